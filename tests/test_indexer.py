"""The indexer on the real bundled model: what is embedded, and what is reused."""

from __future__ import annotations

from pathlib import Path

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.embed import load_embedder
from llama_index_polaris.engine.ingest.indexer import Indexer, SourceDocument
from llama_index_polaris.engine.sqlite.store import Store

DOC = """# Guide

Intro text for the guide, long enough to stand on its own as a chunk here.

## Security

### Authentication

Tokens are checked on every request; an expired token is answered with 401.

### Authorisation

Roles decide which workspaces a member can read and which they can change.
"""


def config():
    return load_config(use_user_config=False, model_id="all-minilm-l6-v2")


def test_embedded_text_carries_parent_headings_and_fits_the_window(tmp_path: Path) -> None:
    embedder = load_embedder("all-minilm-l6-v2")
    seen: list[str] = []

    class Recording:
        """The real embedder, recording what it is asked to embed."""

        def __getattr__(self, name):
            return getattr(embedder, name)

        def embed_documents(self, texts):
            seen.extend(texts)
            return embedder.embed_documents(texts)

    with Store(tmp_path / "p.db") as store:
        indexer = Indexer(store, Recording(), config())
        indexer.index_documents([SourceDocument(id="g.md", text=DOC, path="g.md")])
        chunks = store.get_chunks(document_id="g.md")
    assert [c.heading_path for c in chunks][-1] == "Guide > Security > Authorisation"
    spans = indexer.recipe.chunk(DOC, path="g.md", title="g.md").chunks
    assert seen == [indexer.recipe.embed_text(s) for s in spans]
    assert any(t.startswith("heading_path: Guide > Security > Authorisation\n\n### Authorisation") for t in seen)
    assert all(embedder.count_tokens(t) <= embedder.max_chunk_tokens for t in seen)


def test_reindex_reuses_vectors_and_detects_changed_settings(tmp_path: Path) -> None:
    embedder = load_embedder("all-minilm-l6-v2")
    docs = lambda: [SourceDocument(id="g.md", text=DOC, path="g.md")]  # noqa: E731
    with Store(tmp_path / "p.db") as store:
        first = Indexer(store, embedder, config()).index_documents(docs())
        assert first.chunks_embedded == first.chunks > 1
        again = Indexer(store, embedder, config()).index_documents(docs())
        assert (again.unchanged, again.chunks_embedded) == (1, 0)
        smaller = Indexer(store, embedder, config().replace(chunk_overlap_chars=10)).index_documents(docs())
        assert smaller.updated == 1  # chunker settings changed: re-chunked
        assert smaller.chunks_reused >= 1  # ... but unchanged chunk texts keep their vectors
