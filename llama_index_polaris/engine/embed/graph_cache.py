"""The model's ONNX graph optimised once and kept in the user cache, so a new process skips it.

``$XDG_CACHE_HOME/polaris/onnx-graphs/<model sha256>-ort<version>/`` holds ``model.onnx`` (the
graph, ONNX Runtime's ``ORT_ENABLE_EXTENDED`` optimisations: no hardware-specific layouts) and
``model.onnx.data`` (its weights, read by ONNX Runtime through a memory map). The name is
the model file's sha256 and the ONNX Runtime version, so a changed model file or another
ONNX Runtime writes a new entry. An entry is written to a temporary folder and renamed into
place, so a reader sees a whole entry or none.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..paths import cache_root

log = logging.getLogger(__name__)

GRAPHS = "onnx-graphs"
MODEL, DATA = "model.onnx", "model.onnx.data"
STALE_SECONDS = 3600  # a temporary folder this old was left by a killed process


def graph_dir(fingerprint: str) -> Path:
    """The cache entry for the model with this sha256 under the installed ONNX Runtime."""
    import onnxruntime as ort

    return cache_root() / GRAPHS / f"{fingerprint}-ort{ort.__version__}"


def cached_graph(fingerprint: str) -> Path | None:
    """The optimised graph's ``model.onnx`` if the cache holds it, else None."""
    entry = graph_dir(fingerprint)
    model = entry / MODEL
    return model if model.is_file() and (entry / DATA).is_file() else None


def remove_graph(fingerprint: str) -> None:
    """Drop a cache entry that failed to load (the next session writes it again)."""
    _rmtree(graph_dir(fingerprint))


def save_graph(model: Path, fingerprint: str, options: Any, providers: list[str]) -> Any | None:
    """A session of ``model`` whose optimised graph (``options``' level) is saved to the cache
    on the way; None when the cache cannot be written (the caller makes a plain session)."""
    import onnxruntime as ort

    final = graph_dir(fingerprint)
    tmp = final.with_name(f"{final.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        log.debug("cannot write the optimised graph to %s: %s", tmp, exc)
        return None
    _remove_stale(final.parent)
    options.optimized_model_filepath = str(tmp / MODEL)
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", DATA)
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        session = ort.InferenceSession(str(model), sess_options=options, providers=providers)
    except Exception as exc:  # a bad model or a full disk: the plain session says which
        log.debug("cannot save the optimised graph of %s: %s", model, exc)
        _rmtree(tmp)
        return None
    try:
        os.rename(tmp, final)
    except OSError:  # another process renamed its copy first
        _rmtree(tmp)
    return session


def _remove_stale(folder: Path) -> None:
    now = time.time()
    for entry in folder.glob("*.tmp"):
        try:
            if now - entry.stat().st_mtime > STALE_SECONDS:
                _rmtree(entry)
        except OSError:
            pass


def _rmtree(path: Path) -> None:
    import shutil  # here: shutil loads zlib, bz2 and lzma, which a cold search never needs

    shutil.rmtree(path, ignore_errors=True)
