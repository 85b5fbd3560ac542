"""Which documents `polaris remove PATH...` takes (``PolarisIndex.remove``), and why a path that
takes none is refused rather than answered with "0 removed".

A path takes the documents of the collection whose files lie at or under it: those keyed by a
path relative to the collection's root, and those a door stored by their absolute path. Paths
are made absolute lexically (``os.path.abspath``: ``docs/../x`` is ``x``); the files may be gone
from disk. A path that takes nothing is an ``InputError`` naming it and the collection's root
(and another collection whose root holds it, or the indexed names closest to it), and then
nothing is removed, not even what the other paths took: the command can be corrected and run again.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Mapping, Sequence

from ..errors import InputError
from ..storage.records import DocumentRecord
from ..storage.names import close_names, did_you_mean
from .sources import covers
from ..text import nfc


def documents_under(collection: str, paths: Sequence[str | os.PathLike[str]], root: str | None,
                    files: Mapping[str, DocumentRecord], located: Sequence[DocumentRecord],
                    roots: Mapping[str, str | None]) -> list[str]:
    """The ids of the documents of ``collection`` at or under ``paths``: ``files`` by their path
    relative to ``root``, ``located`` by their absolute path. ``roots`` (every collection's)
    name where a path that takes nothing belongs instead."""
    found: dict[str, None] = {}
    refused = []
    for path in (Path(os.path.abspath(p)) for p in paths):
        ids = [d.id for d in located if covers([path], Path("/"), d.path or "")]
        if root is not None:
            ids += [d.id for rel, d in files.items() if covers([path], Path(root), rel)]
        found.update(dict.fromkeys(ids))
        if not ids:
            refused.append(_why_nothing(path, collection, root, list(files), roots))
    if refused:
        raise InputError(" ".join(refused) + " Nothing was removed (`polaris status` shows each collection's root).")
    return list(found)


def _why_nothing(path: Path, collection: str, root: str | None, names: list[str],
                 roots: Mapping[str, str | None]) -> str:
    """One path's reason, as a sentence: outside the root (and whose root holds it), or no indexed
    file there (and the closest indexed names)."""
    hint = ""
    if root is not None and not _within(path, Path(root)) and not covers([path], Path(root), ""):
        reason = f"{path} is outside the root of collection '{collection}' ({root})"
    else:
        reason = f"no indexed file of collection '{collection}' is at {path}"
        if root is not None and _within(path, Path(root)):
            hint = did_you_mean(close_names(nfc(PurePosixPath(os.path.relpath(path, root)).as_posix()), names))
    others = [name for name, r in roots.items() if r and name != collection and _within(path, Path(r))]
    if others:
        reason += f"; it is under the root of collection '{others[0]}' ({roots[others[0]]}): add --collection {others[0]}"
    return reason + "." + hint


def _within(path: Path, folder: Path) -> bool:
    """True when ``path`` is ``folder`` or lies under it (compared as ``covers`` compares)."""
    return covers([folder], path, "")
