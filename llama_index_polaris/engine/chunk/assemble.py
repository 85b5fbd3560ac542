"""From pieces to chunks: floor merge, overlap, trimmed exact spans."""

from __future__ import annotations

import re
from bisect import bisect_left

from ..text import heuristic_tokens
from ..words.blobs import blob_spans, masked
from .blocks import Section, fence_ranges
from .spans import ChunkSettings, ChunkSpan
from .split import SENTENCES, WORDS, Budget, Piece, split_section
from .tokens import measure_for

# Han, kana and their compatibility forms: text in these scripts is cut between characters
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


def chunk_sections(source: str, sections: list[Section], settings: ChunkSettings) -> list[ChunkSpan]:
    """Chunks of ``source`` from its sections: cascade, floor merge, overlap, exact offsets.

    The budget is counted over the readable text (``blobs.masked``: each blob character a
    space), so a blob weighs nothing, is cut nowhere and never fills a piece of its own: a
    piece that is only a blob is small and joins a neighbour. The chunks keep the source
    as written."""
    count = settings.count_tokens or heuristic_tokens
    blobs = blob_spans(source)
    readable = masked(source, blobs)
    measure = measure_for(readable, [(s.start, s.end) for s in sections], count, settings.max_tokens)
    budget = Budget(readable, measure, count, settings.max_tokens, sum(end - start for start, end in blobs))
    reserve = min(settings.max_tokens // 4, heuristic_tokens(" " * settings.overlap_chars))
    pieces = [p for i, s in enumerate(sections) for p in split_section(budget, s, i, reserve)]
    pieces = merge_small(budget, [p for p in pieces if _has_text(source, p)], settings.min_chars)
    fences = sorted(r for s in sections for r in fence_ranges(s.blocks))
    starts = [overlap_start(budget, pieces, i, fences, settings.overlap_chars) for i in range(len(pieces))]
    return [_span(source, budget, sections[p.section], p, start) for p, start in zip(pieces, starts)]


def trim(source: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` without trailing whitespace or leading blank lines (indentation kept)."""
    text = source[start:end]
    end = start + len(text.rstrip())
    first = start + len(text) - len(text.lstrip())
    line = max(source.rfind("\n", start, first), source.rfind("\r", start, first)) + 1
    return min(max(start, line), end), end


def merge_small(budget: Budget, pieces: list[Piece], min_chars: int) -> list[Piece]:
    """Pieces under ``min_chars`` joined to the previous piece (the next for the first) when that fits."""

    def small(p: Piece) -> bool:
        if p.forced:  # a piece of a word stays as it was cut
            return False
        start, end = trim(budget.source, p.start, p.end)
        return end - start + len(p.prefix) + len(p.suffix) < min_chars

    return _absorb(budget, _absorb(budget, pieces, small, False), small, True)


def _absorb(budget: Budget, pieces: list[Piece], small, backward: bool) -> list[Piece]:
    """One pass: each small piece joins its neighbour (previous, or next when ``backward``)."""
    out: list[Piece] = []
    for p in reversed(pieces) if backward else pieces:
        target = out[-1] if out and small(p) and not out[-1].forced else None
        pair = (p, target) if backward else (target, p)
        joined = _fitting_join(budget, *pair, target.section) if target else None
        if joined:
            out[-1] = joined
        else:
            out.append(p)
    return out[::-1] if backward else out


def overlap_start(budget: Budget, pieces: list[Piece], i: int, fences: list[tuple[int, int]], chars: int) -> int:
    """Where piece ``i`` starts once up to ``chars`` of its section predecessor are carried in.

    The overlap is a proper tail of the previous piece: a piece never repeats its predecessor whole.
    """
    p = pieces[i]
    prev = pieces[i - 1] if i else None
    if not prev or not chars or p.prefix or prev.suffix or prev.section != p.section or p.forced or prev.forced:
        return p.start
    lo = max(prev.start, p.start - chars, _end_of_fence_before(fences, p.start))
    extra = budget.count(p.suffix) if p.suffix else 0
    for find in (SENTENCES, WORDS):
        own = [lo] if find is WORDS and lo > prev.start and budget.source[lo - 1].isspace() else []
        candidates = own + list(find(budget.source, lo, p.start))
        k = _first_fitting(budget, candidates, p.end, extra)
        if k is not None:
            return candidates[k]
    return p.start


def _first_fitting(budget: Budget, starts: list[int], end: int, extra: int) -> int | None:
    lo, hi, best = 0, len(starts) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if budget.measure(starts[mid], end) + extra <= budget.limit:
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    return best


def _end_of_fence_before(fences: list[tuple[int, int]], pos: int) -> int:
    i = bisect_left(fences, (pos, -1)) - 1
    return fences[i][1] if i >= 0 else 0


def _fitting_join(budget: Budget, first: Piece, second: Piece, section: int) -> Piece | None:
    joined = Piece(first.start, second.end, section, first.prefix, second.suffix)
    return joined if _tokens(budget, joined) <= budget.limit else None


def _tokens(budget: Budget, p: Piece) -> int:
    extra = sum(budget.count(s) for s in (p.prefix, p.suffix) if s)
    return (budget.exact(p.start, p.end) if p.forced else budget.measure(p.start, p.end)) + extra


def _has_text(source: str, p: Piece) -> bool:
    start, end = trim(source, p.start, p.end)
    return end > start


def _span(source: str, budget: Budget, section: Section, p: Piece, start: int) -> ChunkSpan:
    start, end = trim(source, start, p.end)
    tokens = _tokens(budget, Piece(start, end, p.section, p.prefix, p.suffix, p.forced))
    text = p.prefix + source[start:end] + p.suffix
    return ChunkSpan(text, start, end, section.heading_path, section.heading_level, tokens, tokens > budget.limit,
                     p.forced)


def cut_warnings(source: str, chunks: list[ChunkSpan], limit: int) -> tuple[str, ...]:
    """What a reader should know of ``chunks``: pieces cut inside a word, pieces over budget.

    A cut between two CJK characters is not one (that script has no spaces to cut at)."""
    inside = [c for c in chunks if c.forced_cut and (_inside_word(source, c.start) or _inside_word(source, c.end))]
    over = [c for c in chunks if c.oversize]
    out = []
    if inside:
        out.append(f"{len(inside)} chunk{'s' if len(inside) > 1 else ''} cut inside a word or code line longer"
                   f" than the {limit}-token budget, with no space or line break to cut at (first at character"
                   f" {inside[0].start}); every piece is indexed")
    if over:
        out.append(f"{len(over)} chunk{'s' if len(over) > 1 else ''} over the {limit}-token budget, each what"
                   f" could not be cut further (first at character {over[0].start})")
    return tuple(out)


def _inside_word(source: str, i: int) -> bool:
    """Whether position ``i`` falls between two characters of one word (CJK characters aside)."""
    if not 0 < i < len(source):
        return False
    a, b = source[i - 1], source[i]
    return not (a.isspace() or b.isspace() or _CJK.match(a) or _CJK.match(b))
