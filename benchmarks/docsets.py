"""Labelled Markdown documentation sets whose unit of an answer is a section.

    python benchmarks/docsets.py prepare [NAME ...]     # docs into ../shared/eval/docsets/<name>/
    python benchmarks/docsets.py sections NAME [--file REL]  # the heading paths the engine's chunker makes
    python benchmarks/docsets.py check [NAME ...]       # every label names a section the chunker makes

A set is a folder of Markdown files plus questions labelled with sections. A label is
``<relpath>#<heading path>``: the file's path relative to the set's docs folder and the
heading path exactly as Polaris writes it (" > "-joined, from the document's top heading
down to the section's own heading, as ``chunk_document`` produces it with the bundled
all-MiniLM-L6-v2 chunk budget). Grades: 2 answers the question, 1 answers part of it.

Hand-labelled sets keep their questions and labels in the repository
(``benchmarks/docsets/<name>/queries.jsonl``, ``qrels/train.tsv``, ``qrels/test.tsv``), and
optionally ``unanswerable.jsonl``: questions the docs do not answer (same fields, kind
``unanswerable``, plus a ``split`` field), for choosing a "nothing matched" threshold;
the documentation itself is never committed: ``prepare`` extracts the pinned commit's
subtree (or just the listed folders of it, ``Source.only``) from the fetched git directory
(``/work/.mirror/<owner>+<name>/repo``) with ``git archive`` into
``../shared/eval/docsets/<name>/docs/`` (Markdown files only).

``anthropic_docs`` is derived, not hand-labelled: ``prepare`` rebuilds its 45 pages from
``../shared/eval/anthropic_docs`` the way ``benchmarks/quality.py`` does (each section
becomes ``## title`` under the page's ``# <slug>``), writes them as files, and maps each
qrel section onto the heading path of the engine's chunks that cover most of its text.
Its queries and qrels are written beside the pages (``../shared/eval/docsets/anthropic_docs``),
not into the repository, because that data set's files are not copied into the project.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_EVAL, DOCSETS, REPO  # noqa: E402

from llama_index_polaris.engine.tune.evaluate import read_qrels  # noqa: E402

LABELS = Path(os.environ.get("POLARIS_DOCSET_LABELS") or REPO / "benchmarks" / "docsets")  # the smoke test's: tmp
MIRRORS = Path("/work/.mirror")
MODEL = "all-minilm-l6-v2"
KINDS = ("paraphrase", "identifier", "mixed")
UNANSWERABLE = "unanswerable"
SPLITS = ("train", "test")
MARKDOWN = (".md", ".markdown")


@dataclass(frozen=True)
class Source:
    """A pinned subtree of a public docs repository."""

    repo: str  # owner/name
    commit: str
    subtree: str  # "" for the repository's root (then `only` names paths from the root)
    licence: str
    only: tuple[str, ...] = ()  # keep just these folders of the subtree (all of it when empty)

    @property
    def git_dir(self) -> Path:
        return MIRRORS / self.repo.replace("/", "+") / "repo"


SOURCES: dict[str, Source] = {
    "cargo-book": Source("rust-lang/cargo", "af373f761aa4e42b093c2e453078fd73c8ce54dd", "doc/book/src",
                         "MIT OR Apache-2.0"),
    "typer": Source("fastapi/typer", "9a7b2e83f6b62c750d6026b0de9ebf2026a8b8fa", "docs", "MIT"),
    "pydantic": Source("pydantic/pydantic", "2151025aa51263f3016502b00010b78e4481eaa1", "docs", "MIT"),
    "uv": Source("astral-sh/uv", "26a9dd4b2125bc271b47855e1fa0c49af3365db5", "docs", "MIT OR Apache-2.0"),
    "sqlmodel": Source("fastapi/sqlmodel", "a6469ef61bb903cbf7fd8749c70d8ceb8046c368", "docs", "MIT"),
    "poetry": Source("python-poetry/poetry", "f46702336862f30050d5c641d5ed6f7568ded793", "docs", "MIT"),
    "mkdocs": Source("mkdocs/mkdocs", "2862536793b3c67d9d83c33e0dd6d50a791928f8", "docs", "BSD-2-Clause"),
    "rust-book": Source("rust-lang/book", "917544888a55e4da7109bdba8c88c893c0da70f4", "src", "MIT OR Apache-2.0"),
    "vite": Source("vitejs/vite", "a98c8d95d552c6fa98ab66fb810f5b39ad5abf49", "docs", "MIT"),
    "prettier": Source("prettier/prettier", "4f84a934201322ca87750e2b9b25baf296da6560", "docs", "MIT"),
    "react-zh": Source("reactjs/zh-hans.react.dev", "f6cda05526ceff44b24588e9e0c2e2106d4588d4", "src/content",
                       "CC-BY-4.0", only=("learn", "reference")),
    "vue-ja": Source("vuejs-translations/docs-ja", "c627102bfabf8bc5ecaa6eb763b965a0a5d43a5b", "src", "CC-BY-4.0"),
    "electron-api": Source("electron/electron", "96f3996d8d3ce6e2fcfb86326fc4b953b53936fb", "docs/api", "MIT"),
    "deno-runtime": Source("denoland/docs", "eb8f78e90dbc72f3b3ab7dcd85609622379b5bca", "runtime", "MIT"),
    "antd-zh": Source("ant-design/ant-design", "2b258157ff20fb8948780e414dc1d74246aede40", "", "MIT",
                      only=("components/*.zh-CN.md", "docs/react/*.zh-CN.md")),
    "jsprimer-ja": Source("asciidwango/js-primer", "976d11e03eb4ff7f9c1db8aecba75532d12f6ee2", "source",
                          "CC-BY-4.0 AND MIT", only=("intro", "basic/*README.md", "use-case/*README.md",
                                                     "appendix", "cheatsheet", "outro")),
}
DERIVED = ("anthropic_docs",)
ALL_SETS = tuple(SOURCES) + DERIVED


# -- the sets as the scorer reads them ----------------------------------------------------
@dataclass
class DocSet:
    """One set: where its Markdown lives, its questions (text, kind) and its qrels per split."""

    name: str
    docs: Path
    queries: dict[str, dict[str, str]]
    qrels: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    unanswerable: dict[str, dict[str, str]] = field(default_factory=dict)  # split -> {id: text}

    def split(self, split: str) -> dict[str, dict[str, int]]:
        return self.qrels.get(split, {})

    @property
    def all_qrels(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for split in self.qrels.values():
            out.update(split)
        return out


def set_dir(name: str) -> Path:
    return DOCSETS / name


def labels_dir(name: str) -> Path:
    """Where the questions and labels live: the repository, or the prepared folder for derived sets."""
    return set_dir(name) if name in DERIVED else LABELS / name


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_set(name: str) -> DocSet:
    """The prepared docs and the labels of ``name``; says what to run when the docs are missing."""
    docs = set_dir(name) / "docs"
    if not docs.is_dir():
        raise SystemExit(f"{docs}: missing. Run `python benchmarks/docsets.py prepare {name}` first"
                         + (f" (it needs the fetched mirror of {SOURCES[name].repo})." if name in SOURCES else "."))
    ldir = labels_dir(name)
    qfile = ldir / "queries.jsonl"
    queries = {str(q["_id"]): {"text": q["text"], "kind": q.get("kind", "paraphrase")}
               for q in (read_jsonl(qfile) if qfile.is_file() else [])}
    qrels = {s: read_qrels(ldir / "qrels" / f"{s}.tsv") for s in SPLITS if (ldir / "qrels" / f"{s}.tsv").is_file()}
    unanswerable: dict[str, dict[str, str]] = {}
    for q in read_unanswerable(name):
        unanswerable.setdefault(str(q.get("split")), {})[str(q["_id"])] = q["text"]
    return DocSet(name, docs, queries, qrels, unanswerable)


def read_unanswerable(name: str) -> list[dict[str, Any]]:
    """The rows of the set's ``unanswerable.jsonl`` (none when it has no such file)."""
    path = labels_dir(name) / f"{UNANSWERABLE}.jsonl"
    return read_jsonl(path) if path.is_file() else []


def section_id(relpath: str, heading_path: str) -> str:
    return f"{relpath}#{heading_path}"


# -- the engine's sections ------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def chunk_settings() -> Any:
    """The settings the Indexer chunks with for the bundled model (budget capped at its window)."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.ingest.recipe import make_recipe

    cfg = load_config(model_id=MODEL, use_user_config=False)
    embedder = load_embedder(MODEL)
    return make_recipe(cfg, embedder.max_chunk_tokens, embedder.token_counter, model=MODEL).settings


def chunk_file(text: str, relpath: str) -> list[Any]:
    """The engine's chunks of one file, as the Indexer makes them (title = the file's name)."""
    from llama_index_polaris.engine.chunk import chunk_document

    return chunk_document(text, chunk_settings(), path=relpath, title=Path(relpath).name).chunks


def engine_files(docs: Path) -> list[tuple[str, Path]]:
    """(relpath, path) of every file the engine would index under ``docs``."""
    from llama_index_polaris.engine.ingest.sources import walk

    return [(f.relpath, f.path) for f in walk([docs], docs.resolve()).files]


def engine_sections(docs: Path) -> dict[str, list[tuple[str, int, int]]]:
    """relpath -> the chunks' (heading path, start, end) in file order."""
    out = {}
    for rel, path in engine_files(docs):
        text = path.read_bytes().decode("utf-8-sig")
        out[rel] = [(c.heading_path_str, c.start, c.end) for c in chunk_file(text, rel)]
    return out


def write_spans(name: str) -> Path:
    """``engine_sections.json`` beside the docs: what a peer's adapter maps its sections onto.

    relpath -> [[heading path, start char, end char], ...] for every chunk the engine's
    chunker makes (offsets into the file decoded as UTF-8, BOM dropped).
    """
    path = set_dir(name) / "engine_sections.json"
    path.write_text(json.dumps(engine_sections(set_dir(name) / "docs")), encoding="utf-8")
    return path


def section_ids(docs: Path) -> set[str]:
    return {section_id(rel, hp) for rel, chunks in engine_sections(docs).items() for hp, _, _ in chunks}


# -- prepare ----------------------------------------------------------------------------------
def prepare_source(name: str, src: Source) -> Path:
    """git archive the pinned subtree into ../shared/eval/docsets/<name>/docs (Markdown only)."""
    if not (src.git_dir / "HEAD").exists() and not (src.git_dir / "objects").is_dir():
        raise SystemExit(
            f"{src.git_dir}: no fetched mirror of {src.repo}. Fetch it first (the search tool's"
            f" `fetch github:{src.repo}`, which puts a bare git directory there), then run"
            f" `python benchmarks/docsets.py prepare {name}` again.")
    has = subprocess.run(["git", "--git-dir", str(src.git_dir), "cat-file", "-e", f"{src.commit}^{{commit}}"],
                         capture_output=True)
    if has.returncode != 0:
        raise SystemExit(f"{src.git_dir} does not hold commit {src.commit}; fetch a newer snapshot of {src.repo}.")
    base = src.subtree.rstrip("/")
    paths = [f"{base}/{d}" if base else d for d in src.only] or ([src.subtree] if base else [])
    tar = subprocess.run(["git", "--git-dir", str(src.git_dir), "archive", "--format=tar", src.commit, *paths],
                         capture_output=True, check=True).stdout
    dest = set_dir(name) / "docs"
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    prefix = base + "/" if base else ""
    manifest = []
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        for m in tf.getmembers():
            if not m.isfile() or not m.name.lower().endswith(MARKDOWN) or not m.name.startswith(prefix):
                continue
            rel = m.name[len(prefix):]
            data = tf.extractfile(m).read()  # type: ignore[union-attr]
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            manifest.append((rel, hashlib.sha256(data).hexdigest(), len(data)))
    manifest.sort()
    (set_dir(name) / "MANIFEST.tsv").write_text(
        f"# {src.repo} {src.commit} {src.subtree or '.'}"
        + (f" ({', '.join(src.only)} only)" if src.only else "") + " (Markdown files only)\n"
        + "".join(f"{r}\t{h}\t{n}\n" for r, h, n in manifest))
    print(f"{name}: {len(manifest)} files, {sum(n for *_, n in manifest):,} bytes -> {dest}")
    return dest


def anthropic_relpath(url: str) -> str:
    """The page's file: its URL path after ``/en/`` (``api/errors.md``, ``api.md`` for ``/en/api/``)."""
    return url.rstrip("/").split("/en/", 1)[-1] + ".md"


def prepare_anthropic(eval_dir: Path = DEFAULT_EVAL) -> Path:
    """Pages rebuilt as in benchmarks/quality.py, written as files; qrels mapped to heading paths."""
    from quality import rebuild_pages

    from llama_index_polaris.engine.tune.evaluate import load_beir

    beir = load_beir(eval_dir / "anthropic_docs", "test")
    pages, spans = rebuild_pages(beir.corpus)
    root = set_dir("anthropic_docs")
    docs = root / "docs"
    if docs.exists():
        import shutil

        shutil.rmtree(docs)
    docs.mkdir(parents=True)
    # one file per page, named after its URL path (unique over the 45 pages)
    names: dict[str, str] = {}
    for page in pages:
        rel = anthropic_relpath(page.id)
        assert rel not in names.values(), rel
        names[page.id] = rel
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(page.text, encoding="utf-8")
    # each original section -> the heading path of the chunks that cover most of its characters
    mapping: dict[str, str] = {}
    for page in pages:
        rel = names[page.id]
        chunks = [(c.heading_path_str, c.start, c.end) for c in chunk_file(page.text, rel)]
        for sid, s, e in spans[page.id]:
            cover: dict[str, int] = {}
            for hp, cs, ce in chunks:
                overlap = min(e, ce) - max(s, cs)
                if overlap > 0:
                    cover[hp] = cover.get(hp, 0) + overlap
            if cover:
                mapping[sid] = section_id(rel, max(cover, key=lambda k: (cover[k], -len(k))))
    rows, lost = {}, 0
    for qid, rels in beir.qrels.items():
        for sid, grade in rels.items():
            target = mapping.get(sid)
            if target is None:
                lost += 1
                continue
            rows.setdefault(qid, {})
            rows[qid][target] = max(rows[qid].get(target, 0), grade)  # two sections on one path: once
    (root / "qrels").mkdir(exist_ok=True)
    with open(root / "qrels" / "test.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid in sorted(rows):
            for cid, grade in rows[qid].items():
                fh.write(f"{qid}\t{cid}\t{2 if grade > 0 else 0}\n")
    with open(root / "queries.jsonl", "w", encoding="utf-8") as fh:
        for qid in rows:
            fh.write(json.dumps({"_id": qid, "text": beir.queries[qid], "kind": "paraphrase"}) + "\n")
    merged = sum(len(v) for v in beir.qrels.values()) - sum(len(v) for v in rows.values()) - lost
    distinct = len(set(mapping.values()))
    print(f"anthropic_docs: {len(pages)} pages, {len(mapping)} sections -> {distinct} heading paths;"
          f" {len(rows)} questions, {sum(len(v) for v in rows.values())} qrels"
          f" ({merged} merged into a shared heading path, {lost} unmapped) -> {root}")
    return docs


# -- check --------------------------------------------------------------------------------------
def check(name: str) -> list[str]:
    """Problems with a set's labels (empty when every label names a real section)."""
    ds = load_set(name)
    problems = []
    known = section_ids(ds.docs)
    seen: dict[str, str] = {}
    for split, qrels in ds.qrels.items():
        for qid, rels in qrels.items():
            if qid in seen:
                problems.append(f"{qid}: in both {seen[qid]} and {split}")
            seen[qid] = split
            if qid not in ds.queries:
                problems.append(f"{split}: {qid} has labels but no question")
            if not any(g == 2 for g in rels.values()):
                problems.append(f"{split}: {qid} has no grade-2 section")
            for cid, grade in rels.items():
                if cid not in known:
                    problems.append(f"{split}: {qid}: {cid!r} is not a section the chunker makes")
                if grade not in (1, 2):
                    problems.append(f"{split}: {qid}: grade {grade} (use 1 or 2)")
    for qid, q in ds.queries.items():
        if qid not in seen:
            problems.append(f"{qid}: question without labels")
        if q["kind"] not in KINDS:
            problems.append(f"{qid}: kind {q['kind']!r} not one of {KINDS}")
    ids: set[str] = set()
    for q in read_unanswerable(name):
        qid = str(q.get("_id"))
        if qid in ids or qid in ds.queries:
            problems.append(f"{UNANSWERABLE}: {qid} is used twice")
        ids.add(qid)
        if q.get("kind") != UNANSWERABLE:
            problems.append(f"{UNANSWERABLE}: {qid}: kind {q.get('kind')!r} (use {UNANSWERABLE!r})")
        if q.get("split") not in SPLITS:
            problems.append(f"{UNANSWERABLE}: {qid}: split {q.get('split')!r} not one of {SPLITS}")
        if not str(q.get("text", "")).strip():
            problems.append(f"{UNANSWERABLE}: {qid}: no text")
    return problems


def counts(name: str) -> dict[str, Any]:
    ds = load_set(name)
    out: dict[str, Any] = {"files": len(engine_files(ds.docs)), "questions": len(ds.queries)}
    for split, qrels in ds.qrels.items():
        kinds: dict[str, int] = {}
        for qid in qrels:
            kinds[ds.queries[qid]["kind"]] = kinds.get(ds.queries[qid]["kind"], 0) + 1
        out[split] = {"questions": len(qrels), "qrels": sum(len(r) for r in qrels.values()), "kinds": kinds}
    if ds.unanswerable:
        out[UNANSWERABLE] = {split: len(qs) for split, qs in ds.unanswerable.items()}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="extract the pinned docs into ../shared/eval/docsets/<name>/")
    p.add_argument("names", nargs="*", default=list(ALL_SETS))
    w = sub.add_parser("spans", help="(re)write engine_sections.json for peers' adapters")
    w.add_argument("names", nargs="*", default=list(ALL_SETS))
    s = sub.add_parser("sections", help="heading paths the engine's chunker makes (TSV: file, heading path, chunks)")
    s.add_argument("name")
    s.add_argument("--file", action="append", help="only these relative paths")
    c = sub.add_parser("check", help="validate questions and labels against the chunker's sections")
    c.add_argument("names", nargs="*", default=list(ALL_SETS))
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        for name in args.names:
            if name in SOURCES:
                prepare_source(name, SOURCES[name])
            elif name == "anthropic_docs":
                prepare_anthropic()
            else:
                raise SystemExit(f"unknown set {name!r}; sets: {', '.join(ALL_SETS)}")
            print(f"{name}: chunker sections -> {write_spans(name)}")
        return 0
    if args.cmd == "spans":
        for name in args.names:
            print(f"{name}: {write_spans(name)}")
        return 0
    if args.cmd == "sections":
        docs = set_dir(args.name) / "docs"
        for rel, chunks in engine_sections(docs).items():
            if args.file and rel not in args.file:
                continue
            order: dict[str, int] = {}
            for hp, _, _ in chunks:
                order[hp] = order.get(hp, 0) + 1
            for hp, n in order.items():
                print(f"{rel}\t{hp}\t{n}")
        return 0
    bad = 0
    for name in args.names:
        problems = check(name)
        print(f"{name}: {json.dumps(counts(name))}")
        for p in problems:
            print(f"  {p}")
        bad += len(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
