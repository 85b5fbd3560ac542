"""Finding documents on disk: Markdown and text files under the paths given.

Hidden directories are skipped, and so is whatever a ``.gitignore`` on the way down
excludes. Symlinked directories are not followed (no loops); symlinked files are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from .errors import InputError

EXTENSIONS = (".md", ".markdown", ".mdx", ".txt")


@dataclass(frozen=True)
class SourceFile:
    """A file to index: its absolute path and its path relative to the indexed root."""

    path: Path
    relpath: str


def index_root(paths: Sequence[str | os.PathLike[str]]) -> Path:
    """The directory that document paths are relative to: the common parent of ``paths``."""
    resolved = []
    for p in paths:
        path = Path(p).resolve()
        if not path.exists():
            raise InputError(f"{p}: no such file or directory.")
        resolved.append(path if path.is_dir() else path.parent)
    return Path(os.path.commonpath(resolved))


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


def walk(paths: Sequence[str | os.PathLike[str]], root: Path | None = None) -> Iterator[SourceFile]:
    """Every indexable file under ``paths`` (files named directly are always included)."""
    root = root or index_root(paths)
    seen: set[Path] = set()
    for p in paths:
        path = Path(p).resolve()
        if path.is_file():
            candidates: Iterator[Path] = iter([path])
        else:
            candidates = _walk_dir(path, _ignore_spec(path, None))
        for file in candidates:
            if file not in seen:
                seen.add(file)
                yield SourceFile(file, file.relative_to(root).as_posix())


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
