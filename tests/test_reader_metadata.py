"""A reader's metadata survives a re-index by another door (#34, item 11).

The handbook built through LlamaIndex (the real ``SimpleDirectoryReader``, ``PolarisNodeParser``,
``PolarisVectorStore`` behind ``VectorStoreIndex``), then ``polaris index`` (the real command, in a
subprocess) over the same folder: the keys the reader stored (``file_name``, ``file_type``,
``file_size``, the dates) stay on every node, a filter on them keeps its hits, and the keys the
engine owns (``heading_path``, ``file_path``, ...) are the engine's. On both backends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from llama_index.core import SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.schema import MetadataMode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from polaris_testing import REPO, project_toml

MODEL = "all-minilm-l6-v2"
POLARIS = str(Path(sys.executable).with_name("polaris"))
READER_KEYS = ("file_name", "file_type", "file_size", "creation_date", "last_modified_date")
TOKENS = MetadataFilters(filters=[MetadataFilter(key="file_name", value="tokens.md")])


def polaris(root: Path, *args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "XDG_CONFIG_HOME": str(root / ".xdg")})
    assert run.returncode == 0, run.stderr
    return run


def config(root: Path):
    return load_config(root, use_user_config=False)


def build(root: Path, target: str) -> None:
    """The docs' quickstart: the reader's documents through Polaris's parser into Polaris's store."""
    cfg = config(root)
    embed = PolarisEmbedding(model_id=MODEL, config=cfg)
    store = PolarisVectorStore(target, embed_model=embed, config=cfg)
    VectorStoreIndex.from_documents(
        SimpleDirectoryReader(str(root / "handbook"), recursive=True).load_data(),
        storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed,
        transformations=[PolarisNodeParser(root_dir=str(root / "handbook"), embed_model=embed)],
    )
    store.close()


def tokens_hits(root: Path, target: str) -> list:
    cfg = config(root)
    store = PolarisVectorStore(target, config=cfg)
    try:
        return store.as_index().as_retriever(similarity_top_k=5, filters=TOKENS).retrieve("token lifetime")
    finally:
        store.close()


def stored_nodes(root: Path, target: str) -> list:
    store = PolarisVectorStore(target, config=config(root))
    try:
        return store.get_nodes()
    finally:
        store.close()


def test_a_cli_reindex_keeps_the_readers_metadata(tmp_path: Path, backend_target: str) -> None:
    root = tmp_path
    shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
    (root / "polaris.toml").write_text(project_toml(backend_target))
    build(root, backend_target)
    before = tokens_hits(root, backend_target)
    assert len(before) >= 2 and all(h.node.metadata["file_name"] == "tokens.md" for h in before)
    nodes_before = {n.node_id: n for n in stored_nodes(root, backend_target)}

    run = polaris(root, "index", "handbook", "--db", backend_target)
    assert "0 chunks embedded" in run.stdout + run.stderr

    after = tokens_hits(root, backend_target)
    assert [h.node.node_id for h in after] == [h.node.node_id for h in before]
    nodes = stored_nodes(root, backend_target)
    assert {n.node_id for n in nodes} == set(nodes_before)
    for node in nodes:
        old = nodes_before[node.node_id]
        for key in READER_KEYS:
            assert node.metadata[key] == old.metadata[key], (node.metadata.get("file_path"), key)
        assert node.metadata["file_path"] == old.metadata["file_path"]  # relative to the root: the engine's
        # the node the reader's parser made, rendered with the same lines (the reader hid file sizes from the LLM)
        assert sorted(node.get_content(MetadataMode.LLM).splitlines()) == sorted(
            old.get_content(MetadataMode.LLM).splitlines())
        assert "file_size" not in node.get_content(MetadataMode.LLM)
        assert node.get_content(MetadataMode.EMBED) == old.get_content(MetadataMode.EMBED)


def test_a_changed_file_keeps_the_readers_keys_and_takes_the_engines(tmp_path: Path, backend_target: str) -> None:
    root = tmp_path
    shutil.copytree(REPO / "examples" / "handbook", root / "handbook")
    (root / "polaris.toml").write_text(project_toml(backend_target))
    build(root, backend_target)
    old = {n.metadata["file_name"]: n.metadata for n in stored_nodes(root, backend_target)}["tokens.md"]
    tokens = root / "handbook" / "auth" / "tokens.md"
    tokens.write_text(tokens.read_text() + "\n## Revocation lists\n\nA revoked token is listed until it expires.\n")

    polaris(root, "index", "handbook", "--db", backend_target)
    polaris(root, "index", "handbook", "--db", backend_target)  # and again: the document is the CLI's now

    mine = [n for n in stored_nodes(root, backend_target) if n.metadata.get("file_path") == "auth/tokens.md"]
    assert any(n.metadata["heading_path"].endswith("> Revocation lists") for n in mine)  # the engine's keys
    for node in mine:
        for key in READER_KEYS:  # as the reader last saw the file: `polaris index` does not compute them
            assert node.metadata[key] == old[key], key
    assert len(tokens_hits(root, backend_target)) >= 2
