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

Always valid Unicode (#24). A file name that is not valid UTF-8 reaches Python with its
undecodable bytes as lone surrogates (``surrogateescape``: byte 0xff is U+DCFF), and so can
text a caller built; SQLite refuses to store them. ``storable`` writes each one out as
text, a byte as ``\\xff`` and any other lone surrogate as ``\\ud800``, and ``nfc`` applies it
first: ``bad\\xffname.md`` is how such a file is stored, shown, found by a scope and
removed, whichever door it came through. The escape is not reversible (a file literally
named ``bad\\xffname.md`` would have the same name: the walk keeps the first and says so).
"""

from __future__ import annotations

import unicodedata
from typing import Any

CHARS_PER_TOKEN = 4  # the budget heuristic: characters per token (config reads it from here)

NORMAL_FORM = "NFC"

BIDI_MARKS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def one_line(text: str) -> str:
    """A name (a file, a heading, a collection) as one line that reads as written: every control
    character, newline and tab included, and every mark that reorders text, written as an escape
    (``\\n``, ``\\x1b``, ``\\u202e``). A listing of names cannot gain a line a name made up, nor be
    recoloured or reversed, on a terminal or in an agent's text."""
    return escaped_controls(text)


def escaped_controls(text: str, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep``, and every mark that reorders
    text, written as an escape (``escaped_char``)."""
    if text.isprintable():  # no control character, no reordering mark (a format character)
        return text
    return "".join(escaped_char(c) if c in BIDI_MARKS or (c not in keep and unicodedata.category(c) == "Cc") else c
                   for c in text)


def pasted(word: str) -> str:
    """``word`` as one argument of a command a user can paste: quoted for a POSIX shell when it
    needs to be (``shlex.quote``), on one line (``one_line``)."""
    import shlex

    return one_line(shlex.quote(word))


def escaped_char(c: str) -> str:
    """``c`` written as a Python escape: ``\\n``, ``\\t``, ``\\x1b``, ``\\u202e``."""
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def nfc(text: str) -> str:
    """``text`` in the form Polaris stores and compares: ``storable``, in NFC; unchanged when it already is."""
    text = storable(text)
    if unicodedata.is_normalized(NORMAL_FORM, text):
        return text
    return unicodedata.normalize(NORMAL_FORM, text)


def storable(text: str) -> str:
    """``text`` with each lone surrogate written out (``\\xff`` for an undecoded byte of a file
    name, ``\\udNNN`` otherwise): valid Unicode, which SQLite stores; unchanged when it is."""
    if text.isascii() or is_valid(text):
        return text
    return "".join(_escaped(c) if "\ud800" <= c <= "\udfff" else c for c in text)


def is_valid(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogate): what UTF-8 can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(surrogate: str) -> str:
    code = ord(surrogate)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def storable_value(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string and key ``storable``."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable_value(k): storable_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable_value(v) for v in value]
    return value


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


def html_escape(text: str) -> str:
    """``html.escape`` (quotes too), imported on first use: a search that shows no HTML never
    loads html.entities."""
    from html import escape

    return escape(text)
