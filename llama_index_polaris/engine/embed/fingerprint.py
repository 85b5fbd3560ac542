"""sha256 of model files, remembered per (path, size, mtime, ctime, inode) so a cold start does not
rehash. The change time is the kernel's (a copy that keeps the mtime, `cp -p` or `rsync -a`, still
moves it), so a file replaced by another of the same size and mtime is hashed again."""

from __future__ import annotations

import json
import logging
import os
import threading

from ..paths import cache_root

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
_MEMO_NAME = "fingerprints-v2.json"  # (size, mtime, ctime, inode); fingerprints.json, (size, mtime), is an older Polaris's


def sha256_of(path: str | os.PathLike[str]) -> str:
    """Hash a file from disk, 1 MiB at a time."""
    import hashlib  # OpenSSL's load is 5 ms of a cold search that finds every hash in the memo

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The file's sha256, read from the memo when its path, size, mtime, ctime and inode are unchanged."""
    real, key = _stat_key(path)
    with _LOCK:
        memo = _read_memo()
        entry = memo.get(real)
        if entry and entry[:-1] == key:
            return entry[-1]
    digest = sha256_of(real)
    remember_sha256(real, digest)
    return digest


def remember_sha256(path: str | os.PathLike[str], digest: str) -> None:
    """Record a hash just computed elsewhere (e.g. while downloading)."""
    real, key = _stat_key(path)
    with _LOCK:
        memo = _read_memo()
        memo[real] = [*key, digest]
        _write_memo(memo)


def _stat_key(path: str | os.PathLike[str]) -> tuple[str, list[int]]:
    real = os.path.realpath(path)
    st = os.stat(real)
    return real, [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _read_memo() -> dict[str, list]:
    try:
        with open(cache_root() / _MEMO_NAME, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_memo(memo: dict[str, list]) -> None:
    target = cache_root() / _MEMO_NAME
    live = {p: v for p, v in memo.items() if os.path.exists(p)}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{_MEMO_NAME}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(live, indent=0), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:  # a read-only cache only costs a rehash next time
        log.debug("cannot write %s: %s", target, exc)
