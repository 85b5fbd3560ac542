"""PolarisNodeParser: a thin LlamaIndex adapter over engine.chunk."""

from __future__ import annotations

from llama_index.core import Document
from llama_index.core.schema import MetadataMode, NodeRelationship

from llama_index_polaris.engine import load_config
from llama_index_polaris.engine.chunk import ChunkSettings, chunk_markdown
from llama_index_polaris.node_parser import PolarisNodeParser

SOURCE = (
    "---\ntitle: Sessions\nowner: auth-team\n---\n"
    "# Guide\n\nHow sessions work. " + "Sessions expire after an hour of inactivity. " * 30 + "\n\n"
    "## Expiry\n\n```python\nrefresh(token)\n```\n\nExpired sessions must log in again, with a new token.\n"
)


def parse(**kwargs):
    doc = Document(text=SOURCE, id_="docs/sessions.md", metadata={"file_path": "/srv/docs/sessions.md"})
    parser = PolarisNodeParser(config=load_config(use_user_config=False), max_chunk_tokens=120, **kwargs)
    return parser, parser.get_nodes_from_documents([doc])


def test_nodes_match_the_engine_chunks_with_exact_offsets():
    parser, nodes = parse(root_dir="/srv")
    chunks = chunk_markdown(SOURCE, ChunkSettings(120, 200, 50), title="sessions.md").chunks
    assert [n.text for n in nodes] == [c.text for c in chunks]
    for node, chunk in zip(nodes, chunks):
        assert SOURCE[node.start_char_idx : node.end_char_idx] == chunk.text
        assert node.metadata["heading_path"] == chunk.heading_path_str
        assert node.metadata["heading_level"] == chunk.heading_level
    assert [n.metadata["chunk_index"] for n in nodes] == list(range(len(nodes)))
    assert nodes[-1].metadata["heading_path"] == "Guide > Expiry"
    assert nodes[0].metadata["file_path"] == "docs/sessions.md"
    assert nodes[0].metadata["owner"] == "auth-team" and nodes[0].metadata["title"] == "Sessions"


def test_ids_are_deterministic_and_relationships_link_the_document():
    _, first = parse()
    _, again = parse()
    assert [n.id_ for n in first] == [n.id_ for n in again]
    assert len({n.id_ for n in first}) == len(first)
    assert all(n.ref_doc_id == "docs/sessions.md" for n in first)
    assert NodeRelationship.PREVIOUS not in first[0].relationships
    for prev, nxt in zip(first, first[1:]):
        assert prev.relationships[NodeRelationship.NEXT].node_id == nxt.id_
        assert nxt.relationships[NodeRelationship.PREVIOUS].node_id == prev.id_


def test_the_embedded_text_is_the_engine_recipe_and_the_llm_sees_where_a_chunk_is():
    parser, nodes = parse()
    spans = parser.recipe.chunk(SOURCE, path="/srv/docs/sessions.md", title="sessions.md").chunks
    for node, span in zip(nodes, spans, strict=True):
        assert node.get_content(MetadataMode.EMBED) == parser.recipe.embed_text(span)
    embed = nodes[-1].get_content(MetadataMode.EMBED)
    assert "chunk_index" not in embed and "owner" not in embed and "file_path" not in embed
    llm = nodes[-1].get_content(MetadataMode.LLM)
    assert "file_path: /srv/docs/sessions.md" in llm and "heading_path: Guide > Expiry" in llm
    assert "chunk_index" not in llm and "heading_level" not in llm


def test_defaults_come_from_polaris_toml(tmp_path, monkeypatch):
    (tmp_path / "polaris.toml").write_text("max_chunk_tokens = 200\nmin_chunk_chars = 10\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
    parser = PolarisNodeParser()
    assert (parser.max_chunk_tokens, parser.chunk_overlap_chars, parser.min_chunk_chars) == (200, 200, 10)
    assert PolarisNodeParser(max_chunk_tokens=300).max_chunk_tokens == 300


def test_node_ids_match_the_engine_indexer(tmp_path):
    """One id scheme: `polaris index` and PolarisNodeParser give a chunk the same node id."""
    from llama_index.core.schema import Document

    from llama_index_polaris import PolarisNodeParser
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.ingest.indexer import Indexer, SourceDocument
    from llama_index_polaris.engine.sqlite.store import Store

    text = "# Guide\n\nIntro paragraph long enough to be a chunk of its own.\n\n## Auth\n\nTokens expire after an hour.\n"
    embedder = load_embedder("all-minilm-l6-v2")
    cfg = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
    with Store(tmp_path / "p.db") as store:
        Indexer(store, embedder, cfg).index_documents([SourceDocument(id="guide.md", text=text, path="guide.md")])
        engine_ids = [c.node_id for c in store.get_chunks(document_id="guide.md")]
    parser = PolarisNodeParser(config=cfg, max_chunk_tokens=254, count_tokens=embedder.count_tokens)
    nodes = parser.get_nodes_from_documents([Document(text=text, id_="guide.md")])
    assert [n.node_id for n in nodes] == engine_ids


def test_with_a_polaris_embedding_nothing_embedded_is_truncated():
    """The budget is the model's window, in its tokens; the heading line is added only where it fits."""
    from llama_index_polaris import PolarisEmbedding

    embed = PolarisEmbedding(model_id="all-minilm-l6-v2")
    embedder = embed.embedder
    raw = embedder._tokenizers_loaded().counter
    # six levels of headings, each cut to HEADING_CHARS in the path: the path does not fit beside a full chunk
    long_heading = "\n".join("#" * i + " " + " ".join(["Configuration"] * 150) for i in range(1, 7))
    long_heading += "\n\n" + "Tokens rotate daily. " * 60
    code = "# Code\n\n```python\n" + "x_value = compute(a, b, c)  # 12 tokens or so\n" * 80 + "```\n"
    docs = [Document(text=t, id_=f"d{i}") for i, t in enumerate([SOURCE, long_heading, code])]
    parser = PolarisNodeParser(config=load_config(use_user_config=False), embed_model=embed)
    assert parser.recipe.max_tokens == embedder.max_chunk_tokens == 254
    nodes = parser.get_nodes_from_documents(docs)
    for node in nodes:
        embedded = node.get_content(metadata_mode=MetadataMode.EMBED)
        assert len(raw.encode(embedded, add_special_tokens=False).ids) <= embedder.max_chunk_tokens, embedded[:80]
    assert any(n.get_content(MetadataMode.EMBED) == n.text for n in nodes)  # a full chunk: no room for context
    assert any(n.get_content(MetadataMode.EMBED) != n.text for n in nodes)
    # counted as len/4 (a model Polaris cannot see) the chunks overrun the window
    plain = PolarisNodeParser(config=load_config(use_user_config=False), count_tokens=lambda t: -(-len(t) // 4))
    assert max(len(raw.encode(n.text, add_special_tokens=False).ids)
               for n in plain.get_nodes_from_documents(docs)) > embedder.max_chunk_tokens


def test_embed_model_must_be_a_polaris_embedding():
    import pytest

    from llama_index_polaris.engine.errors import InputError

    with pytest.raises(InputError, match="count_tokens"):
        PolarisNodeParser(config=load_config(use_user_config=False), embed_model=object())
