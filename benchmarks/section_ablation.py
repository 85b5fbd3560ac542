"""Sections as the unit of an answer: each ranking choice measured on the docs sets.

    python benchmarks/section_ablation.py [NAME ...] [--split train|test|all] [--variants a,b,...]

Each set's cached index (benchmarks/sections.py builds it: the engine's defaults, the
bundled model) answers every question of the split under each variant, in hybrid mode;
a hit's section is (document, heading path) and the metrics are those of sections.py
(a repeated section scores nothing and counts as a duplicate slot). Variants:

- ``chunk``: ten chunks, as Polaris ranked before sections (duplicates and all);
- ``dedup``: a hundred chunks, then the first of each section (fuse chunks, then deduplicate);
- ``section``: the engine's section fusion (each list reduced to sections, then RRF);
- ``section-pool1`` / ``section-pool4``: the same with each list fetching 1x / 4x the chunks;
- ``no-phrases``: section fusion without identifier phrases in the BM25 query;
- ``rrf-only``: RRF alone (``score_fusion`` 0, the spec's fusion);
- ``no-lookup``: without the identifier lookup (a query of identifiers only: BM25 hits naming them as written first);
- ``idalpha0.25`` ... ``idalpha0.6``: LlamaIndex's ``alpha`` for questions with an identifier-like word only
  (equal weights otherwise); ``mixalpha...``: the same for questions with words and an identifier;
  ``lookalpha...``: for queries of identifiers only; ``lookpool0`` ... ``lookpool400``: the BM25 hits
  a lookup is lifted from (``LOOKUP_POOL``; 0: the k-sized pool alone);
- ``alpha0.0`` ... ``alpha1.0``: LlamaIndex's ``alpha`` (RRF list weights, 1 = vector only);
- ``boost0.1`` ...: ``heading_boost``; ``rrf10`` ...: ``rrf_k``; ``hweight2`` ...: BM25 weight of the
  heading path column (text 1).

Decisions are taken on ``--split train`` (and anthropic_docs, which has no train split);
``test`` is reported. Writes benchmarks/out/section_ablation.json and a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402
from docsets import ALL_SETS, load_set  # noqa: E402
from sections import DEEP, K, ablation_header, ablation_row, dedup, hit_section, open_index, questions, slots, summarise  # noqa: E402

from llama_index_polaris.engine.sqlite import bm25 as bm25_module  # noqa: E402
from llama_index_polaris.engine.search import literal  # noqa: E402
from llama_index_polaris.engine.search import pipeline  # noqa: E402


@contextlib.contextmanager
def setting(module: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def run(searcher: Any, text: str, unit: str, deep: bool = False, **kw: Any) -> list[str]:
    if deep:
        return dedup(hit_section(h) for h in searcher.search(text, top_k=DEEP, unit="chunk", **kw))
    return slots(searcher.search(text, top_k=K, unit=unit, **kw))


@contextlib.contextmanager
def configured(searcher: Any, **values: Any) -> Iterator[None]:
    """The searcher with some settings changed for one variant."""
    old = searcher.config
    searcher.config = old.replace(**values)
    try:
        yield
    finally:
        searcher.config = old


SEARCHER: list[Any] = []  # the searcher of the set being scored, for ``configured``

VARIANTS: dict[str, tuple[Callable[[], Any], Callable[[Any, str], list[str]]]] = {
    "chunk": (contextlib.nullcontext, lambda s, t: run(s, t, "chunk")),
    "dedup": (contextlib.nullcontext, lambda s, t: run(s, t, "chunk", deep=True)),
    "section": (contextlib.nullcontext, lambda s, t: run(s, t, "section")),
    # each list fetching 1x / 4x the chunks the pool of top_k 10 had before candidate_pool (30, 120)
    "section-pool1": (lambda: configured(SEARCHER[0], candidate_pool=30), lambda s, t: run(s, t, "section")),
    "section-pool4": (lambda: configured(SEARCHER[0], candidate_pool=120), lambda s, t: run(s, t, "section")),
    "no-phrases": (lambda: setting(bm25_module, "IDENTIFIER_PHRASES", False), lambda s, t: run(s, t, "section")),
    **{f"alpha{a}": (contextlib.nullcontext, lambda s, t, a=a: run(s, t, "section", alpha=a))
       for a in (0.0, 0.25, 0.5, 0.75, 1.0)},
    **{f"boost{b}": (lambda b=b: configured(SEARCHER[0], heading_boost=b), lambda s, t: run(s, t, "section"))
       for b in (0.0, 0.1, 0.2, 0.3)},
    **{f"rrf{k}": (lambda k=k: configured(SEARCHER[0], rrf_k=k), lambda s, t: run(s, t, "section"))
       for k in (10, 40, 60)},
    **{f"hweight{w}": (lambda w=w: setting(bm25_module, "HEADING_WEIGHT", w), lambda s, t: run(s, t, "section"))
       for w in (2.0, 4.0)},
    **{f"idalpha{a}": (contextlib.nullcontext,
                       lambda s, t, a=a: run(s, t, "section", alpha=a if literal.identifiers(t) else None))
       for a in (0.25, 0.35, 0.45, 0.6)},
    **{f"mixalpha{a}": (contextlib.nullcontext,
                        lambda s, t, a=a: run(s, t, "section", alpha=a if literal.identifiers(t) and not literal.is_lookup(t) else None))
       for a in (0.25, 0.35)},
    **{f"lookalpha{a}": (contextlib.nullcontext,
                         lambda s, t, a=a: run(s, t, "section", alpha=a if literal.is_lookup(t) else None))
       for a in (0.2, 0.3, 0.4)},
    "rrf-only": (lambda: configured(SEARCHER[0], score_fusion=0.0), lambda s, t: run(s, t, "section")),
    **{f"lookpool{n}": (lambda n=n: setting(pipeline, "LOOKUP_POOL", n), lambda s, t: run(s, t, "section"))
       for n in (0, 100, 400)},
    "no-lookup": (lambda: setting(pipeline, "IDENTIFIER_LOOKUP", False), lambda s, t: run(s, t, "section")),
    "boost0.2-hweight2": (lambda: _both(configured(SEARCHER[0], heading_boost=0.2),
                                        setting(bm25_module, "HEADING_WEIGHT", 2.0)), lambda s, t: run(s, t, "section")),
}


@contextlib.contextmanager
def _both(a: Any, b: Any) -> Iterator[None]:
    with a, b:
        yield


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(ALL_SETS))
    ap.add_argument("--split", default="train")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    results: dict[str, Any] = {}
    print(ablation_header(["dup share"]))
    for name in args.names:
        ds = load_set(name)
        split, qids = questions(ds, args.split)
        index, _ = open_index(ds)
        searcher = index.searcher()
        searcher.max_top_k = DEEP
        SEARCHER[:] = [searcher]
        for variant in args.variants.split(","):
            context, answer = VARIANTS[variant]
            with context():
                runs = {q: answer(searcher, ds.queries[q]["text"]) for q in qids}
            m = summarise(ds, runs, split)
            results.setdefault(name, {})[variant] = {k: v for k, v in m.items() if k != "per_query"}
            print(ablation_row(name, split, variant, m, f"{m['all']['dup_share']:.3f} | "), flush=True)
        index.close()
    (out_dir() / f"section_ablation-{args.split}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
