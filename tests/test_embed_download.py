"""Model files: user-global cache, Hugging Face cache reuse, download against a local HTTP server."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fixtures.embed_tiny import ModelServer, TinyModels, build_model_dir, spec_to_json, tiny_spec

from llama_index_polaris.engine.embed import ModelFile, clear_embedders, load_embedder, model_cache_dir, model_status
from llama_index_polaris.engine.embed.download import fetch
from llama_index_polaris.engine.errors import ModelDownloadError, ModelError
from llama_index_polaris.engine.plugins import plugin_manager

TESTS = Path(__file__).parent


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return build_model_dir(tmp_path_factory.mktemp("tiny-src"))


@pytest.fixture
def spec(source):
    onnx, tok = source / "onnx" / "model.onnx", source / "tokenizer.json"
    return tiny_spec(
        "tiny-remote",
        onnx=ModelFile("onnx/model.onnx", sha(onnx), onnx.stat().st_size),
        tokenizer=ModelFile("tokenizer.json", sha(tok), tok.stat().st_size),
    )


@pytest.fixture
def server(spec, source, monkeypatch):
    srv = ModelServer()
    srv.serve_model(spec, source)
    monkeypatch.setenv("POLARIS_MODEL_BASE_URL", srv.base_url)
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch, spec):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    for name in ("POLARIS_MODEL_BASE_URL", "HF_HUB_OFFLINE", "POLARIS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    clear_embedders()
    plugin_manager().register(TinyModels(spec), name="tiny-remote")
    yield
    plugin_manager().unregister(name="tiny-remote")
    clear_embedders()


def test_download_into_user_cache_with_progress(spec, server, capfd):
    emb = load_embedder("tiny-remote")
    assert emb.files.source == "download"
    assert emb.files.onnx == model_cache_dir(spec) / "model.onnx"
    assert emb.fingerprint == spec.onnx.sha256
    assert emb.embed_documents(["hello world"]).shape == (1, 16)
    assert "tiny-remote model.onnx" in capfd.readouterr().err  # tqdm's bar on stderr
    assert model_status(spec)["status"] == "cache"
    assert not list(model_cache_dir(spec).glob("*.part"))


def test_resume_after_a_cut_connection(spec, server, tmp_path):
    path = server.url_path(spec, spec.onnx)
    server.cut_once[path] = 100
    seen = []
    digest = fetch(server.base_url + path, tmp_path / "m.onnx", sha256=spec.onnx.sha256, size=spec.onnx.size,
                   progress=lambda done, total: seen.append((done, total)), retry_wait=0)
    assert digest == spec.onnx.sha256
    ranges = [r for p, r in server.requests if p == path]
    assert ranges == [None, "bytes=100-"]  # the second request continued where the cut left off
    assert seen[-1] == (spec.onnx.size, spec.onnx.size)


def test_resume_a_partial_file_left_by_an_earlier_process(spec, server, source, tmp_path):
    path = server.url_path(spec, spec.onnx)
    dest = tmp_path / "m.onnx"
    (tmp_path / "m.onnx.part").write_bytes((source / "onnx" / "model.onnx").read_bytes()[:64])
    fetch(server.base_url + path, dest, sha256=spec.onnx.sha256, size=spec.onnx.size, progress=False)
    assert server.requests == [(path, "bytes=64-")]
    assert sha(dest) == spec.onnx.sha256


def test_checksum_mismatch_is_refused_and_removed(spec, server, tmp_path):
    path = server.url_path(spec, spec.onnx)
    server.files[path] = b"x" * spec.onnx.size  # right size, wrong bytes
    with pytest.raises(ModelDownloadError, match="checksum mismatch"):
        fetch(server.base_url + path, tmp_path / "m.onnx", sha256=spec.onnx.sha256, size=spec.onnx.size, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_checksum_mismatch_through_load_embedder_leaves_no_model(spec, server):
    server.files[server.url_path(spec, spec.onnx)] = b"x" * spec.onnx.size
    with pytest.raises(ModelDownloadError, match="checksum mismatch"):
        load_embedder("tiny-remote")
    assert not (model_cache_dir(spec) / "model.onnx").exists()
    assert model_status(spec)["status"] == "missing"


def test_second_process_reuses_the_cache(spec, server, tmp_path):
    load_embedder("tiny-remote")
    before = len(server.requests)
    script = (
        "import sys; from fixtures.embed_tiny import spec_from_json, TinyModels\n"
        "from llama_index_polaris.engine.plugins import plugin_manager\n"
        "from llama_index_polaris.engine.embed import load_embedder\n"
        "plugin_manager().register(TinyModels(spec_from_json(sys.argv[1])))\n"
        "e = load_embedder('tiny-remote'); print(e.files.source, e.embed_query('hello').shape)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    out = subprocess.run([sys.executable, "-c", script, spec_to_json(spec)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cache", "(16,)"]
    assert len(server.requests) == before


def test_offline_without_a_copy_names_the_directory_and_the_bundled_model(spec, monkeypatch):
    monkeypatch.setenv("POLARIS_MODEL_BASE_URL", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(ModelDownloadError) as err:
        load_embedder("tiny-remote")
    message = str(err.value)
    assert str(model_cache_dir(spec)) in message
    assert 'model_id = "all-minilm-l6-v2"' in message
    assert "no network" in message


def test_hf_hub_offline_skips_the_network(spec, server, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelDownloadError, match="offline mode"):
        load_embedder("tiny-remote")
    assert server.requests == []


def test_truncated_cache_entry_is_removed(spec, server, monkeypatch):
    load_embedder("tiny-remote")
    clear_embedders()
    onnx = model_cache_dir(spec) / "model.onnx"
    onnx.write_bytes(onnx.read_bytes()[:40])
    monkeypatch.setenv("POLARIS_MODEL_BASE_URL", "http://127.0.0.1:9")
    with pytest.raises(ModelError, match="was corrupt or truncated and has been removed"):
        load_embedder("tiny-remote")
    assert not onnx.exists()


def test_corrupt_cache_entry_is_refetched_when_online(spec, server):
    load_embedder("tiny-remote")
    clear_embedders()
    onnx = model_cache_dir(spec) / "model.onnx"
    data = bytearray(onnx.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    onnx.write_bytes(bytes(data))
    emb = load_embedder("tiny-remote")
    assert emb.files.source == "download" and sha(onnx) == spec.onnx.sha256


def test_unpinned_corrupt_cache_entry_fails_at_load_and_is_removed(source, monkeypatch):
    loose = tiny_spec("tiny-loose")  # no sha256 or size known
    plugin_manager().register(TinyModels(loose), name="tiny-loose")
    try:
        directory = model_cache_dir(loose)
        directory.mkdir(parents=True)
        (directory / "model.onnx").write_bytes(b"not an onnx file")
        (directory / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
        emb = load_embedder("tiny-loose")
        assert emb.files.source == "cache"
        with pytest.raises(ModelError, match="cannot load ONNX model.*removed; run again"):
            emb.embed_documents(["hello"])
        assert not directory.exists()
    finally:
        plugin_manager().unregister(name="tiny-loose")


def test_hugging_face_cache_is_reused(spec, source, tmp_path):
    snapshot = tmp_path / "hf" / f"models--{spec.repo.replace('/', '--')}" / "snapshots" / spec.revision
    for file in spec.files:
        target = snapshot / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((source / file.path).read_bytes())
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(spec.revision)
    emb = load_embedder("tiny-remote")
    assert emb.files.source == "hf-cache"
    np.testing.assert_allclose(np.linalg.norm(emb.embed_query("hello")), 1.0, atol=1e-6)
