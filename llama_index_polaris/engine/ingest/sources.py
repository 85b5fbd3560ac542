"""Finding and reading documents on disk, relative to a collection's root.

A collection has one root folder; a file's identity is its path relative to that root,
whichever path was typed (the root, a subfolder or one file). ``plan_root`` decides the
root of a run from the one recorded and the paths given: inside it, it stays; a run over
a parent folder widens it (files are re-keyed, nothing is re-embedded); a root that is
gone from disk has moved. Anything else is refused, with what to type instead.

Only regular files are read, at most ``limit`` bytes, without blocking (a FIFO named
``x.md`` is skipped, not waited on). A file is UTF-8 (a BOM dropped), or UTF-16 or UTF-32
when a BOM says so. Hidden directories and whatever a ``.gitignore`` on
the way down excludes are skipped. Symlinked directories are not followed (no loops);
a symlinked file is read when its target lies inside the root, or anywhere when
``follow_symlinks`` is on; otherwise it is reported as skipped.

A relative path is text, kept in NFC (``text.nfc``) whatever spelling the file system
gives: a macOS file name in NFD and the same name typed in NFC are one document. Two files
whose names differ only in that spelling (possible on Linux) would be one document: the
second one found is skipped, and the run says so. A name that is not valid UTF-8 is
stored with its undecodable bytes written out (``bad\\xffname.md``, ``text.storable``).

A walk never stops at a folder it cannot list (unreadable, or a path longer than the
system allows): the folder is reported as skipped and listed in ``Walk.unlisted``, and the
documents already indexed under it stay (a run removes only what it looked for and did
not find).
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator, Sequence

from ..errors import InputError
from ..text import is_valid, nfc, storable

EXTENSIONS = (".md", ".markdown", ".mdx", ".txt")
# Byte order marks, longest first (UTF-32 LE begins with UTF-16 LE's), and the codec each names.
BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


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
    unlisted: list[Path] = field(default_factory=list)  # folders that could not be listed
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (path, rule) passed over by design


IGNORE_RULES = {
    "extension": f"not a file type Polaris indexes: {', '.join(EXTENSIONS)}",
    "gitignore": "matched by a .gitignore",
    "hidden": "hidden: the name starts with a dot",
    "symlink": "a symlinked folder, which a walk does not enter (a link can loop); to index its files, name the folder it points to",
}


def ignored_summary(ignored: Sequence[tuple[str, str]]) -> str:
    """``"3 .py, 1 .rst, 1 .png (not a file type ...); 1 hidden (...)"``: counts by extension and rule."""
    by_rule: dict[str, dict[str, int]] = {}
    for path, rule in ignored:
        name = PurePosixPath(path.rstrip("/")).name
        kind = "folder" if path.endswith("/") else (PurePosixPath(name).suffix.lower() or "no extension")
        counts = by_rule.setdefault(rule, {})
        counts[kind] = counts.get(kind, 0) + 1
    parts = []
    for rule, counts in sorted(by_rule.items(), key=lambda kv: list(IGNORE_RULES).index(kv[0])):
        listed = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        parts.append(f"{listed} ({IGNORE_RULES[rule]})")
    return "; ".join(parts)


def _resolved(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Absolute paths with symlinked folders resolved; a symlinked file keeps its own name."""
    out = []
    for p in paths:
        path = Path(p).absolute()
        try:
            if not path.exists():
                raise InputError(f"{p}: no such file or directory.")
            out.append(path.parent.resolve() / path.name if path.is_symlink() and not path.is_dir() else path.resolve())
        except OSError as exc:  # a path longer than the system allows, a loop of symlinks
            raise InputError(f"{p}: cannot be used ({exc.strerror or exc}).") from exc
    return out


def common_folder(paths: Sequence[str | os.PathLike[str]]) -> Path:
    """The folder that holds every path given (a file's own folder for a file)."""
    folders = [p if p.is_dir() else p.parent for p in _resolved(paths)]
    return Path(os.path.commonpath(folders))


def plan_root(recorded: str | None, paths: Sequence[str | os.PathLike[str]], collection: str) -> RootPlan:
    """The collection root for a run over ``paths``, given the root ``recorded`` before it."""
    folder = common_folder(paths)
    if not is_valid(str(folder)):
        raise InputError(
            f"{storable(str(folder))}: this folder's path is not valid UTF-8, and a collection's root is recorded as"
            " text. Rename the folder (e.g. `convmv -f latin1 -t utf-8`) or index folders with valid names."
        )
    if recorded is None:
        return RootPlan(folder, None, "new")
    old = Path(recorded)
    if folder == old or folder.is_relative_to(old):
        return RootPlan(old)
    real = real_folder(old)
    if real != old and (folder == real or folder.is_relative_to(real)):  # the root is now a symlink to its files
        return RootPlan(real, old, "moved")
    if old.is_relative_to(folder):
        return RootPlan(folder, old, "widened")
    if not old.exists():
        return RootPlan(folder, old, "moved")
    raise InputError(
        f"{folder} is outside collection '{collection}', whose root is {old}. Index it into a collection"
        f" of its own (`--collection NAME`), or name both folders in one run (`polaris index {old} {folder}`)"
        " to widen the root to their common folder."
    )


def real_folder(folder: Path) -> Path:
    """``folder`` with its symlinks resolved (where a walk of it reads files), or as it is when it
    cannot be resolved."""
    try:
        return folder.resolve()
    except (OSError, RuntimeError):  # a loop
        return folder


def root_of(location: str, relpath: str) -> Path | None:
    """The folder ``relpath`` is relative to, for the file at the absolute ``location`` (None
    when ``location`` does not end with ``relpath``)."""
    place, rel = PurePosixPath(nfc(location)), PurePosixPath(nfc(relpath))
    if not place.is_absolute() or rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    if place.parts[-len(rel.parts):] != rel.parts or len(place.parts) <= len(rel.parts):
        return None
    return Path(*place.parts[: -len(rel.parts)])


def check_unrooted(root: Path, relpaths: Sequence[str], collection: str) -> None:
    """Refuse ``root`` as the first root of a collection that already holds files keyed by paths
    relative to a folder it never recorded (added through LlamaIndex without one), unless each
    of them is under ``root``: a run over another folder would remove them as gone."""
    missing = [p for p in relpaths if not _exists(root / PurePosixPath(p))]
    if not missing:
        return
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    raise InputError(
        f"collection '{collection}' holds {len(relpaths)} documents with paths relative to a folder it does not"
        f" record (added through LlamaIndex without a root), and {root} does not hold {len(missing)} of them"
        f" ({shown}): it is not their folder, and indexing it would remove them. Index the folder they came"
        f" from (the root_dir given to PolarisNodeParser), index {root} into a collection of its own"
        f" (`--collection NAME`), or drop the old documents first (`polaris remove --collection {collection}`)."
    )


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def on_disk(root: Path, relpath: str) -> Path:
    """The file a stored relative path names under ``root``: ``root / relpath`` when that exists,
    else the one whose name the walk stores as ``relpath`` (each part's ``nfc`` spelling: a name in
    NFD on disk, or one that is not UTF-8, ``bad\\xffname.md``), found part by part; else
    ``root / relpath`` (missing)."""
    path = root / PurePosixPath(relpath)
    if os.path.lexists(path):
        return path
    here = root
    for part in PurePosixPath(relpath).parts:
        child = here / part
        if not os.path.lexists(child):
            try:
                named = [name for name in os.listdir(here) if nfc(name) == part]
            except OSError:
                return path
            if len(named) != 1:
                return path
            child = here / named[0]
        here = child
    return here


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
    def unlisted(folder: Path, reason: str) -> None:
        found.unlisted.append(folder)
        found.skipped.append((nfc(folder.relative_to(root).as_posix()) + "/", reason))

    def ignored(path: Path, is_dir: bool, rule: str) -> None:
        entry = nfc(path.relative_to(root).as_posix()) + ("/" if is_dir else "")
        if rule == "symlink":  # a folder the user likely meant to index: said like a skipped file
            found.skipped.append((entry, IGNORE_RULES[rule]))
        else:
            found.ignored.append((entry, rule))

    for path in _resolved(paths):
        if path.is_dir():
            candidates: Iterator[Path] = _walk_dir(path, None, unlisted, ignored)
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
    if storable(this) == this and storable(other) == other:
        return (f"its name {this!a} is {other!a} in another Unicode spelling (NFD/NFC), which is indexed:"
                " one document per name; rename one of them")
    if storable(this) != this:
        return (f"its name {this!a} is not valid UTF-8 and is stored as {nfc(this)!r}, the name of another file,"
                " which is indexed: one document per name; rename one of them")
    return (f"its name is also how {other!a} (not valid UTF-8) is stored, and that file is indexed: one document"
            " per name; rename one of them")


def _skip_reason(file: Path, root: Path, follow_symlinks: bool) -> str | None:
    """Why ``file`` is not read, or None to read it."""
    try:
        if file.is_symlink():
            target = Path(os.path.realpath(file))
            if not follow_symlinks and not target.is_relative_to(root):
                return f"symlink to {storable(str(target))}, outside the root {root}; set follow_symlinks = true to index it"
        mode = os.stat(file).st_mode
    except OSError as exc:
        return f"cannot be read ({_why(exc)})"
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
    """The text of a file's bytes: UTF-8, or UTF-16/UTF-32 when a byte order mark says so (the
    BOM dropped); binary or invalid text raises ``InputError`` saying which and what to do."""
    codec = next((c for bom, c in BOMS if data.startswith(bom)), None)
    if codec is None and b"\x00" in data[:8192]:
        raise InputError(f"{name}: {_nul_kind(data[:8192])}; Polaris indexes UTF-8 text (or UTF-16/32 with a BOM).")
    codec = codec or "utf-8"
    try:
        text = data.decode(codec)
    except UnicodeDecodeError as exc:
        label = {"utf-8-sig": "UTF-8"}.get(codec, codec.upper())
        raise InputError(
            f"{name}: not valid {label} (byte 0x{data[exc.start]:02x} at offset {exc.start}). "
            "Convert it to UTF-8 (e.g. `iconv -f latin1 -t utf-8`) or exclude it from the index."
        ) from exc
    if codec != "utf-8" and "\x00" in text[:8192]:
        raise InputError(f"{name}: decoded as {codec.upper()} (its BOM) it holds NUL characters: a binary file.")
    return text


def _nul_kind(head: bytes) -> str:
    """What a file's first bytes with NULs in them look like: UTF-16 without a BOM, or binary."""
    for order, zeros, chars in (("le", head[1::2], head[0::2]), ("be", head[0::2], head[1::2])):
        if len(head) >= 4 and zeros.count(0) >= 0.9 * len(zeros) and chars.count(0) <= 0.1 * len(chars):
            return (f"looks like UTF-16 ({order.upper()}) without a byte order mark; convert it"
                    f" (`iconv -f utf-16{order} -t utf-8`) or save it with a BOM")
    return "looks like a binary file (NUL bytes)"


def _why(exc: OSError) -> str:
    """An OSError in words, with what to do about a path longer than the system allows."""
    if exc.errno == errno.ENAMETOOLONG:
        return f"{exc.strerror}: its path is longer than this system allows; move it to a shallower folder"
    return exc.strerror or str(exc)


def _ignore_spec(directory: Path, parent: object | None) -> object | None:
    """The .gitignore rules in force in ``directory`` (OSError: the folder cannot be read)."""
    gitignore = directory / ".gitignore"
    try:
        is_file = gitignore.is_file()
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        is_file = False  # no such path can exist; if the folder's own is too long, listing it fails
    if not is_file:
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


def _walk_dir(
    directory: Path, parent: object | None, unlisted: Callable[[Path, str], None],
    ignored: Callable[[Path, bool, str], None] = lambda path, is_dir, rule: None,
) -> Iterator[Path]:
    """The indexable files under ``directory``; a folder that cannot be listed goes to ``unlisted``,
    an entry passed over by a rule (``IGNORE_RULES``) to ``ignored`` (an ignored folder is not entered)."""
    try:
        spec = _ignore_spec(directory, parent)
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        unlisted(directory, f"folder cannot be listed ({_why(exc)}); its files are not indexed, and those"
                            " indexed before stay")
        return
    for entry in entries:
        path = Path(entry.path)
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False  # reported by the file's own checks (``_skip_reason``)
        if entry.name.startswith("."):
            if entry.name != ".gitignore":
                ignored(path, is_dir, "hidden")
        elif _ignored(path, is_dir, spec):
            ignored(path, is_dir, "gitignore")
        elif is_dir:
            yield from _walk_dir(path, spec, unlisted, ignored)
        elif _symlinked_folder(entry):
            ignored(path, True, "symlink")
        elif path.suffix.lower() in EXTENSIONS:
            yield path
        else:
            ignored(path, False, "extension")


def _symlinked_folder(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a symlink to a folder (the walk does not follow one)."""
    try:
        return entry.is_symlink() and entry.is_dir()
    except OSError:  # a loop or a dangling link: the file's own checks say which
        return False


def walked(path: Path, top: Path, is_dir: bool = False) -> bool:
    """Whether a walk of the folder ``top`` reaches ``path``: a Markdown or text file (or, with
    ``is_dir``, a folder) under ``top`` with no hidden part and not excluded by a ``.gitignore``
    on the way down (what ``walk`` skips, decided for one path: ``polaris index --watch``)."""
    try:
        rel = path.relative_to(top)
    except ValueError:
        return False
    if any(part.startswith(".") for part in rel.parts) or not (is_dir or path.suffix.lower() in EXTENSIONS):
        return False
    spec, folder = None, top
    try:
        for part in rel.parts:
            spec = _ignore_spec(folder, spec)
            folder = folder / part
            if _ignored(folder, is_dir or folder != path, spec):
                return False
    except OSError:
        return False  # a folder on the way cannot be read: the walk skips it too
    return True
