"""Datasette plugin: look inside polaris.db and see why each hit scored what it did.

Hooks (all here; the work is in the modules they name):

    prepare_connection  load sqlite-vec, add polaris_embed / polaris_search  (functions)
    register_routes     /-/polaris, /<db>/-/polaris, /<db>/-/polaris/document, each
                        also as .json, and /<db>/-/polaris/documents.json (the
                        document filter's query)  (views)
    get_metadata        hide the vec0 tables and their shadow tables, as Datasette
                        hides full-text tables  (hidden)
    render_cell         on the row pages of chunks and documents, a link to the
                        document in the explorer
    extra_css_urls      the page's stylesheet, on the plugin's pages only
    extra_js_urls       polaris.js: hits open at their first marked word, the document
                        filter asks documents.json as one types; the plugin's pages only
    extra_body_script   keep the explorer's panels open (Datasette's menu script closes
                        every open <details> on any click), on the plugin's pages only
    menu_links          "Polaris search" when a visible database is a Polaris index
    table_actions       links from the chunks and documents tables to the explorer
    database_actions    a link from a Polaris database's page to the explorer
    startup             serve a Polaris file in a read-only folder immutable (as `-i`
                        would; SQLite cannot create its -shm there), and warm the models
                        when the plugin config asks for it
    handle_exception    a damaged Polaris file: a page that says so and what to do (503),
                        on Datasette's own pages too, instead of a bare 500

Plugin configuration (metadata ``plugins: polaris:``): ``warm: true`` loads each Polaris
database's model in a background thread at startup, so the first query does not pay
for it inside Datasette's SQL time limit.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from datasette import hookimpl
from datasette.utils.asgi import Response
from markupsafe import Markup

from llama_index_polaris.engine.sqlite.connect import damage_message

from . import engines, functions, hidden, views

PLUGIN_NAME = "polaris"
PAGE_VIEWS = ("polaris",)


@hookimpl
def prepare_connection(conn: Any, database: str, datasette: Any) -> None:
    engines.load_sqlite_vec(conn)
    functions.register(conn, database, datasette)


@hookimpl
def register_routes() -> list[tuple[str, Any]]:
    return [
        (r"^/-/polaris(?P<format>\.json)?$", views.instance_page),
        (r"^/(?P<database>[^/]+)/-/polaris(?P<format>\.json)?$", views.database_page),
        (r"^/(?P<database>[^/]+)/-/polaris/document(?P<format>\.json)?$", views.document_page),
        (r"^/(?P<database>[^/]+)/-/polaris/documents\.json$", views.documents_json),
    ]


@hookimpl
def extra_css_urls(view_name: str, datasette: Any) -> list[str]:
    if view_name in PAGE_VIEWS:
        return [datasette.urls.static_plugins(static_mount(), "polaris.css")]
    return []


@hookimpl
def extra_js_urls(view_name: str, datasette: Any) -> list[dict[str, Any]]:
    """polaris.js (each hit opens at its first marked word; the document filter), as a module:
    it runs once the page is parsed."""
    if view_name in PAGE_VIEWS:
        return [{"url": datasette.urls.static_plugins(static_mount(), "polaris.js"), "module": True}]
    return []


# Datasette's base template closes every open <details> on any click outside it (its
# menus need that). The explorer's panels (score legend, settings) are reading aids: only
# their own summary opens or closes them. Scripts may still open them.
KEEP_PANELS_OPEN = """
document.querySelectorAll("details.polaris-panel").forEach(function (details) {
  Object.defineProperty(details, "open", {
    configurable: true,
    get: function () { return this.hasAttribute("open"); },
    set: function (value) { if (value) { this.setAttribute("open", ""); } },
  });
});
"""


@hookimpl
def extra_body_script(view_name: str) -> str | None:
    return KEEP_PANELS_OPEN if view_name in PAGE_VIEWS else None


@hookimpl
def get_metadata(datasette: Any) -> dict[str, Any] | None:
    return hidden.metadata(datasette)


@hookimpl
def render_cell(row: Any, value: Any, column: str, table: str | None, database: str, datasette: Any) -> Any:
    """The id on a chunks or documents row page links to that document in the explorer."""
    if column != "id" or table not in ("chunks", "documents") or value is None:
        return None
    doc_id = value if table == "documents" else (row["document_id"] if "document_id" in row.keys() else None)
    if doc_id is None:
        return None

    async def cell() -> Markup | None:
        if not await engines.is_polaris(datasette.databases[database]):
            return None
        href = views.document_href(datasette, database, str(doc_id), value if table == "chunks" else None)
        label = "this chunk in its document" if table == "chunks" else "this document"
        return Markup('{} <a class="polaris-cell-link" href="{}">Polaris: {}</a>').format(value, href, label)

    return cell


@functools.lru_cache(maxsize=1)
def static_mount() -> str:
    """The name Datasette mounts our static/ under: the distribution's name when installed."""
    from datasette.plugins import get_plugins

    ours = Path(__file__).parent / "static"
    for plugin in get_plugins():
        if plugin["static_path"] and Path(plugin["static_path"]).resolve() == ours.resolve():
            return plugin["name"]
    return __name__


@hookimpl
def menu_links(datasette: Any, actor: Any) -> Any:
    async def links() -> list[dict[str, str]]:
        if await views.visible_polaris_databases(datasette, actor):
            return [{"href": datasette.urls.path("/-/polaris"), "label": "Polaris search"}]
        return []

    return links


@hookimpl
def table_actions(datasette: Any, database: str, table: str) -> Any:
    if table not in ("chunks", "documents"):
        return None

    async def links() -> list[dict[str, str]]:
        if not await engines.is_polaris(datasette.databases[database]):
            return []
        page = datasette.urls.database(database) + "/-/polaris"
        what = "chunks" if table == "chunks" else "documents"
        return [
            {"href": page, "label": "Search this Polaris index"},
            {"href": page + "#documents", "label": f"Browse {what} by document (Polaris)"},
        ]

    return links


@hookimpl
def database_actions(datasette: Any, database: str) -> Any:
    async def links() -> list[dict[str, str]]:
        if not await engines.is_polaris(datasette.databases[database]):
            return []
        return [{"href": datasette.urls.database(database) + "/-/polaris", "label": "Polaris explorer: search and explain"}]

    return links


@hookimpl
def handle_exception(datasette: Any, request: Any, exception: Exception) -> Any:
    database = (request.url_vars or {}).get("database") if request is not None else None
    message = damage_message(exception, database or "the database")
    if message is None:
        return None

    async def page() -> Response:
        if request is not None and (request.path.endswith(".json") or request.args.get("_format") == "json"):
            return Response.json({"ok": False, "error": message, "status": views.DAMAGED_STATUS},
                                 status=views.DAMAGED_STATUS)
        html = await datasette.render_template(
            "error.html", {"ok": False, "error": message, "title": "Damaged database", "status": views.DAMAGED_STATUS},
            request=request,
        )
        return Response.html(html, status=views.DAMAGED_STATUS)

    return page


@hookimpl
def startup(datasette: Any) -> None:
    engines.serve_read_only_folders(datasette)
    config = datasette.plugin_config(PLUGIN_NAME) or {}
    if not config.get("warm"):
        return
    paths = [str(db.path) for db in datasette.databases.values() if not db.is_memory and db.path]
    threading.Thread(target=engines.warm, args=(paths,), name="polaris-warm", daemon=True).start()
