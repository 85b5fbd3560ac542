"""Does ``read_section`` give the file's own text? Before and after documents' texts were stored.

    python benchmarks/section_text.py [NAME ...] [--cache DIR] [--json]
    python benchmarks/section_text.py --stitched [NAME ...]   # no index: the chunker alone, before only

For each prepared doc set (``benchmarks/docsets.py``; all of them by default) the set's cached
index (``benchmarks/sections.py``'s file in ``benchmarks/out/docsets/``, else the same file
name in ``--cache DIR``, copied read-only, else built here: that embeds the whole set) is
copied into a scratch folder and made what an index written before schema 9 is: no
``document_texts``. Then, on that copy:

- before: it is opened (migration 9 runs), and every section of every document is read with
  ``read_section``: rebuilt from its chunks (what every index answered before), marked not exact;
- `polaris index` over the set's folder stores the unchanged files' texts (nothing re-embedded);
- after: every section read again.

Each text is compared with the file's own slice: the file decoded (BOM dropped) in NFC, sliced
over the section's runs of chunks (``context.runs``). A mismatch is "fences" when the two
differ in their fence lines (a code block re-fenced where the chunker cut it), else "space"
when they differ in white space only (blank lines where the pieces were joined), else "text"
(prose repeated or lost). The file size is measured VACUUMed before and after the texts are
stored (the cost of keeping them). ``--stitched`` needs no index (nothing is embedded): it
chunks each file as the Indexer does (``docsets.chunk_file``) and counts the sections whose
stitched chunks are not the file's slice, the "before" of every set in a minute. Not part of the test run; a smoke test runs ``measure`` on
two small files (tests/test_section_text.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import out_dir  # noqa: E402

BIG = 1_000_000  # a token budget no section reaches: whole texts are compared


def forget_texts(db: Path) -> None:
    """Make ``db`` what Polaris wrote before it stored texts (schema 9: no ``document_texts``)."""
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE IF EXISTS document_texts")
    if conn.execute("PRAGMA user_version").fetchone()[0] > 9:
        conn.execute("PRAGMA user_version = 9")
    conn.commit()
    conn.close()


def vacuumed_size(db: Path) -> int:
    """The file's size after VACUUM (WAL folded in): what the index costs on disk."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return db.stat().st_size


def fence_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.lstrip().startswith(("```", "~~~"))]


def kind_of(got: str, want: str) -> str:
    """How a text that is not the file's differs from it: fences, space or text."""
    if fence_lines(got) != fence_lines(want):
        return "fences"
    return "space" if got.split() == want.split() else "text"


def read_all(index: Any, docs: Path) -> dict[str, Any]:
    """Every section of every document read whole, compared with the file's slices."""
    from llama_index_polaris.engine.search.context import RUN_SEPARATOR, runs
    from llama_index_polaris.engine.ingest.sources import decode_source
    from llama_index_polaris.engine.text import nfc

    out: dict[str, Any] = {"sections": 0, "exact": 0, "mismatch": 0, "fences": 0, "space": 0, "text": 0,
                           "examples": []}
    for doc in index.store.documents():
        source = nfc(decode_source((docs / doc.path).read_bytes()))
        chunks = {c.node_id: c for c in index.store.get_chunks(document_id=doc.id)}
        for entry in index.outline(doc.path, doc.collection).entries:
            if not entry.chunks:
                continue  # a heading with no text of its own reads its subsections: counted there
            s = index.read_section(doc.path, entry.heading_path, collection=doc.collection, max_tokens=BIG)
            mine = sorted((chunks[n] for n in s.node_ids), key=lambda c: c.ordinal)
            spans = runs([(c.ordinal, c.start_char, c.end_char) for c in mine]) or []
            want = RUN_SEPARATOR.join(source[a:b] for a, b in spans)
            out["sections"] += 1
            out["exact"] += s.exact
            if s.text != want:
                kind = kind_of(s.text, want)
                out["mismatch"] += 1
                out[kind] += 1
                if len(out["examples"]) < 5:
                    out["examples"].append(f"{doc.path} # {entry.heading_path} ({kind})")
    return out


def measure(db: Path, docs: Path, scratch: Path, config: Any) -> dict[str, Any]:
    """Before/after counts and sizes for the index ``db`` of the folder ``docs``, built with
    ``config`` (a copy in ``scratch`` is measured; ``db`` is left as it is)."""
    from llama_index_polaris.engine.index import PolarisIndex

    work = scratch / db.name
    for suffix in ("", "-wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", f"{work}{suffix}")
    forget_texts(work)
    size_before = vacuumed_size(work)
    with PolarisIndex(work, config=config) as index:
        before = read_all(index, docs)
        report = index.index_paths([docs])
        after = read_all(index, docs)
    size_after = vacuumed_size(work)
    return {"before": before, "after": after, "texts_stored": report.texts_stored,
            "chunks_embedded": report.chunks_embedded, "size_before": size_before, "size_after": size_after}


def stitched_counts(docs: Path) -> dict[str, Any]:
    """Sections of the files under ``docs`` whose chunks stitched back are not the file's slice."""
    from docsets import chunk_file, engine_files

    from llama_index_polaris.engine.search.context import RUN_SEPARATOR, runs, stitch
    from llama_index_polaris.engine.ingest.sources import decode_source
    from llama_index_polaris.engine.text import nfc

    out = {"sections": 0, "mismatch": 0, "fences": 0, "space": 0, "text": 0}
    for rel, path in engine_files(docs):
        source = nfc(decode_source(path.read_bytes()))
        groups: dict[str, list[tuple[int, Any]]] = {}
        for i, c in enumerate(chunk_file(source, rel)):
            groups.setdefault(c.heading_path_str, []).append((i, c))
        for chunks in groups.values():
            got = stitch([(c.text, c.start, c.end) for _, c in chunks])
            want = RUN_SEPARATOR.join(source[a:b] for a, b in runs([(i, c.start, c.end) for i, c in chunks]) or [])
            out["sections"] += 1
            if got != want:
                out["mismatch"] += 1
                out[kind_of(got, want)] += 1
    return out


def cached_index(name: str, cache: Path | None) -> Path:
    """The set's cached index: ours, else a read-only copy of the one in ``cache``, else built."""
    from docsets import load_set
    from sections import index_path, open_index

    ds = load_set(name)
    path = index_path(ds)
    if not path.exists() and cache is not None and (cache / path.name).exists():
        src = sqlite3.connect(f"file:{cache / path.name}?mode=ro", uri=True)  # never written to
        dst = sqlite3.connect(path)
        src.backup(dst)
        src.close()
        dst.close()
    if not path.exists():
        index, _ = open_index(ds)  # embeds the whole set
        index.close()
    return path


def render(results: dict[str, dict[str, Any]]) -> str:
    rows = ["| set | sections | before: not the file (fences, space, text) | after: not the file | texts stored |"
            " chunks embedded | size before | size after | + |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    total = {"sections": 0, "before": 0, "after": 0, "size_before": 0, "size_after": 0}
    for name, r in results.items():
        b, a = r["before"], r["after"]
        rows.append(f"| {name} | {b['sections']} | {b['mismatch']} ({b['fences']}, {b['space']}, {b['text']}) | {a['mismatch']} |"
                    f" {r['texts_stored']} | {r['chunks_embedded']} | {r['size_before'] / 1e6:.2f} MB |"
                    f" {r['size_after'] / 1e6:.2f} MB | {100 * (r['size_after'] / r['size_before'] - 1):.1f}% |")
        total["sections"] += b["sections"]
        total["before"] += b["mismatch"]
        total["after"] += a["mismatch"]
        total["size_before"] += r["size_before"]
        total["size_after"] += r["size_after"]
    if len(results) > 1:
        rows.append(f"| all | {total['sections']} | {total['before']} | {total['after']} | | |"
                    f" {total['size_before'] / 1e6:.2f} MB | {total['size_after'] / 1e6:.2f} MB |"
                    f" {100 * (total['size_after'] / total['size_before'] - 1):.1f}% |")
    return "\n".join(rows)


def render_stitched(counted: dict[str, dict[str, Any]]) -> str:
    rows = ["| set | sections | stitched chunks not the file | fences | space | text |", "|---|---:|---:|---:|---:|---:|"]
    for name, c in counted.items():
        rows.append(f"| {name} | {c['sections']} | {c['mismatch']} | {c['fences']} | {c['space']} | {c['text']} |")
    total = {k: sum(c[k] for c in counted.values()) for k in ("sections", "mismatch", "fences", "space", "text")}
    rows.append(f"| all | {total['sections']} | {total['mismatch']} | {total['fences']} | {total['space']} | {total['text']} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    from docsets import ALL_SETS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="doc sets (default: all prepared ones)")
    ap.add_argument("--cache", type=Path, help="a folder of cached set indexes to copy from (read only)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--stitched", action="store_true", help="no index: what stitching chunks gave, per set")
    args = ap.parse_args(argv)
    from docsets import load_set
    from sections import config

    if args.stitched:
        counted = {}
        for name in args.names or ALL_SETS:
            try:
                counted[name] = stitched_counts(load_set(name).docs)
            except SystemExit as exc:
                print(f"{name}: skipped ({exc})", file=sys.stderr)
        print(json.dumps(counted, indent=2) if args.json else render_stitched(counted))
        return 0

    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.names or ALL_SETS:
            try:
                ds = load_set(name)
            except SystemExit as exc:
                print(f"{name}: skipped ({exc})", file=sys.stderr)
                continue
            results[name] = measure(cached_index(name, args.cache), ds.docs, Path(scratch), config())
            print(f"{name}: {results[name]['before']['mismatch']} -> {results[name]['after']['mismatch']}"
                  f" of {results[name]['before']['sections']}", file=sys.stderr)
    text = json.dumps(results, indent=2) if args.json else render(results)
    print(text)
    (out_dir() / "section_text.md").write_text(render(results) + "\n")
    return 0 if all(r["after"]["mismatch"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
