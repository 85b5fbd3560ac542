"""multilingual-e5-small through the real download path: a stand-in with the real file layout,
served at the real URLs from a local server, indexes and searches a Chinese document (#36 item 4)."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.embed_tiny import ModelServer
from fixtures.embed_xlmr import MODEL_ID, PASSAGE_MARK, QUERY_MARK, build_stand_in, stand_in_spec

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.embed import clear_embedders, get_model_spec, registry
from llama_index_polaris.engine.index import PolarisIndex


@pytest.fixture
def served(tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "POLARIS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    spec = stand_in_spec(get_model_spec(MODEL_ID), build_stand_in(tmp_path / "src"))
    monkeypatch.setattr(registry, "BUILTIN_MODELS", tuple(spec if s.id == MODEL_ID else s for s in registry.BUILTIN_MODELS))
    server = ModelServer()
    server.serve_model(spec, tmp_path / "src")
    monkeypatch.setenv("HF_ENDPOINT", server.base_url)
    clear_embedders()
    yield spec, server
    server.close()
    clear_embedders()


def test_downloaded_and_used_for_a_chinese_document(served, tmp_path):
    spec, server = served
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cache.md").write_text("# 缓存\n\n缓存的生命周期是什么？数据保存在内存中。\n", encoding="utf-8")
    (docs / "slots.md").write_text("# 插槽\n\n组件的插槽用于分发内容。\n", encoding="utf-8")
    with PolarisIndex(tmp_path / "polaris.db", config=load_config(use_user_config=False, model_id=MODEL_ID)) as index:
        index.index_paths([docs])
        assert index.embedder.files.source == "download"
        assert server.gets(server.url_path(spec, spec.onnx))  # fetched from the local hub
        meta = index.store.meta
        assert (meta["model_id"], int(meta["embedding_dim"])) == (MODEL_ID, 384)
        assert (meta["doc_prefix"], meta["query_prefix"]) == ("passage: ", "query: ")
        stored = [c.embedding for c in index.store.vector_sample(10)]
        assert stored and all(v[PASSAGE_MARK] > 0 and v[QUERY_MARK] == 0 for v in stored)
        query = index.embed_query("缓存")
        assert query[QUERY_MARK] > 0 and query[PASSAGE_MARK] == 0
        np.testing.assert_allclose(np.linalg.norm(query), 1.0, atol=1e-5)
        hits = index.search("缓存", mode="vector")
        assert hits[0].document == "cache.md"


def test_the_cli_lists_it_and_indexes_with_it(served, tmp_path, capsys, monkeypatch):
    """The command-line door: ``polaris models`` lists the model, ``polaris index --model`` downloads
    it and ``polaris search`` answers a Chinese query with it (in process: the stand-in is served here)."""
    import json

    from llama_index_polaris import cli

    spec, server = served
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cache.md").write_text("# 缓存\n\n缓存的生命周期是什么？数据保存在内存中。\n", encoding="utf-8")
    (docs / "slots.md").write_text("# 插槽\n\n组件的插槽用于分发内容。\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert cli.main(["models"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if MODEL_ID in line]
    assert listed and "384 dims" in listed[0]
    db = str(tmp_path / "polaris.db")
    assert cli.main(["index", str(docs), "--db", db, "--model", MODEL_ID]) == 0
    assert server.gets(server.url_path(spec, spec.onnx))
    capsys.readouterr()
    assert cli.main(["search", "缓存", "--db", db, "--mode", "bm25", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert [h["document"] for h in hits] == ["cache.md"]
    assert cli.main(["status", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model_id"] == MODEL_ID
