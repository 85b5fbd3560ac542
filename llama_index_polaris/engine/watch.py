"""Following folders: after a first run, each change on disk is indexed as it happens.

``watchfiles`` (inotify, FSEvents, ReadDirectoryChangesW) reports changed paths in batches:
a batch is handed over once the files have been quiet for ``QUIET_MS``. Its events are
hints, never facts: what each path is *now* is read from disk when the batch is handled.
So an editor's atomic save (write ``x.md.tmp``, rename it over ``x.md``; or move ``x.md``
aside as ``x.md~`` and write a new one) is one update of ``x.md``; its temporary files
(hidden names such as ``.x.md.swp``, ``~`` backups, other extensions) are never indexed;
a file renamed keeps its vectors (they are reused by text) and reads as one rename.

Each batch is an ordinary incremental run over the paths that changed (``Indexer``:
unchanged text is not re-embedded, each document commits in its own transaction), then
a removal of the paths that are gone. What it did is compared with the index as it was
before the batch, and each document that changed is one ``Change``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .errors import InputError, PolarisError
from .sources import EXTENSIONS, covers, walked
from .store import DocumentRecord

QUIET_MS = 500  # a batch waits until its files have been quiet this long (watchfiles' step)
MAX_BATCH_MS = 2000  # and is handed over after this long even if they are not (watchfiles' debounce)
DB_SIDECARS = ("", "-wal", "-shm", "-journal", ".lock")


@dataclass(frozen=True)
class Change:
    """One document changed by a batch: ``kind`` is added, updated, renamed, removed or failed;
    ``error`` is a batch the engine refused (``reason`` says why; the watch goes on)."""

    kind: str
    path: str  # relative to the collection's root
    chunks: int | None = None  # chunks it has now (added, updated, renamed)
    previous: str | None = None  # the path it had (renamed)
    reason: str | None = None  # why it could not be indexed (failed)

    def line(self) -> str:
        """The change in one line, for people."""
        where = f"{self.previous} -> {self.path}" if self.previous else self.path
        if self.kind == "failed":
            return f"failed   {where}: {self.reason}"
        if self.kind == "error":
            return f"error    {self.reason} (still watching)"
        count = "" if self.chunks is None else f" ({self.chunks} chunk{'s' if self.chunks != 1 else ''})"
        return f"{self.kind:<8} {where}{count}"

    def to_dict(self) -> dict[str, Any]:
        """The change as JSON values (``polaris index --watch --json`` prints one per line)."""
        return {"change": self.kind, "path": self.path, "chunks": self.chunks, "previous": self.previous,
                "reason": self.reason}


class Follower:
    """Keeps ``collection`` of ``index`` in step with the files under ``paths`` (as typed to
    `polaris index`: folders are followed recursively, a file by its name)."""

    def __init__(self, index: Any, paths: Sequence[str | Path], collection: str = "default",
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.index, self.collection, self.on_wait = index, collection, on_wait
        resolved = [Path(p).absolute().resolve() for p in paths]
        self.folders = [p for p in resolved if p.is_dir()]
        self.files = [p for p in resolved if not p.is_dir()]
        db = Path(index.path).absolute()
        self.ignored = {Path(f"{db}{suffix}") for suffix in DB_SIDECARS}

    # -- which events matter --------------------------------------------------------
    def relevant(self, path: str | Path) -> bool:
        """Whether a change reported at ``path`` may change the index (cheap: run on every event)."""
        path = Path(path)
        if path in self.ignored or path.name.endswith("~"):
            return False
        if path in self.files:
            return True
        top = next((f for f in self.folders if path == f or path.is_relative_to(f)), None)
        if top is None or any(part.startswith(".") for part in path.relative_to(top).parts[:-1]):
            return False
        if path.name == ".gitignore":
            return True  # its folder is walked again under the new rules
        if path.name.startswith("."):
            return False
        return path.suffix.lower() in EXTENSIONS or not path.is_file()  # a folder, or gone (maybe one)

    # -- one batch --------------------------------------------------------------------
    def sync(self, changed: Iterable[str | Path]) -> list[Change]:
        """Bring the index in line with what ``changed`` paths hold now; the documents that changed."""
        root = self.index.store.collection_root(self.collection)
        if root is None:
            raise InputError(f"collection '{self.collection}' has no root yet: run `polaris index PATH` first.")
        root = Path(root)
        paths = sorted({Path(p) for p in changed if self.relevant(p)})
        before = self._files(root, paths)
        present, gone = self._classify(paths, before, root)
        report = self._index(present) if present else None
        if gone:
            self.index.remove(self.collection, gone)
        return self._diff(before, self._files(root, paths), report)

    def _classify(self, paths: list[Path], before: dict[str, DocumentRecord], root: Path) -> tuple[list[Path], list[Path]]:
        """The paths to index (files and folders as the walk would see them) and those gone."""
        present: list[Path] = []
        gone: list[Path] = []
        for path in paths:
            target = path.parent if path.name == ".gitignore" else path
            if target.is_dir():
                if self._walked(target, True):
                    present.append(target)
            elif target.is_file():
                if target in self.files or self._walked(target, False):
                    present.append(target)
            elif any(covers([target], root, rel) for rel in before):
                gone.append(target)
        folders = [p for p in present if p.is_dir()]
        present = [p for p in present if not any(p != f and p.is_relative_to(f) for f in folders)]
        return present, gone

    def _walked(self, path: Path, is_dir: bool) -> bool:
        return any(walked(path, top, is_dir) or path == top for top in self.folders if path.is_relative_to(top))

    def _index(self, present: list[Path]) -> Any:
        for _ in range(3):  # a path may vanish between looking at it and reading it
            try:
                return self.index.index_paths(present, collection=self.collection, on_wait=self.on_wait)
            except InputError:
                present = [p for p in present if p.exists()]
                if not present:
                    return None
        return self.index.index_paths(present, collection=self.collection, on_wait=self.on_wait)

    def _files(self, root: Path, paths: list[Path]) -> dict[str, DocumentRecord]:
        """The collection's files under ``paths`` (a ``.gitignore``: under its folder), as stored now."""
        scope = [p.parent if p.name == ".gitignore" else p for p in paths]
        return {rel: doc for rel, doc in self.index.store.files(self.collection).items() if covers(scope, root, rel)}

    def _diff(self, before: dict[str, DocumentRecord], after: dict[str, DocumentRecord], report: Any) -> list[Change]:
        failed = dict(report.failed) if report is not None else {}
        changes: list[Change] = []
        removed = {rel: doc for rel, doc in before.items() if rel not in after}
        by_hash = {doc.content_hash: rel for rel, doc in removed.items() if doc.content_hash}
        for rel, doc in sorted(after.items()):
            old = before.get(rel)
            if rel in failed:
                changes.append(Change("failed", rel, reason=failed[rel]))
            elif old is None:
                previous = by_hash.pop(doc.content_hash, None) if doc.content_hash else None
                removed.pop(previous, None)
                changes.append(Change("renamed" if previous else "added", rel, self._chunks(doc.id), previous))
            elif (old.content_hash, old.status, old.updated_at) != (doc.content_hash, doc.status, doc.updated_at):
                changes.append(Change("updated", rel, self._chunks(doc.id)))
        changes += [Change("removed", rel) for rel in sorted(removed)]
        return changes

    def _chunks(self, document_id: str) -> int:
        with self.index.store.read() as conn:
            return conn.execute("SELECT count(*) FROM chunks WHERE document_id = ?", (document_id,)).fetchone()[0]

    # -- the loop ---------------------------------------------------------------------
    def follow(self, on_change: Callable[[Change], None], stop: Any, on_ready: Callable[[], None] | None = None,
               quiet_ms: int = QUIET_MS) -> None:
        """Watch until ``stop`` (a ``threading.Event``) is set, handing each change to ``on_change``.

        Once the watcher is listening, the followed paths are synced once (what changed since
        the first run, while the watcher started, is caught), then ``on_ready()`` is called.
        """
        import watchfiles

        watched = sorted({*self.folders, *(f.parent for f in self.files)})
        ready = False
        for batch in watchfiles.watch(
            *watched, watch_filter=lambda _change, path: self.relevant(path), debounce=MAX_BATCH_MS,
            step=quiet_ms, stop_event=stop, rust_timeout=quiet_ms, yield_on_timeout=True, raise_interrupt=False,
        ):
            paths = {path for _change, path in batch}
            if not ready:
                paths |= {str(p) for p in (*self.folders, *self.files)}
            try:
                changes = self.sync(paths) if paths else []
            except PolarisError as exc:  # e.g. a folder renamed outside the root: say so, keep watching
                changes = [Change("error", "", reason=str(exc))]
            for change in changes:
                on_change(change)
            if not ready:
                ready = True
                if on_ready is not None:
                    on_ready()
            if stop.is_set():
                break
