"""Whether the index still matches the files on disk: what changed since it was indexed.

An answer from the index is as old as the last ``polaris index`` run; a reader (an agent
above all) must be able to tell when a file has changed since. For each collection with a
root, its indexed files are compared with the files under the root, by content: a file
is read as the indexer reads it (``sources.read_source``) and hashed as the indexer
hashes it (``indexer.document_hash``), so a file touched but not changed is not reported,
and a changed one is whatever its modification time says. A file's state is one of

- ``fresh``: its text is the text indexed;
- ``changed``: it differs (or it was never indexed whole: a ``failed`` document that can be read now);
- ``missing``: it is gone (or its root is);
- ``unreadable``: it is there but cannot be read now (its reason is given);
- ``failed``: it could not be indexed and still cannot be read (the index holds it as failed,
  with nothing from it: running ``polaris index`` again changes nothing, so it is not stale);

and a collection also lists its ``new`` files: indexable files under the root (the same
walk as ``polaris index``: hidden folders and .gitignore'd files skipped) that the index
does not hold. Documents that are not files (added through the LlamaIndex store) have no
state. ``polaris index ROOT --collection NAME`` brings a collection up to date.

A ``Freshness`` remembers each file's hash with its version (size, modification time,
inode), so a long-lived process re-reads only the files touched since it last looked.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..config import PolarisConfig
from ..errors import InputError
from .indexer import document_hash, unprefixed
from .sources import on_disk, read_source, real_folder, walk
from ..storage import Storage
from ..storage.records import DocumentRecord, is_relative_path

FRESH, CHANGED, MISSING, UNREADABLE, FAILED = "fresh", "changed", "missing", "unreadable", "failed"
STATES = (FRESH, CHANGED, MISSING, UNREADABLE, FAILED)
LISTED = 10  # paths a summary lists for each state (the counts are always whole)


@dataclass
class CollectionChanges:
    """How a collection's files on disk differ from the index."""

    collection: str
    root: str | None
    root_exists: bool | None  # None: not looked at (``checked`` false)
    states: dict[str, str] = field(default_factory=dict)  # relative path -> state, for every indexed file
    new: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # why an unreadable or failed file cannot be read
    checked: bool = True  # False: its folder was not read (``Freshness.may_read`` refused it)
    unchecked: int = 0  # the indexed files of a collection not checked

    @property
    def stale(self) -> bool:
        """True when an answer from this collection may not be what the files say now."""
        return bool(self.new) or any(s not in (FRESH, FAILED) for s in self.states.values())

    def paths(self, state: str) -> list[str]:
        """The indexed files in ``state``, in path order."""
        return sorted(p for p, s in self.states.items() if s == state)

    def summary(self, listed: int = LISTED) -> dict[str, Any]:
        """Counts of each state and of new files, with at most ``listed`` paths of each."""
        out: dict[str, Any] = {"root": self.root, "root_exists": self.root_exists, "stale": self.stale,
                               "files": len(self.states) + self.unchecked, "checked": self.checked}
        for state in (CHANGED, MISSING, UNREADABLE, FAILED):
            paths = self.paths(state)
            out[state] = {"count": len(paths), "paths": paths[:listed]}
        for state in (UNREADABLE, FAILED):
            out[state]["reasons"] = {p: self.reasons[p] for p in out[state]["paths"] if p in self.reasons}
        out["new"] = {"count": len(self.new), "paths": sorted(self.new)[:listed]}
        return out


class Freshness:
    """Compares a store's file documents with their files; hashes are remembered per file version."""

    def __init__(self, store: Storage, config: PolarisConfig) -> None:
        self.store, self.config = store, config
        self._hashes: dict[str, tuple[tuple, str | Exception]] = {}  # path -> (version, hash or error)
        self._lock = threading.Lock()
        # which recorded roots may be read (None: all). An index file records its roots, and a file
        # from elsewhere can name any folder: a server shared with clients reads only its own.
        self.may_read: Callable[[str], bool] | None = None

    def _readable(self, root: str) -> bool:
        return self.may_read is None or self.may_read(root)

    def collection(self, name: str) -> CollectionChanges:
        """The changes of collection ``name`` (a collection without a root has none to report)."""
        root = self.store.collection_root(name)
        files = self.store.files(name)
        if root and not self._readable(root):  # not compared, nor looked at: neither fresh nor changed
            return CollectionChanges(name, root, None, checked=False, unchecked=len(files))
        out = CollectionChanges(name, root, bool(root) and Path(root).is_dir())
        if not root:
            return out
        for relpath, doc in files.items():
            out.states[relpath], reason = self._state(Path(root), relpath, doc) if out.root_exists else (MISSING, None)
            if reason:
                out.reasons[relpath] = reason
        if out.root_exists:
            real = real_folder(Path(root))  # a root that became a symlink is walked where it points
            found = walk([real], real, self.config.follow_symlinks)
            out.new = [f.relpath for f in found.files if f.relpath not in files]
        return out

    def collections(self, names: Iterable[str] | None = None) -> dict[str, CollectionChanges]:
        """The changes of each collection (all of them when ``names`` is None)."""
        return {n: self.collection(n) for n in (self.store.collections() if names is None else names)}

    def document(self, doc: DocumentRecord | Any) -> str | None:
        """The state of one document's file (None when it is not a file under a root)."""
        root = self.store.collection_root(doc.collection)
        if not root or not doc.path or not is_relative_path(doc.path) or not self._readable(root):
            return None  # a path that leaves its root (``..``, absolute) is no file under it
        if not Path(root).is_dir():
            return MISSING
        return self._state(Path(root), doc.path, doc)[0]

    def _state(self, root: Path, relpath: str, doc: Any) -> tuple[str, str | None]:
        path = on_disk(root, relpath)
        digest = self._hash(path, relpath)
        if isinstance(digest, FileNotFoundError):
            return MISSING, None
        if isinstance(digest, Exception):  # a document that failed from the start serves nothing: no change
            return (FAILED if getattr(doc, "status", None) == "failed" else UNREADABLE), unprefixed(_reason(digest), relpath)
        stored = getattr(doc, "content_hash", None)
        return (FRESH if stored == digest else CHANGED), None

    def _hash(self, path: Path, relpath: str) -> str | Exception:
        """The file's document hash, or the error reading it (remembered for its current version)."""
        try:
            st = os.stat(path)
        except OSError as exc:
            return exc
        version = (st.st_size, st.st_mtime_ns, st.st_ino)
        with self._lock:
            known = self._hashes.get(str(path))
        if known is not None and known[0] == version:
            return known[1]
        try:
            value: str | Exception = document_hash(read_source(path, relpath, self.config.max_file_mb * 1e6))
        except FileNotFoundError as exc:
            return exc
        except (OSError, InputError) as exc:
            value = exc
        with self._lock:
            self._hashes[str(path)] = (version, value)
        return value


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, InputError) else f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
