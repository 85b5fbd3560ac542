"""Which text to embed with each chunk? The heading-context forms of engine/recipe.py, measured.

    python benchmarks/embed_recipe.py [EVAL_DIR] [--sets anthropic_docs,...] [--budgets 254,222]

For each set and each (context, chunk budget), the set is indexed with the engine's Indexer
(the chunks differ only by budget; the FTS rows are the same for one budget) and scored
in vector and hybrid modes with the default config. Sets: anthropic_docs (pages rebuilt
from its sections, see quality.py) and every labelled docs set under benchmarks/docsets/
whose documents have been prepared (benchmarks/docsets.py prepare).
Writes benchmarks/out/embed_recipe.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, out_dir  # noqa: E402
from quality import MODEL, rebuild_pages, section_metrics, sections_in_order  # noqa: E402

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.tune.evaluate import load_beir  # noqa: E402
from llama_index_polaris.engine.ingest.indexer import Indexer  # noqa: E402
from llama_index_polaris.engine.ingest.recipe import CONTEXTS  # noqa: E402
from llama_index_polaris.engine.index import PolarisIndex  # noqa: E402


def anthropic(eval_dir: Path):
    beir = load_beir(eval_dir / "anthropic_docs", "test")
    docs, spans = rebuild_pages(beir.corpus)
    queries = {q: beir.queries[q] for q in beir.qrels}

    def build(indexer: Indexer) -> None:
        indexer.index_documents(docs)

    return build, queries, beir.qrels, lambda hits: sections_in_order(hits, spans)


def docsets(split: str, names: Sequence[str] | None = None) -> dict:
    """The hand-labelled docs sets prepared on this machine (benchmarks/docsets.py), ``split``
    questions: ``names`` (default every set of docsets.SOURCES)."""
    from docsets import SOURCES, load_set, set_dir
    from sections import dedup, hit_section

    out = {}
    for name in names if names is not None else SOURCES:
        if not (set_dir(name) / "docs").is_dir():
            continue
        ds = load_set(name)
        qrels = ds.split(split)

        def build(indexer: Indexer, docs: Path = ds.docs) -> None:
            indexer.index_paths([docs])

        queries = {q: ds.queries[q]["text"] for q in qrels}
        out[name] = (build, queries, qrels, lambda hits: dedup(hit_section(h) for h in hits))
    return out


def score(index: PolarisIndex, queries: dict, qrels: dict, to_ranking, mode: str) -> dict[str, float]:
    searcher = index.searcher()
    searcher.max_top_k = 100
    run = {qid: to_ranking(searcher.search(text, top_k=30, mode=mode)) for qid, text in queries.items()}
    return section_metrics(run, qrels)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("eval_dir", nargs="?", type=Path, default=DEFAULT_EVAL)
    ap.add_argument("--sets", default=None, help="comma-separated (default: anthropic_docs and every docs set)")
    ap.add_argument("--budgets", default="254,222", help="chunk budgets in tokens (254 = MiniLM's whole window)")
    ap.add_argument("--contexts", default=",".join(CONTEXTS))
    ap.add_argument("--split", default="train", help="questions of the hand-labelled sets (decide on train)")
    args = ap.parse_args()
    wanted = args.sets.split(",") if args.sets else None
    sets = {**({"anthropic_docs": anthropic(args.eval_dir)} if not wanted or "anthropic_docs" in wanted else {}),
            **docsets(args.split, [n for n in wanted if n != "anthropic_docs"] if wanted else None)}
    results = []
    print("| set | context | budget | chunks | mode | nDCG@10 | R@10 | MRR@10 | R@3 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (build, queries, qrels, to_ranking) in sets.items():
        for budget in (int(b) for b in args.budgets.split(",")):
            cfg = load_config(use_user_config=False, model_id=MODEL, max_chunk_tokens=budget)
            for context in args.contexts.split(","):
                path = out_dir() / f"recipe-{name}-{context}-{budget}.db"
                index = PolarisIndex(path, config=cfg)
                t = time.perf_counter()
                build(Indexer(index.store, index.embedder, cfg, heading_context=context))
                seconds = time.perf_counter() - t
                chunks = index.store.counts()["chunks"]
                for mode in ("vector", "hybrid"):
                    m = score(index, queries, qrels, to_ranking, mode)
                    results.append({"set": name, "context": context, "budget": budget, "mode": mode,
                                    "chunks": chunks, "index_seconds": seconds, **m})
                    print(f"| {name} | {context} | {budget} | {chunks} | {mode} | {m['ndcg@10']:.4f} |"
                          f" {m['recall@10']:.4f} | {m.get('mrr@10', float('nan')):.4f} | {m['recall@3']:.4f} |",
                          flush=True)
                index.close()
    (out_dir() / "embed_recipe.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
