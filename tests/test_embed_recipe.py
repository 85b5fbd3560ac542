"""Pooling, layer-norm, Matryoshka truncation and prefixes on a tiny ONNX model built here."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.embed_tiny import MXBAI_LIKE, NOMIC_LIKE, PLAIN, TinyModels, build_model_dir, expected, tiny_spec

from llama_index_polaris.engine.embed import clear_embedders, load_embedder, pooling
from llama_index_polaris.engine.errors import ConfigError, ModelError
from llama_index_polaris.engine.plugins import plugin_manager

TEXTS = ["hello world", "how do we handle expired sessions", "tokens have a lifetime of one hour", "the"]


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    clear_embedders()
    plugin_manager().register(TinyModels(NOMIC_LIKE, MXBAI_LIKE, PLAIN), name="tiny-models")
    yield
    plugin_manager().unregister(name="tiny-models")
    clear_embedders()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_model_dir(tmp_path_factory.mktemp("tiny"))


def test_nomic_recipe_layer_norm_truncate_normalise(model_dir):
    emb = load_embedder("tiny-nomic", model_dir=model_dir)
    assert emb.dim == 8
    docs = emb.embed_documents(TEXTS)
    want = np.stack([expected("search_document: " + t, NOMIC_LIKE, 8) for t in TEXTS])
    np.testing.assert_allclose(docs, want, atol=1e-5)
    q = emb.embed_query(TEXTS[1])
    np.testing.assert_allclose(q, expected("search_query: " + TEXTS[1], NOMIC_LIKE, 8), atol=1e-5)


def test_layer_norm_happens_over_the_full_width_before_truncation(model_dir):
    full = load_embedder("tiny-nomic", model_dir=model_dir, dim=16).embed_documents(TEXTS)
    cut = load_embedder("tiny-nomic", model_dir=model_dir, dim=8).embed_documents(TEXTS)
    renormed = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, renormed, atol=1e-5)


def test_cls_pooling_and_query_prompt_only_on_queries(model_dir):
    emb = load_embedder("tiny-mxbai", model_dir=model_dir)
    docs = emb.embed_documents(TEXTS)
    np.testing.assert_allclose(docs, np.stack([expected(t, MXBAI_LIKE, 16) for t in TEXTS]), atol=1e-5)
    q = emb.embed_query("hello world")
    prompt = "Represent this sentence for searching relevant passages: "
    np.testing.assert_allclose(q, expected(prompt + "hello world", MXBAI_LIKE, 16), atol=1e-5)


def test_cls_pooling_reads_the_first_token():
    hidden = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(pooling.cls_pool(hidden), hidden[:, 0])


def test_mean_pooling_ignores_padding():
    hidden = np.array([[[1.0, 1.0], [3.0, 5.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]])
    np.testing.assert_allclose(pooling.mean_pool(hidden, mask), [[2.0, 3.0]])


def test_query_and_document_vectors_differ_when_prefixes_differ(model_dir):
    emb = load_embedder("tiny-nomic", model_dir=model_dir)
    assert not np.allclose(emb.embed_query("hello world"), emb.embed_documents(["hello world"])[0])
    plain = load_embedder("tiny-plain", model_dir=model_dir)
    np.testing.assert_allclose(plain.embed_query("hello world"), plain.embed_documents(["hello world"])[0])


def test_padding_and_batching_do_not_change_vectors(model_dir):
    emb = load_embedder("tiny-nomic", model_dir=model_dir, batch_size=3)
    texts = TEXTS * 3 + ["hello"]
    together = emb.embed_documents(texts)
    alone = np.stack([emb.embed_documents([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-6)


def test_tokenizer_fixed_padding_is_overridden(model_dir):
    # tokenizer.json pads to 32; feeding 32 positions would still give the same vector for
    # a masked model, so check the tokens the embedder actually encodes.
    emb = load_embedder("tiny-plain", model_dir=model_dir)
    tok = emb._tokenizers_loaded()
    assert len(tok.encoder.encode("hello world").ids) == 4
    assert emb.count_tokens("hello world") == 2


def test_truncation_at_the_model_window_and_chunk_ceiling(model_dir, caplog):
    emb = load_embedder("tiny-nomic", model_dir=model_dir)
    long = " ".join(["hello"] * 50)
    assert emb.count_tokens(long) == 50  # counting never truncates
    assert emb.max_chunk_tokens == 12 - 2 - 2  # window - [CLS]/[SEP] - "search_document", ":"
    with caplog.at_level("DEBUG", logger="llama_index_polaris.engine.embed"):
        vec = emb.embed_documents([long])[0]
    np.testing.assert_allclose(vec, expected("search_document: " + long, NOMIC_LIKE, 8), atol=1e-5)
    assert any("truncated to the 12-token window" in r.getMessage() for r in caplog.records)


def test_model_without_token_type_input(tmp_path):
    directory = build_model_dir(tmp_path / "m", with_token_types=False)
    emb = load_embedder("tiny-plain", model_dir=directory)
    np.testing.assert_allclose(emb.embed_documents(["hello"])[0], expected("hello", PLAIN, 16), atol=1e-5)


def test_flat_model_dir_layout(tmp_path, model_dir):
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "model.onnx").write_bytes((model_dir / "onnx" / "model.onnx").read_bytes())
    (flat / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    emb = load_embedder("tiny-plain", model_dir=flat)
    assert emb.files.source == "model_dir" and emb.files.onnx == flat / "model.onnx"


def test_matryoshka_only_truncation(model_dir):
    with pytest.raises(ConfigError, match="not a Matryoshka model"):
        load_embedder("tiny-plain", model_dir=model_dir, dim=8)
    with pytest.raises(ConfigError, match="supports 1 to 16"):
        load_embedder("tiny-nomic", model_dir=model_dir, dim=32)
    assert load_embedder("tiny-plain", model_dir=model_dir, dim=16).dim == 16


def test_spec_validation():
    with pytest.raises(ModelError, match="pooling"):
        tiny_spec("bad", pooling="max")
    with pytest.raises(ModelError, match="Matryoshka"):
        tiny_spec("bad", default_dim=8)


def test_model_dir_missing_files(tmp_path):
    with pytest.raises(ModelError, match="must hold model.onnx"):
        load_embedder("tiny-plain", model_dir=tmp_path)


def test_corrupt_model_in_model_dir_is_a_clear_error_and_kept(tmp_path, model_dir):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_bytes((model_dir / "onnx" / "model.onnx").read_bytes()[:50])
    (broken / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    emb = load_embedder("tiny-plain", model_dir=broken)
    with pytest.raises(ModelError, match="cannot load ONNX model .*model.onnx"):
        emb.embed_query("hello")
    assert (broken / "model.onnx").exists()  # the user's own files are never deleted


def test_corrupt_tokenizer_is_a_clear_error(tmp_path, model_dir):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_bytes((model_dir / "onnx" / "model.onnx").read_bytes())
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read tokenizer"):
        load_embedder("tiny-plain", model_dir=broken).count_tokens("hello")
