"""Finding and reading documents on disk, relative to a collection's root.

A collection has one root folder; a file's identity is its path relative to that root,
whichever path was typed (the root, a subfolder or one file). ``plan_root`` decides the
root of a run from the one recorded and the paths given: inside it, it stays; a run over
a parent folder widens it (files are re-keyed, nothing is re-embedded); a root that is
gone from disk has moved. Anything else is refused, with what to type instead.

Only regular files are read, at most ``limit`` bytes, without blocking (a FIFO named
``x.md`` is skipped, not waited on). Hidden directories and whatever a ``.gitignore`` on
the way down excludes are skipped. Symlinked directories are not followed (no loops);
a symlinked file is read when its target lies inside the root, or anywhere when
``follow_symlinks`` is on; otherwise it is reported as skipped.

A relative path is text, kept in NFC (``text.nfc``) whatever spelling the file system
gives: a macOS file name in NFD and the same name typed in NFC are one document. Two files
whose names differ only in that spelling (possible on Linux) would be one document: the
second one found is skipped, and the run says so.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterator, Sequence

from .errors import InputError
from .text import nfc

EXTENSIONS = (".md", ".markdown", ".mdx", ".txt")


@dataclass(frozen=True)
class SourceFile:
    """A file to index: its path as found and its path relative to the collection root."""

    path: Path
    relpath: str


@dataclass(frozen=True)
class RootPlan:
    """The root a run uses, and how it relates to the root recorded before it."""

    root: Path
    previous: Path | None = None  # the recorded root, when it changes
    change: str = ""  # "", "new", "widened" or "moved"

    def rename(self, relpath: str) -> str:
        """A file's new relative path after a widening (unchanged otherwise)."""
        if self.change != "widened" or self.previous is None:
            return relpath
        return nfc((self.previous.relative_to(self.root) / relpath).as_posix())


@dataclass
class Walk:
    """What a walk found: the files to index and the entries it skipped, with why."""

    files: list[SourceFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _resolved(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Absolute paths with symlinked folders resolved; a symlinked file keeps its own name."""
    out = []
    for p in paths:
        path = Path(p).absolute()
        if not path.exists():
            raise InputError(f"{p}: no such file or directory.")
        out.append(path.parent.resolve() / path.name if path.is_symlink() and not path.is_dir() else path.resolve())
    return out


def common_folder(paths: Sequence[str | os.PathLike[str]]) -> Path:
    """The folder that holds every path given (a file's own folder for a file)."""
    folders = [p if p.is_dir() else p.parent for p in _resolved(paths)]
    return Path(os.path.commonpath(folders))


def plan_root(recorded: str | None, paths: Sequence[str | os.PathLike[str]], collection: str) -> RootPlan:
    """The collection root for a run over ``paths``, given the root ``recorded`` before it."""
    folder = common_folder(paths)
    if recorded is None:
        return RootPlan(folder, None, "new")
    old = Path(recorded)
    if folder == old or folder.is_relative_to(old):
        return RootPlan(old)
    if old.is_relative_to(folder):
        return RootPlan(folder, old, "widened")
    if not old.exists():
        return RootPlan(folder, old, "moved")
    raise InputError(
        f"{folder} is outside collection '{collection}', whose root is {old}. Index it into a collection"
        f" of its own (`--collection NAME`), or name both folders in one run (`polaris index {old} {folder}`)"
        " to widen the root to their common folder."
    )


def covers(paths: Sequence[Path], root: Path, relpath: str) -> bool:
    """True when the file at ``relpath`` under ``root`` lies within one of ``paths`` (compared in NFC)."""
    target = _spelled(root / PurePosixPath(relpath))
    return any(target == p or target.is_relative_to(p) for p in map(_spelled, paths))


def _spelled(path: Path) -> PurePosixPath:
    """A path compared as text: its NFC spelling."""
    return PurePosixPath(nfc(Path(path).as_posix()))


def walk(paths: Sequence[str | os.PathLike[str]], root: Path, follow_symlinks: bool = False) -> Walk:
    """Every indexable file under ``paths`` (files named directly are always included)."""
    found = Walk()
    seen: set[Path] = set()
    names: dict[str, Path] = {}  # relative path (NFC) -> the file that has it
    for path in _resolved(paths):
        if path.is_dir():
            candidates: Iterator[Path] = _walk_dir(path, _ignore_spec(path, None))
        else:
            candidates = iter([path])
        for file in candidates:
            if file in seen:
                continue
            seen.add(file)
            relpath = nfc(file.relative_to(root).as_posix())
            reason = _skip_reason(file, root, follow_symlinks)
            reason = reason or _spelling_clash(file, names.setdefault(relpath, file), root)
            if reason:
                found.skipped.append((relpath, reason))
            else:
                found.files.append(SourceFile(file, relpath))
    return found


def _spelling_clash(file: Path, first: Path, root: Path) -> str | None:
    """Why ``file`` is skipped when ``first``, another file, has its name in another spelling."""
    if first == file:
        return None
    this, other = file.relative_to(root).as_posix(), first.relative_to(root).as_posix()
    return (f"its name {this!a} is {other!a} in another Unicode spelling (NFD/NFC), which is indexed:"
            " one document per name; rename one of them")


def _skip_reason(file: Path, root: Path, follow_symlinks: bool) -> str | None:
    """Why ``file`` is not read, or None to read it."""
    if file.is_symlink():
        target = Path(os.path.realpath(file))
        if not follow_symlinks and not target.is_relative_to(root):
            return f"symlink to {target}, outside the root {root}; set follow_symlinks = true to index it"
    try:
        mode = os.stat(file).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(mode):
        return f"not a regular file ({_kind(mode)})"
    return None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "a special file"


def read_source(path: Path, name: str, limit_bytes: float) -> str:
    """The UTF-8 text of a regular file of at most ``limit_bytes``; InputError saying why not."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):  # swapped for a pipe or device since the walk
            raise InputError(f"{name}: not a regular file ({_kind(info.st_mode)}); only regular files are indexed.")
        if info.st_size > limit_bytes:
            raise InputError(
                f"{name}: too large ({info.st_size / 1e6:.1f} MB > max_file_mb {limit_bytes / 1e6:g});"
                " raise max_file_mb in polaris.toml to index it."
            )
        data = fh.read(int(limit_bytes) + 1)
    if len(data) > limit_bytes:  # grew while we read it
        raise InputError(f"{name}: grew past max_file_mb while being read; index it again when it is written.")
    return decode_source(data, name=name)


def decode_source(data: bytes, *, name: str = "input") -> str:
    """UTF-8 text of a file's bytes (BOM dropped); binary or invalid UTF-8 raises ``InputError``."""
    if b"\x00" in data[:8192]:
        raise InputError(f"{name}: looks like a binary file (NUL bytes); Polaris indexes UTF-8 text.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{name}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}). "
            "Convert it (e.g. `iconv -f latin1 -t utf-8`) or exclude it from the index."
        ) from exc


def _ignore_spec(directory: Path, parent: object | None) -> object | None:
    gitignore = directory / ".gitignore"
    if not gitignore.is_file():
        return parent
    import pathspec

    try:
        lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return parent
    return (parent, directory, pathspec.GitIgnoreSpec.from_lines(lines))


def _ignored(path: Path, is_dir: bool, spec: object | None) -> bool:
    while spec is not None:
        parent, base, matcher = spec  # type: ignore[misc]
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        if matcher.match_file(rel):
            return True
        spec = parent
    return False


def _walk_dir(directory: Path, spec: object | None) -> Iterator[Path]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if not _ignored(path, True, spec):
                yield from _walk_dir(path, _ignore_spec(path, spec))
        elif path.suffix.lower() in EXTENSIONS and not _ignored(path, False, spec):
            yield path
