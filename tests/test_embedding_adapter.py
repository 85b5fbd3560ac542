"""PolarisEmbedding: the LlamaIndex adapter over engine.embed."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.embed_tiny import NOMIC_LIKE, TinyModels, build_model_dir, expected

from llama_index_polaris import PolarisEmbedding
from llama_index_polaris.engine.config import PolarisConfig
from llama_index_polaris.engine.embed import clear_embedders, load_embedder
from llama_index_polaris.engine.plugins import plugin_manager


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    plugin_manager().register(TinyModels(NOMIC_LIKE), name="tiny-adapter")
    yield build_model_dir(tmp_path_factory.mktemp("tiny"))
    plugin_manager().unregister(name="tiny-adapter")
    clear_embedders()


def test_bundled_model_offline_sync_and_batch():
    embed = PolarisEmbedding(model_id="all-minilm-l6-v2")
    assert (embed.model_name, embed.model_id, embed.embedding_dim) == ("all-minilm-l6-v2", "all-minilm-l6-v2", 384)
    assert embed.class_name() == "PolarisEmbedding"
    assert embed.embedder is load_embedder("all-minilm-l6-v2")
    one = embed.get_text_embedding("Tokens have a lifetime of one hour.")
    batch = embed.get_text_embedding_batch(["Tokens have a lifetime of one hour.", "RRF_K", ""])
    assert len(one) == 384 and isinstance(one[0], float)
    assert len(batch) == 3 and np.allclose(batch[0], one, atol=1e-6)
    query = embed.get_query_embedding("how long do tokens live?")
    assert abs(np.linalg.norm(query) - 1.0) < 1e-5
    assert embed.similarity(query, one) > embed.similarity(query, batch[1])


async def test_async_methods_match_sync():
    embed = PolarisEmbedding(model_id="all-minilm-l6-v2")
    texts = ["expired sessions", "token lifetime"]
    assert np.allclose(await embed.aget_query_embedding("sessions"), embed.get_query_embedding("sessions"), atol=1e-6)
    assert np.allclose(await embed.aget_text_embedding(texts[0]), embed.get_text_embedding(texts[0]), atol=1e-6)
    assert np.allclose(await embed.aget_text_embedding_batch(texts), embed.get_text_embedding_batch(texts), atol=1e-6)


def test_defaults_come_from_polaris_toml(tmp_path):
    (tmp_path / "polaris.toml").write_text('model_id = "all-minilm-l6-v2"\nembed_batch_size = 4\n')
    embed = PolarisEmbedding()
    assert (embed.model_name, embed.onnx_batch_size) == ("all-minilm-l6-v2", 4)
    explicit = PolarisEmbedding(config=PolarisConfig(model_id="all-minilm-l6-v2"), onnx_batch_size=2)
    assert explicit.onnx_batch_size == 2


def test_prefixes_are_applied_per_path(tiny_dir):
    embed = PolarisEmbedding(model_id="tiny-nomic", model_dir=str(tiny_dir))
    np.testing.assert_allclose(embed.get_text_embedding("hello world"), expected("search_document: hello world", NOMIC_LIKE, 8), atol=1e-5)
    np.testing.assert_allclose(embed.get_query_embedding("hello world"), expected("search_query: hello world", NOMIC_LIKE, 8), atol=1e-5)


@pytest.mark.parametrize("query_first", [True, False])
def test_embedding_cache_keeps_queries_and_documents_apart(tiny_dir, query_first):
    from llama_index.core.storage.kvstore import SimpleKVStore

    embed = PolarisEmbedding(model_id="tiny-nomic", model_dir=str(tiny_dir), embeddings_cache=SimpleKVStore())
    want_doc = expected("search_document: hello world", NOMIC_LIKE, 8)
    want_query = expected("search_query: hello world", NOMIC_LIKE, 8)
    for _ in range(2):  # second round is served from the cache
        if query_first:
            np.testing.assert_allclose(embed.get_query_embedding("hello world"), want_query, atol=1e-5)
        np.testing.assert_allclose(embed.get_text_embedding("hello world"), want_doc, atol=1e-5)
        np.testing.assert_allclose(embed.get_text_embedding_batch(["hello world"])[0], want_doc, atol=1e-5)
        np.testing.assert_allclose(embed.get_query_embedding("hello world"), want_query, atol=1e-5)


async def test_async_embedding_cache_keeps_queries_apart(tiny_dir):
    from llama_index.core.storage.kvstore import SimpleKVStore

    embed = PolarisEmbedding(model_id="tiny-nomic", model_dir=str(tiny_dir), embeddings_cache=SimpleKVStore())
    doc = await embed.aget_text_embedding("hello world")
    query = await embed.aget_query_embedding("hello world")
    np.testing.assert_allclose(doc, expected("search_document: hello world", NOMIC_LIKE, 8), atol=1e-5)
    np.testing.assert_allclose(query, expected("search_query: hello world", NOMIC_LIKE, 8), atol=1e-5)
