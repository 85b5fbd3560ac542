"""Model files: user-global cache, Hugging Face cache reuse, downloads through huggingface_hub
against a local server speaking the hub's file API (HF_ENDPOINT pointed at it; the real client)."""

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
from llama_index_polaris.engine.embed.download import hub_cache_dir
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
    monkeypatch.setenv("HF_ENDPOINT", srv.base_url)
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch, spec):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    for name in ("HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE", "POLARIS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)
    clear_embedders()
    plugin_manager().register(TinyModels(spec), name="tiny-remote")
    yield
    plugin_manager().unregister(name="tiny-remote")
    clear_embedders()


def snapshot(spec) -> Path:
    """Where the hub client keeps the spec's revision."""
    return hub_cache_dir() / f"models--{spec.repo.replace('/', '--')}" / "snapshots" / spec.revision


def test_download_through_the_hub_client_into_the_hub_cache(spec, server, capfd):
    emb = load_embedder("tiny-remote")
    assert emb.files.source == "download"
    assert emb.files.onnx == snapshot(spec) / "onnx" / "model.onnx"
    assert emb.files.onnx.resolve().parent.name == "blobs"  # the hub's own layout: a link to a blob
    assert emb.fingerprint == spec.onnx.sha256
    assert emb.embed_documents(["hello world"]).shape == (1, 16)
    assert "tiny-remote model.onnx" in capfd.readouterr().err  # the progress bar, on stderr
    onnx = server.url_path(spec, spec.onnx)
    assert ("HEAD", onnx, None) in server.requests and ("GET", "/cdn" + onnx, None) in server.requests  # LFS redirect
    assert model_status(spec)["status"] == "hf-cache"  # found there next time, by every tool
    clear_embedders()
    before = len(server.requests)
    assert load_embedder("tiny-remote").files.source == "hf-cache"
    assert len(server.requests) == before


def test_no_progress_bar_when_not_asked(spec, server, capfd):
    from llama_index_polaris.engine.embed import get_model_spec, resolve

    seen = []
    resolve(get_model_spec("tiny-remote"), progress=lambda done, total: seen.append((done, total)))
    assert "model.onnx" not in capfd.readouterr().err
    assert seen[-1] == (spec.tokenizer.size, spec.tokenizer.size)
    assert (spec.onnx.size, spec.onnx.size) in seen


def test_resume_after_a_cut_connection(spec, server):
    path = server.url_path(spec, spec.onnx)
    server.cut_once[path] = 100
    emb = load_embedder("tiny-remote")
    assert sha(emb.files.onnx) == spec.onnx.sha256
    # the hub client retried; it resumes from what it had written, in blocks of
    # DOWNLOAD_CHUNK_SIZE (10 MB), so for a file this small it starts again from byte 0
    assert server.gets(path) == [None, None]


def test_a_partial_file_left_by_a_killed_process_does_not_spoil_the_download(spec, server, source):
    """huggingface_hub (since its per-process temporary files) starts a killed download afresh."""
    blobs = hub_cache_dir() / f"models--{spec.repo.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{spec.onnx.sha256}.incomplete").write_bytes(b"garbage" * 9)
    emb = load_embedder("tiny-remote")
    assert server.gets(server.url_path(spec, spec.onnx)) == [None]
    assert sha(emb.files.onnx) == spec.onnx.sha256


def test_hf_endpoint_is_read_when_downloading(spec, server, monkeypatch):
    """HF_ENDPOINT set after huggingface_hub was imported (which reads it once) still counts."""
    import huggingface_hub  # noqa: F401  (imported before the variable changes)

    other = ModelServer()
    try:
        other.files, other.lfs = dict(server.files), set(server.lfs)
        monkeypatch.setenv("HF_ENDPOINT", other.base_url)
        load_embedder("tiny-remote")
        assert server.requests == [] and len(other.gets(server.url_path(spec, spec.onnx))) == 1
    finally:
        other.close()


def test_hf_token_is_sent_to_a_gated_repository(spec, server, monkeypatch):
    server.token = "hf_polaris_test"
    with pytest.raises(ModelDownloadError) as err:
        load_embedder("tiny-remote")
    assert "gated" in str(err.value) and "HF_TOKEN" in str(err.value)
    assert 'model_id = "all-minilm-l6-v2"' in str(err.value)
    monkeypatch.setenv("HF_TOKEN", "hf_polaris_test")
    assert load_embedder("tiny-remote").files.source == "download"
    assert server.auth[-1] == "Bearer hf_polaris_test"


def test_checksum_mismatch_is_refused_and_removed(spec, server):
    server.files[server.url_path(spec, spec.onnx)] = b"x" * spec.onnx.size  # right size, wrong bytes
    server.etags[server.url_path(spec, spec.onnx)] = spec.onnx.sha256  # the hub's etag is the pinned hash
    with pytest.raises(ModelDownloadError, match="checksum mismatch") as err:
        load_embedder("tiny-remote")
    assert "the file was removed" in str(err.value)
    assert not (snapshot(spec) / "onnx" / "model.onnx").exists()
    assert not [p for p in hub_cache_dir().rglob("*") if p.is_file() and p.stat().st_size == spec.onnx.size]
    assert model_status(spec)["status"] == "missing"
    assert len(server.gets(server.url_path(spec, spec.onnx))) == 2  # fetched once more before refusing


def test_a_corrupt_copy_in_the_hub_cache_is_fetched_again(spec, server):
    emb = load_embedder("tiny-remote")
    clear_embedders()
    blob = emb.files.onnx.resolve()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    blob.write_bytes(bytes(data))
    emb = load_embedder("tiny-remote")
    assert emb.files.source == "download" and sha(emb.files.onnx) == spec.onnx.sha256


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
    assert out.stdout.split() == ["hf-cache", "(16,)"]
    assert len(server.requests) == before


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_no_network_names_the_directory_and_the_bundled_model(spec, monkeypatch, caplog):
    """One short attempt, no retries: the hub client alone retries a refused connection five times
    (about 23 s) before giving up (#34: 25.8 s of warnings before the message)."""
    import time

    base = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", base)
    start = time.monotonic()
    with caplog.at_level("INFO"), pytest.raises(ModelDownloadError) as err:
        load_embedder("tiny-remote")
    assert time.monotonic() - start < 5
    assert not [r for r in caplog.records if "etry" in r.getMessage()]  # no "Retrying in 1s [Retry 1/5]"
    message = str(err.value)
    assert str(model_cache_dir(spec)) in message
    assert 'model_id = "all-minilm-l6-v2" in polaris.toml' in message
    assert "--model all-minilm-l6-v2" in message and 'PolarisEmbedding(model_id="all-minilm-l6-v2")' in message
    assert "no network" in message and base in message


def test_polaris_embedding_with_no_model_and_no_network_answers_at_once(tmp_path, monkeypatch, caplog):
    """``PolarisEmbedding()``: the configured default model, not on this machine, no hub to reach."""
    import time

    from llama_index_polaris import PolarisEmbedding

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    start = time.monotonic()
    with caplog.at_level("INFO"), pytest.raises(ModelDownloadError) as err:
        PolarisEmbedding()
    assert time.monotonic() - start < 5
    assert not [r for r in caplog.records if "etry" in r.getMessage()]
    message = str(err.value)
    assert "nomic-embed-text-v1.5" in message and "no network" in message
    for way in ('model_id = "all-minilm-l6-v2" in polaris.toml', "--model all-minilm-l6-v2",
                'PolarisEmbedding(model_id="all-minilm-l6-v2")'):
        assert way in message


@pytest.mark.parametrize("flag", ["HF_HUB_OFFLINE", "POLARIS_OFFLINE"])
def test_offline_skips_the_network_and_says_what_to_do(spec, server, monkeypatch, flag):
    monkeypatch.setenv(flag, "1")
    with pytest.raises(ModelDownloadError, match="offline mode is set") as err:
        load_embedder("tiny-remote")
    assert str(model_cache_dir(spec)) in str(err.value) and 'model_id = "all-minilm-l6-v2"' in str(err.value)
    assert server.requests == []


def test_offline_uses_a_copy_already_in_the_hub_cache(spec, server, monkeypatch):
    load_embedder("tiny-remote")
    clear_embedders()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(server.requests)
    assert load_embedder("tiny-remote").files.source == "hf-cache"
    assert len(server.requests) == before


def test_truncated_cache_entry_is_removed(spec, source, monkeypatch):
    directory = model_cache_dir(spec)  # the user-global cache of earlier versions is still read
    directory.mkdir(parents=True)
    (directory / "model.onnx").write_bytes((source / "onnx" / "model.onnx").read_bytes()[:40])
    (directory / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ModelError, match="was corrupt or truncated and has been removed"):
        load_embedder("tiny-remote")
    assert not (directory / "model.onnx").exists()


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
