"""A node id names one node of one document (#24): no write silently takes it from another.

Before, one ``add()`` with the same node id under two documents kept one and left the other
document ``completed`` with no chunks, and a node id already stored under another document
moved there silently (the same loss across two calls). Both are refused now, before
anything is written; the message names the id and both documents. `polaris index` met the
same loss when a widened root left a file's chunks with the ids of its old key.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_polaris import PolarisEmbedding, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import InputError, NodeIdError
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import BACKENDS, copy_index, database_from_template, new_database

MODEL = "all-minilm-l6-v2"


def config(**kw: Any):
    return load_config(use_user_config=False, model_id=MODEL, **kw)


@pytest.fixture(scope="module")
def embed() -> PolarisEmbedding:
    return PolarisEmbedding(model_id=MODEL, config=config())


@pytest.fixture(scope="module")
def built_handbook_pg(built_handbook: Path, pg_server: str) -> str:
    """The same index copied once into a database (`polaris copy`): the template of each test's."""
    from llama_index_polaris.engine.ingest.copy import copy_index as polaris_copy

    uri = new_database(pg_server, "polaris_tmpl")
    polaris_copy(built_handbook, uri)
    return uri


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, built_handbook: Path, tmp_path: Path, embed):
    """A PolarisVectorStore on a copy of the built handbook, once per backend."""
    if request.param == "sqlite":
        target = str(copy_index(built_handbook, tmp_path))
    else:
        target = database_from_template(request.getfixturevalue("pg_server"),
                                        request.getfixturevalue("built_handbook_pg"))
    s = PolarisVectorStore(target, embed_model=embed, config=config())
    yield s
    s.close()


def node(embed, node_id: str, doc: str, text: str) -> TextNode:
    n = TextNode(id_=node_id, text=text, embedding=embed.get_text_embedding(text))
    n.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc)
    return n


def held(store: PolarisVectorStore) -> dict[str, tuple[str, list[str]]]:
    """Every document: its status and its node ids."""
    engine = store.client
    return {d.id: (d.status, [c.node_id for c in engine.get_chunks(document_id=d.id)]) for d in engine.documents()}


def found(store: PolarisVectorStore, text: str) -> list[str]:
    return [h.document_id for h in store.search(text, mode="bm25", unit="chunk", top_k=3)]


def test_one_add_with_a_node_id_in_two_documents_is_refused_and_writes_nothing(store, embed) -> None:
    before = held(store)
    assert (len(before), sum(len(n) for _, n in before.values())) == (11, 59)
    nodes = [node(embed, "n10", "doc4", "Alpha quartz notes"), node(embed, "n11", "doc4", "Beta quartz notes"),
             node(embed, "n11", "doc5", "Gamma quartz notes")]
    adds = {
        "add": lambda: store.add(nodes),
        "async_add": lambda: asyncio.run(store.async_add(nodes)),
        "VectorStoreIndex": lambda: VectorStoreIndex(
            nodes, embed_model=embed, storage_context=StorageContext.from_defaults(vector_store=store)),
    }
    for door, add in adds.items():
        with pytest.raises(NodeIdError, match="node id 'n11' is given for two documents, 'doc4' and 'doc5'"):
            add()
        assert held(store) == before, door  # not even n10, nor doc4
        assert found(store, "quartz") == []
    assert store.add(nodes[:2]) == ["n10", "n11"]  # one document: written
    assert held(store)["doc4"] == ("completed", ["n10", "n11"])
    assert found(store, "quartz") == ["doc4", "doc4"]


def test_a_node_id_stored_in_another_document_is_refused_not_moved(store, embed) -> None:
    store.add([node(embed, "n10", "doc4", "Alpha quartz notes"), node(embed, "n11", "doc4", "Beta quartz notes")])
    before = held(store)
    with pytest.raises(NodeIdError, match="node 'n11' is stored in document 'doc4'.*'doc5'.*delete it"):
        store.add([node(embed, "n12", "doc5", "Delta quartz notes"), node(embed, "n11", "doc5", "Gamma quartz")])
    assert held(store) == before and "doc5" not in before
    assert sorted(found(store, "quartz")) == ["doc4", "doc4"]
    store.add([node(embed, "n11", "doc4", "Beta quartz notes, revised")])  # an upsert in its own document
    assert held(store)["doc4"] == ("completed", ["n10", "n11"])
    store.delete_nodes(["n11"])  # what the message says: delete it there, then it can go elsewhere
    store.add([node(embed, "n11", "doc5", "Gamma quartz")])
    assert held(store)["doc4"] == ("completed", ["n10"]) and held(store)["doc5"] == ("completed", ["n11"])


def test_a_node_id_inside_one_document_twice_is_refused(store, embed) -> None:
    before = held(store)
    with pytest.raises(InputError, match="document 'doc6': duplicate node ids n12"):
        store.add([node(embed, "n12", "doc6", "Alpha"), node(embed, "n12", "doc6", "Beta")])
    assert held(store) == before


def test_a_new_file_at_a_widened_roots_old_path_keeps_both_files(tmp_path: Path, backend_target: str) -> None:
    """The `polaris index` door: after a run over a parent folder, a file put where another
    used to be keyed derived the node ids still held by that one, and took its chunks."""
    docs = tmp_path / "proj" / "docs"
    docs.mkdir(parents=True)
    (docs / "a.md").write_text("# Alpha\n\nThe alpha document talks about quartz sessions in some detail here.\n")
    with PolarisIndex(backend_target, config=config()) as index:
        index.index_paths([docs])
        assert index.index_paths([tmp_path / "proj"]).root_change == "widened"
        shutil.copy(docs / "a.md", tmp_path / "proj" / "a.md")
        report = index.index_paths([tmp_path / "proj"])
        assert (report.added, report.unchanged, report.failed) == (1, 1, [])
        counts = {d.path: (d.status, len(index.store.get_chunks(document_id=d.id))) for d in index.store.documents()}
        assert counts == {"a.md": ("completed", 1), "docs/a.md": ("completed", 1)}
        hits = index.search("quartz sessions", mode="bm25", unit="chunk", top_k=5)
        assert sorted(h.document for h in hits) == ["a.md", "docs/a.md"]
        assert index.index_paths([tmp_path / "proj"]).unchanged == 2  # and the next run changes nothing
