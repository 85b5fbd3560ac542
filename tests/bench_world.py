"""A tiny generated world for the benchmark scripts: a BEIR "scifact", an "anthropic_docs" corpus
and one labelled docs set ("tiny"), all synthetic text, so every script can run in seconds
where the shared evaluation data does not exist (CI). ``build_world`` writes it and returns
the environment that points the scripts at it (benchmarks/common.py reads these variables).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "cache index vector token query search section heading chunk model batch thread file folder "
    "server client record table column engine window budget score rank fusion merge split "
    "config option setting default value error warning limit offset cursor stream buffer queue "
    "worker process signal commit rollback schema migration version release package module "
    "import export parse render template layout theme plugin hook route handler request response "
    "session cookie header payload encode decode compress hash digest key secret rotate expire"
).split()
IDENTIFIERS = ("no_args_is_help", "max_chunk_tokens", "rrf_k", "--watch", "PolarisIndex")
SET = "tiny"


def sentence(rng: random.Random, n: int = 12) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def paragraph(rng: random.Random, n: int = 4) -> str:
    return " ".join(sentence(rng) for _ in range(n))


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _qrels(path: Path, rows: list[tuple[str, str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows),
                    encoding="utf-8")


def scifact(root: Path, rng: random.Random, n_docs: int = 24, n_queries: int = 12) -> None:
    """BEIR folder: corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv."""
    docs = [{"_id": str(1000 + i), "title": sentence(rng, 6), "text": paragraph(rng, 4)} for i in range(n_docs)]
    _jsonl(root / "corpus.jsonl", docs)
    queries, train, test = [], [], []
    for i in range(n_queries):
        d = docs[(i * 7) % n_docs]
        queries.append({"_id": str(i + 1), "text": " ".join(d["text"].split()[:8])})
        (train if i % 2 else test).append((str(i + 1), d["_id"], 1))
    _jsonl(root / "queries.jsonl", queries)
    _qrels(root / "qrels" / "train.tsv", train)
    _qrels(root / "qrels" / "test.tsv", test)


def anthropic_docs(root: Path, rng: random.Random, pages: int = 3, sections: int = 3) -> None:
    """Sections of pages, with the metadata quality.py and docsets.py rebuild pages from."""
    rows, source = [], 0
    for p in range(pages):
        url = f"https://docs.anthropic.com/en/docs/page-{p}"
        for s in range(sections):
            title = f"Topic {p}.{s} {rng.choice(WORDS)}"
            rows.append({"_id": f"{url}#topic-{s}", "title": title, "text": f"{title}\n\n{paragraph(rng)}",
                         "metadata": {"page_url": url, "anchor": f"topic-{s}", "page_index": p,
                                      "section_index_in_page": s, "source_index": source}})
            source += 1
    _jsonl(root / "corpus.jsonl", rows)
    queries, qrels = [], []
    for i, r in enumerate(rows[::2]):
        queries.append({"_id": f"a{i}", "text": " ".join(r["text"].split()[3:11]) + "?"})
        qrels.append((f"a{i}", r["_id"], 1))
    _jsonl(root / "queries.jsonl", queries)
    _qrels(root / "qrels" / "test.tsv", qrels)


def docset(docs_home: Path, labels_home: Path, rng: random.Random, files: int = 4, sections: int = 3) -> None:
    """Set ``tiny``: Markdown files with headings, questions of each kind labelled with sections."""
    docs = docs_home / SET / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    labels: list[tuple[str, str]] = []  # (section id, a sentence of it)
    for f in range(files):
        rel = f"guide/part-{f}.md" if f % 2 else f"part-{f}.md"
        title = f"Part {f} {rng.choice(WORDS)}"
        body = [f"# {title}", "", paragraph(rng, 2), ""]
        for s in range(sections):
            head = f"Section {f}.{s} {rng.choice(WORDS)}"
            ident = IDENTIFIERS[(f * sections + s) % len(IDENTIFIERS)]
            text = paragraph(rng, 3) + f" Set `{ident}` to change it."
            body += [f"## {head}", "", text, "", "```toml", f"{ident.strip('-')} = 1", "```", ""]
            labels.append((f"{rel}#{title} > {head}", text, ident))
        path = docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(body), encoding="utf-8")
    queries, train, test = [], [], []
    for i, (sid, text, ident) in enumerate(labels):
        kind = ("paraphrase", "identifier", "mixed")[i % 3]
        q = {"paraphrase": " ".join(text.split()[:9]), "identifier": ident,
             "mixed": f"how do I use {ident} " + " ".join(text.split()[:3])}[kind]
        qid = f"{SET}-{i:03d}"
        queries.append({"_id": qid, "text": q, "kind": kind})
        (train if i % 2 == 0 else test).append((qid, sid, 2))
    ldir = labels_home / SET
    _jsonl(ldir / "queries.jsonl", queries)
    _qrels(ldir / "qrels" / "train.tsv", train)
    _qrels(ldir / "qrels" / "test.tsv", test)
    _jsonl(ldir / "unanswerable.jsonl", [
        {"_id": f"{SET}-u{i}", "text": f"what is the capital of {w}", "kind": "unanswerable", "split": sp}
        for i, (w, sp) in enumerate((("mars", "train"), ("venus", "test")))])


def build_world(root: Path, seed: int = 38) -> dict[str, str]:
    """Write the world under ``root``; the environment variables that point the scripts at it."""
    rng = random.Random(seed)
    scifact(root / "eval" / "scifact", rng)
    anthropic_docs(root / "eval" / "anthropic_docs", rng)
    docset(root / "docsets", root / "labels", rng)
    (root / "out").mkdir(exist_ok=True)
    return {"POLARIS_EVAL": str(root / "eval"), "POLARIS_DOCSETS": str(root / "docsets"),
            "POLARIS_DOCSET_LABELS": str(root / "labels"), "POLARIS_BENCH_OUT": str(root / "out"),
            "POLARIS_MAIN_DOCSETS": str(root / "out" / "docsets"), "XDG_CACHE_HOME": str(root / "xdg"),
            "XDG_CONFIG_HOME": str(root / "xdg-config")}
