"""Chunker invariants, on generated Markdown (hypothesis) and on the venv's real docs.

Invariants: chunks cover every non-whitespace character of the body in order; no chunk
is over budget unless it is one unsplittable unit and then it says so (with a real
tokenizer: none is, whatever the input); no chunk starts or ends inside a word, except a
chunk cut inside a word too long for the budget (``forced_cut``, as the last resort);
every chunk's code fences are closed; every heading path agrees with an independent walk
of the headings, and no heading contributes more than ``HEADING_CHARS`` to it.
"""

from __future__ import annotations

import html
import importlib.util
import re
import statistics
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from llama_index_polaris.engine.chunk import (
    HEADING_CHARS, ChunkSettings, TokenCounter, chunk_markdown, capped, heuristic_tokens,
)
from llama_index_polaris.engine.words.blobs import readable
from llama_index_polaris.engine.chunk.frontmatter import read_front_matter

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_chunk.py"
_spec = importlib.util.spec_from_file_location("bench_chunk", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

FULL = MarkdownIt("commonmark").enable("table")
TAG = re.compile(r"<[^>]+>")
ANCHOR = re.compile(r"\s*\{:?\s*[#.][^{}]*\}\s*$")


@dataclass(frozen=True)
class Heading:
    start: int
    level: int
    text: str


def expected_headings(source: str, body_start: int) -> list[Heading]:
    """Top-level headings by rendering their inline HTML and dropping tags (not the chunker's walk)."""
    body = source[body_start:]
    lines = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", body)]
    tokens = FULL.parse(body)
    out = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.level == 0:
            rendered = FULL.renderInline(tokens[i + 1].content)
            plain = html.unescape(TAG.sub(lambda m: re.findall(r'alt="([^"]*)"', m[0])[0] if m[0].startswith("<img") else "", rendered))
            text = " ".join(ANCHOR.sub("", plain).split())
            out.append(Heading(body_start + lines[tok.map[0]], int(tok.tag[1]), text))
    return out


def path_at(headings: list[Heading], pos: int, preamble: tuple[str, ...]) -> tuple[str, ...]:
    stack: list[Heading] = []
    for h in headings[: bisect_right([h.start for h in headings], pos)]:
        while stack and stack[-1].level >= h.level:
            stack.pop()
        stack.append(h)
    return tuple(h.text for h in stack if h.text) if stack else preamble


def fences_closed(text: str) -> bool:
    lines = text.splitlines()
    for tok in FULL.parse(text):
        if tok.type == "fence":
            last = lines[tok.map[1] - 1].strip().lstrip(">").strip() if tok.map[1] - 1 > tok.map[0] else ""
            if not (set(last) == {tok.markup[0]} and len(last) >= len(tok.markup)):
                return False
    return True


def word_char(source: str, i: int) -> bool:
    return 0 <= i < len(source) and source[i].isalnum()


def reference_count(counter):
    """The budget's count done independently: a ``TokenCounter`` is checked by its raw tokenizer."""
    if isinstance(counter, TokenCounter):
        raw = counter._tokenizer
        return lambda text: len(raw.encode(text, add_special_tokens=False))
    return counter or heuristic_tokens


def check(source: str, cfg: ChunkSettings, *, title: str | None = None, check_fences: bool = True) -> list:
    """Assert every invariant for ``chunk_markdown(source)``; return the chunks."""
    doc = chunk_markdown(source, cfg, title=title)
    metadata, body_start, _ = read_front_matter(source)
    count = reference_count(cfg.count_tokens)
    chunks = doc.chunks
    covered = body_start
    for prev, c in zip([None] + chunks, chunks):
        core = source[c.start : c.end]
        assert core.strip() and core == core.strip() or core[0] in " \t", c
        assert c.text == core or refenced(c.text, core), c
        if prev is not None:
            assert prev.start <= c.start and prev.end < c.end
        assert not source[covered : c.start].strip(), f"uncovered text {source[covered:c.start]!r}"
        covered = max(covered, c.end)
        for at, side in ((c.start, "starts"), (c.end, "ends")):
            if word_char(source, at - 1) and word_char(source, at):
                assert c.forced_cut and too_long_to_keep(source, at, count, cfg.max_tokens), f"{side} mid-word: {c}"
        tokens = count(readable(c.text))  # a blob weighs nothing (engine/words/blobs.py)
        exact = isinstance(cfg.count_tokens, TokenCounter)  # len/4 is not additive over pieces
        assert c.token_count == tokens or not exact, f"token_count {c.token_count}, the tokenizer says {tokens}: {c}"
        assert tokens <= cfg.max_tokens or c.oversize, f"{tokens} tokens, not flagged: {c}"
        if c.oversize:
            assert unsplittable(c), f"oversize but splittable: {c}"
        if check_fences:
            assert fences_closed(c.text), f"unbalanced fence: {c.text!r}"
    assert not source[covered:].strip()
    headings = expected_headings(source, body_start)
    preamble = (title,) if title else ((metadata["title"],) if isinstance(metadata.get("title"), str) else ())
    headings = [Heading(h.start, h.level, capped(h.text)) for h in headings]
    preamble = tuple(capped(t) for t in preamble)
    for c in chunks:
        inside = [h.start for h in headings if c.start <= h.start < c.end]
        allowed = {path_at(headings, p, preamble) for p in [c.start, *inside]}
        assert c.heading_path in allowed, (c, allowed)
        assert all(len(name) <= HEADING_CHARS for name in c.heading_path), c.heading_path
    return chunks


def too_long_to_keep(source: str, at: int, count, max_tokens: int) -> bool:
    """Whether the run of non-space characters around ``at`` is one no budget-sized piece can
    hold whole: a cut inside it is the last resort, not a shortcut."""
    start, end = at, at
    while start > 0 and not source[start - 1].isspace():
        start -= 1
    while end < len(source) and not source[end].isspace():
        end += 1
    run = source[start:end]
    return count(run) > max_tokens // 4 or len(run) > 72  # a piece holds at least 72 characters (limit 1)

def refenced(text: str, core: str) -> bool:
    """``text`` is ``core`` with an opening fence line before it and/or a closing one after."""
    is_fence = lambda line: line.strip().lstrip(">-*+ ").startswith(("```", "~~~"))  # noqa: E731
    for i in (i for i in range(len(text) - len(core) + 1) if text.startswith(core, i)):
        prefix, suffix = text[:i], text[i + len(core) :]
        if (not prefix or prefix.endswith("\n") and is_fence(prefix)) and (not suffix or is_fence(suffix)):
            return True
    return False


def unsplittable(c) -> bool:
    lines = [line.strip().lstrip(">-*+ ") for line in c.text.splitlines()]
    content = [line for line in lines if line and not line.startswith(("```", "~~~"))]
    return len(c.text.split()) <= 2 or len(content) <= 1


# --- generated Markdown -------------------------------------------------------------

WORDS = st.sampled_from("alpha beta gamma delta session token expired cache index query Guide Setup".split())
LONG_WORD = st.integers(30, 400).map(lambda n: "x" * n)
word = st.one_of(WORDS, WORDS, WORDS, WORDS, LONG_WORD)
sentence = st.lists(word, min_size=1, max_size=14).map(lambda ws: " ".join(ws).capitalize() + ".")
paragraph = st.lists(sentence, min_size=1, max_size=8).map(" ".join)


@st.composite
def heading(draw) -> str:
    words = draw(st.lists(WORDS, min_size=0, max_size=4))
    styles = ["{}", "`{}`", "*{}*", "**{}**", "[{}](http://e.com)"]
    text = " ".join(draw(st.sampled_from(styles)).format(w) for w in words)
    if words and draw(st.booleans()):
        text += " {#anchor-%d}" % draw(st.integers(0, 9))
    level = draw(st.integers(1, 6))
    if words and level <= 2 and draw(st.booleans()):
        return text + "\n" + ("=" if level == 1 else "-") * draw(st.integers(3, 8))
    return "#" * level + (" " + text if text else "")


@st.composite
def fence(draw) -> str:
    marker = draw(st.sampled_from(["```", "~~~", "````"]))
    info = draw(st.sampled_from(["", "python", "sh"]))
    lines = draw(st.lists(st.lists(WORDS, min_size=0, max_size=10).map(" ".join), min_size=0, max_size=40))
    return "\n".join([marker + info, *lines, marker])


@st.composite
def bullet_list(draw, depth: int = 0) -> str:
    items = []
    for _ in range(draw(st.integers(1, 6))):
        item = "- " + draw(sentence)
        if depth < 3 and draw(st.integers(0, 4)) == 0:
            item += "\n\n" + "\n".join("  " + line for line in draw(bullet_list(depth + 1)).splitlines())
        if draw(st.integers(0, 6)) == 0:
            item += "\n\n" + "\n".join("  " + line for line in draw(fence()).splitlines())
        items.append(item)
    return "\n".join(items)


table = st.lists(st.lists(WORDS, min_size=2, max_size=2), min_size=1, max_size=12).map(
    lambda rows: "| a | b |\n|---|---|\n" + "\n".join(f"| {x} | {y} |" for x, y in rows)
)
quote = paragraph.map(lambda p: "> " + p)
block = st.one_of(heading(), heading(), paragraph, paragraph, fence(), bullet_list(), table, quote)
front = st.sampled_from(["", "---\ntitle: Front\ntags: [a, b]\n---\n", "---\n---\n"])
document = st.tuples(front, st.lists(block, max_size=25)).map(lambda fb: fb[0] + "\n\n".join(fb[1]) + "\n")
budgets = st.builds(
    ChunkSettings,
    max_tokens=st.sampled_from([24, 60, 120, 450]),
    overlap_chars=st.sampled_from([0, 20, 40]),
    min_chars=st.sampled_from([0, 10, 50]),
)
SLOW_OK = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW_OK
@given(document, budgets, st.sampled_from([None, "notes.md"]))
def test_invariants_on_generated_markdown(source, cfg, title):
    check(source, cfg, title=title)


@pytest.fixture(scope="module")
def minilm():
    return bench.minilm_counter()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(document, st.sampled_from([24, 60, 120]))
def test_invariants_with_the_models_tokenizer(minilm, source, budget):
    check(source, ChunkSettings(max_tokens=budget, overlap_chars=40, min_chars=20, count_tokens=minilm))


# --- real documentation ---------------------------------------------------------------


def test_invariants_on_site_packages_docs(minilm, capsys):
    corpus = bench.markdown_corpus()
    assert len(corpus) >= 50
    cfg = ChunkSettings(count_tokens=minilm)
    sizes, oversize, skipped_fences = [], [], 0
    for name, text in corpus:
        closed = fences_closed(text[read_front_matter(text)[1] :])
        skipped_fences += not closed
        chunks = check(text, cfg, title=Path(name).name, check_fences=closed)
        sizes += [c.token_count for c in chunks]
        oversize += [(name, c.token_count) for c in chunks if c.oversize]
    q = statistics.quantiles(sizes, n=10)
    with capsys.disabled():
        print(
            f"\nsite-packages docs: {len(corpus)} files, {len(sizes)} chunks; tokens p10 {q[0]:.0f},"
            f" median {statistics.median(sizes):.0f}, p90 {q[-1]:.0f}, max {max(sizes)};"
            f" {len(oversize)} oversize {oversize[:5]}; {skipped_fences} files with an unclosed fence"
        )
    assert len(sizes) > len(corpus)


# --- whatever the input: within the budget, headings bounded (#24) ------------------------------

RUN_CHARS = st.sampled_from(list("abcXYZ0189") + list("+/=.,;:-_()[]#%&") + list("数据索引检文档") + ["é", "ß"])
run = st.lists(RUN_CHARS, min_size=50, max_size=2500).map("".join)  # no whitespace: nothing to cut at
hostile = st.one_of(
    run,  # a bare run: a URL, a base64 blob, CJK without punctuation
    st.tuples(paragraph, run).map(" ".join),
    run.map(lambda r: "```\n" + r + "\n```"),  # a code line
    run.map(lambda r: "    " + r),  # indented code
    run.map(lambda r: f"| a | b |\n|---|---|\n| {r} | x |"),  # a table row
    run.map(lambda r: "## " + r),  # a heading
)
hostile_document = st.lists(st.one_of(block, hostile, hostile), min_size=1, max_size=6).map(lambda bs: "\n\n".join(bs) + "\n")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(hostile_document, st.sampled_from([24, 60, 254]))
def test_no_chunk_exceeds_the_budget_in_model_tokens_whatever_the_input(minilm, source, budget):
    chunks = check(source, ChunkSettings(max_tokens=budget, overlap_chars=40, min_chars=20, count_tokens=minilm))
    raw = minilm._tokenizer
    for c in chunks:
        # what the model reads: the text without its blobs (engine/words/blobs.py)
        assert len(raw.encode(readable(c.text), add_special_tokens=False)) <= budget and not c.oversize, c


@SLOW_OK
@given(hostile_document, budgets)
def test_no_chunk_exceeds_the_budget_whatever_the_input_without_a_tokenizer(source, cfg):
    for c in check(source, cfg):
        assert heuristic_tokens(c.text) <= cfg.max_tokens and not c.oversize, c


BLANK_FENCES = ("- Alpha.\n\n  - Alpha.\n  \n    - Alpha.\n    \n      - Alpha.\n      \n        ```\n        ```\n    \n"
                "      ```\n" + "      \n" * 12 + "      ```\n  \n    ```\n    ```\n\n  ```\n  ```\n")


@pytest.mark.parametrize("overlap", [0, 20, 40])
def test_a_fence_of_blank_lines_over_the_budget_is_cut_between_them(overlap: int) -> None:
    """Found by the property above: a fenced block holding only indented blank lines was one
    piece over the budget (no line with code to cut at); an empty fence stays whole."""
    chunks = check(BLANK_FENCES, ChunkSettings(max_tokens=24, overlap_chars=overlap, min_chars=0, count_tokens=None))
    assert all(heuristic_tokens(c.text) <= 24 and not c.oversize for c in chunks)


long_heading = st.tuples(st.integers(1, 6), st.lists(st.one_of(WORDS, run), min_size=1, max_size=60)).map(
    lambda lw: "#" * lw[0] + " " + " ".join(lw[1]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(long_heading, paragraph), min_size=1, max_size=12), st.one_of(st.none(), run))
def test_a_headings_contribution_is_bounded(minilm, blocks, title):
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.ingest.recipe import make_recipe

    source = "\n\n".join(blocks) + "\n"
    recipe = make_recipe(load_config(use_user_config=False), 254, minilm)
    doc = recipe.chunk(source, path="doc.md", title=title)
    raw = minilm._tokenizer
    for c in doc.chunks:
        assert len(c.heading_path) <= 6 and all(len(name) <= HEADING_CHARS for name in c.heading_path)
        assert len(c.heading_path_str) <= 6 * HEADING_CHARS + 15
        embedded = recipe.embed_text(c)
        assert len(embedded) <= len(c.text) + len("heading_path: \n\n") + 6 * HEADING_CHARS + 15
        assert len(raw.encode(embedded, add_special_tokens=False)) <= 254
