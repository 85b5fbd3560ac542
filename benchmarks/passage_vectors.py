"""Passage vectors: does a section ranked by the closest of several finer vectors rank better?

    python benchmarks/passage_vectors.py [NAME ...] [--split train|test|all] [--variants a,b,...]
                                         [--mode hybrid|vector] [--embed-only] [--check]

markdown-memory's design ranks a section by the closest of its vectors: the whole section
or any single passage (paragraph, list item, table row, code block). Polaris stores one
vector per chunk (the recipe's text: ``heading_path: A > B`` + a blank line + the chunk).
This script measures, without touching the engine, what extra vectors would do to the
engine's hybrid section ranking on the docs sets:

1. each set's cached index (``benchmarks/sections.py`` builds it with the defaults) gives
   the chunks; each chunk's text is cut with markdown-it-py (``.map`` line ranges of the
   top-level blocks) into passages: paragraphs, list items (top level, nested content
   included), table body rows (each with its table's header row), code blocks, block
   quotes and raw HTML blocks. Headings are skipped; so is a passage that is the chunk's
   whole body (the chunk's own vector already says it) and one repeated in the same
   section (chunks overlap). The passage keeps its Markdown (the chunk vector embeds
   Markdown too) and is embedded in the recipe's form: ``heading_path: <path>`` + blank
   line + passage. A passage shorter than ``--min-chars`` is left out (all passages of
   at least ``FLOOR`` characters are embedded once and cached; the cut is applied when
   scoring).
2. whole-section vectors for sections spanning several chunks: the chunks stitched
   (``engine.search.context.stitch``) behind the same heading line, embedded once; the
   model reads only its first 256 tokens (the rest is truncated: counted and reported),
   so this is close to the first chunk's vector. Also, for free: the mean of a section's
   chunk vectors, and markdown-memory's own section vector, the mean of its passages.
3. every question of the split is answered by ``engine.search.rank.rank`` (the engine's
   pure ranking: sections, RRF, heading boost) in hybrid section mode, with the engine's
   settings, BM25 list (``Searcher._bm25``) and pool (``candidate_pool`` chunks per
   list). Only the vector list changes: an exact cosine KNN in
   numpy over a vector list, where each chunk stands at the closest of its own vectors
   (so a section stands at the closest vector it has), cut to the same pool of chunks.

Variants (vector list):

- ``baseline``: chunk vectors only (must equal section_ablation.py's ``section``);
- ``passages``: chunks + passages, each section at its closest vector;
- ``passages-only``: passages (a chunk without passages keeps its chunk vector);
- ``section``: chunks + whole-section vectors (multi-chunk sections);
- ``passages+section``: chunks + passages + whole-section vectors;
- ``passages+mean``: chunks + passages + each section's mean of its passages (markdown-memory's
  section vector, for sections with two or more passages);
- ``chunkmean``: chunks + each multi-chunk section's mean of its chunk vectors;
- ``passages-min40`` / ``-min80`` / ``-min150``: passages of at least 40 / 80 / 150 characters only;
- ``passages-dX`` (X = 0.02, 0.05, 0.08, 0.1, 0.15): chunks + passages, a passage's cosine
  distance handicapped by X (it must beat the chunk vectors by that much to count);
- ``chunkmean+passages-dX``: both.

Re-measured on the six sets' train splits with score fusion and identifier lookups (#13,
2026-12-01; baseline -> section / passages / chunkmean): cargo-book .7205 -> .7260 / .6941 /
.7280, typer .8260 -> .8345 / .8520 / .8276, pydantic .7831 -> .7847 / .7532 / .7660,
anthropic_docs .8338 -> .8305 / .8274 / .8338, uv .8371 -> .8420 / .8564 / .8198, sqlmodel
.7160 -> .7170 / .7189 / .7195: whole-section vectors +0.003 on the mean for +0.18 vectors
per chunk, passages -0.002 at +2.3 to +3.2; neither built.

First measured 2026-11-30, RRF alone (hybrid, nDCG@10, baseline -> passages; train / test): typer .814 -> .850 /
.846 -> .863, cargo-book .728 -> .727 / .650 -> .687, pydantic .765 -> .725 / .763 -> .737,
anthropic_docs .821 -> .822; pooled per-question change +0.000 train (95% CI -0.015..+0.016),
+0.007 test (-0.008..+0.022), at +2.3 vectors per chunk. In vector mode alone passages help
(cargo-book test .509 -> .583); fusion with BM25 takes most of it back.

Scoring is sections.py's (nDCG@10 graded, R@10, MRR@10; per kind). Decide on ``--split
train``; report ``test`` once. Embeddings are cached under benchmarks/out/passages/
(``<set>-<key>.json`` texts + ``.npy`` vectors, resumable). Writes
benchmarks/out/passage_vectors-<split>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import ALL_SETS, load_set, section_id  # noqa: E402
from sections import K, ablation_row, config, open_index, questions, summarise  # noqa: E402

from llama_index_polaris.engine.search import pipeline  # noqa: E402
from llama_index_polaris.engine.search.context import stitch  # noqa: E402
from llama_index_polaris.engine.search.rank import Candidate, rank  # noqa: E402
from llama_index_polaris.engine.storage.scope import resolve_scope  # noqa: E402
from llama_index_polaris.engine.sqlite.store import from_blob  # noqa: E402

FLOOR = 20  # passages shorter than this (stripped characters) are never embedded
CUT_VERSION = 1  # bump when the cutter changes: the cache key holds it
BLOCK = 256  # texts embedded between two cache saves


# -- cutting ------------------------------------------------------------------------------------
def _md() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table")


def _block_end(tokens: list, start: int) -> int:
    """Index of the token closing the block opened at ``start`` (itself for a leaf)."""
    tok = tokens[start]
    if tok.nesting != 1:
        return start
    depth = 0
    for i in range(start, len(tokens)):
        depth += tokens[i].nesting
        if depth == 0:
            return i
    return len(tokens) - 1


def _lines(lines: list[str], span: Any) -> str:
    return "\n".join(lines[span[0]:span[1]]).strip() if span else ""


def cut_passages(md: Any, text: str) -> tuple[list[tuple[str, str]], str]:
    """(kind, text) of each passage of a chunk's text, and the chunk's body (headings removed).

    Passages are source lines (Markdown kept) of the top-level blocks; a list gives one
    passage per top-level item, a table one per body row prefixed by its header row.
    """
    tokens = md.parse(text)
    lines = text.split("\n")
    out: list[tuple[str, str]] = []
    body: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        end = _block_end(tokens, i)
        block = tokens[i:end + 1]
        t = tok.type
        if t == "heading_open" or t == "hr":
            pass
        elif t in ("bullet_list_open", "ordered_list_open"):
            body.append(_lines(lines, tok.map))
            for b in block:
                if b.type == "list_item_open" and b.level == tok.level + 1:
                    out.append(("item", _lines(lines, b.map)))
        elif t == "table_open":
            body.append(_lines(lines, tok.map))
            header = next((_lines(lines, b.map) for b in block if b.type == "thead_open"), "")
            header = header.split("\n")[0] if header else ""
            in_body = False
            for b in block:
                in_body = (in_body or b.type == "tbody_open") and b.type != "tbody_close"
                if in_body and b.type == "tr_open":
                    row = _lines(lines, b.map)
                    if row:
                        out.append(("row", f"{header}\n{row}" if header else row))
        elif tok.map:
            kind = {"paragraph_open": "para", "fence": "code", "code_block": "code",
                    "blockquote_open": "quote", "html_block": "html"}.get(t, t)
            body.append(_lines(lines, tok.map))
            out.append((kind, _lines(lines, tok.map)))
        i = end + 1
    return out, "\n\n".join(b for b in body if b).strip()


@dataclass
class Chunk:
    id: int
    document: str  # relpath (hit.document)
    heading_path: str
    text: str
    start: int | None
    end: int | None
    ordinal: int
    document_id: str

    @property
    def section(self) -> str:
        return section_id(self.document, self.heading_path)


def read_chunks(index: Any) -> tuple[list[Chunk], np.ndarray]:
    rows = index.store.conn.execute(
        "SELECT c.id, coalesce(d.path, d.id), c.heading_path, c.text, c.start_char, c.end_char, c.ordinal,"
        " c.document_id, c.embedding FROM chunks c JOIN documents d ON d.id = c.document_id"
        " ORDER BY c.document_id, c.ordinal").fetchall()
    chunks = [Chunk(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]) for r in rows]
    vectors = np.stack([from_blob(r[8]) for r in rows]).astype(np.float32)
    return chunks, vectors


def embed_text(heading_path: str, text: str) -> str:
    """The recipe's embedded form (heading_path context line, a blank line, the text)."""
    return f"heading_path: {heading_path}\n\n{text}".strip() if heading_path else text


@dataclass
class Extra:
    """One extra vector: the chunk it stands for, what it is, its raw length and its embedded text."""

    chunk: int
    kind: str
    chars: int
    text: str


def extras_of(chunks: list[Chunk]) -> list[Extra]:
    """Every passage (>= FLOOR chars) and every multi-chunk section's whole text, in a fixed order."""
    md = _md()
    out: list[Extra] = []
    seen: set[tuple[str, str]] = set()
    by_section: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_section.setdefault(c.section, []).append(c)
        passages, body = cut_passages(md, c.text)
        for kind, text in passages:
            if len(text) < FLOOR or text == body or text == c.text.strip():
                continue
            if (c.section, text) in seen:  # overlap repeats a block in the next chunk
                continue
            seen.add((c.section, text))
            out.append(Extra(c.id, kind, len(text), embed_text(c.heading_path, text)))
    for sec, cs in by_section.items():
        if len(cs) > 1:
            whole = stitch([(c.text, c.start, c.end) for c in sorted(cs, key=lambda c: c.ordinal)])
            out.append(Extra(cs[0].id, "section", len(whole), embed_text(cs[0].heading_path, whole)))
    return out


# -- embedding (cached) -----------------------------------------------------------------------------
def embedder() -> Any:
    from llama_index_polaris.engine.embed.embedder import embedder_from_config

    return embedder_from_config(config())


def cached_vectors(name: str, chunks: list[Chunk], extras: list[Extra], emb: Any) -> tuple[np.ndarray, dict]:
    """Vectors of ``extras`` (cached, resumable), and the embedding cost."""
    key = hashlib.sha256(json.dumps([CUT_VERSION, FLOOR, [e.text for e in extras]]).encode()).hexdigest()[:12]
    folder = out_dir() / "passages"
    folder.mkdir(parents=True, exist_ok=True)
    npy, meta_path = folder / f"{name}-{key}.npy", folder / f"{name}-{key}.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"seconds": 0.0, "done": 0}
    vecs = np.load(npy) if npy.exists() else np.zeros((0, emb.dim), dtype=np.float32)
    done = min(meta["done"], len(vecs))
    vecs = vecs[:done]
    if done < len(extras):
        print(f"{name}: embedding {len(extras) - done} of {len(extras)} extra texts", file=sys.stderr, flush=True)
    while done < len(extras):
        batch = [e.text for e in extras[done:done + BLOCK]]
        t = time.perf_counter()
        out = emb.embed_documents(batch)
        meta["seconds"] += time.perf_counter() - t
        vecs = np.concatenate([vecs, out])
        done += len(batch)
        meta["done"] = done
        np.save(npy, vecs)
        meta_path.write_text(json.dumps(meta))
        rate = done / max(meta["seconds"], 1e-9)
        print(f"  {name}: {done}/{len(extras)} ({rate:.1f}/s)", file=sys.stderr, flush=True)
    if "kinds" not in meta:
        counter = emb.count_tokens
        window = emb.max_chunk_tokens
        sections = [e for e in extras if e.kind == "section"]
        meta["truncated_sections"] = sum(counter(e.text) > window for e in sections)
        meta["kinds"] = {k: sum(e.kind == k for e in extras) for k in sorted({e.kind for e in extras})}
        meta_path.write_text(json.dumps(meta))
    return vecs, meta


# -- vector lists ------------------------------------------------------------------------------------
@dataclass
class Space:
    """A vector list: rows and the chunk each row stands for."""

    vectors: np.ndarray
    owner: np.ndarray  # chunk id of each row
    offset: np.ndarray | None = None  # added to each row's distance (a handicap for extra vectors)


def spaces(chunks: list[Chunk], cvecs: np.ndarray, extras: list[Extra], evecs: np.ndarray) -> dict[str, Space]:
    cids = np.array([c.id for c in chunks])
    kind = np.array([e.kind for e in extras])
    owner = np.array([e.chunk for e in extras], dtype=np.int64)
    chars = np.array([e.chars for e in extras])
    is_passage = kind != "section"
    sec_of = {c.id: c.section for c in chunks}

    def with_rows(mask: np.ndarray, base: bool = True) -> Space:
        rows = [cvecs] if base else []
        owners = [cids] if base else []
        return Space(np.concatenate(rows + [evecs[mask]]), np.concatenate(owners + [owner[mask]]))

    def means(groups: dict[str, list[np.ndarray]], first: dict[str, int], least: int) -> tuple[np.ndarray, np.ndarray]:
        rows, owners = [], []
        for sec, vs in groups.items():
            if len(vs) >= least:
                m = np.mean(vs, axis=0)
                rows.append(m / np.linalg.norm(m))
                owners.append(first[sec])
        return np.array(rows, dtype=np.float32).reshape(-1, cvecs.shape[1]), np.array(owners, dtype=np.int64)

    first: dict[str, int] = {}
    chunk_groups: dict[str, list[np.ndarray]] = {}
    for c, v in zip(chunks, cvecs):
        first.setdefault(c.section, c.id)
        chunk_groups.setdefault(c.section, []).append(v)
    passage_groups: dict[str, list[np.ndarray]] = {}
    for e, v, p in zip(extras, evecs, is_passage):
        if p:
            passage_groups.setdefault(sec_of[e.chunk], []).append(v)
    pm_rows, pm_owner = means(passage_groups, first, 2)
    cm_rows, cm_owner = means(chunk_groups, first, 2)
    with_passages = with_rows(is_passage)
    has_passage = np.isin(cids, owner[is_passage])
    out = {
        "baseline": Space(cvecs, cids),
        "passages": with_passages,
        "passages-only": Space(np.concatenate([cvecs[~has_passage], evecs[is_passage]]),
                               np.concatenate([cids[~has_passage], owner[is_passage]])),
        "section": with_rows(~is_passage),
        "passages+section": with_rows(np.ones(len(extras), dtype=bool)),
        "passages+mean": Space(np.concatenate([with_passages.vectors, pm_rows]),
                               np.concatenate([with_passages.owner, pm_owner])),
        "chunkmean": Space(np.concatenate([cvecs, cm_rows]), np.concatenate([cids, cm_owner])),
    }
    for n in (40, 80, 150):
        out[f"passages-min{n}"] = with_rows(is_passage & (chars >= n))
    n_pass = int(is_passage.sum())
    for d in (0.02, 0.05, 0.08, 0.1, 0.15):
        offset = np.concatenate([np.zeros(len(cids)), np.full(n_pass, d)]).astype(np.float32)
        out[f"passages-d{d}"] = Space(with_passages.vectors, with_passages.owner, offset)
        out[f"chunkmean+passages-d{d}"] = Space(
            np.concatenate([with_passages.vectors, cm_rows]), np.concatenate([with_passages.owner, cm_owner]),
            np.concatenate([offset, np.zeros(len(cm_rows), dtype=np.float32)]))
    return out


def knn_chunks(space: Space, q: np.ndarray, pool: int) -> list[tuple[int, float]]:
    """The ``pool`` chunks nearest to ``q``, each at the closest of its vectors (cosine distance)."""
    dist = 1.0 - space.vectors @ q
    if space.offset is not None:
        dist = dist + space.offset
    order = np.argsort(dist, kind="stable")
    out: list[tuple[int, float]] = []
    seen: set[int] = set()
    for i in order:
        cid = int(space.owner[i])
        if cid in seen:
            continue
        seen.add(cid)
        out.append((cid, float(dist[i])))
        if len(out) == pool:
            break
    return out


VARIANTS = ("baseline", "passages", "passages-only", "section", "passages+section", "passages+mean", "chunkmean",
            "passages-min40", "passages-min80", "passages-min150",
            *(f"{p}passages-d{d}" for p in ("", "chunkmean+") for d in (0.02, 0.05, 0.08, 0.1, 0.15)))


# -- scoring -------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=list(ALL_SETS))
    ap.add_argument("--split", default="train")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--mode", default="hybrid", choices=("hybrid", "vector"), help="vector: the KNN list alone")
    ap.add_argument("--embed-only", action="store_true")
    ap.add_argument("--check", action="store_true", help="also run the engine's own search for the baseline")
    args = ap.parse_args()
    emb = embedder()
    results: dict[str, Any] = {}
    rows_out: list[str] = []
    header = ("| set | split | variant | nDCG@10 | R@10 | MRR@10 | paraphrase | identifier | mixed | vectors/chunk |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    print(header)
    for name in args.names:
        ds = load_set(name)
        index, _ = open_index(ds)
        chunks, cvecs = read_chunks(index)
        extras = extras_of(chunks)
        evecs, meta = cached_vectors(name, chunks, extras, emb)
        n_pass = sum(e.kind != "section" for e in extras)
        cost = {"chunks": len(chunks), "passages": n_pass, "section_vectors": len(extras) - n_pass,
                "embed_seconds": round(meta["seconds"], 1), "kinds": meta.get("kinds"),
                "truncated_sections": meta.get("truncated_sections"),
                "sections": len({c.section for c in chunks})}
        print(f"<!-- {name}: {json.dumps(cost)} -->", flush=True)
        results.setdefault(name, {})["cost"] = cost
        if args.embed_only:
            index.close()
            continue
        split, qids = questions(ds, args.split)
        searcher = index.searcher()
        cfg = searcher.config
        pool = cfg.candidate_pool  # each list's chunks, as Searcher._rank_pool's first pool
        by_id = {c.id: c for c in chunks}
        candidates = {c.id: Candidate((c.document_id, c.heading_path), c.heading_path) for c in chunks}
        with searcher.store.read() as conn:
            scope = resolve_scope(conn)
        queries = {}
        for q in qids:
            text = ds.queries[q]["text"].strip()
            qvec = searcher._check_vector(searcher._embed(text))
            with searcher.store.read():
                bm = searcher._bm25(text, pool, scope)
            params = searcher.params(text, K, args.mode, mmr_lambda=cfg.mmr_lambda)
            queries[q] = (qvec, bm, params)
        sp = spaces(chunks, cvecs, extras, evecs)
        for variant in args.variants.split(","):
            space = sp[variant]
            runs = {}
            for q, (qvec, bm, params) in queries.items():
                vec = knn_chunks(space, qvec, pool)
                ranked = rank(vec, bm, candidates, params)
                runs[q] = [by_id[r.chunk_id].section for r in ranked][:K]
            m = summarise(ds, runs, split)
            per_chunk = (len(space.vectors) - len(chunks)) / len(chunks)
            results[name][variant] = {k: v for k, v in m.items() if k != "per_query"}
            results[name][variant]["per_query"] = {q: v["ndcg@10"] for q, v in m["per_query"].items()}
            results[name][variant]["extra_vectors_per_chunk"] = per_chunk
            line = ablation_row(name, split, variant, m)[:-1] + f"| +{per_chunk:.2f} |"
            rows_out.append(line)
            print(line, flush=True)
        if args.check:
            runs = {q: [section_id(h.document, h.heading_path) for h in searcher.search(ds.queries[q]["text"], top_k=K,
                                                                                       unit="section")]
                    for q in qids}
            print(f"<!-- {name}: engine search nDCG@10 {summarise(ds, runs, split)['all']['ndcg@10']:.4f} -->")
        index.close()
    path = out_dir() / f"passage_vectors-{args.split}{'' if args.mode == 'hybrid' else '-' + args.mode}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    for name, entry in results.items():
        old.setdefault(name, {}).update(entry)
    path.write_text(json.dumps(old, indent=2))


if __name__ == "__main__":
    main()
