"""Fitting the learned fusion on the train splits and scoring it on test (issue #27).

    python benchmarks/fusion_fit.py collect [NAME ...] [--scifact DIR]
    python benchmarks/fusion_fit.py fit [--ridge 0.1] [--sweep 1,0.1,0.01] [--no-scifact] [--focus]
                                        [--features fixed,lookup_bm25,...]
    python benchmarks/fusion_fit.py verify WEIGHTS.toml [NAME ...] [--scifact DIR]

``collect`` asks every question of every doc set (both splits) and of SciFact (train and
test) once with the fixed fusion and keeps each first-pool section's features and grade
(the engine's own ``tune_labels.samples``, what `polaris tune` runs), in
``benchmarks/out/fusion/samples-<set>.pkl``. ``fit`` reads them: leave-one-set-out on the
train splits (each set scored by a model fitted on the others), 5-fold cross-validation
over the pooled train questions (what `polaris tune` does), then one model fitted on every
train question scored on each test split, with paired bootstrap intervals over questions.
``verify`` ranks the test questions through the engine with the weights written by ``fit``
(``benchmarks/out/fusion/weights.toml``) and scores the top 10 it returns, so the table
is the engine's, not a re-ordering's. anthropic_docs (one split, 100 questions) is never
fitted on: it is scored with the test splits, as elsewhere in docs/search.md.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import ALL_SETS, load_set, section_id  # noqa: E402
from sections import config, open_index  # noqa: E402

from llama_index_polaris.engine.tune import evaluate, fit as tune  # noqa: E402
from llama_index_polaris.engine.search import learned  # noqa: E402
from llama_index_polaris.engine.tune.labels import Label, Question, beir_questions, samples  # noqa: E402

DIR = out_dir() / "fusion"


def docset_questions(name: str) -> dict[str, list[Question]]:
    ds = load_set(name)
    out: dict[str, list[Question]] = {}
    for split in ("train", "test"):
        qrels = ds.split(split) or ({} if split == "test" else ds.all_qrels)  # anthropic_docs: one split, "all"
        key = split if ds.split(split) else "all"
        for qid in sorted(qrels):
            labels = tuple(Label(*sid.split("#", 1), grade=g) for sid, g in qrels[qid].items() if g > 0)
            out.setdefault(key, []).append(Question(ds.queries[qid]["text"], labels))
    return out


def collect(names: Sequence[str], scifact: str | None) -> None:
    DIR.mkdir(parents=True, exist_ok=True)
    for name in names:
        index, _ = open_index(load_set(name))
        with index:
            got = {split: samples(index, qs) for split, qs in docset_questions(name).items()}
        (DIR / f"samples-{name}.pkl").write_bytes(pickle.dumps(got))
        print(name, {k: len(v) for k, v in got.items()}, flush=True)
    if scifact:
        got = {}
        for split in ("train", "test"):
            beir = evaluate.load_beir(scifact, split=split)
            index, _ = evaluate.build_eval_index(beir, config())
            with index:
                got[split] = samples(index, beir_questions(beir))
        (DIR / "samples-scifact.pkl").write_bytes(pickle.dumps(got))
        print("scifact", {k: len(v) for k, v in got.items()}, flush=True)


def load(features: Sequence[str] | None = None) -> dict[str, dict[str, list[tune.Sample]]]:
    """The collected samples; with ``features``, every other feature reads 0 (so it is not fitted)."""
    data = {p.stem.removeprefix("samples-"): pickle.loads(p.read_bytes()) for p in sorted(DIR.glob("samples-*.pkl"))}
    if features:
        from dataclasses import replace

        unknown = set(features) - set(learned.NAMES)
        if unknown:
            raise SystemExit(f"unknown features {sorted(unknown)}; features: {', '.join(learned.NAMES)}")
        mask = np.array([n in features for n in learned.NAMES], dtype=float)
        data = {s: {k: [replace(x, x=x.x * mask) for x in v] for k, v in d.items()} for s, d in data.items()}
    return data


def scores(ss: list[tune.Sample], w: np.ndarray) -> np.ndarray:
    return np.array([tune.ranked_ndcg(s, w) for s in ss])


def hit1(ss: list[tune.Sample], w: np.ndarray) -> float:
    return float(np.mean([tune.first_relevant(s, w) for s in ss]))


def row(label: str, before: np.ndarray, after: np.ndarray) -> str:
    gain, lo, hi = tune.paired_interval(after - before)
    return f"| {label} | {len(before)} | {before.mean():.4f} | {after.mean():.4f} | {gain:+.4f} ({lo:+.4f} .. {hi:+.4f}) |"


HEAD = "| set | questions | fixed fusion | learned | gain (95% interval) |\n|---|---|---|---|---|"


def fit_report(ridge: float, use_scifact: bool, quiet: bool = False, focus: bool = tune.FOCUS,
               features: Sequence[str] | None = None) -> tuple[np.ndarray, float]:
    data = load(features)
    identity = learned.weight_vector(learned.IDENTITY)
    # anthropic_docs has one split (a guard, as everywhere in docs/search.md): never fitted on, scored with the test sets
    train = {s: d["train"] for s, d in data.items() if "train" in d and (use_scifact or s != "scifact")}
    # leave one set out
    lines, pooled_b, pooled_a = [], [], []
    for held in train:
        w = tune.fit([x for s, ss in train.items() if s != held for x in ss], ridge, focus=focus)
        b, a = scores(train[held], identity), scores(train[held], w)
        lines.append(row(f"{held} (train)", b, a))
        if held != "scifact":
            pooled_b.append(b)
            pooled_a.append(a)
    lines.append(row("**doc sets pooled, leave-one-set-out**", np.concatenate(pooled_b), np.concatenate(pooled_a)))
    pooled = [x for s, ss in train.items() for x in ss]
    cv = tune.cross_validate(pooled, ridge=ridge) if not quiet else None
    loso = float(np.concatenate(pooled_a).mean() - np.concatenate(pooled_b).mean())
    if quiet:
        gain, lo, hi = tune.paired_interval(np.concatenate(pooled_a) - np.concatenate(pooled_b))
        print(f"ridge {ridge}{' focus' if focus else ''}: doc sets leave-one-set-out gain {gain:+.4f}"
              f" ({lo:+.4f} .. {hi:+.4f})", flush=True)
        return identity, loso
    lines.append(row("all train pooled, 5-fold CV (as polaris tune)", cv["before"], cv["after"]))
    print(f"## ridge {ridge}, train: leave-one-set-out and 5-fold\n\n{HEAD}\n" + "\n".join(lines))
    w = tune.fit(pooled, ridge, focus=focus)
    print("\n## weights fitted on every train question\n")
    print("| feature | weight |\n|---|---|")
    for n, v in zip(learned.NAMES, w):
        print(f"| {n} | {v:+.4f} |")
    print(f"\n## test (fitted on train, scored once)\n\n{HEAD}")
    tb, ta = [], []
    for s, d in data.items():
        if "test" not in d:
            continue
        b, a = scores(d["test"], identity), scores(d["test"], w)
        print(row(f"{s} (test; hit@1 {hit1(d['test'], identity):.3f} / {hit1(d['test'], w):.3f})", b, a))
        if s != "scifact":
            tb.append(b)
            ta.append(a)
    if tb:
        print(row("**doc sets pooled, test**", np.concatenate(tb), np.concatenate(ta)))
    (DIR / "weights.toml").write_text(tune.weights_table({n: round(float(v), 6) for n, v in zip(learned.NAMES, w)}))
    print(f"\nweights: {DIR / 'weights.toml'}")
    return w, loso


def verify(weights_file: str, names: Sequence[str], scifact: str | None) -> None:
    from llama_index_polaris.engine.config import read_toml

    weights = read_toml(Path(weights_file))["fusion_weights"]
    print(f"{HEAD}")
    for name in names:
        ds = load_set(name)
        index, _ = open_index(ds)
        with index:
            qrels = ds.split("test") or ds.all_qrels
            res = []
            for cfg in (index.config, index.config.replace(fusion_weights=weights)):
                index.config = cfg
                searcher = index.searcher()
                res.append(np.array([evaluate.ndcg_at_k(
                    [section_id(h.document, h.heading_path) for h in searcher.search(ds.queries[q]["text"], top_k=10)],
                    qrels[q], 10) for q in sorted(qrels)]))
        print(row(f"{name} (engine)", *res), flush=True)
    if scifact:
        beir = evaluate.load_beir(scifact, split="test")
        index, _ = evaluate.build_eval_index(beir, config())
        with index:
            res = []
            for cfg in (index.config, index.config.replace(fusion_weights=weights)):
                index.config = cfg
                res.append(np.array(list(_beir_ndcg(index, beir).values())))
        print(row("scifact (engine, test)", *res))


def _beir_ndcg(index: Any, beir: Any) -> dict[str, float]:
    searcher = index.searcher()
    searcher.max_top_k = 300
    out = {}
    for qid, rels in sorted(beir.qrels.items()):
        if qid in beir.queries:
            hits = searcher.search(beir.queries[qid], top_k=30)
            out[qid] = evaluate.ndcg_at_k(evaluate.documents_in_order(h.document_id for h in hits), rels, 10)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("names", nargs="*", default=list(ALL_SETS))
    c.add_argument("--scifact")
    f = sub.add_parser("fit")
    f.add_argument("--ridge", type=float, default=tune.RIDGE)
    f.add_argument("--sweep", default=None, help="comma-separated ridges: leave-one-set-out pooled gain of each")
    f.add_argument("--no-scifact", action="store_true")
    f.add_argument("--focus", action="store_true", help="pairs weighted by their nDCG discount (LambdaRank's |delta|)")
    f.add_argument("--features", help="comma-separated features to fit (the rest read 0)")
    v = sub.add_parser("verify")
    v.add_argument("weights")
    v.add_argument("names", nargs="*", default=list(ALL_SETS))
    v.add_argument("--scifact")
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        collect(args.names, args.scifact)
    elif args.cmd == "fit":
        features = args.features.split(",") if args.features else None
        for r in ([float(x) for x in args.sweep.split(",")] if args.sweep else [args.ridge]):
            fit_report(r, not args.no_scifact, quiet=bool(args.sweep), focus=args.focus, features=features)
    else:
        verify(args.weights, args.names, args.scifact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
