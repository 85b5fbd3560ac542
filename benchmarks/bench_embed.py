"""Embedding throughput and query latency: Polaris's embedder against a naive baseline, same run.

Polaris: batches of 8 grouped by token count, padded to the longest in the batch.
Baseline: the same ONNX session and tokenizer, one text at a time, padded to 256 tokens.
Passages are the first N abstracts of a BEIR corpus (``title + " " + text``), read at run
time; nothing from the evaluation set is stored in the repository.

    python benchmarks/bench_embed.py ../shared/eval/scifact [--n 2000] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from llama_index_polaris.engine.embed import load_embedder
from llama_index_polaris.engine.embed.pooling import finish
from llama_index_polaris.engine.embed.runtime import plan_batches

COLD_START = (
    "import time; t = time.perf_counter()\n"
    "from llama_index_polaris.engine.embed import load_embedder\n"
    "e = load_embedder({model!r}); e.embed_query('how do we handle expired sessions')\n"
    "print(time.perf_counter() - t)"
)


def read_jsonl(path: Path, n: int, fields: tuple[str, ...]) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            out.append(" ".join(row[f] for f in fields if row.get(f)))
            if len(out) == n:
                break
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentiles(samples: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def padding_ratio(lengths: list[int], batches: list[np.ndarray]) -> float:
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return padded / sum(lengths)


def naive_embed(emb, text: str, prefix: str, width: int = 256) -> np.ndarray:
    """The baseline: one text, padded to a fixed width."""
    tok, session = emb._tokenizers_loaded(), emb._session_loaded()
    ids = tok.encoder.encode(prefix + text).ids[:width]
    feeds = {
        "input_ids": np.full((1, width), tok.pad_id, dtype=np.int64),
        "attention_mask": np.zeros((1, width), dtype=np.int64),
        "token_type_ids": np.zeros((1, width), dtype=np.int64),
    }
    feeds["input_ids"][0, : len(ids)] = ids
    feeds["attention_mask"][0, : len(ids)] = 1
    hidden = session.session.run([session.output], {k: v for k, v in feeds.items() if k in session.inputs})[0]
    spec = emb.spec
    return finish(hidden, feeds["attention_mask"], pooling=spec.pooling, use_layer_norm=spec.layer_norm, dim=emb.dim)[0]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("eval_dir", type=Path, help="a BEIR folder with corpus.jsonl and queries.jsonl")
    parser.add_argument("--n", type=int, default=2000, help="passages (default 2000)")
    parser.add_argument("--queries", type=int, default=200, help="queries for latency (default 200)")
    parser.add_argument("--model", default="all-minilm-l6-v2")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    passages = read_jsonl(args.eval_dir / "corpus.jsonl", args.n, ("title", "text"))
    queries = read_jsonl(args.eval_dir / "queries.jsonl", args.queries, ("text",))
    cold = subprocess.run([sys.executable, "-c", COLD_START.format(model=args.model)], capture_output=True, text=True, check=True)
    emb = load_embedder(args.model, batch_size=args.batch_size, threads=args.threads)
    emb.embed_documents(passages[:16])  # session and tokenizer loaded, arena warmed

    lengths = [len(e.ids) for e in emb._tokenizers_loaded().encoder.encode_batch([emb.spec.doc_prefix + p for p in passages])]
    unsorted = [np.arange(i, min(i + args.batch_size, len(lengths))) for i in range(0, len(lengths), args.batch_size)]

    t = time.perf_counter()
    vectors = emb.embed_documents(passages)
    polaris_s = time.perf_counter() - t
    latencies = []
    for q in queries:
        t = time.perf_counter()
        emb.embed_query(q)
        latencies.append(time.perf_counter() - t)
    polaris_rss = peak_rss_mb()

    t = time.perf_counter()
    naive = np.stack([naive_embed(emb, p, emb.spec.doc_prefix) for p in passages])
    naive_s = time.perf_counter() - t
    naive_latencies = []
    for q in queries:
        t = time.perf_counter()
        naive_embed(emb, q, emb.spec.query_prefix)
        naive_latencies.append(time.perf_counter() - t)

    results = {
        "model": emb.model_id,
        "source": emb.files.source,
        "passages": len(passages),
        "mean_tokens": statistics.mean(lengths),
        "batch_size": args.batch_size,
        "threads": args.threads or "physical cores (ONNX Runtime default)",
        "padding_ratio_sorted": padding_ratio(lengths, plan_batches(lengths, args.batch_size)),
        "padding_ratio_unsorted": padding_ratio(lengths, unsorted),
        "polaris_passages_per_s": len(passages) / polaris_s,
        "naive_passages_per_s": len(passages) / naive_s,
        "polaris_query_p50_ms": percentiles(latencies)[0],
        "polaris_query_p95_ms": percentiles(latencies)[1],
        "naive_query_p50_ms": percentiles(naive_latencies)[0],
        "naive_query_p95_ms": percentiles(naive_latencies)[1],
        "min_cosine_polaris_vs_naive": float((vectors * naive).sum(axis=1).min()),
        "peak_rss_mb_after_polaris": polaris_rss,
        "peak_rss_mb_end": peak_rss_mb(),
        "cold_load_and_first_query_s": float(cold.stdout.strip()),
    }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:32} {value:.3f}" if isinstance(value, float) else f"{key:32} {value}")
    return results


if __name__ == "__main__":
    main()
