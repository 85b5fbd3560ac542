"""A cold `polaris search` loads only what a search needs, and its ONNX session comes from the
cached optimised graph (``embed.graph_cache``) with the same vectors as without it (#38)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llama_index_polaris.engine.embed import clear_embedders, get_model_spec, load_embedder
from llama_index_polaris.engine.embed import graph_cache
from llama_index_polaris.engine.embed.cache import resolve
from llama_index_polaris.engine.embed.embedder import Embedder
from llama_index_polaris.engine.embed.fingerprint import file_sha256
from llama_index_polaris.engine.embed.runtime import create_session

MODEL = "all-minilm-l6-v2"
TEXTS = ["Rotating an API key: create the new key, deploy it, then revoke the old one.",
         "how do we rotate an api key", "On-call hands over on Mondays at 10:00 UTC.", "x"]

# what a one-shot search must not import: the frameworks, the chunker and indexer, the
# download client, the long-lived caches
NOT_NEEDED = ("llama_index", "datasette", "mcp", "markdown_it", "yaml", "tqdm", "huggingface_hub",
              "urllib.request", "http.client", "ssl", "socket", "email",
              "llama_index_polaris.engine.chunk", "llama_index_polaris.engine.ingest.indexer",
              "llama_index_polaris.engine.ingest.watch", "llama_index_polaris.engine.sqlite.bits",
              "llama_index_polaris.engine.sqlite.bm25_cache",
              # loaded where they are used: OpenSSL's hashes, HTML, suggestions, PostgreSQL's numbers, threads
              "hashlib", "html", "difflib", "decimal", "concurrent.futures", "pluggy",
              # dataclasses a search never makes (0.6 ms each): documents' outlines and pages, the learned fusion
              "llama_index_polaris.engine.storage.documents", "llama_index_polaris.engine.search.learned")

SEARCH = """
import io, json, sys, contextlib
from llama_index_polaris.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(['search', 'how do we rotate an api key', '--json'])
from llama_index_polaris.engine.embed.embedder import _LOADED
tokenizers = [v for k, v in _LOADED.items() if k[0] == 'load_tokenizers']
print(json.dumps({"code": code, "hits": len(json.loads(out.getvalue())), "modules": sorted(sys.modules),
                  "counter_parsed": any('counter' in vars(t) for t in tokenizers)}))
"""


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user cache of this test's own (graphs, sha256 memo); no Embedder from before."""
    home = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    clear_embedders()
    yield home
    clear_embedders()


def vectors(fast_start: bool, fingerprint: str | None, onnx: Path | None = None) -> np.ndarray:
    """TEXTS embedded (documents, then the query) by a session made now for this setting."""
    spec = get_model_spec(MODEL)
    files = resolve(spec)
    if onnx is not None:
        files = type(files)(onnx, files.tokenizer, "model_dir")
    embedder = Embedder(spec, files, fast_start=fast_start)
    embedder._session = create_session(files.onnx, (None, fast_start, fingerprint))
    return np.vstack([embedder.embed_documents(TEXTS), embedder._embed([TEXTS[1]], spec.query_prefix)])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def entries(home: Path) -> list[str]:
    folder = home / "polaris" / graph_cache.GRAPHS
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_one_shot_search_imports_only_what_it_needs(built_handbook: Path, tmp_path: Path) -> None:
    shutil.copy(built_handbook, tmp_path / "polaris.db")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    proc = subprocess.run([sys.executable, "-c", SEARCH], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["code"] == 0 and got["hits"] > 0
    loaded = [m for m in got["modules"] if any(m == n or m.startswith(n + ".") for n in NOT_NEEDED)]
    assert loaded == []
    assert not got["counter_parsed"]  # the counting tokenizer is for chunking, not for a search


@pytest.mark.parametrize("fast_start", [True, False])
def test_cached_graph_gives_the_same_vectors(cache_home: Path, fast_start: bool) -> None:
    fingerprint = load_embedder(MODEL).fingerprint
    plain = vectors(fast_start, None)
    assert entries(cache_home) == []
    written = vectors(fast_start, fingerprint)  # the first session optimises and writes the graph
    assert entries(cache_home) == [graph_cache.graph_dir(fingerprint).name]
    entry = graph_cache.graph_dir(fingerprint)
    assert (entry / graph_cache.MODEL).is_file() and (entry / graph_cache.DATA).is_file()
    stamp = (entry / graph_cache.DATA).stat().st_mtime_ns
    loaded = vectors(fast_start, fingerprint)  # later sessions load it
    assert (entry / graph_cache.DATA).stat().st_mtime_ns == stamp
    for got in (written, loaded):
        assert cosines(got, plain).min() >= 0.9999
        assert np.abs(got - plain).max() < 1e-3


def test_one_shot_and_long_lived_sessions_agree_through_the_cache(cache_home: Path) -> None:
    fingerprint = load_embedder(MODEL).fingerprint
    long_lived = vectors(False, None)  # today's indexing session: ORT_ENABLE_ALL, no cache
    vectors(True, fingerprint)
    assert cosines(vectors(True, fingerprint), long_lived).min() >= 0.9999


def test_changed_model_file_gets_its_own_graph(cache_home: Path, tmp_path: Path) -> None:
    import onnx

    original = resolve(get_model_spec(MODEL)).onnx
    vectors(True, file_sha256(original))
    changed = tmp_path / "model" / "model.onnx"
    changed.parent.mkdir()
    proto = onnx.load(str(original))
    proto.doc_string = "the same weights, another file"
    onnx.save(proto, str(changed))
    new_fingerprint = file_sha256(changed)
    assert new_fingerprint != file_sha256(original)
    before = entries(cache_home)
    got = vectors(True, new_fingerprint, onnx=changed)
    assert entries(cache_home) == sorted([*before, graph_cache.graph_dir(new_fingerprint).name])
    assert cosines(got, vectors(True, None)).min() >= 0.9999


def test_another_onnxruntime_version_gets_its_own_graph(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime

    fingerprint = load_embedder(MODEL).fingerprint
    vectors(True, fingerprint)
    first = entries(cache_home)
    monkeypatch.setattr(onnxruntime, "__version__", "0.0.0-another")
    assert graph_cache.cached_graph(fingerprint) is None  # not the other version's graph
    vectors(True, fingerprint)
    assert len(entries(cache_home)) == 2 and first[0] in entries(cache_home)
    assert any(name.endswith("-ort0.0.0-another") for name in entries(cache_home))


def test_a_damaged_graph_is_written_again(cache_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    fingerprint = load_embedder(MODEL).fingerprint
    good = vectors(True, fingerprint)
    data = graph_cache.graph_dir(fingerprint) / graph_cache.DATA
    size = data.stat().st_size
    with open(data, "r+b") as fh:
        fh.truncate(size // 2)
    again = vectors(True, fingerprint)
    assert "did not load" in caplog.text
    assert data.stat().st_size == size
    assert cosines(again, good).min() >= 0.9999


def test_an_unwritable_cache_falls_back_to_a_plain_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # nothing can be made under a file
    clear_embedders()
    fingerprint = file_sha256(resolve(get_model_spec(MODEL)).onnx)
    got = vectors(True, fingerprint)
    assert graph_cache.cached_graph(fingerprint) is None
    assert cosines(got, vectors(True, None)).min() >= 0.9999
    clear_embedders()


def test_search_hits_are_the_same_cold_and_long_lived(built_handbook: Path, tmp_path: Path) -> None:
    """Cold (`polaris search`, one-shot session from the cache) and long-lived give the same hits."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    shutil.copy(built_handbook, tmp_path / "polaris.db")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    cli = str(Path(sys.executable).with_name("polaris"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")},
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    cfg = load_config(tmp_path, use_user_config=False, db_path=str(tmp_path / "polaris.db"))
    with PolarisIndex(cfg.db_path, config=cfg, readonly=True) as index:
        for query in ("how do we rotate an api key", "on-call handover", "deleting a workspace"):
            cold = json.loads(subprocess.run([cli, "search", query, "--json"], cwd=tmp_path, env=env,
                                             capture_output=True, text=True, check=True).stdout)
            warm = index.search(query)
            assert [h["node_id"] for h in cold] == [h.node_id for h in warm]
            assert [round(h["score"], 4) for h in cold] == [round(h.score, 4) for h in warm]


def test_sqlite_vec_is_loaded_from_where_its_package_says() -> None:
    """``connect.vec0_path`` finds the extension without importing sqlite_vec (which imports sqlite3)."""
    import sqlite_vec

    from llama_index_polaris.engine.sqlite.connect import vec0_path

    assert vec0_path() == sqlite_vec.loadable_path()
