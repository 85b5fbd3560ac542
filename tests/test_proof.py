"""engine.proof: the text that was embedded is rebuilt from the file exactly, a file naming
no model is proven (and records it) by any door, read-only ones included, and a proof that
cannot be made is refused. Real polaris.db files, the bundled model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import Document, IndexNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisVectorStore
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.errors import ModelMismatchError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.embed.proof import SAMPLE, embedded_text, prove
from llama_index_polaris.engine.sqlite.store import Store
from polaris_testing import REPO

MODEL = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def embed() -> PolarisEmbedding:
    return PolarisEmbedding(model_id=MODEL, config=load_config(use_user_config=False))


def config(**kw):
    return load_config(use_user_config=False, model_id=MODEL, **kw)


def odd_nodes() -> list[TextNode]:
    """Nodes whose embedded text is not the default rendering: templates, separators,
    excluded keys and metadata values that are not strings."""
    plain = TextNode(id_="plain", text="No metadata at all.")
    shaped = TextNode(
        id_="shaped", text="Tokens last an hour.",
        metadata={"title": "Tokens", "year": 2024, "score": 0.5, "tags": ["auth", "tokens"], "draft": False,
                  "owner": None, "file_size": 120},
        excluded_embed_metadata_keys=["file_size"], metadata_template="<{key}={value}>", metadata_separator=" | ",
        text_template="[{metadata_str}]\n{content}",
    )
    hidden = TextNode(id_="hidden", text="Everything excluded.", metadata={"a": 1},
                      excluded_embed_metadata_keys=["a"])
    index_node = IndexNode(id_="summary", text="A summary of the session guide.", index_id="guide-index",
                           metadata={"kind": "summary"}, text_template="SUMMARY {metadata_str}\n{content}")
    for n in (plain, shaped, hidden, index_node):
        n.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="odd")
    return [plain, shaped, hidden, index_node]


def test_the_embedded_text_is_rebuilt_from_the_file_as_llamaindex_rendered_it(tmp_path, embed) -> None:
    handbook = shutil.copytree(REPO / "examples" / "handbook", tmp_path / "handbook")
    docs = [Document(text=p.read_text(), id_=str(p.relative_to(handbook)),
                     metadata={"file_path": str(p.relative_to(handbook)), "file_size": p.stat().st_size})
            for p in sorted(handbook.rglob("*.md"))]
    for d in docs:
        d.excluded_embed_metadata_keys = ["file_size"]
    nodes = PolarisNodeParser(config=config(), embed_model=embed).get_nodes_from_documents(docs) + odd_nodes()
    store = PolarisVectorStore(tmp_path / "li.db", config=config())
    store.add(nodes)  # text only: the rendering is what is checked here
    by_id = {c.node_id: c for c in store.client.get_chunks()}
    for node in nodes:
        assert embedded_text(by_id[node.node_id]) == node.get_content(metadata_mode=MetadataMode.EMBED), node.node_id
    store.close()

    with PolarisIndex(tmp_path / "cli.db", config=config()) as cli:  # chunks `polaris index` made
        cli.index_paths([handbook])
        chunks = cli.store.get_chunks()
        assert all(embedded_text(c) is not None for c in chunks)
        assert any(embedded_text(c).startswith("heading_path: ") for c in chunks)


def unknown_file(path: Path, embed, nodes=None) -> None:
    """Nodes embedded by ``embed`` through VectorStoreIndex(embed_model=...): a file naming no model."""
    store = PolarisVectorStore(path, config=config())
    nodes = nodes if nodes is not None else odd_nodes() + [
        TextNode(id_=f"n{i}", text=f"Note {i}: sessions expire after {i} hours.", metadata={"heading_path": f"N > {i}"})
        for i in range(12)]
    VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed)
    assert store.client.model.model_id == "unknown"
    store.close()


def test_a_read_only_door_proves_the_model_and_the_file_records_it(tmp_path, embed) -> None:
    """`polaris search` and Datasette open the file read-only: the proof is recorded all the same."""
    unknown_file(tmp_path / "p.db", embed)
    with PolarisIndex(tmp_path / "p.db", config=config(), readonly=True) as reader:
        assert [h.node_id for h in reader.search("when do sessions expire", top_k=1)] != []
    with Store(tmp_path / "p.db", readonly=True) as fresh:
        recorded = fresh.model
    assert (recorded.model_id, recorded.dim, recorded.fingerprint) == (MODEL, 384, embed.embedder.fingerprint)


def test_polaris_index_into_a_file_naming_no_model_proves_it_and_reuses_its_vectors(tmp_path, embed) -> None:
    handbook = shutil.copytree(REPO / "examples" / "handbook", tmp_path / "handbook")
    store = PolarisVectorStore(tmp_path / "p.db", config=config())
    VectorStoreIndex.from_documents(
        [Document(text=p.read_text(), metadata={"file_path": str(p.relative_to(handbook))})
         for p in sorted(handbook.rglob("*.md"))],
        storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed,
        transformations=[PolarisNodeParser(root_dir=str(handbook), config=config(), embed_model=embed)],
    )
    assert store.client.model.model_id == "unknown"
    store.close()
    with PolarisIndex(tmp_path / "p.db", config=config()) as index:
        report = index.index_paths([handbook])
        assert index.store.model.model_id == MODEL
    assert report.chunks_embedded == 0 and report.chunks_reused > 0  # the same vectors, found by what was embedded


def test_a_proof_that_cannot_be_made_is_refused(tmp_path, embed) -> None:
    """No stored chunk keeps the text that was embedded for it (a node class that renders
    itself its own way): nothing can be compared, so nothing is recorded."""

    class Headline(TextNode):
        def get_content(self, metadata_mode=MetadataMode.NONE) -> str:
            return "HEADLINE " + self.text if metadata_mode == MetadataMode.EMBED else self.text

    unknown_file(tmp_path / "p.db", embed, [Headline(id_=f"h{i}", text=f"Headline {i}.") for i in range(3)])
    with Store(tmp_path / "p.db") as store:
        with pytest.raises(ModelMismatchError, match="none of the 3 chunks looked at keeps the text") as info:
            prove(store, embed.embedder)
        assert "unknown" not in str(info.value)
        assert store.model.model_id == "unknown"


def test_the_proof_samples_chunks_across_the_file(tmp_path, embed) -> None:
    """Vectors of a second model added later (the file names none, so nothing checked them)
    are in the sample: the proof compares chunks from the whole file, not its first few."""
    from llama_index.core.embeddings import MockEmbedding

    unknown_file(tmp_path / "p.db", embed)
    store = PolarisVectorStore(tmp_path / "p.db", config=config())
    late = [TextNode(id_=f"late{i}", text=f"Late note {i}.") for i in range(12)]
    VectorStoreIndex(late, storage_context=StorageContext.from_defaults(vector_store=store),
                     embed_model=MockEmbedding(embed_dim=384))
    store.close()
    with Store(tmp_path / "p.db") as raw:
        sample = raw.vector_sample(SAMPLE)
        assert len(sample) == SAMPLE and sample[0].node_id != "late0" and sample[-1].node_id.startswith("late")
        with pytest.raises(ModelMismatchError, match="did not make them"):
            prove(raw, embed.embedder)
