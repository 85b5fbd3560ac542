"""Does embedding a chunk's parent headings with it help? An A/B on anthropic_docs.

    python benchmarks/heading_context.py [EVAL_DIR]

Builds the anthropic_docs pages twice with the engine's Indexer, with and without the
parent-heading context in the embedded text (the chunks and the FTS rows are the same),
and scores vector-only and hybrid retrieval with the default config.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, out_dir  # noqa: E402
from quality import MODEL, rebuild_pages, section_metrics, sections_in_order  # noqa: E402

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.evaluate import load_beir  # noqa: E402
from llama_index_polaris.engine.index import Indexer  # noqa: E402
from llama_index_polaris.engine.session import PolarisIndex  # noqa: E402


def score(index: PolarisIndex, beir, spans, mode: str) -> dict[str, float]:
    searcher = index.searcher()
    run = {}
    for qid in beir.qrels:
        hits = searcher.search(beir.queries[qid], top_k=30, mode=mode)
        run[qid] = sections_in_order(hits, spans)
    return section_metrics(run, beir.qrels)


def main() -> None:
    eval_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_EVAL
    beir = load_beir(eval_dir / "anthropic_docs", "test")
    docs, spans = rebuild_pages(beir.corpus)
    cfg = load_config(use_user_config=False, model_id=MODEL)
    print("| embedded text | mode | Recall@3 | MRR@3 | nDCG@10 |")
    print("|---|---|---|---|---|")
    for context in (True, False):
        index = PolarisIndex(out_dir() / f"heading-context-{context}.db", config=cfg)
        Indexer(index.store, index.embedder, cfg, heading_context=context).index_documents(docs)
        for mode in ("vector", "hybrid"):
            m = score(index, beir, spans, mode)
            label = "parent headings + chunk" if context else "chunk only"
            print(f"| {label} | {mode} | {m['recall@3']:.4f} | {m['mrr@3']:.4f} | {m['ndcg@10']:.4f} |", flush=True)
        index.close()


if __name__ == "__main__":
    main()
