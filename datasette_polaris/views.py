"""The pages: /-/polaris, /<database>/-/polaris and /<database>/-/polaris/document.

Each view checks Datasette's permissions first, reads through the engine in a worker
thread and hands plain values to a template that extends Datasette's base.html.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

from datasette.utils import tilde_decode, tilde_encode
from datasette.utils.asgi import NotFound, Response

from llama_index_polaris.engine.config import describe
from llama_index_polaris.engine.errors import PolarisError
from llama_index_polaris.engine.search.pipeline import MODES, clamp_top_k

from . import render
from .engines import Engine, engine_for, is_polaris

SEARCH_SETTINGS = ("rrf_k", "heading_boost", "mmr_lambda", "mmr_candidate_multiplier", "top_k", "fts_tokenizer")


@dataclass
class SearchForm:
    """The search parameters of a request, validated."""

    q: str = ""
    k: int = 10
    mode: str = "hybrid"
    collections: list[str] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    error: str | None = None


async def instance_page(datasette: Any, request: Any) -> Response:
    """/-/polaris: the first Polaris database the actor may see, with links to the others."""
    await datasette.ensure_permissions(request.actor, ["view-instance"])
    names = await visible_polaris_databases(datasette, request.actor)
    if not names:
        return await _render(datasette, request, "polaris.html", {"database": None, "polaris_databases": []})
    return await _database_page(datasette, request, names[0], names, datasette.urls.path("/-/polaris"))


async def database_page(datasette: Any, request: Any) -> Response:
    """/<database>/-/polaris: overview, search form and results for one database."""
    name = await _allowed_database(datasette, request)
    names = await visible_polaris_databases(datasette, request.actor)
    action = datasette.urls.database(name) + "/-/polaris"
    return await _database_page(datasette, request, name, names, action)


async def document_page(datasette: Any, request: Any) -> Response:
    """/<database>/-/polaris/document?id=...: one document's chunks in order."""
    name = await _allowed_database(datasette, request)
    if not await is_polaris(datasette.databases[name]):
        raise NotFound(f"{name} is not a Polaris index")
    doc_id = request.args.get("id") or ""
    engine = _engine_or_none(datasette.databases[name].path)
    if engine is None:
        raise NotFound(f"{name} cannot be opened as a Polaris index")
    q = request.args.get("q") or ""
    doc, chunks = await _in_thread(datasette, lambda: _document(engine, doc_id, q))
    if doc is None:
        raise NotFound("No such document")
    context = {
        "database": name,
        "doc": doc,
        "chunks": chunks,
        "q": q,
        "overview_url": datasette.urls.database(name) + "/-/polaris",
        "document_row_url": datasette.urls.row(name, "documents", tilde_encode(doc.id)),
        "chunk_row_url": lambda cid: datasette.urls.row(name, "chunks", str(cid)),
    }
    return await _render(datasette, request, "polaris_document.html", context)


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


async def _database_page(datasette: Any, request: Any, name: str, names: list[str], action: str) -> Response:
    db = datasette.databases[name]
    context: dict[str, Any] = {"database": name, "polaris_databases": names, "action": action}
    if not await is_polaris(db):
        context["not_polaris"] = True
        return await _render(datasette, request, "polaris.html", context)
    try:
        engine = engine_for(db.path)
    except PolarisError as exc:
        context["open_error"] = str(exc)
        return await _render(datasette, request, "polaris.html", context)
    form = parse_form(request.args, engine.config.top_k)
    overview = await _in_thread(datasette, lambda: _overview(engine))
    chunk_counts = dict((await db.execute("SELECT document_id, count(*) FROM chunks GROUP BY 1")).rows)
    hits, error = [], form.error
    if form.q and not error:
        try:
            hits = await _in_thread(datasette, lambda: _search(engine, form))
        except PolarisError as exc:
            error = str(exc)
    context.update(overview)
    context.update(
        form=form,
        modes=MODES,
        hits=hits,
        error=error,
        chunk_counts=chunk_counts,
        database_url=datasette.urls.database(name),
        document_url=lambda doc_id, chunk_id=None: _document_url(datasette, name, doc_id, form.q, chunk_id),
        highlight=render.highlight,
        fmt=render.fmt,
    )
    return await _render(datasette, request, "polaris.html", context)


def parse_form(args: Any, default_k: int) -> SearchForm:
    """Read q, k, mode, collection and document from the query string."""
    form = SearchForm(q=(args.get("q") or "").strip(), k=default_k)
    form.collections = [c for c in args.getlist("collection") if c]
    form.documents = [d for d in args.getlist("document") if d]
    mode = args.get("mode") or "hybrid"
    if mode in MODES:
        form.mode = mode
    else:
        form.error = f"mode must be one of {', '.join(MODES)}, not {mode!r}."
    raw_k = args.get("k")
    if raw_k:
        try:
            form.k = clamp_top_k(int(raw_k), default_k)
        except ValueError:
            form.error = f"k must be a whole number from 1 to 100, not {raw_k!r}."
    return form


def _overview(engine: Engine) -> dict[str, Any]:
    store = engine.store
    return {
        "model": store.model,
        "counts": store.counts(),
        "documents": store.documents(),
        "size": render.human_size(store.size_bytes()),
        "meta": sorted(store.meta.items()),
        "settings": [row for row in describe(engine.config) if row[0] in SEARCH_SETTINGS],
    }


def _search(engine: Engine, form: SearchForm) -> list[Any]:
    return engine.searcher.search(
        form.q, top_k=form.k, mode=form.mode,
        collections=form.collections or None, documents=form.documents or None,
    )


def _document(engine: Engine, doc_id: str, q: str) -> tuple[Any, list[dict[str, Any]]]:
    doc = engine.store.get_document(doc_id)
    if doc is None:
        return None, []
    chunks = engine.store.get_chunks(document_id=doc_id)
    count_tokens = _token_counter(engine) if any(c.token_count is None for c in chunks) else None
    shared = render.overlaps([(c.text, c.start_char, c.end_char) for c in chunks])
    rows = []
    for c, (before, after) in zip(chunks, shared):
        tokens, computed = c.token_count, False
        if tokens is None and count_tokens is not None:
            tokens, computed = count_tokens(c.text), True
        rows.append({
            "chunk": c, "tokens": tokens, "tokens_computed": computed, "overlap_prev": before,
            "overlap_next": after, "parts": render.segments(c.text, before, after, q),
        })
    return doc, rows


def _engine_or_none(path: str) -> Engine | None:
    try:
        return engine_for(path)
    except PolarisError:
        return None


def _token_counter(engine: Engine) -> Callable[[str], int] | None:
    try:
        return engine.embedder().count_tokens
    except PolarisError:
        return None


def _document_url(datasette: Any, name: str, doc_id: str, q: str, chunk_id: int | None) -> str:
    from urllib.parse import urlencode

    params = {"id": doc_id, **({"q": q} if q else {})}
    anchor = f"#chunk-{chunk_id}" if chunk_id is not None else ""
    return f"{datasette.urls.database(name)}/-/polaris/document?{urlencode(params)}{anchor}"


async def _in_thread(datasette: Any, fn: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(datasette.executor, fn)


async def _render(datasette: Any, request: Any, template: str, context: dict[str, Any]) -> Response:
    html = await datasette.render_template(template, context, request=request, view_name="polaris")
    return Response.html(html)
