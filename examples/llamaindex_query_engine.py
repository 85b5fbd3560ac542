"""Polaris inside LlamaIndex: build polaris.db from the handbook, then query it.

Runs offline: the bundled all-MiniLM-L6-v2 model embeds, and MockLLM stands in for
the LLM so the example shows retrieval (the sources) without an API key.

    python examples/llamaindex_query_engine.py [DB_PATH]
"""

from __future__ import annotations

import sys
from pathlib import Path

from llama_index.core import SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisRetriever, PolarisVectorStore

HANDBOOK = Path(__file__).parent / "handbook"


def build(db_path: Path) -> tuple[PolarisVectorStore, PolarisEmbedding]:
    """Chunk the handbook with PolarisNodeParser and store it in ``db_path``."""
    embed = PolarisEmbedding(model_id="all-minilm-l6-v2")
    store = PolarisVectorStore(db_path=str(db_path), embed_model=embed)
    documents = SimpleDirectoryReader(str(HANDBOOK), recursive=True, required_exts=[".md"]).load_data()
    nodes = PolarisNodeParser(embed_model=embed).get_nodes_from_documents(documents)  # budget in its tokens
    storage = StorageContext.from_defaults(vector_store=store)
    VectorStoreIndex(nodes, storage_context=storage, embed_model=embed)
    return store, embed


def main(db_path: Path) -> None:
    store, embed = build(db_path)
    retriever = PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=3)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    for question in ("how do we handle expired sessions", "rrf_k"):
        response = engine.query(question)
        print(f"Q: {question}")
        for hit in response.source_nodes:
            meta = hit.node.metadata
            print(f"  {hit.score:.3f}  {Path(meta['file_path']).name}  {meta['heading_path']}")
            e = hit.explain
            print(f"         vector #{e.vector_rank}  bm25 #{e.bm25_rank}  boost {e.boost:.4f}  mmr penalty {e.mmr_penalty:.4f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("llamaindex-example.db"))
