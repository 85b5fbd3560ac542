"""Shared fixtures: a fresh database file per test, small stores with a fake model.

Nothing here is shared between tests: every fixture builds its own objects in the
test's own ``tmp_path`` and closes what it opened.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from llama_index_polaris.engine.store import DocumentRecord, Store
from polaris_testing import REPO, fake_binding, make_chunks, unit_vectors


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where this test's polaris.db goes (not created yet)."""
    return tmp_path / "polaris.db"


@pytest.fixture
def open_store() -> Iterator[Callable[..., Store]]:
    """``open_store(path, **kw)``: a Store that is closed when the test ends."""
    opened: list[Store] = []

    def _open(path: Path, **kw) -> Store:
        store = Store(path, **kw)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def make_store(db_path: Path, open_store: Callable[..., Store]) -> Callable[..., Store]:
    """``make_store(dim=4, docs={"doc-a": 3, "doc-b": 2})``: a bound store holding ``docs``.

    Each document gets ``n`` chunks (``make_chunks``) and vectors ``unit_vectors(n, dim,
    seed=i)`` where ``i`` is the document's position in ``docs``.
    """

    def _make(dim: int = 4, docs: dict[str, int] | None = None, path: Path | None = None, **kw) -> Store:
        store = open_store(path or db_path, **kw)
        store.bind_model(fake_binding(dim))
        for i, (doc_id, n) in enumerate((docs if docs is not None else {"doc-a": 3, "doc-b": 2}).items()):
            store.upsert_document(
                DocumentRecord(doc_id, path=f"{doc_id}.md"), make_chunks(doc_id, n), unit_vectors(n, dim, seed=i)
            )
        return store

    return _make


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess]:
    """``run_python(code, env={...}, pythonpath=[...])``: run ``code`` in a fresh interpreter."""

    def _run(code: str, *, env: dict[str, str] | None = None, pythonpath: list[str] | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if k != "POLARIS_FORCE_PYSQLITE3"}
        full_env["PYTHONPATH"] = os.pathsep.join([*(pythonpath or []), str(REPO)])
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout
        )

    return _run


@pytest.fixture
def settings_embed_model():
    """``settings_embed_model(model)`` sets LlamaIndex's ``Settings.embed_model`` for one test;
    what was there is put back after it."""
    from llama_index.core import Settings

    saved = Settings._embed_model
    yield lambda model: setattr(Settings, "_embed_model", model)
    Settings._embed_model = saved


@pytest.fixture(scope="module")
def built_handbook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/handbook indexed once per module by `polaris index`'s engine on the bundled
    model; tests copy it (``copy_index``) rather than write to it."""
    import shutil

    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    root = tmp_path_factory.mktemp("built")
    handbook = shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
    with PolarisIndex(root / "polaris.db", config=load_config(use_user_config=False, model_id="all-minilm-l6-v2")) as index:
        index.index_paths([handbook])
    return root / "polaris.db"

