"""Fit and check the match strength and the "no good match" flag (#37 item 3, ``search/strength.py``).

    python benchmarks/match_strength.py collect [NAME ...] --split train|test   # hits -> out/strength-SPLIT.json
    python benchmarks/match_strength.py fit                                      # train rows -> MODELS, GOOD_MATCH
    python benchmarks/match_strength.py score [NAME ...] --split test            # the engine's flag on a split
    python benchmarks/match_strength.py score [NAME ...] --split train --near-miss   # and made-up identifiers

``collect`` runs every labelled question of the split (``qrels/SPLIT.tsv``) and every
unanswerable one of the split (``unanswerable.jsonl``) through the cached index of each set
(hybrid, sections, top 10, the defaults) and keeps, for each hit, the figures the engine
reads (``cosine``, ``term_share``) and whether its section is labelled relevant (never, for
an unanswerable question). ``fit`` fits one logistic model per set of figures present
(both, cosine only, terms only) on the train rows, then the threshold: the strength under
which a result's strongest hit says "no good match", chosen for the best F1 of that flag with
the unanswerable questions as its positives. ``score`` reads the flag the engine sets
(``Hits.no_good_match``) and reports its precision and recall on the unanswerable
questions, per set and pooled.

``--near-miss`` adds, for each answerable question of the split that names an identifier
(``literal.identifiers``), the same question with every identifier made up (``made_up``: each
digit moved by 5, else ``zq`` put before its last character: ``LUM-4011`` -> ``LUM-9566``,
``--locked`` -> ``--lockezqd``), counted as unanswerable: the docs name the real one, not this.
The rule was fixed before any run of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import load_set  # noqa: E402
from sections import hit_section, open_index  # noqa: E402

SETS = ("vue-ja", "react-zh", "electron-api", "deno-runtime", "vite", "prettier", "rust-book")
FIGURES = {(True, True): (0, 1), (True, False): (0,), (False, True): (1,)}
L2 = 1e-3


def made_up(identifier: str) -> str:
    """A near miss of ``identifier`` that no document names: each digit moved by 5, else ``zq``
    put before its last character."""
    if any(c.isdigit() for c in identifier):
        return "".join(str((int(c) + 5) % 10) if c.isdigit() else c for c in identifier)
    return identifier[:-1] + "zq" + identifier[-1]


def near_misses(questions: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    """Each answerable question naming an identifier, with every identifier made up (unanswerable)."""
    from llama_index_polaris.engine.search.literal import identifiers

    out = []
    for qid, text, relevant in questions:
        names = identifiers(text) if relevant else []
        if names:
            for name in names:
                text = text.replace(name, made_up(name))
            out.append((f"{qid}-near-miss", text, {}))
    return out


def collect(names: list[str], split: str, near_miss: bool = False) -> list[dict]:
    rows = []
    for name in names:
        ds = load_set(name)
        index, _ = open_index(ds, build=False)
        questions = [(qid, ds.queries[qid]["text"], rel) for qid, rel in ds.qrels.get(split, {}).items()]
        questions += [(qid, text, {}) for qid, text in ds.unanswerable.get(split, {}).items()]
        if near_miss:
            questions += near_misses(questions)
        for qid, text, relevant in questions:
            hits = index.search(text, top_k=10, mode="hybrid", unit="section")
            rows.append({"set": name, "qid": qid, "answerable": bool(relevant), "no_good_match": hits.no_good_match,
                         "near_miss": qid.endswith("-near-miss"),
                         "hits": [{"cosine": h.cosine, "term_share": h.term_share, "strength": h.strength,
                                   "relevant": relevant.get(hit_section(h), 0) > 0} for h in hits]})
        index.close()
        print(f"{name}: {len(questions)} questions", file=sys.stderr)
    return rows


def logistic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Intercept and weights of an L2-regularised logistic regression (Newton's method)."""
    X = np.hstack([np.ones((len(x), 1)), x])
    w = np.zeros(X.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-X @ w))
        grad = X.T @ (p - y) + L2 * np.r_[0.0, w[1:]]
        hess = (X * (p * (1 - p))[:, None]).T @ X + L2 * np.diag(np.r_[0.0, np.ones(len(w) - 1)])
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def fit(rows: list[dict]) -> dict:
    hits = [h for r in rows for h in r["hits"]]
    y = np.array([h["relevant"] for h in hits], dtype=np.float64)
    figures = np.array([[h["cosine"] if h["cosine"] is not None else np.nan,
                         h["term_share"] if h["term_share"] is not None else np.nan] for h in hits])
    models = {}
    for key, cols in FIGURES.items():
        keep = ~np.isnan(figures[:, list(cols)]).any(axis=1)
        w = logistic(figures[keep][:, list(cols)], y[keep])
        full = [float(w[0]), 0.0, 0.0]
        for c, weight in zip(cols, w[1:]):
            full[1 + c] = float(weight)
        models[key] = tuple(round(v, 3) for v in full)
    top = []  # each question's best strength (the engine flags a result none of whose hits is good)
    for r in rows:
        best = max((_strength(models, h) for h in r["hits"]), default=0.0)
        top.append((best, not r["answerable"]))
    best = max(((f1(top, t), t) for t in np.arange(0.02, 0.98, 0.01)), key=lambda p: p[0])
    return {"models": {str(k): v for k, v in models.items()}, "good_match": round(float(best[1]), 2),
            "train_flag": flag_numbers([(s < best[1], u) for s, u in top])}


def _strength(models: dict, hit: dict) -> float:
    key = (hit["cosine"] is not None, hit["term_share"] is not None)
    if key not in models:
        return 0.0
    b0, bc, bs = models[key]
    z = b0 + bc * (hit["cosine"] or 0.0) + bs * (hit["term_share"] or 0.0)
    return float(1.0 / (1.0 + np.exp(-z)))


def f1(top: list[tuple[float, bool]], t: float) -> float:
    n = flag_numbers([(s < t, u) for s, u in top])
    return 0.0 if not n["precision"] or not n["recall"] else 2 * n["precision"] * n["recall"] / (n["precision"] + n["recall"])


def flag_numbers(pairs: list[tuple[bool, bool]]) -> dict:
    """Precision and recall of a flag (flagged, unanswerable) over questions."""
    pairs = [(bool(f), bool(u)) for f, u in pairs]
    tp = sum(f and u for f, u in pairs)
    flagged, positives = sum(f for f, _ in pairs), sum(u for _, u in pairs)
    return {"precision": round(tp / flagged, 3) if flagged else 0.0, "recall": round(tp / positives, 3) if positives else 0.0,
            "flagged": flagged, "unanswerable": positives, "questions": len(pairs),
            "answerable_flagged": flagged - tp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("collect", "fit", "score"))
    parser.add_argument("names", nargs="*", default=list(SETS))
    parser.add_argument("--split", default="train")
    parser.add_argument("--near-miss", action="store_true", help="also each identifier question with its identifiers made up")
    args = parser.parse_args()
    path = out_dir() / f"strength-{args.split}.json"
    if args.command == "collect":
        path.write_text(json.dumps(collect(args.names, args.split)))
        print(path)
    elif args.command == "fit":
        print(json.dumps(fit(json.loads((out_dir() / "strength-train.json").read_text())), indent=1))
    else:
        rows = collect(args.names, args.split, args.near_miss)
        path.write_text(json.dumps(rows))
        plain = [r for r in rows if not r.get("near_miss")]
        table = {n: flag_numbers([(r["no_good_match"], not r["answerable"]) for r in plain if r["set"] == n])
                 for n in args.names}
        table["pooled"] = flag_numbers([(r["no_good_match"], not r["answerable"]) for r in plain])
        if args.near_miss:  # the made-up identifiers flagged, and the real questions they came from
            missed = [r for r in rows if r.get("near_miss")]
            table["near_miss"] = {"questions": len(missed), "flagged": sum(r["no_good_match"] for r in missed),
                                  "their_real_questions_flagged": sum(r["no_good_match"] for r in plain
                                                                      if r["qid"] + "-near-miss" in
                                                                      {m["qid"] for m in missed})}
        print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
