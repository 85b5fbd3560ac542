"""The `polaris` command: index a docs folder, search it, and look at the index.

It never imports llama_index: `polaris search` is what an agent runs dozens of times
in a row, so start-up stays small.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
from typing import Any, NoReturn, Sequence

from .engine.config import describe, load_config
from .engine.errors import PolarisError
from .engine.text import one_line, pasted

EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


def _config(args: argparse.Namespace, **overrides: Any) -> Any:
    return load_config(config_file=getattr(args, "config", None), db_path=args.db, **overrides)


def _db_path(args: argparse.Namespace) -> str:
    try:
        return _config(args).db_path
    except PolarisError:
        return args.db or "polaris.db"


def _open(args: argparse.Namespace, *, readonly: bool, **overrides: Any) -> Any:
    from .engine.index import PolarisIndex

    cfg = _config(args, **overrides)
    return PolarisIndex(cfg.db_path, config=cfg, readonly=readonly, fast_start=readonly)


# -- index ------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace) -> int:
    """polaris index PATH... : incremental indexing."""
    from .engine.ingest.sources import common_folder

    common_folder(args.paths)  # a missing path is an error before anything is opened
    with _open(args, readonly=False, model_id=args.model) as index:
        new_file = index.store.model is None and index.store.counts()["documents"] == 0
        try:
            index.embedder  # noqa: B018  the model is found (or refused) before any work
        except PolarisError:
            if new_file:  # leave no empty index behind a model that could not load
                index.close()
                _remove_index(index.path)
            raise
        bar = _progress_bar(args.quiet)
        try:
            report = index.index_paths(
                args.paths, collection=args.collection, progress=bar.update,
                on_wait=lambda msg: print(f"polaris: {msg}", file=sys.stderr, flush=True),
            )
        finally:
            bar.close()
    for kind in ("failed", "skipped", "warning"):
        for path, reason in getattr(report, "warnings" if kind == "warning" else kind):
            print(shown(f"{kind}: {path}: {reason}"), file=sys.stderr)
    if report.root_line():
        print(f"polaris: collection '{args.collection}': {report.root_line()}", file=sys.stderr)
    if report.nothing_line():
        print(f"polaris: {' '.join(map(str, args.paths))}: {report.nothing_line()}", file=sys.stderr)
    if args.json:
        lists = {k: [list(x) for x in getattr(report, k)] for k in ("failed", "skipped", "warnings", "ignored")}
        print(json.dumps({**vars(report), **lists}, indent=2))
    else:
        print(report.summary())
    if args.watch:
        return _watch(args)
    return 0


def _watch(args: argparse.Namespace) -> int:
    """After the first run of `polaris index --watch`: one line per document as it is stored, until
    Ctrl-C (or SIGTERM).

    The first Ctrl-C says so at once, lets the documents being indexed finish, then stops (exit 0);
    a second one stops at once (exit 130): the document being written is rolled back, as any
    interrupted run's. Either way the last line says what the batch under way saved."""
    import signal
    import threading

    from .engine.ingest.watch import Follower

    stop, hard = threading.Event(), threading.Event()
    shown = " ".join(args.paths)
    out = _WatchLines(args.json, _progress_bar(args.quiet or args.json, delay=0.5))

    def on_signal(signum: int, frame: Any) -> None:
        if hard.is_set():  # stopping at once already: the rollback is under way
            return
        if stop.is_set():
            hard.set()
            raise KeyboardInterrupt
        stop.set()
        _say_now("polaris: stopping after the current document (Ctrl-C again stops at once)")

    def on_ready() -> None:
        print(f"polaris: watching {shown} for changes (Ctrl-C to stop)", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with _open(args, readonly=False, model_id=args.model) as index:
            follower = Follower(index, args.paths, args.collection,
                                on_wait=lambda msg: print(f"polaris: {msg}", file=sys.stderr, flush=True))
            follower.follow(out.change, stop, on_ready, progress=out)
    except KeyboardInterrupt:
        print(f"polaris: stopped at once: {out.saved} documents of the batch saved (shown above), the one being"
              f" written rolled back; `polaris index {shown}` (or --watch) indexes the rest", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if out.left:
        print(f"polaris: stopped after the current document: {out.saved} documents of the batch saved (shown"
              f" above), {out.left} files left for the next run (`polaris index {shown}`, or --watch)", file=sys.stderr)
    else:
        print("polaris: stopped watching; the index holds every change shown above", file=sys.stderr)
    return 0


class _WatchLines:
    """What `polaris index --watch` prints of each batch: a line per change as it comes (above the
    bar, which ``bar`` draws on a terminal), and what the batch saved and left (``saved``, ``left``)."""

    def __init__(self, json_lines: bool, bar: Any) -> None:
        self.json, self.bar = json_lines, bar
        self.saved = self.done = self.total = 0
        self.open = False

    def _start(self) -> None:
        if not self.open:  # a new batch
            self.open, self.saved, self.done, self.total = True, 0, 0, 0

    def change(self, change: Any) -> None:
        """One change, printed at once (flushed)."""
        import time

        self._start()
        self.saved += change.kind in ("added", "updated", "renamed")
        line = json.dumps(change.to_dict()) if self.json else f"{time.strftime('%H:%M:%S')} {change.line()}"
        self.bar.write(line, file=sys.stdout)

    def update(self, stage: str, done: int, total: int) -> None:
        """The indexer's progress: the bar, and how far the batch got."""
        self._start()
        if stage == "documents":
            self.done, self.total = done, total
        self.bar.update(stage, done, total)

    def close(self) -> None:
        """The batch is over."""
        self.open = False
        self.bar.close()

    @property
    def left(self) -> int:
        """The files of the last batch its run did not reach (it was stopped)."""
        return self.total - self.done


def _say_now(message: str) -> None:
    """``message`` on stderr from a signal handler (no buffered stream: it may be mid-write), over the bar."""
    clear = "\r\033[K" if sys.stderr.isatty() else ""
    os.write(sys.stderr.fileno(), f"{clear}{message}\n".encode())


# -- remove -----------------------------------------------------------------------
def cmd_remove(args: argparse.Namespace) -> int:
    """polaris remove : drop a collection, or the files under some paths, from the index."""
    if not args.paths and args.collection is None:
        raise PolarisError("name what to remove: PATH... (files under them) or --collection NAME (all of it).")
    collection = args.collection or "default"
    with _open(args, readonly=False) as index:
        removed = index.remove(collection, args.paths or None)
    print(json.dumps({"removed": removed, "collection": collection}) if args.json else f"{removed} removed")
    return 0

def _remove_index(path: Any) -> None:
    from .engine.storage import is_server_uri

    if is_server_uri(str(path)):  # the tables this run created go; the database itself stays
        from .engine.postgres import schema
        from .engine.postgres.connect import connect

        conn = connect(str(path))
        try:
            schema.drop_empty_index(conn)
        finally:
            conn.close()
        return
    for suffix in ("", "-wal", "-shm", ".lock"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _progress_bar(quiet: bool, delay: float = 0) -> Any:
    """The indexing bar on a terminal (``progress``), shown once a run has lasted ``delay`` seconds;
    silent otherwise."""
    from .progress import IndexProgress

    return IndexProgress(enabled=not quiet and sys.stderr.isatty(), file=sys.stderr, leave=False, delay=delay)


# -- search -----------------------------------------------------------------------
def cmd_search(args: argparse.Namespace) -> int:
    """polaris search QUERY : hybrid search with optional explanation."""
    _one_blas_thread()
    with _open(args, readonly=True) as index:
        hits = index.search(
            args.query, top_k=args.k, mode=args.mode, unit=args.unit,
            documents=args.document or None, collections=args.collection or None,
            context_tokens=args.context_tokens if args.context == "section" else None,
        )
    if args.json:  # stdout stays a JSON array: each hit has strength and good_match, the verdict goes to stderr
        print(json.dumps([h.to_dict(explain=args.explain) for h in hits], indent=2, ensure_ascii=not _utf8(sys.stdout)))
        if hits and hits.no_match_note:
            print(hits.no_match_note, file=sys.stderr)
        return 0
    if not hits:
        print("no results", file=sys.stderr)
        return 0
    from .engine.search.highlight import Highlighter

    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    if hits.no_match_note:  # the engine's verdict: nothing matched well
        print(hits.no_match_note + "\n")
    marker = Highlighter(args.query, hits.tokenizer)
    marker.prime(" ".join(h.text.split()) for h in hits)
    if args.explain and hits[0].explain.fusion:
        from .engine.search.explain import fusion_line

        print(fusion_line(hits[0].explain.fusion) + "\n")
    for hit in hits:
        print(_hit_text(hit, args.query, color, args.explain, marker))
    return 0


def _one_blas_thread() -> None:
    """One search multiplies no large matrices: numpy's BLAS need not start a thread per core
    (measured: 0.1 s less CPU per cold `polaris search`), unless the environment chose already."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def shown(text: str) -> str:
    """``text`` safe to print on a terminal: every control character but newline and tab, and the
    marks that reorder text, written as escapes (``\\x1b``), so a document cannot recolour the
    output, retitle the window or clear the screen."""
    from .engine.text import escaped_controls

    return escaped_controls(text, keep="\n\t")


def _hit_text(hit: Any, query: str, color: bool, explain: bool, marker: Any = None) -> str:
    from .engine.search.explain import explain_line

    bold = (lambda s: f"\033[1m{s}\033[0m") if color else (lambda s: s)
    where = one_line(f"{hit.document}" + (f"  ›  {hit.heading_path}" if hit.heading_path else ""))
    match = "" if hit.strength is None else f"  (match {hit.strength:.2f}{'' if hit.good_match else ', weak'})"
    lines = [f"{hit.rank:>2}. {hit.score:.3f}  {bold(where)}{match}", "    " + snippet(hit.text, query, color, marker=marker)]
    if hit.document_status == "stale":
        lines.append(f"    stale: {shown(hit.document_error or '')}")
    if explain:
        lines.append("    " + explain_line(hit.explain))
        if hit.explain.chunks and len(hit.section_chunks) > 1:
            lines.append("    " + _chunks_line(hit))
    if hit.section_text is not None:
        if hit.section_exact is False:
            from .engine.storage.documents import NOT_EXACT

            lines.append(f"    ({NOT_EXACT})")
        lines.append("    " + shown(hit.section_text).replace("\n", "\n    "))
    return "\n".join(lines) + "\n"


def _chunks_line(hit: Any) -> str:
    """Which of the section's chunks matched, with each one's rank in each list."""
    shown = hit.section_chunks.index(hit.node_id) + 1 if hit.node_id in hit.section_chunks else "?"
    parts = [f"{_fmt(m.position, 'd')} (vector #{_fmt(m.vector_rank, 'd')}, bm25 #{_fmt(m.bm25_rank, 'd')})"
             for m in hit.explain.chunks]
    return f"section of {len(hit.section_chunks)} chunks, shown: {shown}; matched: " + ", ".join(parts)


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def snippet(text: str, query: str, color: bool = False, width: int = 220, marker: Any = None) -> str:
    """A one-line window of ``text`` from a little before its first marked word, the words
    BM25 matched highlighted by the engine's ``Highlighter`` (as the page and notebook mark)."""
    from .engine.search.highlight import Highlighter

    marker = marker or Highlighter(query)
    flat = shown(" ".join(text.split()))
    marks = marker.spans(flat)
    first = marks[0][0] if marks else 0
    start = max(0, first - width // 3)
    if start:
        start = flat.find(" ", start) + 1 or start
    window = flat[start:start + width]
    if color:
        inside = [(a - start, b - start) for a, b in marks if start <= a and b <= start + width]
        for a, b in reversed(inside):
            window = window[:a] + f"\033[1;33m{window[a:b]}\033[0m" + window[b:]
    return ("…" if start else "") + window + ("…" if start + width < len(flat) else "")


# -- status and models -------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    """polaris status : what the index holds and the effective config."""
    cfg = _config(args)
    from .engine.index import PolarisIndex, upgrade_schema

    upgraded = upgrade_schema(cfg.db_path)  # the one reading command that upgrades an older file
    if upgraded:
        from .engine.storage import shown_target

        print(f"polaris: upgraded {shown_target(cfg.db_path)} from schema v{upgraded[0]} to v{upgraded[1]}",
              file=sys.stderr)
    with PolarisIndex(cfg.db_path, config=cfg, readonly=True) as index:
        status = index.status(check=args.check, changes=True)
    status["config"] = {k: {"value": v, "source": s} for k, v, s in describe(cfg)}
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print(shown(_status_text(status)))
    if args.check and status["integrity"] != ["ok"]:
        raise PolarisError(
            f"{status['db_path']} is damaged ({'; '.join(status['integrity'][:3])}). Rebuild it: move it"
            " aside and run `polaris index` on your folders again (the documents themselves are on disk)."
        )
    if args.check and status["vectors"] and status["vectors"]["skipped"]:
        raise PolarisError(
            f"{status['db_path']} holds {status['vectors']['skipped']} rows that vector search skips (listed above;"
            " written around Polaris, which refuses such vectors). Search still answers without them. To restore a"
            " file's chunks: `polaris remove PATH` then `polaris index PATH` (it embeds them again); a LlamaIndex"
            " node: add it again with its embedding."
        )
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    """polaris backup DEST : a consistent one-file copy of the index, safe while it is in use."""
    with _open(args, readonly=True) as index:
        target = index.backup(args.dest)
        counts = index.store.counts()
    _print_summary(args, str(target), counts)
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    """polaris copy SRC DST : the index at SRC into a new DST (a file or a postgresql:// URI), vectors and all."""
    from .engine.ingest.copy import copy_index

    counts = copy_index(args.src, args.dst)
    _print_summary(args, _shown(args.dst), counts)
    return 0


def _print_summary(args: argparse.Namespace, target: str, counts: dict[str, Any]) -> None:
    """What `backup` and `copy` wrote: ``TARGET: N documents, M chunks``, or that as a JSON object."""
    if args.json:
        print(json.dumps({"target": target, "documents": counts["documents"], "chunks": counts["chunks"]}))
    else:
        print(f"{target}: {counts['documents']} documents, {counts['chunks']} chunks")


def _shown(target: str) -> str:
    from .engine.storage import is_server_uri

    if is_server_uri(target):
        from .engine.postgres.connect import shown

        return shown(target)
    return target


def _status_text(s: dict[str, Any]) -> str:
    lines = [
        f"index      {s['db_path']} ({s['size_bytes'] / 1e6:.1f} MB, schema v{s['schema_version']})",
        f"model      {s['model_id']} ({s['embedding_dim']} dims)",
        f"documents  {s['documents']}    chunks {s['chunks']}",
    ]
    budget = s.get("chunk_budget")
    if budget:
        lines.append(f"chunking   {budget['tokens']} tokens per chunk at most: {budget['source']}")
    if s.get("documents_without_text"):
        lines.append(f"texts      {s['documents_without_text']} documents have no stored text, so their sections are"
                     " rebuilt from chunks (indexed before Polaris kept it, or added as LlamaIndex nodes);"
                     " `polaris index` over their folder stores it, re-embedding nothing")
    for name, statuses in s["collections"].items():
        root = s["roots"].get(name)
        where = f" (root {one_line(root)}{'' if s['root_exists'].get(name) else ', MISSING: see below'})" if root else ""
        lines.append(f"  {one_line(name)}{where}: " + ", ".join(f"{n} {st}" for st, n in statuses.items()))
    for name, root in s["roots"].items():
        if root and not s["root_exists"].get(name):
            lines.append(
                f"  root of '{one_line(name)}' is gone: if it moved, `polaris index NEW_PLACE --collection"
                f" {pasted(name)}` re-keys nothing and re-embeds nothing; to drop it, `polaris remove --collection"
                f" {pasted(name)}`"
            )
    lines += _changes_lines(s["changes"])
    check = "; ".join(s["integrity"][:5]) if "integrity" in s else "not checked (`polaris status --check` reads every page)"
    lines.append(f"integrity  {check}")
    vectors = s.get("vectors")
    if vectors is not None:
        lines.append(f"vectors    {vectors['skipped']} rows skipped by vector search" if vectors["skipped"]
                     else "vectors    ok (every chunk has a valid vector in chunks_vec)")
        lines += [f"  {_bad_vector_line(row)}" for row in vectors["rows"]]
        if vectors["skipped"] > len(vectors["rows"]):
            lines.append(f"  ... and {vectors['skipped'] - len(vectors['rows'])} more (--json lists the first"
                         f" {len(vectors['rows'])})")
    lines.append("config (value, from)")
    lines += [f"  {k:<26} {c['value']!r:<42} {c['source']}" for k, c in s["config"].items()]
    return "\n".join(lines)


def _changes_lines(changes: dict[str, Any]) -> list[str]:
    """What changed on disk since indexing, per collection (``freshness``)."""
    stale = {name: c for name, c in changes.items() if c["stale"]}
    failed = [f"            failed (not indexed): {one_line(p)}: {r}" for c in changes.values()
              for p, r in c["failed"]["reasons"].items()]
    if not stale:
        return ["on disk   every file as indexed", *failed]
    lines = []
    for name, c in stale.items():
        counts = ", ".join(f"{c[k]['count']} {k}" for k in ("changed", "missing", "new", "unreadable") if c[k]["count"])
        lines.append(f"on disk   {one_line(name)}: {counts} since indexed")
        lines += [f"            {k}: {', '.join(map(one_line, c[k]['paths']))}" for k in ("changed", "missing", "new")
                  if c[k]["paths"]]
        lines += [f"            unreadable: {one_line(p)}: {r}" for p, r in c["unreadable"]["reasons"].items()]
        if c["root_exists"]:
            lines.append(f"            update: polaris index {pasted(c['root'])} --collection {pasted(name)}")
    return lines + failed


def _bad_vector_line(row: dict[str, Any]) -> str:
    from .engine.storage.vectors import BadVector

    return BadVector(**row).line()


def cmd_models(args: argparse.Namespace) -> int:
    """polaris models : the embedding models, and which are available offline."""
    from .engine.embed import list_models, model_status

    cfg = _config(args)
    rows = []
    for spec in list_models():
        st = model_status(spec)
        rows.append({"id": spec.id, "dim": spec.default_dim, "native_dim": spec.native_dim,
                     "size_mb": spec.size_mb, "default": spec.id == cfg.model_id, **st})
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    for r in rows:
        mark = "*" if r["default"] else " "
        where = r.get("path") or ""
        print(f"{mark} {r['id']:<24} {r['dim']:>5} dims  ~{r['size_mb']:>4} MB  {r.get('status', '?'):<9} {where}")
    print("\n* = model_id in effect for new indexes")
    return 0


# -- mcp --------------------------------------------------------------------------
MCP_MISSING = "`polaris mcp` needs the MCP Python SDK, an optional extra: in the clone of Polaris, pip install -e '.[mcp]'."


def cmd_mcp(args: argparse.Namespace) -> int:
    """polaris mcp : serve the index to agents over MCP (stdio, or streamable HTTP)."""
    from .mcp_binding import http_binding

    http_binding(args.http, args.allow_host or ())  # a refused bind is said before the SDK's imports
    try:
        from .mcp_server import serve
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mcp", "mcp_types"):
            raise PolarisError(MCP_MISSING) from None
        raise

    try:
        serve(_config(args), collection=args.collection, allow_writes=args.allow_writes, http=args.http,
              allow_hosts=args.allow_host or ())
    except KeyboardInterrupt:
        pass
    return 0


# -- parser -----------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="FILE", help="index file or postgresql:// URI (default: db_path from polaris.toml,"
                   " else ./polaris.db)")
    p.add_argument("--config", metavar="FILE", help="polaris.toml to use instead of ./polaris.toml")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are JSON when the command line asks for --json."""

    def __init__(self, *args: Any, json_errors: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.json_errors = json_errors

    def error(self, message: str) -> NoReturn:
        if not self.json_errors:
            super().error(message)
        print_error(True, "UsageError", f"{self.prog}: {message}")
        self.exit(EXIT_USAGE)


class _Version(argparse.Action):
    """``polaris --version``: the installed package's version, read only when asked (start-up stays small)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"polaris {package_version()}")
        parser.exit()


def package_version() -> str:
    """The version of the installed llama-index-polaris distribution."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-index-polaris")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed: pip install -e . in the clone)"


def print_error(as_json: bool, kind: str, message: str, label: str = "error") -> None:
    """An error on stderr: ``polaris: error: MESSAGE``, or, for a command run with --json, one
    line ``{"error": {"type": KIND, "message": MESSAGE}}`` (KIND: the engine's exception name)."""
    if as_json:
        print(json.dumps({"error": {"type": kind, "message": message}}, ensure_ascii=not _utf8(sys.stderr)),
              file=sys.stderr)
    else:
        print(shown(f"polaris: {label}: {message}" if label else f"polaris: {message}"), file=sys.stderr)


def build_parser(json_errors: bool = False) -> argparse.ArgumentParser:
    """The argument parser for every subcommand (``json_errors``: its usage errors as ``print_error``'s JSON)."""
    parser = _Parser(prog="polaris", description="Local-first hybrid search over Markdown docs.", json_errors=json_errors)
    parser.add_argument("--version", action=_Version, help="print the version of Polaris and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=functools.partial(_Parser, json_errors=json_errors))

    p = sub.add_parser("index", help="index Markdown and text files (incremental)")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--collection", default="default")
    p.add_argument("--model", metavar="ID", help="embedding model (see `polaris models`)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true")
    p.add_argument("--watch", action="store_true",
                   help="after the run, follow changes under PATHs and index each one (Ctrl-C stops after the"
                        " current document; a second Ctrl-C at once)")
    _common(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("search", help="search the index",
                       epilog="A query that starts with '-' (a flag such as --locked) is taken as the query"
                              " when it is the only one; `polaris search -- --locked` says so explicitly.")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=None, help="number of hits (1-100; default top_k)")
    p.add_argument("--mode", choices=("hybrid", "vector", "bm25"), default="hybrid")
    p.add_argument("--collection", action="append", metavar="NAME")
    p.add_argument("--document", action="append", metavar="PATH")
    p.add_argument("--unit", choices=("section", "chunk"), help="a hit is a section (default) or a chunk")
    p.add_argument("--context", choices=("chunk", "section"), default="chunk",
                   help="section: print each hit's whole section (bounded by --context-tokens)")
    p.add_argument("--context-tokens", type=int, default=800, metavar="N", help="budget of a section's text")
    p.add_argument("--json", action="store_true")
    p.add_argument("--explain", action="store_true", help="per-stage figures for each hit")
    _common(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("status", help="what the index holds, and the effective config")
    p.add_argument("--json", action="store_true")
    p.add_argument("--check", action="store_true", help="also read every page (PRAGMA quick_check) and every stored vector")
    _common(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("backup", help="copy the index to a new file, safely while it is in use",
                       epilog="Copying polaris.db alone can miss the last runs (they may still be in"
                              " polaris.db-wal); this writes one complete, checked file.")
    p.add_argument("dest", metavar="DEST", help="a new file, or a folder to put it in")
    p.add_argument("--json", action="store_true")
    _common(p)
    p.set_defaults(func=cmd_backup)

    p = sub.add_parser("copy", help="copy an index between a file and a postgresql:// database, vectors and all",
                       epilog="Nothing is re-embedded; `polaris status` on the copy shows the same counts."
                              " DST must be a new file or an empty database.")
    p.add_argument("src", metavar="SRC", help="the index to copy: a polaris.db file or a postgresql:// URI")
    p.add_argument("dst", metavar="DST", help="where to: a new file or an empty postgresql:// database")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_copy, db=None)

    p = sub.add_parser("remove", help="remove a collection, or the files under PATHs, from the index")
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (they may no longer exist)")
    p.add_argument("--collection", metavar="NAME", help="the collection (default: 'default'); alone: all of it")
    p.add_argument("--json", action="store_true")
    _common(p)
    p.set_defaults(func=cmd_remove)

    p = sub.add_parser("models", help="embedding models and where their files are")
    p.add_argument("--json", action="store_true")
    _common(p)
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("mcp", help="serve the index to agents over MCP (stdio; --http for streamable HTTP)",
                       description="An MCP server over the index: tools search, read_section, outline,"
                                   " list_documents, status (and reindex with --allow-writes), and a resource"
                                   " per document (polaris://COLLECTION/PATH). See docs/mcp.md.")
    p.add_argument("--collection", metavar="NAME", help="the collection tools use when a call names none (default: all)")
    p.add_argument("--http", metavar="[HOST:]PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp (HOST defaults to 127.0.0.1) instead of stdio")
    p.add_argument("--allow-host", action="append", metavar="HOST",
                   help="with --http: also answer requests for HOST (repeatable; required beyond loopback: requests"
                        " naming another Host or Origin are refused)")
    p.add_argument("--allow-writes", action="store_true",
                   help="open the index for writing and offer the reindex tool (default: read-only)")
    _common(p)
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("eval", help="retrieval quality on a BEIR-layout folder")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--split", default="test")
    p.add_argument("--mode", choices=("hybrid", "vector", "bm25", "all"), default="all")
    p.add_argument("--model", metavar="ID")
    p.add_argument("--unit", choices=("section", "chunk"), help="what a hit is (default: the config's unit)")
    p.add_argument("--whole-documents", action="store_true",
                   help="one chunk per corpus entry, cut at the model's window (the BEIR/MTEB setup)")
    p.add_argument("--json", action="store_true")
    _common(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("tune", help="fit the fusion to labelled questions; writes polaris.toml only when it helps",
                       description="Fit the learned fusion (a weighted sum of each hit's explanation features) to"
                                   " labelled questions with k-fold cross-validation, print the before/after table,"
                                   " and write [fusion_weights] to polaris.toml only when the cross-validated gain's"
                                   " 95% paired bootstrap interval is above 0. See docs/search.md.")
    p.add_argument("labels", metavar="LABELS",
                   help="a BEIR folder (as polaris eval reads) or a JSONL file: {\"question\": ..., \"path\": ..., \"heading\": ...}")
    p.add_argument("--split", help="BEIR qrels split (default: train if qrels/train.tsv exists, else test)")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
    p.add_argument("--dry-run", action="store_true", help="print the table and the decision, write nothing")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    p.add_argument("--json", action="store_true")
    _common(p)
    p.set_defaults(func=cmd_tune)
    return parser


# -- eval -------------------------------------------------------------------------
def cmd_eval(args: argparse.Namespace) -> int:
    """polaris eval DIR : nDCG@10, Recall@10/100, MRR@10 of each mode on a BEIR folder."""
    from .engine.tune.evaluate import METRICS, build_eval_index, load_beir, run_modes

    config = load_config(config_file=args.config, model_id=args.model)
    beir = load_beir(args.dir, args.split)
    index, report = build_eval_index(beir, config, whole_documents=args.whole_documents, db=args.db)
    modes = ("vector", "bm25", "hybrid") if args.mode == "all" else (args.mode,)
    with index:
        model_id = index.store.model.model_id
        results = run_modes(index, beir, modes, unit=args.unit)
    if args.json:
        print(json.dumps({m: {k: round(v, 4) for k, v in r.items()} for m, r in results.items()}, indent=2))
        return 0
    print(f"{beir.path.name} ({args.split}, {len(beir.qrels)} queries), model {model_id};"
          f" index: {report.summary()}", file=sys.stderr)
    print(f"| mode | {' | '.join(METRICS)} | ms/query |")
    print("|---" * (len(METRICS) + 2) + "|")
    for mode, r in results.items():
        print(f"| {mode} | " + " | ".join(f"{r[m]:.4f}" for m in METRICS) + f" | {r['ms_per_query']:.1f} |")
    return 0


# -- tune -------------------------------------------------------------------------
def cmd_tune(args: argparse.Namespace) -> int:
    """polaris tune LABELS : fit the learned fusion to labelled questions; write it only when it helps."""
    from pathlib import Path

    from .engine.tune import fit as tune
    from .engine.errors import InputError

    labels = Path(args.labels)
    if args.folds < 2:
        raise InputError(f"--folds must be 2 or more (each question is ranked by weights fitted on the other folds), got {args.folds}.")
    if not labels.exists():
        raise InputError(f"{labels}: not found; give a BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or a JSONL"
                         " file of questions with their relevant path and heading (see docs/search.md, \"polaris tune\").")
    index, questions, source = _tune_inputs(args, labels)
    with index:
        found = _tune_samples(index, questions, args.quiet)
    result = tune.decide(found, k=args.folds)
    target = Path(args.config) if args.config else Path("polaris.toml")
    write = result.keep and not args.dry_run
    if write:
        from .engine.tune.labels import write_weights

        write_weights(target, tune.weights_table(result.weights))
    if args.json:
        print(json.dumps({**vars(result), "source": source, "written": str(target) if write else None}, indent=2))
        return 0
    print(f"{source}: {result.questions} questions, {args.folds}-fold cross-validation (each question ranked by"
          " weights fitted without it), nDCG@10 over each question's first candidate pool")
    print("| ranking | nDCG@10 | first hit relevant |\n|---|---|---|")
    print(f"| fixed fusion (before) | {result.before:.4f} | {result.hit1_before:.4f} |")
    print(f"| learned fusion, cross-validated (after) | {result.after:.4f} | {result.hit1_after:.4f} |")
    print(f"gain {result.gain:+.4f}, 95% paired bootstrap interval {result.low:+.4f} to {result.high:+.4f}"
          f" ({tune.BOOTSTRAP} resamples of the questions); weights are written only when the whole interval is above 0.")
    if write:
        print(f"kept: {result.reason}. Wrote {len(result.weights)} weights to {target} ([fusion_weights]); every door"
              " ranks with them now. Remove the table to go back to the fixed fusion.")
    elif result.keep:
        print(f"would keep: {result.reason}; --dry-run: nothing written.")
    else:
        print(f"not written: {result.reason}. {target} is unchanged.")
    return 0


def _tune_inputs(args: argparse.Namespace, labels: Any) -> tuple[Any, list, str]:
    """The index and the labelled questions of a BEIR folder (indexed into the eval cache) or of
    a JSONL file (asked of --db)."""
    from .engine.tune import labels as tune_labels

    if labels.is_dir():
        from .engine.tune.evaluate import build_eval_index, load_beir

        split = args.split or ("train" if (labels / "qrels" / "train.tsv").is_file() else "test")
        beir = load_beir(labels, split)
        index, _ = build_eval_index(beir, load_config(config_file=args.config))
        return index, tune_labels.beir_questions(beir), f"{labels.name} ({split})"
    questions = tune_labels.read_jsonl(labels)
    index = _open(args, readonly=True)
    docs = [d.path or d.id for d in index.store.documents()] + [d.id for d in index.store.documents()]
    tune_labels.check_known(questions, docs, str(labels))
    return index, questions, labels.name


def _tune_samples(index: Any, questions: list, quiet: bool) -> list:
    from .engine.tune.labels import samples

    def progress(done: int, total: int) -> None:
        if not quiet and sys.stderr.isatty():
            print(f"\rpolaris tune: {done}/{total} questions", end="" if done < total else "\n", file=sys.stderr)

    return samples(index, questions, progress)


def flag_query(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``polaris search --locked``: a query spelled like a flag is the query, not an unknown
    option (argparse would refuse it), when no other query was given; ``--`` is put before it."""
    argv = list(argv)
    if not argv or argv[0] != "search" or "--" in argv:
        return argv
    search = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(" search"))
    options = search._option_string_actions
    unknown, positional, i = [], 0, 1
    while i < len(argv):
        token = argv[i]
        action = options.get(token.split("=", 1)[0]) if token.startswith("-") else None
        if action is not None:
            i += 2 if action.nargs != 0 and "=" not in token else 1
            continue
        if token.startswith("-") and len(token) > 1:
            unknown.append(i)
        else:
            positional += 1
        i += 1
    if positional or len(unknown) != 1:
        return argv
    query = argv.pop(unknown[0])
    return [*argv, "--", query]


def _asks_json(argv: list[str]) -> bool:
    """True when the command line asks for --json (before any ``--``): its usage errors are JSON too."""
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


def _exit_now(code: int) -> NoReturn:
    """End a `polaris search` process without the interpreter's teardown (freeing the model
    session and every module: 40 ms of a 0.28 s cold search, measured). The index is closed
    and nothing else is pending; the output is flushed first."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = 0
    os._exit(code)


def _utf8(stream: Any) -> bool:
    """Whether ``stream`` writes UTF-8 (JSON keeps its letters as they are then, else escapes them)."""
    return (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")


def _never_unencodable() -> None:
    """A letter the terminal's encoding lacks (a Windows code page, PYTHONIOENCODING=latin-1) is
    written as an escape, never a crash: ``›`` in every hit's heading line was enough."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and not _utf8(stream):
            reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `polaris` console script."""
    _never_unencodable()
    console = argv is None  # a process of its own, which ends with this command
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(json_errors=_asks_json(argv))
    args = parser.parse_args(flag_query(argv, parser))
    if args.func is cmd_remove and not args.paths and args.collection is None:  # a usage error: exit 2
        parser.error("remove: name what to remove: PATH... (files under them) or --collection NAME (all of it).")
    as_json = bool(getattr(args, "json", False))
    one_shot = console and args.func is cmd_search
    if one_shot:  # a search's imports make no garbage worth collecting before the process ends (-8 ms)
        gc.disable()
    try:
        code = args.func(args)
        if one_shot:
            _exit_now(code)
        return code
    except PolarisError as exc:
        print_error(as_json, type(exc).__name__, str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        print_error(as_json, "Interrupted", "interrupted; finished documents are saved, run the same command to"
                    " resume.", label="")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # SQLite's own errors (a damaged file, a full disk) without a traceback
        from .engine.backends import error_message

        message = error_message(exc, _db_path(args))
        if message is None:
            raise
        print_error(as_json, "DatabaseError", message)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
