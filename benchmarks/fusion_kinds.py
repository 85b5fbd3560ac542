"""Fusion that knows what kind of question it was given (issue #37): the lists cached once, the rule fitted from them.

    python benchmarks/fusion_kinds.py collect [NAME ...]       # each question's two lists, once per set
    python benchmarks/fusion_kinds.py check [NAME ...]         # the cache ranks as the engine does
    python benchmarks/fusion_kinds.py table [--split train|test] [--rule default|adaptive|vector|bm25 ...]

``collect`` asks every question of every set (both splits) once and keeps what ``rank()``
ranks: the first pool's vector and BM25 lists (chunk ids and values, as the Searcher
fetches them, the lookup's lift included), each candidate's section and heading path,
the query's ``RankParams`` and its content words' document frequencies, in
``benchmarks/out/fusion_kinds/<set>.pkl``. Everything after reads the cache and calls the
engine's pure ``rank()`` (``search/rank.py``) with the rule's parameters, so a fit never
re-runs the model or the database and what is scored is what the engine ranks.
``check`` compares the cached ranking with ``searcher.search`` on every question.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import KINDS, load_set, section_id  # noqa: E402
from sections import K, open_index, score_query  # noqa: E402

from llama_index_polaris.engine.search import question  # noqa: E402
from llama_index_polaris.engine.search.rank import Candidate, rank  # noqa: E402
from llama_index_polaris.engine.search.terms import query_words  # noqa: E402

DIR = out_dir() / "fusion_kinds"
# the train sets of #37: eleven English, the call-signature API reference and the front-matter site
FIT_SETS = ("cargo-book", "typer", "pydantic", "uv", "sqlmodel", "poetry", "mkdocs", "rust-book", "vite", "prettier",
            "anthropic_docs", "electron-api", "deno-runtime")


def doc_freqs(store: Any, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
    """Chunks in the index and, for each term, how many hold it (FTS5, for the analysis only)."""
    conn = store.conn
    n = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    out = {}
    for t in terms:
        q = '"' + t.replace('"', '""') + '"'
        out[t] = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (q,)).fetchone()[0]
    return n, out


def collect_set(name: str) -> dict[str, Any]:
    ds = load_set(name)
    index, _ = open_index(ds, build=False)
    rows = []
    with index:
        searcher = index.searcher()
        store = searcher.store
        depth = searcher.config.candidate_pool
        with store.read():
            scope = store.resolve_scope()
        for qid in sorted(ds.all_qrels):
            text = ds.queries[qid]["text"]
            split = "train" if qid in ds.split("train") else ("test" if qid in ds.split("test") else "all")
            qvec = searcher._check_vector(searcher._embed(text))
            p = searcher.params(text, K, "hybrid", searcher.config.unit, searcher.config.mmr_lambda, None)
            with store.read():
                vec = searcher._knn(qvec, depth, scope, fetch_k=min(depth, 30))
                bm = searcher._bm25(text, depth, scope)
                cands = searcher._candidates([h[0] for h in [*vec, *bm]], False)
                docs = {c: r.document for c, r in searcher._rows(list(cands)).items()}
                n_chunks, df = doc_freqs(store, query_words(text))
            rows.append({"qid": qid, "text": text, "kind": ds.queries[qid]["kind"], "split": split,
                         "rels": ds.all_qrels[qid], "params": p, "vector": vec, "bm25": bm,
                         "candidates": {c: (k.section, k.heading_path, docs.get(c, "")) for c, k in cands.items()},
                         "n_chunks": n_chunks, "df": df})
    return {"name": name, "rows": rows}


def load(name: str) -> dict[str, Any]:
    return pickle.loads((DIR / f"{name}.pkl").read_bytes())


def ranked_sections(row: dict[str, Any], p: Any) -> list[str]:
    """The top ``K`` sections ``rank()`` gives for a cached question under params ``p``."""
    cands = {c: Candidate(sec, h) for c, (sec, h, _) in row["candidates"].items()}
    return [section_id(row["candidates"][r.chunk_id][2], row["candidates"][r.chunk_id][1])
            for r in rank(row["vector"], row["bm25"], cands, p)]


# -- scoring a rule from the cache -------------------------------------------------------------------
def sets(names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The cached rows of each set that has been collected."""
    return {n: load(n)["rows"] for n in names if (DIR / f"{n}.pkl").exists()}


def in_split(row: dict[str, Any], split: str) -> bool:
    """anthropic_docs has one split (``all``): it counts as train, as in fusion_fit.py it was a guard."""
    return row["split"] == split or (row["split"] == "all" and split == "train")


def params(row: dict[str, Any], system: str, rule: Any = None) -> Any:
    """The RankParams of ``system``: ``default`` (today's fixed fusion), ``vector``, ``bm25``, or
    ``rule`` (a ``question.Rule``: fusion by kind of question)."""
    p = replace(row["params"], query=row["text"], fusion_rule=None)
    if system in ("vector", "bm25"):
        return replace(p, mode=system)
    return replace(p, fusion_rule=rule) if system == "rule" else p


def measure(row: dict[str, Any], p: Any) -> tuple[float, float]:
    """nDCG@10 and hit@1 (the first section is relevant) of one cached question under ``p``."""
    shown = ranked_sections(row, p)
    return score_query(shown, row["rels"])["ndcg@10"], float(bool(shown) and row["rels"].get(shown[0], 0) > 0)


def scored(data: Mapping[str, list[dict[str, Any]]], split: str, system: str, rule: Any = None,
           kinds: Sequence[str] = KINDS) -> dict[str, dict[str, np.ndarray]]:
    """Per set: qid order, labelled kind, nDCG@10 and hit@1 of every question of ``split``."""
    out = {}
    for name, rows in data.items():
        rs = [r for r in rows if in_split(r, split) and r["kind"] in kinds]
        m = np.array([measure(r, params(r, system, rule)) for r in rs]).reshape(-1, 2)
        out[name] = {"kind": np.array([r["kind"] for r in rs]), "ndcg": m[:, 0], "hit1": m[:, 1]}
    return out


# -- the fit: every candidate rule's score on every train question, once ---------------------------
VECTOR = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
BOOST = (0.1, 0.2, 0.3)
WORD_SLOPES = ((99, 0.0), (6, 0.02), (6, 0.04), (9, 0.03), (9, 0.06))  # (long_words, per_word)
AGREE = (-0.2, 0.0, 0.2)
OFFSET = (-0.1, 0.0)


def grid(kind: str) -> list[dict[str, Any]]:
    """The settings tried for one kind of question (the other kinds' numbers do not touch it)."""
    out = []
    for v in VECTOR:
        for b in BOOST:
            for off in OFFSET:
                if kind != "words":
                    out.append({"vector": v, "boost": b, "score_offset": off})
                    continue
                for lw, pw in WORD_SLOPES:
                    for ag in AGREE:
                        out.append({"vector": v, "boost": b, "score_offset": off, "long_words": lw, "per_word": pw,
                                    "agree": ag})
    return out


def rule_of(setting: Mapping[str, Any], kind: str, base: question.Rule = question.Rule()) -> question.Rule:
    """``base`` with one kind's numbers set (the word and agreement slopes apply to ``words`` only)."""
    extra = {k: setting[k] for k in ("long_words", "per_word", "agree") if k in setting}
    return replace(base, vector={**base.vector, kind: setting["vector"]}, boost={**base.boost, kind: setting["boost"]},
                   score_offset=setting["score_offset"], **extra)


def matrix(data: Mapping[str, list[dict[str, Any]]], kind: str, split: str = "train") -> dict[str, Any]:
    """nDCG@10 and hit@1 of every question of ``kind`` (as ``question.read`` reads it) under every
    setting of ``grid(kind)``: (settings x questions) arrays, with each question's set and labelled kind."""
    rows = [(n, r) for n, rs in data.items() for r in rs if in_split(r, split) and question.read(r["text"]).kind == kind]
    settings = grid(kind)
    nd, h1 = np.zeros((len(settings), len(rows))), np.zeros((len(settings), len(rows)))
    for i, st in enumerate(settings):
        rule = rule_of(st, kind)
        for j, (_, r) in enumerate(rows):
            nd[i, j], h1[i, j] = measure(r, params(r, "rule", rule))
    return {"settings": settings, "ndcg": nd, "hit1": h1, "sets": np.array([n for n, _ in rows]),
            "labels": np.array([r["kind"] for _, r in rows]), "qids": [r["qid"] for _, r in rows]}


def check(name: str) -> None:
    ds = load_set(name)
    data = load(name)
    index, _ = open_index(ds, build=False)
    with index:
        searcher = index.searcher()
        same = 0
        for row in data["rows"]:
            hits = searcher.search(row["text"], top_k=K)
            engine = [section_id(h.document, h.heading_path) for h in hits]
            same += engine == ranked_sections(row, row["params"])
    print(f"{name}: {same}/{len(data['rows'])} questions rank the same from the cache", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("names", nargs="*", default=list(FIT_SETS))
    k = sub.add_parser("check")
    k.add_argument("names", nargs="*", default=list(FIT_SETS))
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        DIR.mkdir(parents=True, exist_ok=True)
        for name in args.names:
            data = collect_set(name)
            (DIR / f"{name}.pkl").write_bytes(pickle.dumps(data))
            print(name, len(data["rows"]), flush=True)
    elif args.cmd == "check":
        for name in args.names:
            check(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
