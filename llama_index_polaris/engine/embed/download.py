"""Fetch a model's files into the user-global cache: resumable (HTTP Range), progress bar, sha256-verified.

The server is ``$POLARIS_MODEL_BASE_URL`` (default ``https://huggingface.co``), laid out as
``{base}/{repo}/resolve/{revision}/{path}`` like the Hugging Face hub. Tests point it at a
local server; ``HF_HUB_OFFLINE=1`` or ``POLARIS_OFFLINE=1`` forbid any download.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Union

from ..errors import ModelDownloadError
from .fingerprint import remember_sha256, sha256_of
from .registry import ModelFile, ModelSpec

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://huggingface.co"
CHUNK_BYTES = 1 << 20
TIMEOUT_S = 30
Progress = Union[bool, Callable[[int, int], None]]


def base_url() -> str:
    """The download server: ``$POLARIS_MODEL_BASE_URL`` or the Hugging Face hub."""
    return (os.environ.get("POLARIS_MODEL_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


def offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``POLARIS_OFFLINE`` asks for no network."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("POLARIS_OFFLINE", ""))
    return any(f.strip().lower() in ("1", "true", "yes", "on") for f in flags)


def file_url(spec: ModelSpec, file: ModelFile, base: str | None = None) -> str:
    """Where one of the model's files is served."""
    return f"{base or base_url()}/{spec.repo}/resolve/{spec.revision}/{file.path}"


def missing_model_message(spec: ModelSpec, dest_dir: Path, reason: str) -> str:
    """The one error a user sees when a model is neither present nor downloadable."""
    names = " and ".join(f"{f.name} (from {file_url(spec, f, DEFAULT_BASE_URL)})" for f in spec.files)
    return (
        f"Embedding model '{spec.id}' is not available here and could not be downloaded ({reason}). "
        f"Put {names} into {dest_dir}, or set model_dir in polaris.toml to a directory holding them, "
        f'or use the bundled offline model: model_id = "all-minilm-l6-v2".'
    )


def download_model(spec: ModelSpec, dest_dir: Path, *, base: str | None = None, progress: Progress = True) -> None:
    """Download every file of ``spec`` missing from ``dest_dir`` (one process at a time)."""
    if offline():
        raise ModelDownloadError(missing_model_message(spec, dest_dir, "offline mode is set"))
    with _dir_lock(dest_dir):
        for file in spec.files:
            target = dest_dir / file.name
            if target.exists() and (file.sha256 is None or sha256_of(target) == file.sha256):
                continue  # fetched by another process while we waited, or left by an earlier run
            url = file_url(spec, file, base)
            log.info("downloading %s %s (%s) from %s", spec.id, file.name, _mb(file.size), url)
            try:
                fetch(url, target, sha256=file.sha256, size=file.size, progress=progress, label=f"{spec.id} {file.name}")
            except ModelDownloadError as exc:
                raise ModelDownloadError(missing_model_message(spec, dest_dir, str(exc))) from exc


def fetch(
    url: str,
    dest: Path,
    *,
    sha256: str | None,
    size: int | None,
    progress: Progress = True,
    label: str = "",
    attempts: int = 4,
    retry_wait: float = 1.0,
) -> str:
    """Download ``url`` to ``dest`` via ``dest.part``, resuming after cuts; returns the sha256.

    A checksum mismatch is refused: the partial file is removed and nothing lands at ``dest``.
    """
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, attempts + 1):
        try:
            _transfer(url, part, size, progress, label or dest.name)
            break
        except urllib.error.HTTPError as exc:
            if exc.code not in (408, 416, 429) and exc.code < 500:
                raise ModelDownloadError(f"{url} answered HTTP {exc.code}") from exc
            problem: Exception = exc
        except urllib.error.URLError as exc:  # no connection at all: retrying will not help
            raise ModelDownloadError(f"cannot reach {url}: {_reason(exc)}") from exc
        except (OSError, http.client.HTTPException) as exc:
            problem = exc
        log.info("download of %s interrupted (%s); attempt %d of %d", url, problem, attempt, attempts)
        if attempt == attempts:
            raise ModelDownloadError(f"cannot fetch {url}: {_reason(problem)}") from problem
        time.sleep(retry_wait * attempt)
    digest = sha256_of(part)
    if sha256 is not None and digest != sha256:
        part.unlink()
        raise ModelDownloadError(
            f"checksum mismatch for {url}: expected sha256 {sha256}, got {digest}; the file was removed"
        )
    os.replace(part, dest)
    remember_sha256(dest, digest)
    return digest


def _transfer(url: str, part: Path, size: int | None, progress: Progress, label: str) -> None:
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:
        offset = 0
    if size is not None and offset == size:
        return
    headers = {"User-Agent": "polaris-embed/0.1"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416:  # our partial file is not a prefix the server recognises
            part.unlink(missing_ok=True)
        raise
    with response:
        if response.status != 206 or not _range_starts_at(response, offset):
            offset = 0  # the server ignored the Range: start over
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else size
        if size is not None and total is not None and total != size:
            part.unlink(missing_ok=True)
            raise ModelDownloadError(f"{url} is {total} bytes, expected {size}")
        with open(part, "ab" if offset else "wb") as out, _progress(progress, total, offset, label) as tick:
            done = offset
            while block := response.read(CHUNK_BYTES):
                out.write(block)
                done += len(block)
                tick(done)
    if total is not None and done < total:
        raise ConnectionError(f"connection closed after {done} of {total} bytes")


def _range_starts_at(response, offset: int) -> bool:
    content_range = response.headers.get("Content-Range", "")
    return content_range.startswith(f"bytes {offset}-")


@contextlib.contextmanager
def _progress(progress: Progress, total: int | None, initial: int, label: str) -> Iterator[Callable[[int], None]]:
    if callable(progress):
        yield lambda done: progress(done, total or 0)
        return
    from tqdm import tqdm  # imported only when a download happens

    bar = tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=label, disable=not progress)
    last = [initial]

    def tick(done: int) -> None:
        bar.update(done - last[0])
        last[0] = done

    try:
        yield tick
    finally:
        bar.close()


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no cross-process lock
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _reason(exc: Exception) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return f"no network ({exc.reason})"
    return str(exc) or type(exc).__name__


def _mb(size: int | None) -> str:
    return "size unknown" if size is None else f"{size / 1e6:.0f} MB"
