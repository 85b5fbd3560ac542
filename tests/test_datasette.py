"""The Datasette plugin over a real polaris.db: real sqlite-vec, real FTS5, the real bundled model."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from datasette.app import Datasette

from datasette_polaris import engines
from llama_index_polaris.engine.embed import load_embedder
from llama_index_polaris.engine.store import ChunkRecord, DocumentRecord, ModelBinding, Store

MODEL = "all-minilm-l6-v2"
OVERLAP = 20
XSS_SCRIPT = "<script>alert('xss-script')</script>"
XSS_IMG = '<img src=x onerror="alert(\'xss-img\')">'
XSS_LINK = "[click me](javascript:alert('xss-link'))"

SESSIONS = (
    "When a session expires the server answers 401 and the client refreshes its token."
    " Expired sessions are swept every ten minutes by the janitor job."
)
# (document id, collection, [(heading path, text, token_count or None)])
CORPUS = [
    ("docs/auth.md", "guides", [
        ("Authentication", "Authentication uses signed cookies and short-lived bearer tokens.", 11),
        ("Authentication > Sessions > Expired sessions", SESSIONS, None),
        ("Authentication > Sessions > Logout", "Logging out deletes the session row and clears the cookie.", 12),
    ]),
    ("docs/deploy.md", "guides", [
        ("Deployment > Docker", "Build the image with docker build and run it behind a reverse proxy.", None),
        ("Deployment > Backups", "Back up the SQLite file with the online backup API, never by copying it.", None),
    ]),
    ("notes/evil.md", "notes", [
        (f"Evil {XSS_SCRIPT}", f"Payloads: {XSS_SCRIPT} {XSS_IMG} and a link {XSS_LINK}.", None),
    ]),
]


def build_polaris_db(path: Path) -> Path:
    """A small index: three documents, overlapping chunks, a failed document, XSS payloads."""
    embedder = load_embedder(MODEL)
    with Store(path) as store:
        store.bind_model(ModelBinding(embedder.model_id, embedder.dim, embedder.fingerprint))
        for doc_id, collection, specs in CORPUS:
            chunks, end, prev = [], 0, ""
            for ordinal, (heading, text, tokens) in enumerate(specs):
                shared = prev[-OVERLAP:]  # the chunker carries the previous chunk's tail across
                text, start = shared + text, end - len(shared)
                chunks.append(ChunkRecord(
                    node_id=f"{doc_id}#{ordinal}", text=text, ordinal=ordinal, heading_path=heading,
                    start_char=start, end_char=start + len(text), token_count=tokens,
                ))
                end, prev = start + len(text), text
            vectors = embedder.embed_documents([c.text for c in chunks])
            doc = DocumentRecord(id=doc_id, path=doc_id, name=Path(doc_id).name, collection=collection)
            store.upsert_document(doc, chunks, vectors)
        store.put_document(DocumentRecord(id="notes/broken.md", path="notes/broken.md", collection="notes",
                                          status="failed", error="not UTF-8"))
    return path


@pytest.fixture(scope="module")
def polaris_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_polaris_db(tmp_path_factory.mktemp("polaris") / "polaris.db")


@pytest.fixture(scope="module")
def plain_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plain") / "plain.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE dogs (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO dogs (name) VALUES ('Cleo')")
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def ds(polaris_db: Path, plain_db: Path) -> Datasette:
    return Datasette([str(polaris_db), str(plain_db)])


def sql_json(ds_response) -> list[dict]:
    assert ds_response.status_code == 200, ds_response.text
    return ds_response.json()


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text inside <script> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def assert_inert(html: str) -> None:
    """No payload from the corpus or the query became an element, a handler or a link."""
    parsed = _Elements()
    parsed.feed(html)
    for tag, attrs in parsed.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        for name in ("href", "src", "action"):
            assert not (attrs.get(name) or "").strip().lower().startswith("javascript:"), (tag, attrs)
        assert not (tag == "img" and attrs.get("src") == "x"), attrs
    assert not any("alert(" in script for script in parsed.scripts)


def text_of(html: str) -> str:
    """The page's text with tags removed (highlighting splits words into <mark> elements)."""
    return re.sub(r"<[^>]+>", "", html)


async def test_plugin_is_registered(ds: Datasette) -> None:
    plugins = (await ds.client.get("/-/plugins.json")).json()
    ours = [p for p in plugins if "prepare_connection" in p["hooks"] and "register_routes" in p["hooks"]]
    assert ours and {"menu_links", "table_actions", "extra_css_urls"} <= set(ours[0]["hooks"])


async def test_page_shows_the_index_at_a_glance(ds: Datasette) -> None:
    r = await ds.client.get("/polaris/-/polaris")
    assert r.status_code == 200
    html = r.text
    assert MODEL in html and ">384<" in html
    assert "guides" in html and "notes" in html and "failed" in html
    assert re.search(r"Chunks</dt><dd><a [^>]+>6<", html)
    css = re.search(r'href="([^"]+/polaris\.css)"', html).group(1)  # package data
    assert (await ds.client.get(css)).status_code == 200


async def test_instance_page_opens_the_polaris_database(ds: Datasette) -> None:
    r = await ds.client.get("/-/polaris", params={"q": "expired sessions"})
    assert r.status_code == 200
    assert "Expired sessions" in text_of(r.text) and "docs/auth.md" in r.text


async def test_search_shows_hits_with_their_explanation(ds: Datasette) -> None:
    r = await ds.client.get("/polaris/-/polaris", params={"q": "what happens when a session expires", "k": "3"})
    assert r.status_code == 200
    hits = re.findall(r'<li class="polaris-hit" id="hit-(\d+)">', r.text)
    assert hits == ["1", "2", "3"]
    first = r.text.split('id="hit-1"')[1].split('id="hit-2"')[0]
    assert "Expired sessions" in text_of(first)
    assert "<mark>session</mark>" in first and "<mark>expires</mark>" in first
    assert "1.000" in first  # top hit reads 1.000
    for column in ("Vector rank", "Distance", "BM25 rank", "BM25 score", "RRF", "Boost", "MMR penalty"):
        assert column in first
    assert 'href="/polaris/chunks/' in first  # Datasette's own row page


async def test_search_scope_and_mode(ds: Datasette) -> None:
    r = await ds.client.get("/polaris/-/polaris", params={"q": "backup", "mode": "bm25", "collection": "notes"})
    assert r.status_code == 200 and "0 results" in r.text
    r = await ds.client.get("/polaris/-/polaris", params={"q": "backup", "mode": "bm25", "document": "docs/deploy.md"})
    assert "1 result " in r.text and "Backups" in text_of(r.text)
    r = await ds.client.get("/polaris/-/polaris", params={"q": "backup", "mode": "fuzzy"})
    assert r.status_code == 200 and "mode must be one of" in r.text


async def test_polaris_search_sql_function_returns_json_hits(ds: Datasette) -> None:
    sql = "select value from json_each(polaris_search(:q, 2))"
    rows = sql_json(await ds.client.get("/polaris.json", params={"sql": sql, "q": "expired session token", "_shape": "array"}))
    hits = [json.loads(r["value"]) for r in rows]
    assert [h["rank"] for h in hits] == [1, 2]
    assert hits[0]["heading_path"] == "Authentication > Sessions > Expired sessions"
    assert hits[0]["score"] == 1.0
    assert {"vector_rank", "vector_distance", "bm25_rank", "bm25_score", "rrf", "boost", "mmr_penalty"} <= set(hits[0]["explain"])
    sql = "select json_extract(value, '$.document') as doc from json_each(polaris_search(:q, 5, :opts))"
    rows = sql_json(await ds.client.get("/polaris.json", params={
        "sql": sql, "q": "docker", "opts": '{"mode": "bm25", "collections": ["guides"]}', "_shape": "array"}))
    assert rows == [{"doc": "docs/deploy.md"}]


async def test_polaris_embed_drives_a_vec0_knn_query(ds: Datasette) -> None:
    sql = (
        "select c.heading_path, v.distance from chunks_vec v join chunks c on c.id = v.rowid"
        " where v.embedding match polaris_embed(:q) and k = 3 order by v.distance"
    )
    rows = sql_json(await ds.client.get("/polaris.json", params={"sql": sql, "q": "docker image reverse proxy", "_shape": "array"}))
    assert len(rows) == 3
    assert rows[0]["heading_path"] == "Deployment > Docker"
    assert rows[0]["distance"] <= rows[1]["distance"] <= rows[2]["distance"]
    size = sql_json(await ds.client.get("/polaris.json", params={"sql": "select length(polaris_embed('x')) as n", "_shape": "array"}))
    assert size == [{"n": 384 * 4}]


async def test_function_errors_are_sql_errors(ds: Datasette, capfd: pytest.CaptureFixture) -> None:
    cases = [
        ("plain", "select polaris_search('dogs', 3)", "is not a Polaris index"),
        ("polaris", "select polaris_search('x', 3, 'not json')", "options must be a JSON object"),
        ("polaris", "select polaris_search('x', 3, '{\"mode\": \"fuzzy\"}')", "mode must be one of"),
        ("polaris", "select polaris_embed(42)", "polaris_embed(text) needs text, got int"),
    ]
    for database, sql, reason in cases:
        r = await ds.client.get(f"/{database}.json", params={"sql": sql})
        assert r.status_code == 400 and r.json()["ok"] is False  # an SQL error, not a row
        assert r.json()["rows"] == []
        # CPython's sqlite3 fixes the SQL error's text; the reason goes to Datasette's stderr
        assert reason in capfd.readouterr().err


async def test_chunk_view_lists_chunks_in_order(ds: Datasette) -> None:
    r = await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md", "q": "session"})
    assert r.status_code == 200
    html = r.text
    ids = [int(i) for i in re.findall(r'<li class="polaris-chunk" id="chunk-(\d+)">', html)]
    assert len(ids) == 3 and ids == sorted(ids)
    assert html.index("Expired sessions") < html.index("Logout")
    assert "<strong>11</strong> tokens" in html  # stored
    assert "(counted now)" in html  # computed with the model's tokenizer
    assert "overlap with previous <strong>20</strong>" in html
    for cid in ids:
        assert f'href="/polaris/chunks/{cid}"' in html
    assert 'href="/polaris/documents/docs~2Fauth~2Emd"' in html
    assert "<mark>session</mark>" in html
    assert (await ds.client.get("/polaris/-/polaris/document", params={"id": "nope"})).status_code == 404


async def test_database_without_polaris_tables(ds: Datasette) -> None:
    r = await ds.client.get("/plain/-/polaris", params={"q": "dogs"})
    assert r.status_code == 200
    assert "has no Polaris tables" in r.text and 'href="/polaris/-/polaris"' in r.text
    assert (await ds.client.get("/plain/dogs.json")).status_code == 200  # the rest of Datasette still works
    assert (await ds.client.get("/plain/-/polaris/document", params={"id": "x"})).status_code == 404
    only_plain = Datasette([str(ds.databases["plain"].path)])
    r = await only_plain.client.get("/-/polaris")
    assert r.status_code == 200 and "No database served here is a Polaris index" in r.text


async def test_menu_and_table_actions(ds: Datasette) -> None:
    html = (await ds.client.get("/polaris/chunks")).text
    assert "Search this Polaris index" in html and 'href="/-/polaris"' in html
    assert "Search this Polaris index" in (await ds.client.get("/polaris/documents")).text
    assert "Search this Polaris index" not in (await ds.client.get("/plain/dogs")).text
    assert "Polaris explorer" in (await ds.client.get("/polaris")).text


async def test_denied_actor_cannot_search(polaris_db: Path, plain_db: Path) -> None:
    metadata = {"databases": {"polaris": {"allow": {"id": "root"}}}}
    ds = Datasette([str(polaris_db), str(plain_db)], metadata=metadata)
    assert (await ds.client.get("/polaris/-/polaris", params={"q": "session"})).status_code == 403
    assert (await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md"})).status_code == 403
    r = await ds.client.get("/polaris.json", params={"sql": "select polaris_search('session', 3)"})
    assert r.status_code == 403
    # the functions only ever search the database they run in: the allowed one has no index
    r = await ds.client.get("/plain.json", params={"sql": "select polaris_search('session', 3)"})
    assert r.status_code == 400 and "Expired" not in r.text
    r = await ds.client.get("/-/polaris", params={"q": "session"})
    assert r.status_code == 200 and "Expired sessions" not in text_of(r.text) and "No database served here" in r.text
    assert "Polaris search" not in (await ds.client.get("/")).text
    root = {"ds_actor": ds.sign({"a": {"id": "root"}}, "actor")}
    r = await ds.client.get("/polaris/-/polaris", params={"q": "session"}, cookies=root)
    assert r.status_code == 200 and "Expired sessions" in text_of(r.text)


async def test_documents_render_inert_on_every_page(ds: Datasette) -> None:
    pages = [
        ("/polaris/-/polaris", {"q": "payloads alert click"}),
        ("/polaris/-/polaris", {"q": "evil", "mode": "bm25"}),
        ("/polaris/-/polaris/document", {"id": "notes/evil.md", "q": "script"}),
        ("/-/polaris", {"q": "payloads"}),
    ]
    for path, params in pages:
        r = await ds.client.get(path, params=params)
        assert r.status_code == 200
        assert "xss-script" in r.text  # the payload is shown, as text
        assert_inert(r.text)
    doc = (await ds.client.get("/polaris/-/polaris/document", params={"id": "notes/evil.md"})).text
    assert "&lt;script&gt;alert(" in doc and "&lt;img src=x onerror=" in doc
    assert "[click me](javascript:alert(" in doc  # Markdown is not rendered: the link is text


async def test_query_with_html_is_escaped_in_the_results_header(ds: Datasette) -> None:
    q = '<script>alert("q")</script><img src=x onerror=alert(1)> session'
    r = await ds.client.get("/polaris/-/polaris", params={"q": q})
    assert r.status_code == 200
    header = r.text.split('class="polaris-results-header"')[1].split("</h2>")[0]
    assert "&lt;script&gt;alert(" in header and "<script" not in header
    assert_inert(r.text)
    assert "<script>alert(" not in r.text.split("<title>")[1].split("</title>")[0]


async def test_warm_opens_every_polaris_database_at_startup(tmp_path: Path, plain_db: Path) -> None:
    fresh = build_polaris_db(tmp_path / "warm.db")
    ds = Datasette([str(fresh), str(plain_db)], metadata={"plugins": {"polaris": {"warm": True}}})
    await ds.invoke_startup()
    for thread in threading.enumerate():
        if thread.name == "polaris-warm":
            thread.join(timeout=60)
    assert str(fresh.resolve()) in engines.open_engines()
    assert str(Path(plain_db).resolve()) not in engines.open_engines()


async def test_polaris_database_with_nothing_indexed(tmp_path: Path) -> None:
    Store(tmp_path / "empty.db").close()
    ds = Datasette([str(tmp_path / "empty.db")])
    r = await ds.client.get("/empty/-/polaris", params={"q": "anything"})
    assert r.status_code == 200
    assert "none recorded" in r.text and "0 results" in r.text and "No documents yet" in r.text


def test_connection_that_cannot_load_extensions_warns_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(engines, "_warned_no_extensions", False)
    conn = sqlite3.connect(":memory:")  # this Python's stdlib sqlite3 may or may not load extensions
    if hasattr(conn, "enable_load_extension"):
        pytest.skip("this Python's stdlib sqlite3 can load extensions")
    with caplog.at_level("WARNING", logger="datasette_polaris.engines"):
        assert engines.load_sqlite_vec(conn) is False
        assert engines.load_sqlite_vec(conn) is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "sqlite-vec could not be loaded" in warnings[0] and "pysqlite3-binary" in warnings[0]
    assert conn.execute("select 1").fetchone() == (1,)  # the connection itself still works
