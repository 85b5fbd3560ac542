"""Fusion that knows what kind of question it was given (issue #37): the lists cached once, the rule fitted from them.

    python benchmarks/fusion_kinds.py collect [NAME ...]       # each question's two lists, once per set
    python benchmarks/fusion_kinds.py check [NAME ...]         # the cache ranks as the engine does
    python benchmarks/fusion_kinds.py fit [NAME ...] [--tol 0.003] [--hit-weight 0]
    python benchmarks/fusion_kinds.py report [NAME ...] [--split train|test]

``collect`` asks every question of every set (both splits) once and keeps what ``rank()``
ranks: the first pool's vector and BM25 lists (chunk ids and values, as the Searcher
fetches them, the lookup's lift included), each candidate's section and heading path,
the query's ``RankParams`` and its content words' document frequencies, in
``benchmarks/out/fusion_kinds/<set>.pkl``. Everything after reads the cache and calls the
engine's pure ``rank()`` (``search/rank.py``) with the rule's parameters, so a fit never
re-runs the model or the database and what is scored is what the engine ranks.
``check`` compares the cached ranking (under ``question.RULE``) with ``searcher.search`` (the
engine's default) on every question. ``fit`` chooses each kind's numbers on the train splits
(staged grid, each set weighing the same, a change kept only when it gains more than ``TOL``)
and scores them leave-one-set-out; ``report`` prints the per-set, per-kind table of
docs/search.md (fixed fusion, each list alone, the rule; nDCG@10 and hit@1 with 95%
paired bootstrap intervals).
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
    cands = row.get("_cands")
    if cands is None:
        cands = row["_cands"] = {c: Candidate(sec, h) for c, (sec, h, _) in row["candidates"].items()}
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
WORD_SLOPES = ((6, 0.0), (6, 0.025), (6, 0.05), (6, 0.075), (8, 0.025), (8, 0.05))  # (pivot, per_word)
AGREE = (-0.2, 0.0, 0.2)
OFFSET = (-0.1, 0.0)
TOL = 0.003  # a setting must beat a smaller change by this much nDCG@10 (set-balanced mean) to be chosen
NEUTRAL = {"vector": 0.5, "boost": 0.2, "score_offset": -0.1}
NEUTRAL_WORDS = {**NEUTRAL, "pivot": 6, "per_word": 0.0, "agree": 0.0}


def neutral(kind: str) -> dict[str, Any]:
    return dict(NEUTRAL_WORDS if kind == "words" else NEUTRAL)


def stage_one(kind: str) -> list[dict[str, Any]]:
    """The list weight and the heading boost of one kind, the rest as today (the neutral first)."""
    out = [{**neutral(kind), "vector": v, "boost": b} for v in VECTOR for b in BOOST]
    return sorted(out, key=lambda st: abs(st["vector"] - 0.5) + abs(st["boost"] - 0.2))


def stage_two(kind: str, best: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Around the first stage's best: score fusion's offset and, for questions in words, the slopes
    by content words and by the heads' agreement."""
    out = [{**best, "score_offset": off} for off in OFFSET if off != best["score_offset"]]
    if kind == "words":
        out += [{**best, "pivot": pv, "per_word": pw, "agree": ag} for pv, pw in WORD_SLOPES for ag in AGREE
                if (pv, pw, ag) != (best["pivot"], best["per_word"], best["agree"])]
    return out


def rule_of(setting: Mapping[str, Any], kind: str, base: question.Rule = question.Rule()) -> question.Rule:
    """``base`` with one kind's numbers set (the word and agreement slopes apply to ``words`` only)."""
    extra = {k: setting[k] for k in ("pivot", "per_word", "agree") if k in setting}
    return replace(base, vector={**base.vector, kind: setting["vector"]}, boost={**base.boost, kind: setting["boost"]},
                   score_offset=setting["score_offset"], **extra)


def kind_rows(data: Mapping[str, list[dict[str, Any]]], kind: str, split: str) -> list[tuple[str, dict[str, Any]]]:
    return [(n, r) for n, rs in data.items() for r in rs if in_split(r, split) and question.read(r["text"]).kind == kind]


def matrix(rows: list[tuple[str, dict[str, Any]]], kind: str, settings: list[dict[str, Any]]) -> dict[str, Any]:
    """nDCG@10 and hit@1 of every question (of ``kind`` as ``question.read`` reads it) under every
    setting: (settings x questions) arrays, with each question's set and labelled kind."""
    nd, h1 = np.zeros((len(settings), len(rows))), np.zeros((len(settings), len(rows)))
    for i, st in enumerate(settings):
        rule, key = rule_of(st, kind), (kind, tuple(sorted(st.items())))
        for j, (name, r) in enumerate(rows):
            got = MEMO.get((name, r["qid"], key))
            if got is None:
                got = MEMO[(name, r["qid"], key)] = measure(r, params(r, "rule", rule))
            nd[i, j], h1[i, j] = got
    return {"settings": list(settings), "ndcg": nd, "hit1": h1, "sets": np.array([n for n, _ in rows]),
            "labels": np.array([r["kind"] for _, r in rows]), "qids": [r["qid"] for _, r in rows]}


MEMO: dict[tuple, tuple[float, float]] = {}  # (set, qid, kind and setting) -> (nDCG@10, hit@1), kept in DIR/memo.pkl


def joined(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {**a, "settings": a["settings"] + b["settings"], "ndcg": np.vstack([a["ndcg"], b["ndcg"]]),
            "hit1": np.vstack([a["hit1"], b["hit1"]])}


def choose(m: Mapping[str, Any], keep: np.ndarray | None = None, hit_weight: float = 0.0, tol: float = TOL) -> int:
    """The setting with the best mean nDCG@10 (+ ``hit_weight`` x hit@1) over the questions ``keep``
    selects, each set weighing the same; among those within ``tol`` of the best, the one listed
    first (the grid lists the smaller changes from today's fusion first), so noise does not
    move a number."""
    keep = np.ones(m["ndcg"].shape[1], bool) if keep is None else keep
    value = np.zeros(len(m["settings"]))
    names = sorted(set(m["sets"][keep]))
    for name in names:
        sel = keep & (m["sets"] == name)
        value += (m["ndcg"][:, sel].mean(axis=1) + hit_weight * m["hit1"][:, sel].mean(axis=1)) / len(names)
    return int(np.flatnonzero(value >= value.max() - tol)[0])


def fit(data: Mapping[str, list[dict[str, Any]]], hit_weight: float = 0.0, tol: float = TOL) -> dict[str, Any]:
    """Each kind's best setting on all train questions, and leave-one-set-out: each set's questions
    scored by the setting chosen on the other sets (the guard against a fit that suits these sets)."""
    out: dict[str, Any] = {}
    for kind in question.KINDS:
        rows = kind_rows(data, kind, "train")
        if not rows:
            continue
        m = matrix(rows, kind, stage_one(kind))
        m = joined(m, matrix(rows, kind, stage_two(kind, m["settings"][choose(m, hit_weight=hit_weight, tol=tol)])))
        if kind == "words":  # the list weight and boost again, with the slopes found
            slopes = {k: v for k, v in m["settings"][choose(m, hit_weight=hit_weight, tol=tol)].items() if k not in ("vector", "boost")}
            again = [{**st, **slopes} for st in stage_one(kind)]
            m = joined(m, matrix(rows, kind, [st for st in again if st not in m["settings"]]))
        best = choose(m, hit_weight=hit_weight, tol=tol)
        base = m["settings"].index(neutral(kind))
        loso_nd, loso_h1 = np.zeros(m["ndcg"].shape[1]), np.zeros(m["ndcg"].shape[1])
        for name in sorted(set(m["sets"])):
            held = m["sets"] == name
            i = choose(m, ~held, hit_weight, tol) if (~held).any() else base
            loso_nd[held], loso_h1[held] = m["ndcg"][i, held], m["hit1"][i, held]
        out[kind] = {"setting": m["settings"][best], "matrix": m, "best": best, "neutral": base,
                     "loso_ndcg": loso_nd, "loso_hit1": loso_h1}
    return out


def interval(d: np.ndarray, rounds: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and 95% paired bootstrap interval (questions resampled), as sections.py ``paired``."""
    if len(d) == 0:
        return 0.0, 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(d.mean()), float(lo), float(hi)


def fit_report(data: Mapping[str, list[dict[str, Any]]], hit_weight: float = 0.0, tol: float = TOL) -> str:
    res = fit(data, hit_weight, tol)
    lines = ["| kind (as read) | questions | setting | fixed nDCG@10 | fitted | leave-one-set-out | LOSO gain (95%) |"
             " fixed hit@1 | LOSO hit@1 |", "|---|---|---|---|---|---|---|---|---|"]
    for kind, r in res.items():
        m, b, n = r["matrix"], r["best"], r["neutral"]
        g = interval(r["loso_ndcg"] - m["ndcg"][n])
        lines.append(f"| {kind} | {m['ndcg'].shape[1]} | {r['setting']} | {m['ndcg'][n].mean():.4f} |"
                     f" {m['ndcg'][b].mean():.4f} | {r['loso_ndcg'].mean():.4f} | {g[0]:+.4f} ({g[1]:+.4f} .. {g[2]:+.4f}) |"
                     f" {m['hit1'][n].mean():.3f} | {r['loso_hit1'].mean():.3f} |")
    return "\n".join(lines)


SYSTEMS = ("default", "vector", "bm25", "rule")
LABEL = {"default": "fixed fusion (before)", "vector": "vector only", "bm25": "BM25 only", "rule": "by question (after)"}


def report(data: Mapping[str, list[dict[str, Any]]], split: str, rule: question.Rule = question.RULE) -> str:
    """Per set and labelled kind: nDCG@10 and hit@1 of the four systems, the gain of the rule over
    the fixed fusion with its interval, and whether hybrid is at or above the better single list."""
    res = {sy: scored(data, split, sy, rule) for sy in SYSTEMS}
    head = ("| set | kind | n | nDCG@10 fixed | vector | BM25 | **by question** | gain (95%) | hit@1 fixed |"
            " **by question** | >= better list |")
    lines = [head, "|---" * (head.count(" | ") + 1) + "|"]
    pooled: dict[str, dict[str, list[np.ndarray]]] = {}
    for name in data:
        for kind in ("all", *KINDS):
            sel = np.ones(len(res["default"][name]["kind"]), bool) if kind == "all" else res["default"][name]["kind"] == kind
            if not sel.any():
                continue
            nd = {sy: res[sy][name]["ndcg"][sel] for sy in SYSTEMS}
            h1 = {sy: res[sy][name]["hit1"][sel] for sy in SYSTEMS}
            for sy in SYSTEMS:
                pooled.setdefault(kind, {}).setdefault(sy, []).append(nd[sy])
                pooled.setdefault(kind, {}).setdefault(sy + "_hit1", []).append(h1[sy])
            lines.append(_report_row(name, kind, nd, h1))
    for kind, got in pooled.items():
        lines.append(_report_row("**pooled**", kind, {sy: np.concatenate(got[sy]) for sy in SYSTEMS},
                                 {sy: np.concatenate(got[sy + "_hit1"]) for sy in SYSTEMS}, hit_interval=True))
    return "\n".join(lines)


def _report_row(name: str, kind: str, nd: Mapping[str, np.ndarray], h1: Mapping[str, np.ndarray],
                hit_interval: bool = False) -> str:
    g = interval(nd["rule"] - nd["default"])
    better = max(nd["vector"].mean(), nd["bm25"].mean())
    ok = "yes" if nd["rule"].mean() >= better - 1e-9 else f"no ({nd['rule'].mean() - better:+.3f})"
    hits = f"{h1['rule'].mean():.3f}"
    if hit_interval:
        hg = interval(h1["rule"] - h1["default"])
        hits += f" ({hg[0]:+.3f}: {hg[1]:+.3f} .. {hg[2]:+.3f})"
    return (f"| {name} | {kind} | {len(nd['rule'])} | {nd['default'].mean():.3f} | {nd['vector'].mean():.3f} |"
            f" {nd['bm25'].mean():.3f} | **{nd['rule'].mean():.3f}** | {g[0]:+.3f} ({g[1]:+.3f} .. {g[2]:+.3f}) |"
            f" {h1['default'].mean():.3f} | {hits} | {ok} |")


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
            rule = question.RULE if searcher.config.fusion_by_question else None
            same += engine == ranked_sections(row, params(row, "rule" if rule else "default", rule))
    print(f"{name}: {same}/{len(data['rows'])} questions rank the same from the cache", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("names", nargs="*", default=list(FIT_SETS))
    f = sub.add_parser("fit")
    f.add_argument("names", nargs="*", default=list(FIT_SETS))
    f.add_argument("--hit-weight", type=float, default=0.0)
    f.add_argument("--tol", type=float, default=TOL)
    r = sub.add_parser("report")
    r.add_argument("names", nargs="*", default=list(FIT_SETS))
    r.add_argument("--split", default="train", choices=("train", "test"))
    k = sub.add_parser("check")
    k.add_argument("names", nargs="*", default=list(FIT_SETS))
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        DIR.mkdir(parents=True, exist_ok=True)
        for name in args.names:
            data = collect_set(name)
            (DIR / f"{name}.pkl").write_bytes(pickle.dumps(data))
            print(name, len(data["rows"]), flush=True)
    elif args.cmd == "fit":
        memo = DIR / "memo.pkl"  # the cache's scores under each setting: valid while the cache and rank() are
        MEMO.update(pickle.loads(memo.read_bytes()) if memo.exists() else {})
        print(fit_report(sets(args.names), args.hit_weight, args.tol))
        memo.write_bytes(pickle.dumps(MEMO))
    elif args.cmd == "report":
        print(report(sets(args.names), args.split))
    elif args.cmd == "check":
        for name in args.names:
            check(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
