"""`polaris mcp`: the index served to coding agents and chat clients over MCP.

A thin adapter over the engine, like the CLI: each tool calls the engine (``PolarisIndex``:
search, outline, read_section, documents, status with ``freshness``) and renders what
it answers twice, as structured content (the engine's own shapes: ``Hit.to_dict`` for a
hit) and as a short text for the model to read. It ranks nothing, cuts nothing and
counts nothing itself; the only decisions here are the bounds of an answer (``LIMITS``),
which the engine enforces with its own messages (``check_top_k``).

- One index per process, opened on first use (read-only unless writes are allowed) and
  warmed in the background at start (model session, vector and BM25 caches), so the
  first search of a fresh server is not the one that loads the model. A file that
  cannot be opened yet (not indexed) is an error of each call, tried again by the next.
- Bad input is a tool result with ``isError`` and the engine's message (the same text
  `polaris` prints after ``polaris: error:``); the session goes on.
- Arguments are strict: an unknown one is refused naming the known ones (the schemas say
  ``additionalProperties: false``), and a value of another type is not converted (``k: true``).
- Transports: stdio (what an agent starts), where a line that cannot be decoded is answered
  with a JSON-RPC error (and a line on stderr), not dropped; or streamable HTTP, bound to
  loopback unless another address is named, with the SDK's Host and Origin checks on every
  bind (beyond loopback only for the hosts named with ``--allow-host``).

The tools, resources and limits are described for users in docs/mcp.md. (No ``from
__future__ import annotations`` here: the SDK reads the tools' signatures, bounds included,
at registration, from closures.)
"""

import functools
import json
import re
import socket
import sys
import threading
from pathlib import Path
from dataclasses import asdict
from typing import Annotated, Any, Callable, Optional, Sequence
from urllib.parse import quote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, Resource, TextContent, ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from .engine.config import PolarisConfig
from .engine.storage.documents import NOT_EXACT
from .engine.errors import PolarisError, ScopeError
from .engine.text import one_line, pasted
from .engine.search.explain import brief_line
from .engine.search.pipeline import MAX_QUERY_CHARS, MODES, check_top_k
from .mcp_binding import Binding, binding, http_binding, in_url

SCHEME = "polaris"
# Every answer is bounded. Tokens are the index's model's (what the engine's budgets count).
LIMITS = {
    "k_default": 5, "k_max": 20,  # search hits
    "section_tokens_default": 300, "section_tokens_max": 2000,  # each hit's section text
    "answer_tokens": 6000,  # a search answer's section texts together: k x section_tokens is cut to fit
    "read_tokens_default": 2000, "read_tokens_max": 8000,  # read_section's text
    "outline_entries": 400,  # headings an outline lists (deeper ones are left out first)
    "outline_depth_max": 100,  # the deepest max_depth an outline call takes
    "list_default": 100, "list_max": 500,  # documents a list_documents page holds
    "resource_tokens": 20000,  # a document read as a resource
    "resources_listed": 1000,  # documents resources/list names
}
INSTRUCTIONS = (
    "Polaris searches this project's Markdown documentation (hybrid: vector + BM25) and answers with"
    " sections, not whole files. Start with `search`; each hit names a document and a heading path,"
    " and shows the section's text up to a token budget. `read_section` reads one section (more of it,"
    " or its neighbours), `outline` shows a document's headings with their sizes, `list_documents` and"
    " `status` say what is indexed and whether files changed on disk since (then answers may be stale)."
)


# -- structured output shapes ------------------------------------------------------------------
class HitItem(TypedDict):
    """One hit: the fields of ``Hit.to_dict`` (as `polaris search --json` prints them) an agent reads
    (``BRIEF``; all of them with ``full``), and two of this door: ``explanation`` and ``on_disk``."""

    rank: int
    score: float
    strength: Optional[float]  # match strength, on one scale for every query (None: nothing to read it from)
    good_match: bool  # strength at or above the engine's threshold
    document: str
    collection: str
    heading_path: str
    node_id: str
    section_start: Optional[int]
    section_end: Optional[int]
    section_text: Optional[str]  # the section, up to section_tokens, the matched chunk kept in view
    section_exact: Optional[bool]  # section_text is the file's own text (False: rebuilt from chunks)
    document_status: str
    document_error: Optional[str]
    explanation: str  # brief_line of the hit's explanation
    on_disk: Optional[str]  # freshness of its file: fresh, changed, missing, unreadable (None: not a file)


# The keys of a hit without ``full``: Claude Code (and VS Code) give the model the structured
# content alone when a result has one, so it is kept to what a reader needs: where, how good,
# the text once (``text``, the chunk that matched, is inside ``section_text``).
BRIEF = ("rank", "score", "strength", "good_match", "document", "collection", "heading_path", "node_id",
         "section_start", "section_end", "section_text", "section_exact", "document_status", "document_error")


class SearchAnswer(TypedDict):
    query: str
    mode: str
    k: int
    section_tokens: int  # the budget each hit's section text had
    no_good_match: bool  # no hit matches well: the documents may not answer this (the engine decides)
    hits: list[HitItem]


class SectionAnswer(TypedDict):
    document: str
    collection: str
    heading_path: str
    title: str
    depth: int
    text: str
    tokens: int
    truncated: bool
    with_subsections: bool
    start_char: Optional[int]
    end_char: Optional[int]
    position: int
    siblings: int
    parent: Optional[str]
    previous: Optional[str]
    next: Optional[str]
    children: list[str]
    document_status: str
    on_disk: Optional[str]
    exact: bool  # text is the file's own (False: rebuilt from chunks; documents.NOT_EXACT says why)


class OutlineItem(TypedDict):
    heading_path: str
    title: str
    depth: int
    tokens: int
    total_tokens: int
    start_char: Optional[int]
    end_char: Optional[int]
    chunks: int


class OutlineAnswer(TypedDict):
    document: str
    collection: str
    tokens: int
    headings: int
    shown: int
    entries: list[OutlineItem]


class DocumentItem(TypedDict):
    document: str
    collection: str
    document_id: str
    status: str
    error: Optional[str]
    chunks: int
    sections: int
    updated_at: Optional[str]
    on_disk: Optional[str]
    stale: bool
    uri: str


class DocumentsAnswer(TypedDict):
    total: int
    offset: int
    documents: list[DocumentItem]


class StatusAnswer(TypedDict):
    db_path: str
    model_id: Optional[str]
    embedding_dim: Optional[int]
    documents: int
    chunks: int
    collections: dict[str, dict[str, int]]
    roots: dict[str, Optional[str]]
    schema_version: int
    documents_without_text: int  # their sections are rebuilt from chunks (documents.NOT_EXACT)
    stale: bool
    changes: dict[str, Any]
    server: dict[str, Any]


class ReindexAnswer(TypedDict):
    collection: str
    root: str
    summary: str
    report: dict[str, Any]


# -- the index, opened once ------------------------------------------------------------------
class Door:
    """The one ``PolarisIndex`` of this server: opened on first use, warmed in the background."""

    def __init__(self, config: PolarisConfig, *, collection: str | None = None, allow_writes: bool = False,
                 transport: str = "stdio") -> None:
        from .engine.index import import_engine

        self.config, self.collection, self.allow_writes, self.transport = config, collection, allow_writes, transport
        import_engine(config.db_path)  # before the warm-up and the tools' worker threads import any of it
        self._index: Any = None
        self._lock = threading.Lock()

    @property
    def db_path(self) -> str:
        """The index as messages name it (a URI without its password)."""
        from .engine.storage import shown_target

        return shown_target(self.config.db_path)

    @property
    def index(self) -> Any:
        """The open index (an error of this call, tried again by the next, when it cannot open)."""
        with self._lock:
            if self._index is None:
                from .engine.index import PolarisIndex

                self._index = PolarisIndex(self.config.db_path, config=self.config, readonly=not self.allow_writes)
                self._index.freshness.may_read = self.may_index  # status and hits read only this server's folders
            return self._index

    def warm(self) -> threading.Thread:
        """Open the index and load what a first query needs, in a background thread."""
        def run() -> None:
            try:
                index = self.index
                if index.store.model is not None:
                    index.embedder.embed_query("warm up")
                    for cache in (index.vector_cache, index.bm25_cache):
                        if cache is not None:
                            cache.refresh()
            except Exception:  # noqa: BLE001  the first call reports it, as the engine words it
                pass

        thread = threading.Thread(target=run, name="polaris-warm-up", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None

    def scope(self, collection: str | None) -> str | None:
        """The collection a call names, else the server's (None: all). An empty name is no name:
        agents fill optional arguments with "", and every tool reads it alike."""
        return collection if collection else self.collection

    def may_index(self, root: str) -> bool:
        """Whether a client's ``reindex`` may walk ``root``, and ``status`` or a hit's freshness read
        files under it: a folder under the index file's folder, under the folder of a polaris.toml
        the server's config came from, or under the folder the server started in unless that is
        ``/`` or the home folder (where a client often starts it).
        Resolved, so a symlink cannot lead out. An index file records its collections' roots, and a
        file from elsewhere could name any folder."""
        from .engine.ingest.sources import real_folder
        from .engine.storage import is_server_uri

        target = real_folder(Path(root))
        homes = [real_folder(Path(source).absolute().parent) for source in set(self.config.sources.values())
                 if source.endswith(".toml")]
        if not is_server_uri(str(self.config.db_path)):
            homes.append(real_folder(Path(self.config.db_path).absolute().parent))
        start = real_folder(Path.cwd())
        if start not in (real_folder(Path(start.anchor)), real_folder(Path.home())):
            homes.append(start)
        return any(target == home or target.is_relative_to(home) for home in homes)

    def on_disk(self, document_id: str) -> str | None:
        """The freshness of one document's file (None: not a file under a root)."""
        index = self.index
        record = index.store.get_document(document_id)
        return index.freshness.document(record) if record is not None else None


# -- the tools' work (each returns structured content and its text) -----------------------------
def search(door: Door, query: str, k: int, mode: str, collection: str | None, documents: list[str] | None,
           section_tokens: int, explain: bool = False, full: bool = False) -> tuple[dict, str]:
    check_top_k(k, LIMITS["k_max"], "k")
    check_top_k(section_tokens, LIMITS["section_tokens_max"], "section_tokens")
    budget = min(section_tokens, LIMITS["answer_tokens"] // k)
    scope = door.scope(collection)
    if documents is not None:  # "" is no name, as a collection's
        documents = [d for d in documents if d] or None
    hits = door.index.search(query, top_k=k, mode=mode, documents=documents, collections=[scope] if scope else None,
                             unit="section", context_tokens=budget)
    states = {d: door.on_disk(d) for d in dict.fromkeys(h.document_id for h in hits)}
    items = []
    for h in hits:
        d = h.to_dict(explain=explain)
        d = d if full else {key: d[key] for key in (*BRIEF, *(("explain",) if explain else ()))}
        items.append({**d, "explanation": brief_line(h.explain), "on_disk": states[h.document_id]})
    answer = {"query": query, "mode": mode, "k": k, "section_tokens": budget, "no_good_match": hits.no_good_match,
              "hits": items}
    return answer, _search_text(answer, hits.no_match_note)


def _search_text(answer: dict, note: str | None = None) -> str:
    hits = answer["hits"]
    if not hits:
        return f"No sections match {answer['query']!r} ({answer['mode']})."
    lines = [f"{len(hits)} sections for {answer['query']!r} ({answer['mode']}; each section's text up to"
             f" {answer['section_tokens']} tokens):"]
    if note:
        lines += ["", note]
    for h in hits:
        match = "" if h["strength"] is None else f" match {h['strength']:.2f}{'' if h['good_match'] else ' (weak)'}"
        lines += ["", f"{h['rank']}. [{h['score']:.3f}{match}] {one_line(h['document'])} › {one_line(h['heading_path'])}",
                  f"   {h['explanation']} | chars {h['section_start']}-{h['section_end']}"]
        lines += _warnings(h["document_status"], h["document_error"], h["on_disk"], h["section_exact"])
        lines.append(h["section_text"] or "")
    lines += ["", "More of a section: read_section(document, heading_path)."]
    return "\n".join(lines)


def _warnings(status: str | None, error: str | None, on_disk: str | None, exact: bool | None = True) -> list[str]:
    out = []
    if status == "stale":
        out.append(f"   ! stale: {error}")
    if exact is False:
        out.append(f"   ! {NOT_EXACT}")
    if on_disk not in (None, "fresh"):
        out.append(f"   ! its file is {on_disk} on disk since it was indexed: this text may be out of date")
    return out


def read_section(door: Door, document: str | None, heading_path: str | None, node_id: str | None,
                 collection: str | None, max_tokens: int, subsections: bool) -> tuple[dict, str]:
    check_top_k(max_tokens, LIMITS["read_tokens_max"], "max_tokens")
    s = door.index.read_section(document, heading_path, node_id=node_id, collection=door.scope(collection),
                                max_tokens=max_tokens, subsections=subsections)
    data = asdict(s)
    ref = data.pop("document")
    data.pop("node_ids")  # the chunks' ids: nothing a reader acts on (a hit's node_id reads its section)
    answer = {"document": ref["path"] or ref["id"], "collection": ref["collection"], **data,
              "document_status": ref["status"], "on_disk": door.on_disk(ref["id"])}
    where = f"under '{s.parent}'" if s.parent else "at the top"
    size = f"{s.tokens} tokens" + (f", cut to {max_tokens}" if s.truncated else "")
    lines = [f"{one_line(answer['document'])} › {one_line(s.heading_path)}",
             f"section {s.position} of {s.siblings} {where} · {size} · chars {s.start_char}-{s.end_char}"
             + (" · with its subsections" if s.with_subsections else "")]
    lines += [f"{label}: {one_line(value)}" for label, value in (("previous", s.previous), ("next", s.next)) if value]
    if s.children:
        lines.append("subsections: " + "; ".join(one_line(c.rsplit(" > ", 1)[-1]) for c in s.children))
    lines += _warnings(ref["status"], ref["error"], answer["on_disk"], s.exact)
    lines += ["---", s.text]
    return answer, "\n".join(lines)


def outline(door: Door, document: str, collection: str | None, max_depth: int | None) -> tuple[dict, str]:
    if max_depth is not None:
        check_top_k(max_depth, LIMITS["outline_depth_max"], "max_depth")
    o = door.index.outline(document, door.scope(collection))
    entries = [e for e in o.entries if max_depth is None or e.depth <= max_depth]
    limit = LIMITS["outline_entries"]
    while len(entries) > limit:  # the deepest headings go first, so the tree stays whole
        deepest = max(e.depth for e in entries)
        entries = [e for e in entries if e.depth < deepest] or entries[:limit]
    items = [{k: v for k, v in asdict(e).items() if k not in ("parent", "children")} for e in entries]
    answer = {"document": o.document.name, "collection": o.document.collection, "tokens": o.tokens,
              "headings": len(o.entries), "shown": len(items), "entries": items}
    lines = [f"{one_line(answer['document'])} ({one_line(answer['collection'])}): {o.tokens} tokens, {len(o.entries)} headings"
             + (f", {len(items)} shown" if len(items) < len(o.entries) else "")]
    for e in entries:
        size = f"{e.tokens}" + (f"; {e.total_tokens} with subsections" if e.total_tokens != e.tokens else "")
        lines.append(f"{'  ' * (e.depth - 1)}- {one_line(e.title)} ({size})")
    return answer, "\n".join(lines)


def list_documents(door: Door, collection: str | None, prefix: str | None, limit: int, offset: int) -> tuple[dict, str]:
    check_top_k(limit, LIMITS["list_max"], "limit")
    index = door.index
    page = index.documents(door.scope(collection), prefix, limit, offset)
    items = []
    for r in page.rows:
        state = index.freshness.document(r)
        items.append({"document": r.path or r.id, "collection": r.collection, "document_id": r.id, "status": r.status,
                      "error": r.error, "chunks": r.chunks, "sections": r.sections, "updated_at": r.updated_at,
                      "on_disk": state, "stale": r.status == "stale" or state not in (None, "fresh"),
                      "uri": document_uri(r.collection, r.path or r.id)})
    answer = {"total": page.total, "offset": page.offset, "documents": items}
    lines = [f"{len(items)} of {page.total} documents" + (f" from {offset}" if offset else "") + ":"]
    for d in items:
        flags = [d["status"]] if d["status"] != "completed" else []
        flags += [f"{d['on_disk']} on disk"] if d["on_disk"] not in (None, "fresh") else []
        lines.append(f"{one_line(d['collection'])}/{one_line(d['document'])}  {d['sections']} sections"
                     + (f"  [{', '.join(flags)}]" if flags else ""))
    return answer, "\n".join(lines)


def status(door: Door) -> tuple[dict, str]:
    from .engine.embed.embedder import loaded_sessions

    s = door.index.status(changes=True)
    index = door.index
    s["server"] = {"transport": door.transport, "read_only": not door.allow_writes, "collection": door.collection,
                   "embedder_loaded": index.embedder_loaded, "model_sessions": loaded_sessions(),
                   "limits": LIMITS}
    keys = StatusAnswer.__annotations__
    answer = {k: s[k] for k in keys}
    unchecked = [n for n, c in s["changes"].items() if not c["checked"]]
    lines = [f"index {s['db_path']}: {s['documents']} documents, {s['chunks']} chunks, model {s['model_id']}",
             "files on disk: " + ("CHANGED since indexing; answers may be stale" if s["stale"] else
                                  "as indexed" + (" (where compared)" if unchecked else ""))]
    if s["documents_without_text"]:
        lines.append(f"{s['documents_without_text']} documents have no stored text: their sections are rebuilt from"
                     " chunks (`polaris index` over their folder stores it)")
    for name, c in s["changes"].items():
        counts = ", ".join(f"{c[k]['count']} {k}" for k in ("changed", "missing", "new", "unreadable", "failed")
                           if c[k]["count"])
        root = c["root"] or "no folder"
        if not c["checked"]:
            lines.append(f"  {one_line(name)} ({one_line(root)}): {c['files']} files; not compared with the disk: its"
                         " folder is outside this server's working folder, the index file's folder and its polaris.toml's")
            continue
        lines.append(f"  {one_line(name)} ({one_line(root)}{'' if c['root_exists'] or not c['root'] else ', GONE'}): {c['files']} files"
                     + (f"; {counts}" if counts else ""))
        for k in ("changed", "missing", "new"):
            if c[k]["paths"]:
                lines.append(f"    {k}: " + ", ".join(map(one_line, c[k]["paths"])))
        if c["stale"] and c["root"]:
            lines.append(f"    update: polaris index {pasted(c['root'])} --collection {pasted(name)}")
    return answer, "\n".join(lines)


def reindex(door: Door, collection: str | None) -> tuple[dict, str]:
    from .engine.errors import InputError

    name = door.scope(collection) or "default"
    index = door.index
    index.check_collection(name)  # an unknown name is refused as a search scoped to it is
    root = index.store.collection_root(name)
    if root is None:
        raise InputError(f"collection '{name}' has no folder to index (its documents came through the LlamaIndex store).")
    if not door.may_index(root):
        raise InputError(
            f"collection '{one_line(name)}' has its folder at {one_line(root)}, outside this server's working folder,"
            f" the index file's folder and its polaris.toml's: an index file records its roots, and a client's call"
            f" does not get to index a folder nobody named on this machine. Index it yourself: polaris index"
            f" {pasted(root)} --collection {pasted(name)}, or start the server in a folder that holds it (not / or"
            f" your home folder)."
        )
    report = index.index_paths([root], collection=name)
    data = {k: (v[:20] if isinstance(v, list) else v) for k, v in vars(report).items()}
    answer = {"collection": name, "root": root, "summary": report.summary(), "report": json.loads(json.dumps(data))}
    return answer, f"{name} ({root}): {report.summary()}"


def document_uri(collection: str, path: str) -> str:
    """``polaris://COLLECTION/PATH`` (each part percent-encoded; a path keeps its slashes)."""
    return f"{SCHEME}://{quote(collection, safe='')}/{quote(path, safe='/')}"


# -- the MCP server -----------------------------------------------------------------------------
def stderr_line(line: str) -> None:
    """``polaris: LINE`` on stderr (stdout is the wire of a stdio server)."""
    print(f"polaris: {line}", file=sys.stderr, flush=True)


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _result(answer: dict, text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=answer)


def _door_call(door: Door, work: Callable[..., tuple[dict, str]]) -> Callable[..., CallToolResult]:
    """``work`` as a tool body: its answer as a result, a Polaris error (or SQLite's) as an error result."""

    @functools.wraps(work)
    def call(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            return _result(*work(door, *args, **kwargs))
        except PolarisError as exc:
            return _error(str(exc))
        except Exception as exc:
            from .engine.backends import error_message as sqlite_error_message

            message = sqlite_error_message(exc, door.db_path)
            if message is None:
                raise
            return _error(message)

    return call


class PolarisMCP(MCPServer):
    """MCPServer whose tools take strict arguments, whose stdio transport answers what it cannot decode,
    and whose resources/list names each indexed document (``polaris://COLLECTION/PATH``)."""

    door: Door
    say: Callable[[str], None] = staticmethod(stderr_line)  # where the server speaks

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, **kwargs: Any) -> None:
        """Add a tool whose arguments are validated strictly: no unknown names, no conversions."""
        super().add_tool(fn, name=name, **kwargs)
        tool = self._tool_manager.get_tool(name or fn.__name__)
        strict = strict_arguments(tool.fn_metadata.arg_model)
        tool.fn_metadata.arg_model = strict
        tool.parameters = strict.model_json_schema(by_alias=True)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Call a tool; unknown arguments, or values of another type, are an error naming the arguments."""
        from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
        from pydantic import ValidationError

        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            known = [field.alias or key for key, field in tool.fn_metadata.arg_model.model_fields.items()]
            unknown = [key for key in arguments if key not in known]
            if unknown:
                raise ToolError(unknown_arguments(name, unknown, known))
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError) and tool is not None:
                raise ToolError(invalid_arguments(name, exc.__cause__)) from exc.__cause__
            raise

    async def run_stdio_async(self) -> None:
        """Serve over stdio as the SDK does, a line it cannot decode answered (``Undecodable``)."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            server = self._lowlevel_server
            await server.run(Undecodable(read_stream, write_stream, self.say), write_stream,
                             server.create_initialization_options())

    async def list_resources(self) -> list[Resource]:
        import anyio.to_thread

        listed = await super().list_resources()
        return listed + await anyio.to_thread.run_sync(self._documents)

    def _documents(self) -> list[Resource]:
        try:
            page = self.door.index.documents(self.door.collection, limit=LIMITS["resources_listed"])
        except PolarisError:
            return []
        return [Resource(uri=document_uri(r.collection, r.path or r.id), name=r.path or r.id,
                         title=f"{r.collection}/{r.path or r.id}", mime_type="text/markdown",
                         description=f"{r.sections} sections, {r.chunks} chunks ({r.status})")
                for r in page.rows]


# -- arguments: strict --------------------------------------------------------------------------
# Other servers' names for an argument (markdown-memory's ``limit``), per tool: suggested when used.
OTHER_NAMES = {"search": {"limit": "k", "top_k": "k", "n": "k", "document": "documents"}}


def strict_arguments(model: type) -> type:
    """``model`` (the arguments of a tool, as the SDK builds them) refusing unknown names (its schema
    then says ``additionalProperties: false``) and values of another type (``true`` for an integer,
    ``"3"`` for 3)."""
    from pydantic import ConfigDict

    return type(model.__name__, (model,), {"__module__": model.__module__,
                                           "model_config": ConfigDict(strict=True, extra="forbid")})


def unknown_arguments(tool: str, unknown: Sequence[str], known: Sequence[str]) -> str:
    """The message for a call of ``tool`` with arguments it does not have: they, a close name, and its own."""
    from .engine.storage.names import close_names, did_you_mean

    other = OTHER_NAMES.get(tool, {})
    near = [m for u in unknown for m in ([other[u]] if u in other else close_names(u, known))]
    names = ", ".join(repr(u) for u in unknown)
    own = f"Its arguments: {', '.join(known)}." if known else "It takes no arguments."
    return f"{tool} has no argument{'s' if len(unknown) > 1 else ''} {names}.{did_you_mean(near)} {own}"


def invalid_arguments(tool: str, error: Any) -> str:
    """The message for a call of ``tool`` whose arguments failed validation: each argument and what was wrong."""
    parts = []
    for e in error.errors():
        where = ".".join(str(part) for part in e["loc"])
        if e["type"] == "missing":
            parts.append(f"{where} is required")
            continue
        try:
            got = json.dumps(e["input"], ensure_ascii=False)
        except (TypeError, ValueError):
            got = repr(e["input"])
        parts.append(f"{where}: {e['msg']}, got {got if len(got) <= 80 else got[:77] + '...'}")
    return f"{tool}: {'; '.join(parts)}."


# -- stdio: a line that cannot be decoded ---------------------------------------------------------
class Undecodable:
    """The stdio transport's read stream, where the SDK's decoding errors (which it would drop: an
    agent then waits forever) are answered: a JSON-RPC error on the wire, a line on stderr."""

    def __init__(self, inner: Any, write_stream: Any, say: Callable[[str], None]) -> None:
        self._inner, self._write, self._say = inner, write_stream, say

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._answer(item)

    async def _answer(self, exc: Exception) -> None:
        import anyio
        from mcp.shared.message import SessionMessage
        from mcp_types import ErrorData, JSONRPCError

        request_id, code, message = decoding_error(exc)
        self._say(f"could not decode a request (id {json.dumps(request_id)}): {message}")
        try:
            await self._write.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id,
                                                               error=ErrorData(code=code, message=message))))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is over: stderr has it

    def __aiter__(self) -> "Undecodable":
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> "Undecodable":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


def decoding_error(exc: Exception) -> tuple[int | str | None, int, str]:
    """The JSON-RPC error for a line that could not be decoded: (the request's id when it can be read,
    else None; -32700 for a line that is no JSON, or holds a lone surrogate escape; -32600 for JSON that
    is no JSON-RPC message; the message)."""
    from mcp_types import INVALID_REQUEST, PARSE_ERROR
    from pydantic import ValidationError

    errors = exc.errors() if isinstance(exc, ValidationError) else []
    if not errors:
        return None, PARSE_ERROR, f"Parse error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}."
    first = errors[0]
    if first["type"] != "json_invalid":
        return _request_id(first["input"]), INVALID_REQUEST, (
            'Invalid Request: not a JSON-RPC 2.0 message (a request is an object with "jsonrpc": "2.0", an "id"'
            ' and a "method").')
    raw = str(first["input"]).rstrip("\r\n")
    try:
        parsed = json.loads(raw)  # Python's reader takes what the SDK's refuses, lone surrogates included
    except json.JSONDecodeError as bad:
        return None, PARSE_ERROR, (f"Parse error: the line is not valid JSON ({bad.msg} at column {bad.colno});"
                                   " send each message whole, on one line.")
    except (ValueError, RecursionError):
        return None, PARSE_ERROR, "Parse error: the line is not valid JSON."
    lone = _lone_surrogate(parsed)
    if lone is None:
        return _request_id(parsed), PARSE_ERROR, f"Parse error: {first['msg']}."
    return _request_id(parsed), PARSE_ERROR, (
        f"Parse error: a string holds a lone surrogate escape ({lone}), half of a character (a text cut in the"
        " middle of an emoji?); send whole characters.")


def _request_id(message: Any) -> int | str | None:
    """The id of a request (an object with a method and an id), else None."""
    if isinstance(message, dict) and "method" in message:
        found = message.get("id")
        if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
            return found
    return None


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in a parsed JSON value's strings (keys included), as its escape."""
    if isinstance(value, str):
        found = re.search("[\ud800-\udfff]", value)
        return f"\\u{ord(found.group()):04x}" if found else None
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else []
    return next((x for x in map(_lone_surrogate, items) if x is not None), None)


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

Query = Annotated[str, Field(description="What to find: a question in plain words, or an identifier (a flag,"
                             " a config key, an error message).", json_schema_extra={"maxLength": MAX_QUERY_CHARS})]
Collection = Annotated[Optional[str], Field(description="Only this collection (default: the server's, else all).")]
DocumentName = Annotated[str, Field(description="The document: its path under its collection's root, as hits and"
                                    " list_documents give it (e.g. 'guide/auth.md'), or its document id.")]


def build_server(door: Door) -> PolarisMCP:
    """The MCP server of ``door``: its tools, the document resources, and ``reindex`` when writes are allowed."""
    app = PolarisMCP("polaris", title="Polaris docs search", instructions=INSTRUCTIONS, version=_version(),
                     log_level="WARNING")
    app.door = door
    lim = LIMITS

    def search_tool(
        query: Query,
        k: Annotated[int, Field(description=f"How many sections, 1 to {lim['k_max']}.",
                                json_schema_extra={"minimum": 1, "maximum": lim["k_max"]})] = lim["k_default"],
        mode: Annotated[str, Field(description="hybrid (default: meaning and words), vector (meaning) or bm25 (words).",
                                   json_schema_extra={"enum": list(MODES)})] = "hybrid",
        collection: Collection = None,
        documents: Annotated[Optional[list[str]], Field(description="Only these documents (paths or ids).")] = None,
        section_tokens: Annotated[int, Field(
            description=f"Token budget of each hit's section text, 1 to {lim['section_tokens_max']}; all hits together"
                        f" get at most {lim['answer_tokens']}.",
            json_schema_extra={"minimum": 1, "maximum": lim["section_tokens_max"]})] = lim["section_tokens_default"],
        explain: Annotated[bool, Field(description="Add every ranking stage's figures to each hit.")] = False,
        full: Annotated[bool, Field(description="Every field of each hit, as `polaris search --json` prints it"
                                    " (the matched chunk's own text and offsets, metadata, the section's chunk ids).")]
        = False,
    ) -> Annotated[CallToolResult, SearchAnswer]:
        return _door_call(door, search)(query, k, mode, collection, documents, section_tokens, explain, full)

    app.add_tool(search_tool, name="search", title="Search the docs", annotations=READ_ONLY, description=(
        "Search the indexed Markdown docs; returns the best sections, best first. Each hit: document (path),"
        " heading_path, score (top hit 1.0), strength (how well it matches, one scale for every query), good_match,"
        " the section's character span, its text up to section_tokens (the passage that matched is always shown) and a one-line explanation (its rank in the vector and BM25"
        " lists). no_good_match: nothing matched well, the docs may not answer this. Same sections, order and"
        " scores as `polaris search --json`. Then read_section(document, heading_path) for more of one."))

    def read_tool(
        document: Annotated[Optional[str], Field(description="The document (path or id); optional with node_id.")] = None,
        heading_path: Annotated[Optional[str], Field(description="The section: its heading path as a hit or the outline"
                                                     " gives it ('Guide > Auth > Tokens'), or its title if unique.")] = None,
        node_id: Annotated[Optional[str], Field(description="Instead of a heading path: a chunk's node id from a hit.")] = None,
        collection: Collection = None,
        max_tokens: Annotated[int, Field(description=f"Token budget of the text, 1 to {lim['read_tokens_max']}.",
                                         json_schema_extra={"minimum": 1, "maximum": lim["read_tokens_max"]})]
        = lim["read_tokens_default"],
        subsections: Annotated[bool, Field(description="Read on through its subsections (always, for a heading"
                                           " without text of its own).")] = False,
    ) -> Annotated[CallToolResult, SectionAnswer]:
        return _door_call(door, read_section)(document, heading_path, node_id, collection, max_tokens, subsections)

    app.add_tool(read_tool, name="read_section", title="Read a section", annotations=READ_ONLY, description=(
        "Read one section of a document by its heading path (or a hit's node id), cut to max_tokens. Says where"
        " it sits: its position among its siblings, the previous and next sections, its subsections, its size"
        " in tokens and whether the text was cut."))

    def outline_tool(
        document: DocumentName,
        collection: Collection = None,
        max_depth: Annotated[Optional[int], Field(description=f"Only headings this deep (1: top level), 1 to"
                                                  f" {lim['outline_depth_max']}.", json_schema_extra={
                                                      "minimum": 1, "maximum": lim["outline_depth_max"]})] = None,
    ) -> Annotated[CallToolResult, OutlineAnswer]:
        return _door_call(door, outline)(document, collection, max_depth)

    app.add_tool(outline_tool, name="outline", title="Outline of a document", annotations=READ_ONLY, description=(
        "A document's heading tree: each heading's path, depth and size in tokens (its own text, and with its"
        f" subsections), in document order; at most {lim['outline_entries']} headings. Pick a section, then"
        " read_section."))

    def list_tool(
        collection: Collection = None,
        prefix: Annotated[Optional[str], Field(description="Only paths starting with this ('guide/').")] = None,
        limit: Annotated[int, Field(description=f"Documents per page, 1 to {lim['list_max']}.",
                                    json_schema_extra={"minimum": 1, "maximum": lim["list_max"]})] = lim["list_default"],
        offset: Annotated[int, Field(description="Skip this many (paging).", json_schema_extra={"minimum": 0})] = 0,
    ) -> Annotated[CallToolResult, DocumentsAnswer]:
        return _door_call(door, list_documents)(collection, prefix, limit, offset)

    app.add_tool(list_tool, name="list_documents", title="List documents", annotations=READ_ONLY, description=(
        "The indexed documents, by collection and path: status, sections, chunks, and whether the file changed"
        " on disk since it was indexed (on_disk, stale)."))

    def status_tool() -> Annotated[CallToolResult, StatusAnswer]:
        return _door_call(door, status)()

    app.add_tool(status_tool, name="status", title="Index status", annotations=READ_ONLY, description=(
        "What the index holds (model, documents, chunks, collections and their folders) and whether files"
        " changed on disk since they were indexed: when `stale` is true, answers may be out of date"
        " (changed, missing and new files are listed)."))

    if door.allow_writes:
        def reindex_tool(collection: Collection = None) -> Annotated[CallToolResult, ReindexAnswer]:
            return _door_call(door, reindex)(collection)

        app.add_tool(reindex_tool, name="reindex", title="Re-index a collection", annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False), description=(
            "Bring a collection up to date with its folder (incremental: only changed files are re-embedded;"
            " files that are gone leave the index)."))

    @app.resource(f"{SCHEME}://{{collection}}/{{+path}}", name="document", mime_type="text/markdown",
                  description=f"An indexed document's text (at most {lim['resource_tokens']} tokens).")
    def document_resource(collection: str, path: str) -> str:
        try:
            _ref, text, _tokens, _cut = door.index.document_text(path, collection, lim["resource_tokens"])
        except ScopeError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        except PolarisError as exc:
            raise ResourceError(str(exc)) from exc
        return text

    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-index-polaris")
    except PackageNotFoundError:
        return "0"


# -- running ------------------------------------------------------------------------------------
def serve(config: PolarisConfig, *, collection: str | None = None, allow_writes: bool = False,
          http: str | None = None, allow_hosts: Sequence[str] = (),
          announce: Callable[[str], None] | None = None) -> None:
    """Serve the index of ``config`` over stdio, or over streamable HTTP at ``http`` (HOST:PORT) for
    loopback names and ``allow_hosts``."""
    import anyio

    say = announce or stderr_line
    bind = http_binding(http, allow_hosts)
    security = None if bind is None else (_settings(bind), bind.notice)
    door = Door(config, collection=collection, allow_writes=allow_writes,
                transport="stdio" if bind is None else "streamable-http")
    app = build_server(door)
    app.say = say
    door.warm()
    try:
        if bind is None:
            anyio.run(app.run_stdio_async)
        else:
            anyio.run(_serve_http, app, bind.host, bind.port, security, say)
    finally:
        door.close()


def _settings(bind: Binding) -> TransportSecuritySettings:
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=bind.allowed_hosts,
                                     allowed_origins=bind.allowed_origins)


def http_security(host: str, allow_hosts: Sequence[str], *, port: int | None = None
                  ) -> tuple[TransportSecuritySettings, str | None]:
    """The SDK's DNS-rebinding protection for a server bound to ``host`` (``mcp_binding.binding``), and
    the notice it prints (None on loopback)."""
    bind = binding(host, allow_hosts, port=port)
    return _settings(bind), bind.notice


async def _serve_http(app: PolarisMCP, host: str, port: int, security: tuple[TransportSecuritySettings, str | None],
                      say: Callable[[str], None]) -> None:
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connectable before the address is announced: a client may call at once
    except OSError as exc:
        sock.close()
        raise PolarisError(f"cannot listen on {host}:{port} ({exc.strerror or exc}).") from exc
    bound = sock.getsockname()[1]
    settings, notice = security
    if notice is not None:
        say(notice)
    say(f"MCP server at http://{in_url(host)}:{bound}/mcp ({app.door.db_path}, "
        f"{'writes allowed' if app.door.allow_writes else 'read-only'})")
    starlette_app = app.streamable_http_app(host=host, transport_security=settings)
    server = uvicorn.Server(uvicorn.Config(starlette_app, log_level="warning", lifespan="on"))
    await server.serve(sockets=[sock])
