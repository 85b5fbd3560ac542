"""Polaris inside LlamaIndex: build polaris.db from the handbook, then query it.

Runs offline: the bundled all-MiniLM-L6-v2 model embeds, and MockLLM stands in for
the LLM so the example shows retrieval (the sources) without an API key. The index it
builds is the one `polaris index handbook` builds: the same chunks, ids and vectors.

    python examples/llamaindex_query_engine.py [DB_PATH]

Without DB_PATH the index goes to a temporary folder, removed at the end (nothing is left in
the clone); give one to keep it and open it with `polaris search --db DB_PATH`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from llama_index.core import Settings, SimpleDirectoryReader, StorageContext, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.search.explain import brief_line  # the explanation line the MCP server prints

HANDBOOK = Path(__file__).parent / "handbook"


def build(db_path: Path) -> VectorStoreIndex:
    """Chunk the handbook with PolarisNodeParser and store it in ``db_path``."""
    Settings.embed_model = PolarisEmbedding(model_id="all-minilm-l6-v2")  # the parser counts in its tokens
    store = PolarisVectorStore(db_path=str(db_path))  # collection "default", as `polaris index`
    documents = SimpleDirectoryReader(str(HANDBOOK), recursive=True, required_exts=[".md"]).load_data()
    return VectorStoreIndex.from_documents(
        documents,
        storage_context=StorageContext.from_defaults(vector_store=store),
        transformations=[PolarisNodeParser(root_dir=str(HANDBOOK))],  # file_path relative to the handbook
    )


def main(db_path: Path) -> None:
    index = build(db_path)
    retriever = PolarisRetriever(vector_store=index.vector_store, similarity_top_k=3)  # hybrid, one hit per section
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    for question in ("how do we handle expired sessions", "rrf_k"):
        response = engine.query(question)
        print(f"Q: {question}")
        for hit in response.source_nodes:
            meta = hit.node.metadata
            print(f"  {hit.score:.3f}  {meta['file_path']}  {meta['heading_path']}")
            print(f"         {brief_line(hit.explain)}")  # a list that did not find the hit reads '-'
    same = index.as_retriever(similarity_top_k=3).retrieve("rrf_k")  # no mode: what `polaris search` answers
    print("as_retriever():", [n.node.metadata["heading_path"] for n in same])
    index.vector_store.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="polaris-example-") as folder:
            main(Path(folder) / "polaris.db")
