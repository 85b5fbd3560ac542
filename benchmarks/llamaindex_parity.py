"""The LlamaIndex door against `polaris index`: the same chunks, vectors and quality?

    python benchmarks/llamaindex_parity.py [EVAL_DIR] [--sets scifact,anthropic_docs]

For each set the corpus is indexed twice with the bundled model: by the engine's Indexer
(what `polaris index` and `polaris eval` run) and through LlamaIndex
(``VectorStoreIndex(... transformations=[PolarisNodeParser()], embed_model=PolarisEmbedding)``
into a ``PolarisVectorStore``). It reports how many (heading path, text) chunks the two
share, the lowest cosine between the two vectors of one chunk, and nDCG@10 / Recall@10 /
MRR@10 of hybrid retrieval through each door, and the share of queries whose hits
(document, chunk span) are the same in the same order (``PolarisIndex.search`` and
``VectorStoreIndex.as_retriever(vector_store_query_mode="hybrid")``). SciFact: test split,
a document ranks at its best hit. anthropic_docs: pages rebuilt as in quality.py, scored
by section. Writes benchmarks/out/llamaindex_parity.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, machine, machine_line, out_dir  # noqa: E402
from quality import MODEL, rebuild_pages, section_metrics, sections_in_order  # noqa: E402

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.tune.evaluate import (  # noqa: E402
    corpus_markdown, documents_in_order, load_beir, score_run,
)
from llama_index_polaris.engine.ingest.indexer import SourceDocument  # noqa: E402
from llama_index_polaris.engine.index import PolarisIndex  # noqa: E402

DEPTH = 100


def sets(eval_dir: Path) -> dict[str, tuple[list[SourceDocument], dict, dict, Callable, Callable]]:
    """name -> (documents, queries, qrels, hits-to-ranking, metrics)."""
    out = {}
    scifact = load_beir(eval_dir / "scifact", "test")
    docs = [SourceDocument(id=i, text=corpus_markdown(d), name=d.get("title") or i) for i, d in scifact.corpus.items()]
    queries = {q: scifact.queries[q] for q in scifact.qrels}
    out["scifact"] = (docs, queries, scifact.qrels,
                      lambda hits: documents_in_order(doc for doc, _, _ in hits)[:DEPTH], score_run)
    anthropic = load_beir(eval_dir / "anthropic_docs", "test")
    pages, spans = rebuild_pages(anthropic.corpus)

    def by_section(hits: list[tuple]) -> list[str]:
        return sections_in_order([_Span(*h) for h in hits], spans)

    out["anthropic_docs"] = (pages, {q: anthropic.queries[q] for q in anthropic.qrels}, anthropic.qrels,
                             by_section, section_metrics)
    return out


class _Span:
    def __init__(self, document_id: str, start_char: int | None, end_char: int | None) -> None:
        self.document_id, self.start_char, self.end_char = document_id, start_char, end_char


def cli_door(name: str, docs: list[SourceDocument], queries: dict, cfg: Any) -> tuple[PolarisIndex, dict]:
    index = PolarisIndex(out_dir() / f"parity-{name}-cli.db", config=cfg)
    index.indexer().index_documents(docs, total=len(docs))
    searcher = index.searcher()
    searcher.max_top_k = 3 * DEPTH
    runs = {}
    for qid, text in queries.items():
        hits = searcher.search(text, top_k=3 * DEPTH)
        runs[qid] = [(h.document_id, h.start_char, h.end_char) for h in hits]  # the node's span, as LlamaIndex's
    return index, runs


def llamaindex_door(name: str, docs: list[SourceDocument], queries: dict, cfg: Any) -> tuple[Any, dict]:
    from llama_index.core import Document, StorageContext, VectorStoreIndex

    from llama_index_polaris import PolarisEmbedding, PolarisNodeParser, PolarisVectorStore

    embed = PolarisEmbedding(model_id=MODEL, config=cfg)
    store = PolarisVectorStore(out_dir() / f"parity-{name}-llamaindex.db", embed_model=embed, config=cfg)
    if not store.client.counts()["chunks"]:
        documents = [Document(text=d.text, id_=d.id, metadata={"title": d.name}) for d in docs]
        VectorStoreIndex.from_documents(
            documents, storage_context=StorageContext.from_defaults(vector_store=store),
            transformations=[PolarisNodeParser(config=cfg)], embed_model=embed,
        )
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(
        similarity_top_k=3 * DEPTH, vector_store_query_mode="hybrid")
    runs = {}
    for qid, text in queries.items():
        nodes = retriever.retrieve(text)
        runs[qid] = [(n.node.ref_doc_id, n.node.start_char_idx, n.node.end_char_idx) for n in nodes]
    return store, runs


def same_chunks(index: PolarisIndex, store: Any) -> dict[str, Any]:
    """How many (heading path, text) chunks both doors made, and the lowest cosine between their vectors."""
    a = {(c.heading_path, c.text): c.embedding for c in index.store.get_chunks(with_embedding=True)}
    b = {(c.heading_path, c.text): c.embedding for c in store.client.get_chunks(with_embedding=True)}
    shared = set(a) & set(b)
    cosines = [float(a[k] @ b[k]) for k in shared]
    return {"cli_chunks": len(a), "llamaindex_chunks": len(b), "shared": len(shared),
            "min_cosine": min(cosines) if cosines else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("eval_dir", nargs="?", type=Path, default=DEFAULT_EVAL)
    ap.add_argument("--sets", default="scifact,anthropic_docs")
    args = ap.parse_args()
    cfg = load_config(use_user_config=False, model_id=MODEL)
    results: dict[str, Any] = {"machine": machine_line(machine()), "sets": {}}
    print("| set | door | chunks | shared (heading path, text) | min cosine | same hits, same order | nDCG@10 | R@10 | MRR@10 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (docs, queries, qrels, to_ranking, metrics) in sets(args.eval_dir).items():
        if name not in args.sets.split(","):
            continue
        t = time.perf_counter()
        index, cli_runs = cli_door(name, docs, queries, cfg)
        store, li_runs = llamaindex_door(name, docs, queries, cfg)
        chunks = same_chunks(index, store)
        same = sum(cli_runs[q] == li_runs[q] for q in queries) / max(len(queries), 1)
        entry = {"chunks": chunks, "same_hits": same, "seconds": time.perf_counter() - t}
        for door, runs, count in (("polaris index", cli_runs, chunks["cli_chunks"]),
                                  ("LlamaIndex", li_runs, chunks["llamaindex_chunks"])):
            m = metrics({q: to_ranking(h) for q, h in runs.items()}, qrels)
            entry[door] = m
            print(f"| {name} | {door} | {count} | {chunks['shared']} | {chunks['min_cosine']:.4f} |"
                  f" {same:.0%} of queries | {m['ndcg@10']:.4f} | {m['recall@10']:.4f} | {m['mrr@10']:.4f} |", flush=True)
        results["sets"][name] = entry
        index.close()
        store.close()
    (out_dir() / "llamaindex_parity.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
