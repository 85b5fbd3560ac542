"""Retrieval quality on a BEIR-layout folder, for each search mode (`polaris eval` prints it).

The corpus is indexed once into a cached database keyed by the corpus, the model and
the chunker settings. When chunks are smaller than documents, a document's score is
its best chunk's (the first time it appears in the ranking).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..errors import InputError
from ..paths import cache_root

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
DEPTH = 100
CHUNKS_PER_DOC = 3  # chunks fetched per document wanted, so the top 100 documents are all there


# -- metrics (pure) ------------------------------------------------------------------
def dcg(gains: Sequence[float]) -> float:
    """Discounted cumulative gain with linear gains (as trec_eval): sum g / log2(i + 1)."""
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranking against graded relevance ``rels``."""
    ideal = dcg(sorted((r for r in rels.values() if r > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(rels.get(d, 0), 0) for d in ranked[:k]]) / ideal


def recall_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top ``k``."""
    relevant = {d for d, r in rels.items() if r > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document in the top ``k`` (0 if none)."""
    for i, d in enumerate(ranked[:k], start=1):
        if rels.get(d, 0) > 0:
            return 1.0 / i
    return 0.0


_AT_K = {"ndcg": ndcg_at_k, "recall": recall_at_k, "mrr": mrr_at_k}


def metric_at_k(name: str, ranked: Sequence[str], rels: Mapping[str, int]) -> float:
    """The metric named ``<ndcg|recall|mrr>@<k>`` (e.g. ``"ndcg@10"``) of one ranking."""
    measure, k = name.split("@")
    return _AT_K[measure](ranked, rels, int(k))


def score_run(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], metrics: Sequence[str] = METRICS
) -> dict[str, float]:
    """Mean of each of ``metrics`` over the queries in ``qrels`` (a query with no run scores 0)."""
    totals = dict.fromkeys(metrics, 0.0)
    for qid, rels in qrels.items():
        ranked = run.get(qid, [])
        for name in metrics:
            totals[name] += metric_at_k(name, ranked, rels)
    n = max(len(qrels), 1)
    return {m: v / n for m, v in totals.items()}


def documents_in_order(doc_ids: Iterable[str]) -> list[str]:
    """Chunk hits to a document ranking: each document at its best chunk's place."""
    return list(dict.fromkeys(doc_ids))


# -- BEIR files ----------------------------------------------------------------------
@dataclass
class BeirSet:
    """A BEIR folder: corpus, queries and the qrels of one split."""

    path: Path
    corpus: dict[str, dict[str, Any]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}:{n}: not valid JSON ({exc.msg}).") from None


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id corpus-id score`` rows (tab-separated, with a header) as nested dicts."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.rstrip("\n").split("\t")
            if n == 1 and parts[0] == "query-id" or not line.strip():
                continue
            if len(parts) != 3:
                raise InputError(f"{path}:{n}: expected 'query-id<TAB>corpus-id<TAB>score'.")
            qrels.setdefault(parts[0], {})[parts[1]] = int(float(parts[2]))
    return qrels


def load_beir(directory: str | os.PathLike[str], split: str = "test") -> BeirSet:
    """Read a BEIR folder; the error says which file is missing."""
    root = Path(directory)
    files = {"corpus": root / "corpus.jsonl", "queries": root / "queries.jsonl", "qrels": root / "qrels" / f"{split}.tsv"}
    for name, path in files.items():
        if not path.is_file():
            raise InputError(f"{path}: missing; a BEIR folder has corpus.jsonl, queries.jsonl and qrels/{split}.tsv.")
    corpus = {str(d["_id"]): d for d in _jsonl(files["corpus"])}
    queries = {str(q["_id"]): q["text"] for q in _jsonl(files["queries"])}
    qrels = read_qrels(files["qrels"])
    return BeirSet(root, corpus, queries, qrels)


def corpus_markdown(doc: Mapping[str, Any]) -> str:
    """A corpus entry as Markdown: its title as the heading, then its text."""
    title, text = (doc.get("title") or "").strip(), (doc.get("text") or "").strip()
    return f"# {title}\n\n{text}" if title else text


def corpus_fingerprint(path: Path) -> str:
    """sha256 of the corpus file (part of the cache key)."""
    from ..embed.fingerprint import file_sha256

    return file_sha256(path / "corpus.jsonl")


def eval_cache_dir() -> Path:
    """Where cached evaluation indexes live: ``eval/`` in the user-global Polaris cache."""
    return cache_root() / "eval"


# -- running -------------------------------------------------------------------------
def build_eval_index(beir: BeirSet, config: Any, progress: Any = None, whole_documents: bool = False,
                     db: str | None = None) -> Any:
    """The cached PolarisIndex for this corpus, model and chunker (built if needed); ``db`` (a
    file or a ``postgresql://`` URI) names where to build it instead of the cache.

    ``whole_documents`` indexes each corpus entry as one chunk cut at the model's window,
    as BEIR and MTEB do, so that published figures can be reproduced.
    """
    from ..embed import embedder_from_config
    from ..ingest.indexer import Indexer, SourceDocument
    from ..index import PolarisIndex

    embedder = embedder_from_config(config)
    from ..ingest.recipe import DEFAULT_CONTEXT

    key = json.dumps([corpus_fingerprint(beir.path), embedder.model_id, embedder.dim, embedder.fingerprint,
                      config.max_chunk_tokens, config.chunk_overlap_chars, config.min_chunk_chars,
                      config.fts_tokenizer, DEFAULT_CONTEXT] + (["whole"] if whole_documents else []), sort_keys=True)
    path: Any = db if db is not None else eval_cache_dir() / f"{beir.path.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.db"
    if db is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    index = PolarisIndex(path, config=config.replace(model_id=embedder.model_id))
    docs = (SourceDocument(id=i, text=corpus_markdown(d), name=d.get("title") or i) for i, d in beir.corpus.items())
    indexer = Indexer(index.store, index.embedder, index.config, progress=progress, whole_documents=whole_documents)
    report = indexer.index_documents(docs, total=len(beir.corpus))
    return index, report


def run_modes(
    index: Any, beir: BeirSet, modes: Sequence[str], depth: int = DEPTH, unit: str | None = None
) -> dict[str, dict[str, float]]:
    """Score each mode over the split's queries (hits of ``unit``, default the config's); reports query time."""
    searcher = index.searcher()
    searcher.max_top_k = CHUNKS_PER_DOC * depth
    results = {}
    queries = {q: beir.queries[q] for q in beir.qrels if q in beir.queries}
    for mode in modes:
        run, start = {}, time.perf_counter()
        for qid, text in queries.items():
            hits = searcher.search(text, top_k=CHUNKS_PER_DOC * depth, mode=mode, unit=unit)
            run[qid] = documents_in_order(h.document_id for h in hits)[:depth]
        elapsed = time.perf_counter() - start
        results[mode] = {**score_run(run, beir.qrels), "queries": len(queries),
                         "ms_per_query": 1000 * elapsed / max(len(queries), 1)}
    return results
