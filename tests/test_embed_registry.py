"""The model registry, plugin registration, dimension rules, status, and import cost."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from llama_index_polaris.engine.embed import (
    BUILTIN_MODELS,
    ModelFile,
    ModelSpec,
    get_model_spec,
    list_models,
    model_status,
    resolve_dim,
)
from llama_index_polaris.engine.errors import ConfigError, ModelError
from llama_index_polaris.engine.hookspecs import hookimpl
from llama_index_polaris.engine.plugins import plugin_manager


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))


def test_builtin_models():
    ids = [s.id for s in list_models()][:3]
    assert ids == ["nomic-embed-text-v1.5", "all-minilm-l6-v2", "mxbai-embed-large-v1"]
    nomic, minilm, mxbai = (get_model_spec(i) for i in ids)
    assert (nomic.pooling, nomic.layer_norm, nomic.matryoshka, nomic.native_dim, nomic.default_dim) == ("mean", True, True, 768, 512)
    assert (nomic.doc_prefix, nomic.query_prefix) == ("search_document: ", "search_query: ")
    assert (minilm.native_dim, minilm.window, minilm.doc_prefix, minilm.query_prefix) == (384, 256, "", "")
    assert minilm.bundled is not None and not minilm.matryoshka
    assert (mxbai.pooling, mxbai.native_dim, mxbai.matryoshka, mxbai.doc_prefix) == ("cls", 1024, True, "")
    assert mxbai.query_prefix == "Represent this sentence for searching relevant passages: "
    e5 = get_model_spec("multilingual-e5-small")
    assert (e5.repo, e5.pooling, e5.native_dim, e5.default_dim, e5.window) == ("intfloat/multilingual-e5-small", "mean", 384, 384, 512)
    assert (e5.doc_prefix, e5.query_prefix, e5.licence, e5.matryoshka) == ("passage: ", "query: ", "MIT", False)
    assert all(spec.licence for spec in BUILTIN_MODELS)
    for spec in BUILTIN_MODELS:
        assert spec.onnx.path == "onnx/model.onnx" and spec.tokenizer.path == "tokenizer.json"
        assert all(len(f.sha256) == 64 and f.size for f in spec.files)
        assert len(spec.revision) == 40


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(ModelError) as err:
        get_model_spec("bert-large-nope")
    for spec in BUILTIN_MODELS:
        assert spec.id in str(err.value)


def test_plugins_register_models_through_the_hook():
    extra = ModelSpec(
        id="plugin-model", repo="acme/plugin-model", revision="main",
        onnx=ModelFile("model.onnx"), tokenizer=ModelFile("tokenizer.json"),
        pooling="mean", native_dim=8, default_dim=8, window=64,
    )

    class Plugin:
        @hookimpl
        def register_embedding_models(self, register):
            register(extra)
            register(dataclasses.replace(extra, id="all-minilm-l6-v2"))

    plugin_manager().register(Plugin(), name="acme")
    try:
        assert get_model_spec("plugin-model") is extra
        assert get_model_spec("all-minilm-l6-v2").native_dim == 384  # a built-in cannot be shadowed
    finally:
        plugin_manager().unregister(name="acme")
    with pytest.raises(ModelError):
        get_model_spec("plugin-model")


def test_dimension_rules():
    nomic, minilm = get_model_spec("nomic-embed-text-v1.5"), get_model_spec("all-minilm-l6-v2")
    assert resolve_dim(nomic, None) == 512
    assert resolve_dim(nomic, 768) == 768
    assert resolve_dim(nomic, 256) == 256
    assert resolve_dim(minilm, None) == 384
    with pytest.raises(ConfigError, match="not a Matryoshka model"):
        resolve_dim(minilm, 256)
    with pytest.raises(ConfigError, match="supports 1 to 768"):
        resolve_dim(nomic, 1024)


def test_model_status_without_downloading():
    rows = {s.id: model_status(s) for s in BUILTIN_MODELS}
    assert rows["all-minilm-l6-v2"]["status"] == "bundled"
    assert rows["all-minilm-l6-v2"]["size_on_disk"] > 20_000_000
    assert rows["nomic-embed-text-v1.5"]["status"] == "missing"
    assert rows["nomic-embed-text-v1.5"]["path"].endswith("polaris/models/nomic-embed-text-v1.5")


def test_importing_the_embed_package_stays_light():
    code = (
        "import sys, llama_index_polaris.engine.embed as e\n"
        "e.get_model_spec('all-minilm-l6-v2')\n"
        "heavy = [m for m in ('onnxruntime', 'tokenizers', 'huggingface_hub', 'tqdm', 'onnx', 'llama_index.core')"
        " if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
