"""Text as Polaris stores and compares it: one Unicode normal form, always valid Unicode.

One spelling of text (#23). "ångström" can be written with precomposed letters (NFC, what
keyboards and most files produce) or as base letters followed by combining marks (NFD,
what macOS file names and text pasted from them often are). Both spellings show the same
and mean the same, but a regex word (``\\w+`` stops at a combining mark), a tokenizer
without accent folding, an FTS5 term or a SQL ``=`` sees two different strings. Polaris
decides here, once, that text is compared in NFC: ``nfc`` is applied to everything that
is stored (a document's text before it is hashed and chunked, so chunk offsets refer to
the NFC text; chunk text and heading paths written by any door; document paths, names and
collection names) and to everything that is compared with it (queries, their words,
document and collection names in a scope, the text an embedder reads).
"""

from __future__ import annotations

import unicodedata

from .config import CHARS_PER_TOKEN

NORMAL_FORM = "NFC"


def nfc(text: str) -> str:
    """``text`` in the normal form Polaris stores and compares (NFC); unchanged when it already is."""
    if unicodedata.is_normalized(NORMAL_FORM, text):
        return text
    return unicodedata.normalize(NORMAL_FORM, text)


def spellings(text: str) -> list[str]:
    """``text`` as given, in NFC and in NFD (distinct): the forms a name stored before Polaris
    normalised it may have (a file first indexed from a macOS NFD file name)."""
    return list(dict.fromkeys((text, nfc(text), unicodedata.normalize("NFD", text))))


def heuristic_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: the estimate used when no tokenizer is given."""
    return -(-len(text) // CHARS_PER_TOKEN)


def clean_text(text: str) -> str:
    """``text`` as valid Unicode: lone surrogates become U+FFFD instead of failing the tokenizer."""
    if not isinstance(text, str):
        raise TypeError(f"expected str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
