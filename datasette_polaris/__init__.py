"""Datasette plugin: look inside polaris.db and see why each hit scored what it did.

Hooks (all here; the work is in the modules they name):

    prepare_connection  load sqlite-vec, add polaris_embed / polaris_search  (functions)
    register_routes     /-/polaris, /<db>/-/polaris, /<db>/-/polaris/document  (views)
    extra_css_urls      the page's stylesheet, on the plugin's pages only
    menu_links          "Polaris search" when a visible database is a Polaris index
    table_actions       links from the chunks and documents tables to the explorer
    database_actions    a link from a Polaris database's page to the explorer
    startup             warm the models when the plugin config asks for it

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

from . import engines, functions, views

PLUGIN_NAME = "polaris"
PAGE_VIEWS = ("polaris",)


@hookimpl
def prepare_connection(conn: Any, database: str, datasette: Any) -> None:
    engines.load_sqlite_vec(conn)
    functions.register(conn, database, datasette)


@hookimpl
def register_routes() -> list[tuple[str, Any]]:
    return [
        (r"^/-/polaris$", views.instance_page),
        (r"^/(?P<database>[^/]+)/-/polaris$", views.database_page),
        (r"^/(?P<database>[^/]+)/-/polaris/document$", views.document_page),
    ]


@hookimpl
def extra_css_urls(view_name: str, datasette: Any) -> list[str]:
    if view_name in PAGE_VIEWS:
        return [datasette.urls.static_plugins(static_mount(), "polaris.css")]
    return []


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
def startup(datasette: Any) -> None:
    config = datasette.plugin_config(PLUGIN_NAME) or {}
    if not config.get("warm"):
        return
    paths = [str(db.path) for db in datasette.databases.values() if not db.is_memory and db.path]
    threading.Thread(target=engines.warm, args=(paths,), name="polaris-warm", daemon=True).start()
