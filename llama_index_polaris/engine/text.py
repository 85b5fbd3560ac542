"""Text handed to a tokenizer: always valid Unicode; its size when no tokenizer is at hand."""

from __future__ import annotations

from .config import CHARS_PER_TOKEN


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
