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
a removal of the paths that are gone. Each document the run stores is one ``Change``,
handed on as it commits (a bulk copy is shown file by file, not at the end of the batch);
what the run did not report (removals) is found by comparing the index with what it
held before the batch. Once ``stop`` is set, the batch's run finishes the documents it
started and stops; the files it did not reach are caught up by the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..errors import InputError, PolarisError
from .indexer import Finished
from .sources import EXTENSIONS, covers, walked
from ..storage.records import DocumentRecord

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
    def sync(self, changed: Iterable[str | Path], on_change: Callable[[Change], None] | None = None,
             stop: Any = None, progress: Any = None) -> list[Change]:
        """Bring the index in line with what ``changed`` paths hold now; the documents that changed,
        each also handed to ``on_change`` as it commits. ``stop`` and ``progress`` go to the run."""
        root = self.index.store.collection_root(self.collection)
        if root is None:
            raise InputError(f"collection '{self.collection}' has no root yet: run `polaris index PATH` first.")
        root = Path(root)
        paths = sorted({Path(p) for p in changed if self.relevant(p)})
        before = self._files(root, paths)
        present, gone = self._classify(paths, before, root)
        tally = _Tally(root, before, on_change, self._chunks)
        away = [f for f in self.folders if not f.is_dir()] + ([] if root.is_dir() else [root])
        if away:  # a followed folder (or the root) moved away: keep its documents, as `polaris index` does
            kept = [g for g in gone if any(g == f or g.is_relative_to(f) or f.is_relative_to(g) for f in away)]
            gone = [g for g in gone if g not in kept]
            if kept:
                tally._add(Change("error", "", reason=f"{', '.join(map(str, sorted(set(away))))}: gone; its documents"
                                  " are kept. If it moved back, nothing is re-embedded; if it moved elsewhere,"
                                  f" `polaris index NEW_PLACE --collection {self.collection}` re-keys them."))
        report = self._index(present, tally.finished, stop, progress) if present else None
        if gone:
            self.index.remove(self.collection, gone)
        tally.rest(self._files(root, paths), report)
        return tally.changes

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

    def _index(self, present: list[Path], on_document: Callable[[Finished], None], stop: Any, progress: Any) -> Any:
        def run() -> Any:
            return self.index.index_paths(present, collection=self.collection, on_wait=self.on_wait,
                                          on_document=on_document, stop=stop, progress=progress)

        for _ in range(3):  # a path may vanish between looking at it and reading it
            try:
                return run()
            except InputError:
                present = [p for p in present if p.exists()]
                if not present:
                    return None
        return run()

    def _files(self, root: Path, paths: list[Path]) -> dict[str, DocumentRecord]:
        """The collection's files under ``paths`` (a ``.gitignore``: under its folder), as stored now."""
        scope = [p.parent if p.name == ".gitignore" else p for p in paths]
        return {rel: doc for rel, doc in self.index.store.files(self.collection).items() if covers(scope, root, rel)}

    def _chunks(self, document_id: str) -> int:
        with self.index.store.read() as conn:
            return conn.execute("SELECT count(*) FROM chunks WHERE document_id = ?", (document_id,)).fetchone()[0]

    # -- the loop ---------------------------------------------------------------------
    def follow(self, on_change: Callable[[Change], None], stop: Any, on_ready: Callable[[], None] | None = None,
               quiet_ms: int = QUIET_MS, progress: Any = None) -> None:
        """Watch until ``stop`` (a ``threading.Event``) is set, handing each change to ``on_change``
        as its document commits; a batch under way when ``stop`` is set finishes the documents
        it started, then the watch ends. ``progress`` (an ``IndexProgress``, say) gets each
        batch's run (``update``) and is closed after it.

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
                if paths:
                    self.sync(paths, on_change, stop, progress.update if progress is not None else None)
            except PolarisError as exc:  # e.g. a folder renamed outside the root: say so, keep watching
                on_change(Change("error", "", reason=str(exc)))
            finally:
                if progress is not None:
                    progress.close()
            if not ready:
                ready = True
                if on_ready is not None:
                    on_ready()
            if stop.is_set():
                break


class _Tally:
    """One batch's changes: each document the run stores becomes a ``Change`` at once (``finished``),
    handed to ``emit``; at the end, ``rest`` finds what the run did not report (removals, and any
    change made around it) by comparing the index with ``before``, what it held before the batch."""

    def __init__(self, root: Path, before: dict[str, DocumentRecord], emit: Callable[[Change], None] | None,
                 chunks: Callable[[str], int]) -> None:
        self.root, self.before, self.emit, self.chunks = root, before, emit, chunks
        self.changes: list[Change] = []
        self.by_hash: dict[str, list[str]] = {}
        for rel, doc in before.items():
            if doc.content_hash:
                self.by_hash.setdefault(doc.content_hash, []).append(rel)
        self.renamed: set[str] = set()  # paths of ``before`` that a new path took over

    def _add(self, change: Change) -> None:
        self.changes.append(change)
        if self.emit is not None:
            self.emit(change)

    def finished(self, done: Finished) -> None:
        """A document the run has just committed."""
        if done.kind == "failed":
            self._add(Change("failed", done.path, reason=done.reason))
        elif done.path in self.before:
            self._add(Change("updated", done.path, done.chunks))
        else:  # new here: renamed when a file with its text was here before and is gone from disk
            previous = self._previous(done.content_hash, lambda rel: not (self.root / rel).exists())
            self._add(Change("renamed" if previous else "added", done.path, done.chunks, previous))

    def _previous(self, digest: str | None, gone: Callable[[str], bool]) -> str | None:
        """The path of ``before`` with text ``digest`` that is ``gone`` (taken: it is renamed), or None."""
        for rel in self.by_hash.get(digest or "", []):
            if rel not in self.renamed and gone(rel):
                self.renamed.add(rel)
                return rel
        return None

    def rest(self, after: dict[str, DocumentRecord], report: Any) -> None:
        """What changed between ``before`` and ``after`` (the index now) that was not handed on yet."""
        failed = dict(report.failed) if report is not None else {}
        told = {c.path for c in self.changes}
        removed = {rel for rel in self.before if rel not in after}
        for rel, doc in sorted(after.items()):
            old = self.before.get(rel)
            if rel in told:
                continue
            if rel in failed:
                self._add(Change("failed", rel, reason=failed[rel]))
            elif old is None:
                previous = self._previous(doc.content_hash, removed.__contains__)
                self._add(Change("renamed" if previous else "added", rel, self.chunks(doc.id), previous))
            elif (old.content_hash, old.status, old.updated_at) != (doc.content_hash, doc.status, doc.updated_at):
                self._add(Change("updated", rel, self.chunks(doc.id)))
        for rel in sorted(removed - self.renamed):
            self._add(Change("removed", rel))
