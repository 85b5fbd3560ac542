"""A ~100k-chunk Polaris file of *real* MiniLM vectors, for recall and cold-start figures.

SciFact's 5,183 abstracts hold ~11k chunks at the engine's window, too few to measure
an approximate index at 100k. This script indexes finer units of the same text: each
document's title, each sentence, and each pair of adjacent sentences (about 93k units),
embedded with the bundled all-minilm-l6-v2 (document prefix, as the Indexer embeds)
and written through the engine's Store (so every trigger runs, the sign-bit index
included). The file is bound to the real model, so `polaris search` runs on it.

    python benchmarks/real_vectors.py [EVAL_DIR] [--docs N]     # benchmarks/out/real-scifact.db

Resumable: documents already stored are skipped (one transaction per document).
Queries for recall are SciFact's own (``queries.jsonl``), embedded with the query prefix.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, out_dir  # noqa: E402

MODEL = "all-minilm-l6-v2"
SENT = re.compile(r"(?<=[.!?])\s+")


def units(doc: dict) -> list[str]:
    """Title, sentences and adjacent sentence pairs of one SciFact entry."""
    sentences = [s.strip() for s in SENT.split(doc.get("text") or "") if len(s.strip()) > 20]
    title = (doc.get("title") or "").strip()
    pairs = [f"{a} {b}" for a, b in zip(sentences, sentences[1:])]
    return list(dict.fromkeys(([title] if title else []) + sentences + pairs))


def path() -> Path:
    return out_dir() / "real-scifact.db"


def build(eval_dir: Path, batch_docs: int = 50, limit: int | None = None) -> Path:
    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store

    embedder = load_embedder(MODEL, batch_size=32)
    store = Store(path())
    store.bind_model(ModelBinding(embedder.model_id, embedder.dim, embedder.fingerprint,
                                  embedder.spec.doc_prefix, embedder.spec.query_prefix))
    done = {d.id for d in store.documents()}
    docs = [json.loads(line) for line in open(eval_dir / "scifact" / "corpus.jsonl", encoding="utf-8")][:limit]
    todo = [d for d in docs if str(d["_id"]) not in done]
    t0, n = time.perf_counter(), 0
    for i in range(0, len(todo), batch_docs):
        group = todo[i:i + batch_docs]
        texts = [units(d) for d in group]
        vectors = embedder.embed_documents([t for ts in texts for t in ts])
        at = 0
        for d, ts in zip(group, texts):
            doc_id = str(d["_id"])
            title = (d.get("title") or "").strip()
            chunks = [ChunkRecord(f"{doc_id}:{j}", t, ordinal=j, heading_path=title) for j, t in enumerate(ts)]
            store.upsert_document(DocumentRecord(doc_id, name=title), chunks, vectors[at:at + len(ts)])
            at += len(ts)
            n += len(ts)
        print(f"{len(done) + i + len(group)}/{len(docs)} documents, {n} units in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    store.close()
    return path()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_dir", nargs="?", type=Path, default=DEFAULT_EVAL)
    ap.add_argument("--docs", type=int, default=None, help="only the first N SciFact documents")
    args = ap.parse_args()
    print(build(args.eval_dir, limit=args.docs))
