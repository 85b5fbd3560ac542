"""The pages: /-/polaris, /<database>/-/polaris and /<database>/-/polaris/document.

Each page has a JSON twin (``.json`` on the path, or ``?_format=json``) built from the
same values: hits are ``Hit.to_dict()``, the shape of ``polaris search --json --explain``.
Each view checks Datasette's permissions first, validates every parameter (a 400 names
each bad one), reads through the engine in a worker thread and hands plain values to a
template that extends Datasette's base.html.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode

from datasette.utils import add_cors_headers, tilde_decode, tilde_encode
from datasette.utils.asgi import NotFound, Response
from datasette.version import __version__ as datasette_version

from llama_index_polaris.engine.config import describe
from llama_index_polaris.engine.sqlite.connect import sqlite_error_message
from llama_index_polaris.engine.errors import DatabaseError, InputError, PolarisError, ScopeError
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search.pipeline import MAX_QUERY_CHARS, MODES, clamp_top_k
from llama_index_polaris.engine.storage.names import documents_named
from llama_index_polaris.engine.search.strength import GOOD_MATCH

from . import legend, render
from .engines import index_for, is_polaris

SEARCH_SETTINGS = ("rrf_k", "fusion_weights", "score_fusion", "score_fusion_vector", "score_fusion_depth", "heading_boost", "changelog_penalty", "mmr_lambda", "candidate_pool", "top_k", "unit", "fts_tokenizer")
TEXT_VIEWS = ("rendered", "raw")
FORMATS = ("html", "json")
DEFAULT_TOKENIZER = "unicode61"  # FTS5's own default, for a file that records none
NO_DATABASE = (
    "No database served here is a Polaris index. Build one with `polaris index PATH --db polaris.db`,"
    " then run `datasette polaris.db`."
)
HEADING_OFFSET = {"search": 3, "document": 2}  # h1 page, h2 section, h3 hit: a chunk's "#" is an h4
DOCUMENTS_LISTED = 20  # documents the page lists; its filter box asks documents.json for the rest
DOCUMENTS_SIZE = {"default": 20, "max": 100}  # _size of documents.json, as Datasette's own _size


@dataclass
class SearchForm:
    """The parameters of a request, validated: ``errors`` maps each bad one to why."""

    q: str = ""
    k: int = 10
    k_given: bool = False
    mode: str = "hybrid"
    collections: list[str] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    view: str = "rendered"
    format: str = "html"
    errors: dict[str, str] = field(default_factory=dict)

    def state(self, **changes: Any) -> list[tuple[str, str]]:
        """The search state as query parameters, for links that must keep it."""
        form = dataclasses.replace(self, **changes)
        params = [("q", form.q)] if form.q else []
        if form.mode != "hybrid":
            params.append(("mode", form.mode))
        if form.k_given:
            params.append(("k", str(form.k)))
        params += [("collection", c) for c in form.collections] + [("document", d) for d in form.documents]
        if form.view != "rendered":
            params.append(("view", form.view))
        return params


def parse_form(args: Any, default_k: int, json_path: bool = False) -> SearchForm:
    """Read q, k, mode, collection, document, view and _format; every bad value is named."""
    form = SearchForm(q=(args.get("q") or "").strip(), k=default_k)
    if len(form.q) > MAX_QUERY_CHARS:
        form.errors["q"] = f"q is {len(form.q):,} characters; at most {MAX_QUERY_CHARS:,} are searched. Shorten it."
        form.q = form.q[:200]  # what the page echoes back
    form.collections = [c for c in args.getlist("collection") if c]
    form.documents = [d for d in args.getlist("document") if d]
    mode = args.get("mode") or "hybrid"
    if mode in MODES:
        form.mode = mode
    else:
        form.errors["mode"] = f"mode must be one of {', '.join(MODES)}, not {mode!r}."
    raw_k = args.get("k")
    if raw_k:
        try:
            form.k, form.k_given = clamp_top_k(int(raw_k), default_k), True
        except ValueError:
            form.errors["k"] = f"k must be a whole number (1 to 100; others are clamped), not {raw_k!r}."
    view = args.get("view") or "rendered"
    if view in TEXT_VIEWS:
        form.view = view
    else:
        form.errors["view"] = f"view must be one of {', '.join(TEXT_VIEWS)}, not {view!r}."
    fmt = args.get("_format") or ("json" if json_path else "html")
    if fmt in FORMATS and not (json_path and fmt != "json"):
        form.format = fmt
    else:
        form.format = "json" if json_path else "html"
        form.errors["_format"] = f"_format must be json (or leave it out for the page), not {fmt!r}."
    return form


# -- views ----------------------------------------------------------------------------------
async def instance_page(datasette: Any, request: Any) -> Response:
    """/-/polaris: the first Polaris database the actor may see, with links to the others."""
    await datasette.ensure_permissions(request.actor, ["view-instance"])
    names = await visible_polaris_databases(datasette, request.actor)
    page = _Page(datasette, request, datasette.urls.path("/-/polaris"))
    if not names:
        return await page.failure(404, NO_DATABASE, "polaris.html", {"database": None, "polaris_databases": []})
    return await _search_page(page, names[0], names)


async def database_page(datasette: Any, request: Any) -> Response:
    """/<database>/-/polaris: overview, search form and results for one database."""
    name = await _allowed_database(datasette, request)
    names = await visible_polaris_databases(datasette, request.actor)
    page = _Page(datasette, request, datasette.urls.database(name) + "/-/polaris")
    return await _search_page(page, name, names)


async def document_page(datasette: Any, request: Any) -> Response:
    """/<database>/-/polaris/document?id=...: one document's chunks in order."""
    name = await _allowed_database(datasette, request)
    page = _Page(datasette, request, datasette.urls.database(name) + "/-/polaris/document")
    context: dict[str, Any] = {"database": name, "doc": None, "overview_url": datasette.urls.database(name) + "/-/polaris"}
    if not await is_polaris(datasette.databases[name]):
        return await page.failure(404, f"{name} is not a Polaris index.", "polaris_document.html", context)
    try:
        engine = index_for(datasette.databases[name].path)
    except PolarisError as exc:
        return await page.failure(500, str(exc), "polaris_document.html", context)
    form = parse_form(request.args, engine.config.top_k, page.json_path)
    page.form = form
    doc_id = request.args.get("id") or ""
    if not doc_id:
        form.errors["id"] = "id is required: the document's id (documents.id)."
    context.update(form=form, back_url=_url(context["overview_url"], form.state()))
    if form.errors:
        return await page.failure(400, _joined(form.errors), "polaris_document.html", context, errors=form.errors)
    try:
        doc, rows = await _in_thread(
            datasette, lambda: _document(engine, doc_id, form, html=not page.wants_json), str(engine.path)
        )
    except DatabaseError as exc:
        return await page.failure(DAMAGED_STATUS, str(exc), "polaris_document.html", context)
    except InputError as exc:
        return await page.failure(404, str(exc), "polaris_document.html", context)
    if doc is None:
        return await page.failure(404, f"No document with id {doc_id!r} in {name}.", "polaris_document.html", context)
    context.update(
        doc=doc,
        chunks=rows,
        q=form.q,
        document_row_url=datasette.urls.row(name, "documents", tilde_encode(doc.id)),
        chunk_row_url=lambda cid: datasette.urls.row(name, "chunks", str(cid)),
        view_url=lambda view: _url(page.base, [("id", doc.id), *form.state(view=view)]),
    )
    data = {
        "ok": True,
        "database": name,
        "document": dataclasses.asdict(doc),
        "chunks": [_chunk_json(row) for row in rows],
    }
    return await page.respond("polaris_document.html", context, data)


async def documents_json(datasette: Any, request: Any) -> Response:
    """/<database>/-/polaris/documents.json?q=TEXT: a page of documents whose path (or id) holds
    TEXT, in any case, with their chunk counts (``list_documents``): what the page's document
    filter asks as one types. ``_size`` (default 20, at most 100) and ``_next`` page it, as
    Datasette's table JSON does; ``collection`` (repeatable) narrows it."""
    name = await _allowed_database(datasette, request)
    page = _Page(datasette, request, datasette.urls.database(name) + "/-/polaris/documents")
    page.json_path = True
    if not await is_polaris(datasette.databases[name]):
        return await page.failure(404, f"{name} is not a Polaris index.", "polaris.html", {})
    errors: dict[str, str] = {}
    size = _whole(request.args.get("_size"), DOCUMENTS_SIZE["default"], "_size", 1, errors)
    offset = _whole(request.args.get("_next"), 0, "_next", 0, errors)
    if len(request.args.get("q") or "") > MAX_QUERY_CHARS:
        errors["q"] = f"q is longer than {MAX_QUERY_CHARS:,} characters; type part of a path."
    if errors:
        return await page.failure(400, _joined(errors), "polaris.html", {}, errors=errors)
    size = min(size, DOCUMENTS_SIZE["max"])
    q = (request.args.get("q") or "").strip()
    collections = [c for c in request.args.getlist("collection") if c] or None
    try:
        engine = index_for(datasette.databases[name].path)
        found = await _in_thread(
            datasette, lambda: engine.documents(collections, None, size, offset, contains=q or None), str(engine.path)
        )
    except ScopeError as exc:
        return await page.failure(400, str(exc), "polaris.html", {}, errors=exc.reasons)
    except PolarisError as exc:
        return await page.failure(_status_of(exc), str(exc), "polaris.html", {})
    following = offset + len(found.rows) if offset + len(found.rows) < found.total else None
    args = [(k, v) for k, v in parse_qsl(request.query_string, keep_blank_values=True) if k != "_next"]
    return await page.respond("polaris.html", {}, {
        "ok": True, "database": name, "q": q, "count": found.total,
        "rows": [dataclasses.asdict(row) for row in found.rows],
        "next": None if following is None else str(following),
        "next_url": None if following is None else _url(page.base + ".json", [*args, ("_next", str(following))]),
    })


def _whole(raw: str | None, default: int, name: str, low: int, errors: dict[str, str]) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low:
        errors[name] = f"{name} must be a whole number of at least {low}, not {raw!r}."
    return value


async def visible_polaris_databases(datasette: Any, actor: Any) -> list[str]:
    """Names of the databases with Polaris tables that ``actor`` may view."""
    names = []
    for name, db in datasette.databases.items():
        if not await is_polaris(db):
            continue
        visible, _ = await datasette.check_visibility(actor, permissions=[("view-database", name), "view-instance"])
        if visible:
            names.append(name)
    return names


async def _allowed_database(datasette: Any, request: Any) -> str:
    route = tilde_decode(request.url_vars["database"])
    try:
        db = datasette.get_database(route=route)
    except KeyError:
        raise NotFound("Database not found") from None
    await datasette.ensure_permissions(request.actor, [("view-database", db.name), "view-instance"])
    return db.name


async def _search_page(page: "_Page", name: str, names: list[str]) -> Response:
    datasette, request = page.datasette, page.request
    db = datasette.databases[name]
    context: dict[str, Any] = {"database": name, "polaris_databases": names, "action": page.base}
    if not await is_polaris(db):
        context["not_polaris"] = True
        return await page.failure(404, f"{name} has no Polaris tables (polaris_meta, documents, chunks).", "polaris.html", context)
    try:
        engine = index_for(db.path)
    except PolarisError as exc:
        context["open_error"] = str(exc)
        return await page.failure(500, str(exc), "polaris.html", context)
    form = parse_form(request.args, engine.config.top_k, page.json_path)
    page.form = form
    try:
        overview = await _in_thread(datasette, lambda: _overview(engine, not page.wants_json), str(engine.path))
    except DatabaseError as exc:
        context["open_error"] = str(exc)
        return await page.failure(DAMAGED_STATUS, str(exc), "polaris.html", context)
    hits: list[Any] = []
    status, error = 200, None
    if form.errors:
        status, error = 400, _joined(form.errors)
    elif form.q:
        try:
            hits = await _in_thread(datasette, lambda: _search(engine, form), str(engine.path))
        except ScopeError as exc:  # a collection or document the file lacks: that parameter is bad
            form.errors.update(exc.reasons)  # keyed "collection" / "document", as the parameters are
            status, error = 400, str(exc)
        except PolarisError as exc:
            status, error = _status_of(exc), str(exc)
    results = await _in_thread(datasette, lambda: _results(engine, hits, form)) if hits and not page.wants_json else []
    # the config's, overridden by what this search used (its question's weights and boost: ``used_weights``)
    settings = {key: getattr(engine.config, key) for key in SEARCH_SETTINGS} | getattr(hits, "settings", {})
    context.update(overview)
    context.update(
        form=form,
        modes=MODES,
        results=results,
        hits=hits,
        no_match_note=getattr(hits, "no_match_note", None),
        good_match=GOOD_MATCH,
        error=error,
        errors=form.errors,
        search_settings=settings,
        database_url=datasette.urls.database(name),
        documents_json_url=datasette.urls.database(name) + "/-/polaris/documents.json",
        document_url=lambda doc_id, chunk_id=None: _document_url(datasette, name, doc_id, form, chunk_id),
        view_url=lambda view: _url(page.base, form.state(view=view)),
        fmt=render.fmt,
        legend=legend,
    )
    data = {
        "ok": status == 200,
        "database": name,
        "databases": names,
        "query": {"q": form.q, "mode": form.mode, "k": form.k, "collections": form.collections, "documents": form.documents},
        "settings": settings,
        "index": _index_json(overview),
        "hits": [hit.to_dict() for hit in hits],
        "no_good_match": bool(form.q) and not form.errors and not error and _no_good_match(hits),
    }
    if status != 200:
        data.update(error=error, errors=form.errors, status=status)
    return await page.respond("polaris.html", context, data, status)


def _no_good_match(hits: Any) -> bool:
    """The engine's verdict that nothing matched well (``Hits.no_good_match``; no hits: True)."""
    return getattr(hits, "no_good_match", not hits)


# -- the engine calls (run in a worker thread) ------------------------------------------------
def _overview(engine: PolarisIndex, html: bool) -> dict[str, Any]:
    """The index at a glance, from what the file keeps (``Store.counts``); for the page, the
    first ``DOCUMENTS_LISTED`` documents too (the filter box asks documents.json for others)."""
    store = engine.store
    return {
        "model": store.model,
        "counts": store.counts(),
        "documents": engine.documents(limit=DOCUMENTS_LISTED) if html else None,
        "size": render.human_size(store.size_bytes()),
        "meta": sorted(store.meta.items()),
        "settings": [row for row in describe(engine.config) if row[0] in SEARCH_SETTINGS],
    }


def _search(engine: PolarisIndex, form: SearchForm) -> list[Any]:
    return engine.searcher().search(  # a file with nothing indexed yet answers no hits
        form.q, top_k=form.k, mode=form.mode,
        collections=form.collections or None, documents=form.documents or None,
    )


def _highlighter(engine: PolarisIndex, q: str) -> render.Highlighter:
    return render.Highlighter(q, engine.store.meta.get("fts_tokenizer") or DEFAULT_TOKENIZER)


def _results(engine: PolarisIndex, hits: list[Any], form: SearchForm) -> list[dict[str, Any]]:
    """Each hit with its heading path and text marked (and rendered, unless view=raw)."""
    marker = _highlighter(engine, form.q)
    parts = {h.chunk_id: (h.heading_path or "(no heading)").split(" > ") for h in hits}
    texts = [p for ps in parts.values() for p in ps]
    for h in hits:
        texts += render.markdown_texts(h.text) if form.view == "rendered" else [h.text]
    marker.prime(texts)
    return [{
        "hit": h,
        "heading": [marker.mark(p) for p in parts[h.chunk_id]],
        "text": _text_html(h.text, marker, form.view, HEADING_OFFSET["search"]),
    } for h in hits]


def _text_html(text: str, marker: render.Highlighter, view: str, heading_offset: int) -> Any:
    if view == "raw":
        return marker.mark(text)
    return render.markdown(text, marker, heading_offset)


def _document(engine: PolarisIndex, doc_id: str, form: SearchForm, html: bool) -> tuple[Any, list[dict[str, Any]]]:
    """The document (by id, else by its path when one document has it) and, per chunk,
    its figures (and, for the page, its marked-up text)."""
    doc = engine.store.get_document(doc_id)
    if doc is None:
        with engine.store.read() as conn:
            ids, _ = documents_named(conn, [doc_id])
        if len(ids) > 1:
            raise InputError(f"{len(ids)} documents have the path {doc_id!r}: ask for one id, {', '.join(ids)}.")
        doc = engine.store.get_document(ids[0]) if ids else None
    if doc is None:
        return None, []
    doc_id = doc.id
    chunks = engine.store.get_chunks(document_id=doc_id)
    count_tokens = _token_counter(engine) if any(c.token_count is None for c in chunks) else None
    shared = render.overlaps([(c.text, c.start_char, c.end_char) for c in chunks])
    rows = []
    for c, (before, after) in zip(chunks, shared):
        tokens, computed = c.token_count, False
        if tokens is None and count_tokens is not None:
            tokens, computed = count_tokens(c.text), True
        rows.append({"chunk": c, "tokens": tokens, "tokens_computed": computed, "overlap_prev": before, "overlap_next": after})
    if html:
        _mark_up_chunks(engine, rows, form)
    return doc, rows


def _mark_up_chunks(engine: PolarisIndex, rows: list[dict[str, Any]], form: SearchForm) -> None:
    """Add each chunk's heading parts and text, marked (raw: cut at the overlaps; else rendered)."""
    marker = _highlighter(engine, form.q)
    headings = [(row["chunk"].heading_path or "(no heading)").split(" > ") for row in rows]
    texts = [p for parts in headings for p in parts]
    for row in rows:
        texts += render.markdown_texts(row["chunk"].text) if form.view == "rendered" else [row["chunk"].text]
    marker.prime(texts)
    for row, parts in zip(rows, headings):
        c = row["chunk"]
        row["heading"] = [marker.mark(p) for p in parts]
        if form.view == "raw":
            row["parts"], row["html"] = render.segments(c.text, row["overlap_prev"], row["overlap_next"], marker), None
        else:
            row["parts"], row["html"] = None, render.markdown(c.text, marker, HEADING_OFFSET["document"])


def _token_counter(engine: PolarisIndex) -> Callable[[str], int] | None:
    try:
        return engine.embedder.count_tokens
    except PolarisError:
        return None


# -- JSON ---------------------------------------------------------------------------------------
def _index_json(overview: dict[str, Any]) -> dict[str, Any]:
    """The index at a glance, with the names `polaris status --json` uses."""
    model, counts = overview["model"], overview["counts"]
    return {
        "model_id": model.model_id if model else None,
        "embedding_dim": model.dim if model else None,
        "documents": counts["documents"],
        "chunks": counts["chunks"],
        "collections": counts["collections"],
    }


def _chunk_json(row: dict[str, Any]) -> dict[str, Any]:
    c = row["chunk"]
    return {
        "chunk_id": c.id, "node_id": c.node_id, "ordinal": c.ordinal, "heading_path": c.heading_path,
        "heading_level": c.heading_level, "text": c.text, "start_char": c.start_char, "end_char": c.end_char,
        "token_count": row["tokens"], "token_count_source": None if row["tokens"] is None else ("counted now" if row["tokens_computed"] else "stored"),
        "overlap_previous": row["overlap_prev"], "overlap_next": row["overlap_next"], "metadata": c.metadata,
    }


def _joined(errors: dict[str, str]) -> str:
    return " ".join(errors.values())


# -- responses ----------------------------------------------------------------------------------
class _Page:
    """One request to a plugin page: answers as HTML or as its JSON twin."""

    def __init__(self, datasette: Any, request: Any, base: str) -> None:
        self.datasette, self.request, self.base = datasette, request, base
        self.json_path = request.url_vars.get("format") == ".json"
        self.form: SearchForm | None = None

    @property
    def wants_json(self) -> bool:
        if self.form is not None:
            return self.form.format == "json"
        return self.json_path or self.request.args.get("_format") == "json"

    def json_url(self) -> str:
        """This page's JSON twin: the same parameters on the ``.json`` path."""
        args = [(k, v) for k, v in parse_qsl(self.request.query_string, keep_blank_values=True) if k != "_format"]
        return _url(self.base + ".json", args)

    async def respond(self, template: str, context: dict[str, Any], data: dict[str, Any], status: int = 200) -> Response:
        if self.wants_json:
            headers: dict[str, str] = {}
            if self.datasette.cors:
                add_cors_headers(headers)
            return Response.json(data, status=status, headers=headers)
        context.update(json_url=self.json_url(), alternate_url_json=self.json_url(), datasette_version=datasette_version)
        html = await self.datasette.render_template(template, context, request=self.request, view_name="polaris")
        return Response.html(html, status=status)

    async def failure(self, status: int, message: str, template: str, context: dict[str, Any],
                      errors: dict[str, str] | None = None) -> Response:
        context.setdefault("error", message)
        context.setdefault("errors", errors or {})
        data = {"ok": False, "error": message, "errors": errors or {}, "status": status}
        return await self.respond(template, context, data, status)


def _url(path: str, params: list[tuple[str, str]]) -> str:
    return f"{path}?{urlencode(params)}" if params else path


def document_href(datasette: Any, name: str, doc_id: str, chunk_id: int | None = None,
                  state: list[tuple[str, str]] = ()) -> str:
    """The explorer's view of one document (at one chunk), keeping the search ``state``."""
    anchor = f"#chunk-{chunk_id}" if chunk_id is not None else ""
    return _url(f"{datasette.urls.database(name)}/-/polaris/document", [("id", doc_id), *state]) + anchor


def _document_url(datasette: Any, name: str, doc_id: str, form: SearchForm, chunk_id: int | None) -> str:
    return document_href(datasette, name, doc_id, chunk_id, form.state())


async def _in_thread(datasette: Any, fn: Callable[[], Any], where: str = "this database") -> Any:
    """``fn()`` in Datasette's executor; an SQLite error on ``where`` (a damaged file) becomes a DatabaseError."""
    try:
        return await asyncio.get_running_loop().run_in_executor(datasette.executor, fn)
    except PolarisError:
        raise
    except Exception as exc:
        message = sqlite_error_message(exc, where)
        if message is None:
            raise
        raise DatabaseError(message) from exc


# A damaged file is not a bug in the page: 503 says the database cannot be served as it is.
DAMAGED_STATUS = 503


def _status_of(exc: PolarisError) -> int:
    if isinstance(exc, InputError):
        return 400
    return DAMAGED_STATUS if isinstance(exc, DatabaseError) else 500
