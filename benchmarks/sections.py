"""Section-level retrieval quality on the documentation sets of ``benchmarks/docsets.py``.

    python benchmarks/sections.py index [NAME ...]          # build/refresh the cached indexes only
    python benchmarks/sections.py score [NAME ...] [--split all|train|test] [--peer RUN.jsonl ...]

A hit's section is (hit.document, hit.heading_path): the file's path relative to the set's
docs folder and the chunk's heading path. Rankings are turned into sections and scored
with the engine's own metric helpers (``llama_index_polaris.engine.tune.evaluate``):

- ``section`` (the engine's default since #13): ``index.search(q, top_k=10, mode=...,
  unit="section")``, ten distinct sections fused as sections.
- ``chunk`` (Polaris before #13): the top 10 chunks of ``index.search(q, top_k=10,
  mode=..., unit="chunk")``; each chunk's slot is its section's. A section met again lower in the ten
  is a *duplicate slot*: it scores nothing (nDCG/recall/MRR count a section once, at its
  first rank) and is reported as the duplicate share (duplicate slots / all slots shown).
- ``dedup`` (chunks, then deduplicate sections): ``index.search(q, top_k=100, mode=...)``
  and the first hit of each section kept, so the ten slots are ten distinct sections.
  (The engine sizes its candidate pools from top_k, so hybrid fuses deeper lists here.)
- a peer's run (``--peer``): a JSONL of ``{"set", "qid", "sections": [[relpath, heading
  path], ...]}`` as written by ``benchmarks/peer_markdown_memory.py``; scored the same way.

Defaults everywhere (no tuning): ``load_config(model_id="all-minilm-l6-v2")`` with no
user or project config file. Indexes are cached under ``benchmarks/out/docsets/`` keyed
by the set's file manifest and the chunker settings.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, machine_line, out_dir, save_json  # noqa: E402
from docsets import ALL_SETS, KINDS, MODEL, DocSet, load_set, section_id  # noqa: E402

from llama_index_polaris.engine.config import load_config  # noqa: E402
from llama_index_polaris.engine.tune.evaluate import mrr_at_k, ndcg_at_k, recall_at_k  # noqa: E402

K = 10
DEEP = 100  # chunks fetched for "chunks, then deduplicate sections"
MODES = ("hybrid", "vector", "bm25")


def config() -> Any:
    return load_config(model_id=MODEL, use_user_config=False, config_file=None, project_root=out_dir())


def manifest_key(docs: Path) -> str:
    """sha256 over (relpath, content) of every Markdown file under ``docs``."""
    h = hashlib.sha256()
    for path in sorted(p for p in docs.rglob("*") if p.is_file()):
        h.update(path.relative_to(docs).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]


def index_path(ds: DocSet) -> Path:
    cfg = config()
    key = hashlib.sha256(json.dumps([manifest_key(ds.docs), MODEL, cfg.max_chunk_tokens, cfg.chunk_overlap_chars,
                                     cfg.min_chunk_chars, cfg.fts_tokenizer]).encode()).hexdigest()[:12]
    path = out_dir() / "docsets" / f"{ds.name}-{MODEL}-{key}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def open_index(ds: DocSet, build: bool = True) -> tuple[Any, dict]:
    """The cached PolarisIndex of a set (indexed incrementally: unchanged files are skipped)."""
    from llama_index_polaris.engine.index import PolarisIndex

    path = index_path(ds)
    index = PolarisIndex(path, config=config())
    info: dict[str, Any] = {"db": str(path)}
    if build:
        t = time.perf_counter()
        report = index.index_paths([ds.docs])
        info.update(seconds=round(time.perf_counter() - t, 1), summary=report.summary())
        if report.failed:
            raise SystemExit(f"{ds.name}: files failed to index: {report.failed}")
    info.update(index.store.counts())
    return index, info


# -- rankings to sections -------------------------------------------------------------------------
def hit_section(hit: Any) -> str:
    return section_id(hit.document, hit.heading_path)


def slots(hits: Iterable[Any], k: int = K) -> list[str]:
    """The section of each of the first ``k`` hits (repeats kept: they are wasted slots)."""
    return [hit_section(h) for h in list(hits)[:k]]


def dedup(sections: Iterable[str], k: int = K) -> list[str]:
    """First occurrence of each section, in order, at most ``k``."""
    return list(dict.fromkeys(sections))[:k]


def duplicate_slots(shown: Sequence[str]) -> int:
    """Slots whose section already appeared above."""
    return len(shown) - len(set(shown))


# -- metrics ----------------------------------------------------------------------------------------
METRICS = ("ndcg@10", "recall@10", "mrr@10", "dup_share")


def score_query(shown: Sequence[str], rels: dict[str, int]) -> dict[str, float]:
    """Metrics of one ranked list of section slots (repeats count once, at their first rank).

    A repeated section is kept in its slot as an unlabelled filler: the section list the
    metrics see is ``shown`` with later repeats replaced by a placeholder, so a duplicate
    costs the place it takes, as it does for a reader.
    """
    seen: set[str] = set()
    ranked = []
    for i, s in enumerate(shown[:K]):
        ranked.append(s if s not in seen else f"\0dup{i}")
        seen.add(s)
    return {
        "ndcg@10": ndcg_at_k(ranked, rels, K),
        "recall@10": recall_at_k(ranked, rels, K),
        "mrr@10": mrr_at_k(ranked, rels, K),
        "dup_share": duplicate_slots(shown[:K]) / max(len(shown[:K]), 1),
        "dup_slots": float(duplicate_slots(shown[:K])),
        "slots": float(len(shown[:K])),
    }


def aggregate(per_query: dict[str, dict[str, float]], qids: Iterable[str]) -> dict[str, float]:
    """Means over ``qids``; the duplicate share is pooled (duplicate slots / all slots)."""
    qids = list(qids)
    if not qids:
        return {}
    out = {m: sum(per_query[q][m] for q in qids) / len(qids) for m in ("ndcg@10", "recall@10", "mrr@10")}
    slots_total = sum(per_query[q]["slots"] for q in qids)
    out["dup_share"] = sum(per_query[q]["dup_slots"] for q in qids) / slots_total if slots_total else 0.0
    out["n"] = len(qids)
    return out


def summarise(ds: DocSet, runs: dict[str, list[str]], split: str) -> dict[str, Any]:
    """Per-split and per-kind metrics of a run (qid -> section slots)."""
    qrels = ds.all_qrels if split == "all" else ds.split(split)
    per_query = {q: score_query(runs.get(q, []), rels) for q, rels in qrels.items()}
    out = {"all": aggregate(per_query, qrels)}
    for kind in KINDS:
        qids = [q for q in qrels if ds.queries[q]["kind"] == kind]
        if qids:
            out[kind] = aggregate(per_query, qids)
    out["per_query"] = per_query
    return out


def questions(ds: DocSet, split: str) -> tuple[str, list[str]]:
    """The split actually scored (``all`` for a set without that split) and its question ids."""
    split = split if ds.split(split) else "all"
    return split, sorted(ds.all_qrels if split == "all" else ds.split(split))


ABLATION_HEADER = "| set | split | variant | nDCG@10 | R@10 | MRR@10 | {extra}paraphrase | identifier | mixed |"


def ablation_row(name: str, split: str, variant: str, m: dict[str, Any], extra: str = "") -> str:
    """One Markdown row of an ablation: the run's metrics, ``extra`` cells, nDCG@10 per kind."""
    a = m["all"]
    kinds = " | ".join(f"{m[k]['ndcg@10']:.3f}" if k in m else "-" for k in KINDS)
    return (f"| {name} | {split} | {variant} | {a['ndcg@10']:.4f} | {a['recall@10']:.4f} | {a['mrr@10']:.4f} |"
            f" {extra}{kinds} |")


def ablation_header(extra: Sequence[str] = ()) -> str:
    """The header and rule of ``ablation_row``'s table, with the ``extra`` columns."""
    head = ABLATION_HEADER.format(extra="".join(f"{e} | " for e in extra))
    return head + "\n" + "|---" * head.count(" | ") + "|---|"


# -- running Polaris ----------------------------------------------------------------------------------
def polaris_runs(ds: DocSet, index: Any) -> dict[str, dict[str, Any]]:
    """For each mode: the section run (the engine's default unit), the chunk run (top 10
    chunks as slots) and the dedup run (100 chunks, first of each section)."""
    searcher = index.searcher()
    searcher.max_top_k = DEEP
    out: dict[str, dict[str, Any]] = {}
    qids = sorted(ds.all_qrels)
    for mode in MODES:
        section_run, chunk_run, dedup_run, ms = {}, {}, {}, []
        for qid in qids:
            text = ds.queries[qid]["text"]
            t = time.perf_counter()
            section_run[qid] = slots(searcher.search(text, top_k=K, mode=mode, unit="section"))
            ms.append(1000 * (time.perf_counter() - t))
            chunk_run[qid] = slots(searcher.search(text, top_k=K, mode=mode, unit="chunk"))
            deep = searcher.search(text, top_k=DEEP, mode=mode, unit="chunk")
            dedup_run[qid] = dedup(hit_section(h) for h in deep)
        out[f"polaris-{mode}-section"] = {"run": section_run, "ms_per_query": sum(ms) / max(len(ms), 1)}
        out[f"polaris-{mode}-chunk"] = {"run": chunk_run}
        out[f"polaris-{mode}-dedup"] = {"run": dedup_run}
    return out


def read_peer(path: Path, name: str) -> dict[str, list[str]]:
    run = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                if row["set"] == name:
                    run[row["qid"]] = [section_id(r, h) for r, h in row["sections"]][:K]
    return run


SYSTEM_LABELS = {
    "polaris-hybrid-section": "**Polaris hybrid, sections (default)**",
    "polaris-vector-section": "Polaris vector, sections",
    "polaris-bm25-section": "Polaris bm25, sections",
    "polaris-hybrid-chunk": "Polaris hybrid, chunks (before #13)",
    "polaris-vector-chunk": "Polaris vector, chunks",
    "polaris-bm25-chunk": "Polaris bm25, chunks",
    "polaris-hybrid-dedup": "Polaris hybrid, chunks then dedup sections",
    "polaris-vector-dedup": "Polaris vector, chunks then dedup sections",
    "polaris-bm25-dedup": "Polaris bm25, chunks then dedup sections",
    "markdown-memory": "markdown-memory 0.7.13 (same MiniLM)",
}


def render(results: dict[str, Any]) -> str:
    """Markdown tables: one per set, every system, all questions and per kind."""
    from common import table

    lines = []
    for name, entry in results["sets"].items():
        systems = entry["systems"]
        any_sys = next(iter(systems.values()))
        n_all = any_sys["all"]["all"]["n"]
        kinds = [k for k in KINDS if k in any_sys["all"]]
        counts = ", ".join(f"{k} {any_sys['all'][k]['n']}" for k in kinds)
        splits = ", ".join(f"{sp} {any_sys[sp]['all']['n']}" for sp in ("train", "test") if sp in any_sys)
        lines += [f"### {name}", "", f"{n_all} questions ({splits}; {counts}). Index: {entry['index'].get('documents')}"
                  f" files, {entry['index'].get('chunks')} Polaris chunks.", ""]
        headers = ["system", "nDCG@10", "R@10", "MRR@10", "dup share"] + [f"nDCG@10 {k}" for k in kinds] + ["nDCG@10 test"]
        rows = []
        for sy, r in systems.items():
            a = r["all"]
            rows.append([SYSTEM_LABELS.get(sy, sy), a["all"]["ndcg@10"], a["all"]["recall@10"], a["all"]["mrr@10"],
                         a["all"]["dup_share"]] + [a[k]["ndcg@10"] for k in kinds]
                        + [r["test"]["all"]["ndcg@10"] if "test" in r else float("nan")])
        lines += [table(headers, rows, ".3f"), ""]
        rows = []
        for sy, r in systems.items():
            a = r["all"]
            rows.append([SYSTEM_LABELS.get(sy, sy)] + [f"{a[k]['recall@10']:.3f} / {a[k]['mrr@10']:.3f} / {a[k]['dup_share']:.3f}"
                                                      for k in kinds])
        lines += ["R@10 / MRR@10 / dup share by kind:", "", table(["system"] + kinds, rows), ""]
    return "\n".join(lines)


def compare(results: dict[str, Any], a: str, b: str, names: Sequence[str] | None = None, split: str = "all") -> str:
    """Per set: questions where ``a`` scores a lower nDCG@10 than ``b``, by kind, with top sections
    (``split`` train or test: that split's questions only, so a diagnosis can stay on train)."""
    lines = []
    for name, entry in results["sets"].items():
        if names and name not in names:
            continue
        ds = load_set(name)
        sa, sb = entry["systems"][a], entry["systems"][b]
        pa, pb = sa["all"]["per_query"], sb["all"]["per_query"]
        if split != "all":
            pa = {q: v for q, v in pa.items() if q in ds.split(split)}
        worse = [q for q in pa if pa[q]["ndcg@10"] < pb[q]["ndcg@10"] - 1e-9]
        better = [q for q in pa if pa[q]["ndcg@10"] > pb[q]["ndcg@10"] + 1e-9]
        by_kind = {k: (sum(ds.queries[q]["kind"] == k for q in worse), sum(ds.queries[q]["kind"] == k for q in better))
                   for k in KINDS}
        lines.append(f"## {name}: {a} below {b} on {len(worse)}, above on {len(better)} of {len(pa)}"
                     f" (by kind, below/above: {by_kind})")
        for q in sorted(worse, key=lambda q: pa[q]["ndcg@10"] - pb[q]["ndcg@10"]):
            rels = ds.all_qrels[q]
            top_a = (sa["run"].get(q) or ["-"])[0]
            top_b = (sb["run"].get(q) or ["-"])[0]
            lines.append(f"- {q} [{ds.queries[q]['kind']}] {ds.queries[q]['text']!r}: nDCG {pa[q]['ndcg@10']:.2f} vs"
                         f" {pb[q]['ndcg@10']:.2f}\n    {a} #1: {top_a} (grade {rels.get(top_a, 0)})"
                         f"\n    {b} #1: {top_b} (grade {rels.get(top_b, 0)})")
    return "\n".join(lines)


def paired(results: dict[str, Any], a: str, b: str, rounds: int = 10_000, seed: int = 0) -> str:
    """``a`` minus ``b`` in nDCG@10, question by question: the mean and a 95% bootstrap interval
    (questions resampled with replacement, ``rounds`` times, fixed seed) per set and split,
    then pooled over the sets, all questions and by kind."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def row(label: str, diffs: list[float], left: list[float], right: list[float]) -> list[Any]:
        d = np.asarray(diffs)
        means = d[rng.integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
        lo, hi = np.quantile(means, [0.025, 0.975])
        return [label, len(d), f"{np.mean(left):.3f}", f"{np.mean(right):.3f}", f"{d.mean():+.3f}", f"{lo:+.3f} .. {hi:+.3f}"]

    from common import table

    rows, pooled = [], {}
    for name, entry in results["sets"].items():
        ds = load_set(name)
        pa, pb = entry["systems"][a]["all"]["per_query"], entry["systems"][b]["all"]["per_query"]
        for split in ("train", "test", "all"):
            qids = [q for q in pa if split == "all" or q in ds.split(split)]
            if not qids or (split != "all" and len(qids) == len(pa)):
                continue
            rows.append(row(f"{name} {split}", [pa[q]["ndcg@10"] - pb[q]["ndcg@10"] for q in qids],
                            [pa[q]["ndcg@10"] for q in qids], [pb[q]["ndcg@10"] for q in qids]))
        for q in pa:
            for split in ("all", "test" if q in ds.split("test") else "train"):
                for kind in ("all", ds.queries[q]["kind"]):
                    pooled.setdefault((split, kind), []).append((pa[q]["ndcg@10"], pb[q]["ndcg@10"]))
    for (split, kind), pairs in sorted(pooled.items()):
        rows.append(row(f"pooled {split}, {kind}", [x - y for x, y in pairs], [x for x, _ in pairs], [y for _, y in pairs]))
    return table(["questions", "n", a, b, "difference", "95% interval"], rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("report", help="render benchmarks/out/sections.json as Markdown tables")
    rp.add_argument("--json", default=str(out_dir() / "sections.json"))
    cp = sub.add_parser("compare", help="questions where system A trails system B, with each one's first section")
    cp.add_argument("a")
    cp.add_argument("b")
    cp.add_argument("--json", default=str(out_dir() / "sections.json"))
    cp.add_argument("--names", nargs="*")
    cp.add_argument("--split", default="all", choices=("all", "train", "test"))
    pp = sub.add_parser("paired", help="A minus B per question: mean and 95%% bootstrap interval per set and pooled")
    pp.add_argument("a")
    pp.add_argument("b")
    pp.add_argument("--json", default=str(out_dir() / "sections.json"))
    i = sub.add_parser("index")
    i.add_argument("names", nargs="*", default=list(ALL_SETS))
    s = sub.add_parser("score")
    s.add_argument("names", nargs="*", default=list(ALL_SETS))
    s.add_argument("--peer", action="append", default=[], metavar="RUN.jsonl", help="a peer's ranked sections")
    args = ap.parse_args(argv)
    if args.cmd == "report":
        print(render(json.loads(Path(args.json).read_text())))
        return 0
    if args.cmd == "compare":
        print(compare(json.loads(Path(args.json).read_text()), args.a, args.b, args.names, args.split))
        return 0
    if args.cmd == "paired":
        print(paired(json.loads(Path(args.json).read_text()), args.a, args.b))
        return 0
    if args.cmd == "index":
        for name in args.names:
            ds = load_set(name)
            index, info = open_index(ds)
            index.close()
            print(f"{name}: {json.dumps(info)}", flush=True)
        return 0
    results: dict[str, Any] = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
                               "machine": machine_line(machine()), "sets": {}}
    for name in args.names:
        ds = load_set(name)
        index, info = open_index(ds)
        with index:
            runs = polaris_runs(ds, index)
        for peer in args.peer:
            run = read_peer(Path(peer), name)
            if run:  # a peer not run on this set is left out, not scored as zero
                runs[Path(peer).stem] = {"run": run}
        entry: dict[str, Any] = {"index": info, "systems": {}}
        for system, r in runs.items():
            entry["systems"][system] = {
                split: summarise(ds, r["run"], split) for split in ("all", "train", "test") if split == "all" or ds.split(split)
            }
            if "ms_per_query" in r:
                entry["systems"][system]["ms_per_query"] = r["ms_per_query"]
            entry["systems"][system]["run"] = r["run"]
        results["sets"][name] = entry
        a = entry["systems"]
        print(f"{name}: " + "; ".join(f"{sy} nDCG@10 {a[sy]['all']['all']['ndcg@10']:.3f}"
                                      f" dup {a[sy]['all']['all']['dup_share']:.3f}" for sy in a), flush=True)
    path = save_json("sections.json", results)
    (out_dir() / "sections.md").write_text(render(results))
    print(f"wrote {path} and sections.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
