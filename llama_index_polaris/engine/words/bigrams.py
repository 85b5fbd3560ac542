"""Chinese, Japanese and Korean runs cut into overlapping character bigrams (#36).

These scripts put no spaces between words, so a tokenizer that cuts at spaces and
punctuation (FTS5's ``unicode61``, Python's ``\\w+``) reads a whole clause as one token
and a two-character word is found only where the author happened to set it apart. Here a
run of Han, Hiragana, Katakana or Hangul letters (one script: a run ends where the script
changes, ``を使う`` is three runs) becomes its overlapping character bigrams, ``生命周期`` ->
``生命 命周 周期``; a run of one character stays that character. A Han run's characters are
terms as well (``生 命 周 期``): a Han character is a word or a morpheme of its own (a
question's 报错 shares no bigram with a page's 错误 but shares 错), while a kana or Hangul letter
is a syllable. Bigrams need no dictionary, and bigrams with Han unigrams
measure best on our CJK sets (docs/search.md); together they find every one- and
two-character word.

``spaced(text, unigrams=False)`` is the bigrams alone: the words a person would mark in a
text (the highlighter, the heading boost, excerpts, match strength read those); the index and
the BM25 query read the unigrams too.

``spaced`` is the one text the keyword side reads in place of the stored text: the
bigrams spaced out, everything else (Latin words, identifiers, code) left exactly as it
was, so a text without CJK letters is returned unchanged and its terms do not move. Every
place that makes terms reads ``spaced``: the FTS5 rows (``chunks.fts_text``), the posting
lists of both backends (``tokenize.Tokenizer``), the query (``search/terms.py``) and the
highlighter, which maps what it marks back to the stored text with ``spaced_origin``.
"""

from __future__ import annotations

import functools
import re

# recorded in polaris_meta as ``fts_segmenter``: how the terms of a file were made (1: bigrams alone;
# 2: Han runs add their characters)
SEGMENTER = "cjk-bigram-2"

# Letters only (categories L and Nl): a punctuation mark, a voicing mark or a middle dot inside a
# run would be a separator to FTS5 and cut a bigram in two. One class per script: a run ends where
# the script changes, so Japanese is cut where kanji meets kana (measured on vue-ja train, BM25
# over sections: 0.612 against 0.577 for bigrams across the change, 0.584 with the two kana as one).
HAN = "\u3005-\u3007\u3021-\u3029\u3038-\u303c\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufa6d\ufa70-\ufad9\U00020000-\U0003134f"
HIRAGANA = "\u3031-\u3035\u3041-\u3096\u309d-\u309f"
KATAKANA = "\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9d"  # ー included, the middle dot ・ not
HANGUL = "\u1100-\u11ff\u3131-\u318e\ua960-\ua97c\uac00-\ud7a3\ud7b0-\ud7c6\ud7cb-\ud7fb\uffa0-\uffbe\uffc2-\uffdc"
BOPOMOFO = "\u3105-\u312f\u31a0-\u31bf"
SCRIPTS = (HAN, HIRAGANA, KATAKANA, HANGUL, BOPOMOFO)
CJK_LETTERS = "".join(SCRIPTS)


@functools.cache
def patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """A CJK run, one CJK letter, one Han letter: compiled on first use (6 ms, which a cold
    search of ASCII text never needs)."""
    return (
        re.compile("|".join(f"[{letters}]+" for letters in SCRIPTS)),
        re.compile(f"[{CJK_LETTERS}]"),
        re.compile(f"[{HAN}]"),
    )


def is_cjk(text: str) -> bool:
    """Whether ``text`` starts with a CJK letter (a term of ``spaced`` that is a bigram or a lone character)."""
    return bool(text) and not text[0].isascii() and patterns()[1].match(text) is not None


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds any CJK letter (when not, ``spaced(text)`` is ``text``)."""
    return not text.isascii() and patterns()[1].search(text) is not None


def bigrams(run: str) -> list[str]:
    """A run's overlapping character bigrams; a run of one character is itself."""
    if len(run) < 2:
        return [run] if run else []
    return [run[i:i + 2] for i in range(len(run) - 1)]


def grams(run: str, unigrams: bool = True) -> list[tuple[int, str]]:
    """A run's terms with their offsets in it: its bigrams, then (``unigrams``, a Han run of two
    or more) each of its characters."""
    out = list(enumerate(bigrams(run)))
    if unigrams and len(run) > 1 and patterns()[2].match(run):
        out += list(enumerate(run))
    return out


def spaced(text: str, unigrams: bool = True) -> str:
    """``text`` with each CJK run replaced by its terms (``grams``), a space on each side of each;
    ``text`` itself when it holds no CJK letter. Spaced again, it gives no term it did not give
    (a bigram's characters are among its run's unigrams)."""
    if not has_cjk(text):
        return text
    return patterns()[0].sub(lambda m: " " + " ".join(g for _, g in grams(m.group(), unigrams)) + " ", text)


def spaced_origin(text: str, unigrams: bool = True) -> tuple[str, list[int]]:
    """``spaced(text, unigrams)`` and, for each of its characters, the offset in ``text`` it came
    from (a space put in takes the offset of the character after it): a term at ``[a, b)`` of
    the spaced text is ``text[origin[a]:origin[b - 1] + 1]``."""
    if not has_cjk(text):
        return text, list(range(len(text)))
    out: list[str] = []
    origin: list[int] = []
    pos = 0
    for m in patterns()[0].finditer(text):
        out.append(text[pos:m.start()])
        origin.extend(range(pos, m.start()))
        start, run = m.start(), m.group()
        for i, gram in grams(run, unigrams):
            out.append(" " + gram)
            origin.extend([start + i, start + i, start + i + 1] if len(gram) == 2 else [start + i, start + i])
        out.append(" ")
        origin.append(m.end())
        pos = m.end()
    out.append(text[pos:])
    origin.extend(range(pos, len(text)))
    return "".join(out), origin


def original_span(origin: list[int], start: int, end: int) -> tuple[int, int]:
    """The span of the stored text that the spaced text's ``[start, end)`` came from."""
    return origin[start], origin[end - 1] + 1
