"""YAML front matter: parsed into document metadata, never indexed as body text.

A block counts as front matter when the file starts with a ``---`` line, a later line
is ``---`` or ``...``, and the YAML between them is a mapping (or empty). Anything else
(prose between two rules, YAML that does not parse) stays body text, so no content is
lost to a guess, and under no heading of its own (``delimited_end``): its closing rule does
not make its last lines a setext heading.

Front matter is bounded: YAML aliases are refused (a few hundred bytes of nested
aliases expand to gigabytes), and a block over ``MAX_FRONT_MATTER_BYTES`` (as YAML or
as the JSON it becomes) is not parsed. Either way the block stays body text and a
warning says why.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import yaml

OPENERS = ("---",)
CLOSERS = ("---", "...")
MAX_FRONT_MATTER_BYTES = 32_768


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors' aliases instead of expanding them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases (*name) are not allowed in front matter")
        return super().compose_node(parent, index)


def read_front_matter(text: str) -> tuple[dict[str, Any], int, str | None]:
    """``(metadata, body_start, warning)``; the warning says why a block was kept as text."""
    block = _delimited(text)
    if block is None:
        return {}, 0, None
    first, closing, end = block
    if len(text[first:closing].encode("utf-8", "surrogatepass")) > MAX_FRONT_MATTER_BYTES:
        return {}, 0, f"front matter is over {MAX_FRONT_MATTER_BYTES} bytes: kept as text"
    data, warning = _mapping(text[first:closing])
    return (data, end, None) if data is not None else ({}, 0, warning)


def delimited_end(text: str) -> int:
    """Where a leading block between a ``---`` line and a ``---``/``...`` line ends (0: none),
    front matter or not: a block kept as text is still no heading (its closing rule would make
    the lines above it a setext heading)."""
    block = _delimited(text)
    return 0 if block is None else block[2]


def _delimited(text: str) -> tuple[int, int, int] | None:
    """(where the block's first line starts, where its closing line starts, where that line ends)
    of a leading block between a ``---`` line and a ``---``/``...`` line; None when there is none."""
    pos = 1 if text.startswith("\ufeff") else 0
    first = _next_line(text, pos)
    if text[pos:first].rstrip() not in OPENERS:
        return None
    line_start = first
    while line_start < len(text):
        line_end = _next_line(text, line_start)
        if text[line_start:line_end].rstrip() in CLOSERS:
            return first, line_start, line_end
        line_start = line_end
    return None


def _next_line(text: str, pos: int) -> int:
    newline = text.find("\n", pos)
    return len(text) if newline < 0 else newline + 1


def _mapping(block: str) -> tuple[dict[str, Any] | None, str | None]:
    """The block as a JSON-safe mapping, or None and why it stays text (None: no need to say)."""
    try:
        data = yaml.load(block, Loader=_NoAliasLoader)  # noqa: S506  a SafeLoader subclass
    except yaml.YAMLError as exc:
        if "alias" in str(exc):
            return None, "front matter uses YAML aliases, which are not expanded: kept as text"
        return None, None
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return None, None
    data = json_safe(data)
    if len(json.dumps(data)) > MAX_FRONT_MATTER_BYTES:
        return None, f"front matter is over {MAX_FRONT_MATTER_BYTES} bytes as JSON: kept as text"
    return data, None


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
