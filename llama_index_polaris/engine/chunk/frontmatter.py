"""YAML front matter: parsed into document metadata, never indexed as body text.

A block counts as front matter when the file starts with a ``---`` line, a later line
is ``---`` or ``...``, and the YAML between them is a mapping (or empty). Anything else
(prose between two rules, YAML that does not parse) stays body text, so no content is
lost to a guess.
"""

from __future__ import annotations

import datetime
from typing import Any

import yaml

OPENERS = ("---",)
CLOSERS = ("---", "...")


def split_front_matter(text: str) -> tuple[dict[str, Any], int]:
    """``(metadata, body_start)``: the parsed front matter and the offset where the body begins."""
    pos = 1 if text.startswith("\ufeff") else 0
    first = _next_line(text, pos)
    if text[pos:first].rstrip() not in OPENERS:
        return {}, 0
    line_start = first
    while line_start < len(text):
        line_end = _next_line(text, line_start)
        if text[line_start:line_end].rstrip() in CLOSERS:
            data = _mapping(text[first:line_start])
            return (data, line_end) if data is not None else ({}, 0)
        line_start = line_end
    return {}, 0


def _next_line(text: str, pos: int) -> int:
    newline = text.find("\n", pos)
    return len(text) if newline < 0 else newline + 1


def _mapping(block: str) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError:
        return None
    if data is None:
        return {}
    return json_safe(data) if isinstance(data, dict) else None


def json_safe(value: Any) -> Any:
    """``value`` with dates as ISO strings and other non-JSON scalars as ``str``."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
