"""The Datasette plugin over a real polaris.db: real sqlite-vec, real FTS5, the real bundled model."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from datasette.app import Datasette

from datasette_polaris import engines, render
from llama_index_polaris.engine.embed import load_embedder
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, ModelBinding, Store

MODEL = "all-minilm-l6-v2"
OVERLAP = 20
XSS_SCRIPT = "<script>alert('xss-script')</script>"
XSS_IMG = '<img src=x onerror="alert(\'xss-img\')">'
XSS_LINK = "[click me](javascript:alert('xss-link'))"
# Markdown that must stay inert once rendered: raw HTML, script URLs, images, a title that
# tries to close its attribute, and two links that are fine (http and relative).
MD_PAYLOADS = (
    "<a href=\"javascript:alert('xss-a')\">raw anchor</a> <javascript:alert('xss-auto')>"
    " [data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) [vb](vbscript:msgbox)"
    " [entity](&#106;avascript:alert('xss-entity')) ![pixel](https://tracker.example/p.png)"
    " [titled](https://example.com/a \"x\\\" onmouseover=\\\"alert('xss-title')\")"
    " [the docs](https://example.com/docs) [next page](../deploy.md)"
)

SESSIONS = (
    "When a session expires the server answers 401 and the client refreshes its token."
    " Expired sessions are swept every ten minutes by the janitor job."
    " A stale token gets the error code `token_expired`."
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
        (f"Evil {XSS_SCRIPT}", f"Payloads: {XSS_SCRIPT} {XSS_IMG} and a link {XSS_LINK}.\n\n{MD_PAYLOADS}", None),
    ]),
]


def build_polaris_db(path: Path, fts_tokenizer: str | None = None) -> Path:
    """A small index: three documents, overlapping chunks, a failed document, XSS payloads."""
    embedder = load_embedder(MODEL)
    with Store(path, fts_tokenizer=fts_tokenizer) as store:
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
            assert not (attrs.get(name) or "").strip().lower().startswith(("javascript:", "data:", "vbscript:")), (tag, attrs)
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
    # k as a named parameter: Datasette passes URL parameters as text
    sql = "select value from json_each(polaris_search(:q, :k))"
    rows = sql_json(await ds.client.get("/polaris.json", params={"sql": sql, "q": "expired session token", "k": "2",
                                                                 "_shape": "array"}))
    assert [json.loads(r["value"])["rank"] for r in rows] == [1, 2]
    # a literal past 2**63 reaches the function as REAL: a whole number, clamped as the docs say
    sql = "select count(*) as n from json_each(polaris_search(:q, 100000000000000000000))"
    rows = sql_json(await ds.client.get("/polaris.json", params={"sql": sql, "q": "session", "_shape": "array"}))
    assert 1 <= rows[0]["n"] <= 100


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


async def test_function_errors_reach_the_client_with_the_reason(ds: Datasette) -> None:
    cases = [
        ("plain", "select polaris_search('dogs', 3) as v", "polaris_search: ", "is not a Polaris index"),
        ("polaris", "select polaris_search('x', 3, 'not json') as v", "polaris_search: ", "options must be a JSON object"),
        ("polaris", "select polaris_search('x', 3, '{\"mode\": \"fuzzy\"}') as v", "polaris_search: ",
         "mode must be one of hybrid, vector, bm25, got 'fuzzy'"),
        ("polaris", "select polaris_search('x', 'three') as v", "polaris_search: ", "k must be an integer, got str"),
        ("polaris", "select polaris_embed(42) as v", "polaris_embed", "needs text, got int"),
    ]
    for database, sql, prefix, reason in cases:
        r = await ds.client.get(f"/{database}.json", params={"sql": sql, "_shape": "array"})
        assert r.status_code == 200, r.text
        error = json.loads(r.json()[0]["v"])["error"]  # an object where the hits (an array) would be
        assert error.startswith(prefix) and reason in error, error
        html = await ds.client.get(f"/{database}", params={"sql": sql})
        assert reason.replace("'", "&#39;") in html.text  # shown in the result cell of Datasette's query page
    # the documented json_each usage yields one row saying why, not hits
    sql = "select key, value from json_each(polaris_search('x', 3, '{\"mode\": \"fuzzy\"}'))"
    rows = sql_json(await ds.client.get("/polaris.json", params={"sql": sql, "_shape": "array"}))
    assert len(rows) == 1 and rows[0]["key"] == "error" and "mode must be one of" in rows[0]["value"]
    # and a vec0 MATCH given an error instead of a vector refuses it: no row pretends to be a neighbour
    sql = "select rowid from chunks_vec where embedding match polaris_embed(42) and k = 3"
    r = await ds.client.get("/polaris.json", params={"sql": sql})
    assert r.status_code == 400 and r.json()["rows"] == []


async def test_chunk_view_lists_chunks_in_order(ds: Datasette) -> None:
    r = await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md", "q": "session"})
    assert r.status_code == 200
    html = r.text
    ids = [int(i) for i in re.findall(r'<li class="polaris-chunk" id="chunk-(\d+)">', html)]
    assert len(ids) == 3 and ids == sorted(ids)
    assert text_of(html).index("Expired sessions") < text_of(html).index("Logout")
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
    assert r.status_code == 404  # a page that explains, with links to the Polaris databases
    assert "has no Polaris tables" in r.text and 'href="/polaris/-/polaris"' in r.text
    r = await ds.client.get("/plain/-/polaris.json", params={"q": "dogs"})
    assert r.status_code == 404 and r.json()["ok"] is False and "has no Polaris tables" in r.json()["error"]
    assert (await ds.client.get("/plain/dogs.json")).status_code == 200  # the rest of Datasette still works
    assert (await ds.client.get("/plain/-/polaris/document", params={"id": "x"})).status_code == 404
    only_plain = Datasette([str(ds.databases["plain"].path)])
    r = await only_plain.client.get("/-/polaris")
    assert r.status_code == 404 and "No database served here is a Polaris index" in r.text
    r = await only_plain.client.get("/-/polaris.json")
    assert r.status_code == 404 and "No database served here is a Polaris index" in r.json()["error"]


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
    assert r.status_code == 200 and "is not a Polaris index" in r.text and "Expired" not in r.text
    r = await ds.client.get("/-/polaris", params={"q": "session"})
    assert r.status_code == 404 and "Expired sessions" not in text_of(r.text) and "No database served here" in r.text
    r = await ds.client.get("/polaris/-/polaris.json", params={"q": "session"})
    assert r.status_code == 403 and "Expired" not in r.text
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
        for view in ("rendered", "raw"):
            r = await ds.client.get(path, params={**params, "view": view})
            assert r.status_code == 200
            assert f"polaris-text-{view}" in r.text
            assert "xss-script" in text_of(r.text) and "xss-title" in r.text  # the payloads are shown, as text
            assert_inert(r.text)
    raw = (await ds.client.get("/polaris/-/polaris/document", params={"id": "notes/evil.md", "view": "raw"})).text
    assert "&lt;script&gt;alert(" in raw and "&lt;img src=x onerror=" in raw
    assert "[click me](javascript:alert(" in raw and "[the docs](https://example.com/docs)" in raw  # raw: nothing rendered


async def test_chunk_text_is_rendered_as_markdown_safely(ds: Datasette) -> None:
    r = await ds.client.get("/polaris/-/polaris/document", params={"id": "notes/evil.md"})
    assert r.status_code == 200
    html = r.text.split('class="polaris-text polaris-text-rendered"')[1].split("</li>")[0]
    assert_inert(html)
    parsed = _Elements()
    parsed.feed(html)
    links = {attrs.get("href"): attrs for tag, attrs in parsed.tags if tag == "a"}
    # http(s) and relative links are links, marked rel=nofollow; an image is a link, never loaded
    assert set(links) == {"https://example.com/docs", "../deploy.md", "https://example.com/a",
                          "https://tracker.example/p.png"}
    assert all("nofollow" in (a.get("rel") or "") for a in links.values())
    assert links["https://example.com/a"]["title"] == "x\" onmouseover=\"alert('xss-title')"  # one attribute
    assert not [t for t, _ in parsed.tags if t in ("img", "script", "iframe", "object", "embed")]
    assert "image: pixel" in html
    # every other scheme stays literal Markdown text
    for literal in ("[click me](javascript:alert(", "[data](data:text/html", "[vb](vbscript:msgbox)",
                    "&lt;javascript:alert(", "&lt;a href=&#34;javascript:alert("):
        assert literal in html, literal
    # inline code is rendered; the toggle shows the raw text instead
    auth = (await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md"})).text
    assert "<code>token_expired</code>" in auth
    toggled = await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md", "view": "raw"})
    assert "`token_expired`" in toggled.text and "<code>token_expired</code>" not in toggled.text


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
    assert str(fresh.resolve()) in engines.open_indexes()
    assert str(Path(plain_db).resolve()) not in engines.open_indexes()


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


# -- issue 14: JSON twins, native FTS, hidden vec0 tables, legend, layout state, 400s ----------

def test_markdown_headings_sit_below_the_page_headings() -> None:
    marker = render.Highlighter("", "unicode61")
    assert render.markdown("# Title\n\n## Part", marker, heading_offset=2).startswith('<h3 class="polaris-md-heading">Title</h3>\n<h4')
    assert "<h6" in render.markdown("##### Deep", marker, heading_offset=3)  # never past h6


def test_highlighting_follows_the_fts5_tokenizer() -> None:
    porter = render.Highlighter("how do expired sessions work", "porter unicode61 remove_diacritics 2")
    text = "A stale token gets `token_expired`; the session expires. Expiry is not stemmed alike."
    assert str(porter.mark(text)) == (
        "A stale token gets `token_<mark>expired</mark>`; the <mark>session</mark> <mark>expires</mark>."
        " Expiry is not stemmed alike.")
    plain = render.Highlighter("expired sessions", "unicode61")  # no stemming: only the same words
    assert str(plain.mark(text)) == "A stale token gets `token_<mark>expired</mark>`; the session expires. Expiry is not stemmed alike."
    assert str(porter.mark("<b>expired</b> &amp;")) == "&lt;b&gt;<mark>expired</mark>&lt;/b&gt; &amp;amp;"
    assert str(render.Highlighter("rrf_k", "unicode61").mark("set rrf_k = 20")) == "set <mark>rrf_k</mark> = 20"


def test_a_lookup_marks_the_identifier_as_written_not_its_words() -> None:
    """A query of identifiers only ranks the texts naming it first (literal.py); the page marks
    those places, where BM25's words would mark the prose it ranked down."""
    lookup = render.Highlighter("OUT_DIR", "unicode61")
    text = "Pass --out-dir to copy out to a dir; Cargo sets `OUT_DIR` (not MY_OUT_DIR)."
    assert str(lookup.mark(text)) == ("Pass --out-dir to copy out to a dir; Cargo sets `<mark>OUT_DIR</mark>`"
                                      " (not MY_OUT_DIR).")
    prose = "Pass --out-dir to copy out to a dir."  # names it nowhere: what BM25 matched, the phrase "out dir"
    assert str(lookup.mark(prose)) == "Pass --<mark>out-dir</mark> to copy out to a dir."


async def test_search_page_has_a_json_twin_with_the_cli_hit_fields(ds: Datasette, polaris_db: Path) -> None:
    params = {"q": "how do expired sessions work", "k": "3"}
    twin = await ds.client.get("/polaris/-/polaris.json", params=params)
    assert twin.status_code == 200 and twin.headers["content-type"].startswith("application/json")
    data = twin.json()
    assert data["ok"] is True and data["database"] == "polaris"
    assert data["query"] == {"q": params["q"], "mode": "hybrid", "k": 3, "collections": [], "documents": []}
    assert set(data["settings"]) >= {"rrf_k", "heading_boost", "mmr_lambda", "candidate_pool", "top_k"}
    assert data["index"]["model_id"] == MODEL and data["index"]["embedding_dim"] == 384 and data["index"]["chunks"] == 6
    assert [h["rank"] for h in data["hits"]] == [1, 2, 3] and data["hits"][0]["score"] == 1.0
    assert data["hits"][0]["heading_path"] == "Authentication > Sessions > Expired sessions"
    # the same hits, field for field, as `polaris search --json --explain` on the same file
    cli = subprocess.run(
        [sys.executable, "-m", "llama_index_polaris.cli", "search", params["q"], "-k", "3", "--json", "--explain",
         "--db", str(polaris_db)], cwd=polaris_db.parent, capture_output=True, text=True, timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    cli_hits = json.loads(cli.stdout)
    # the score uses the similarities themselves (score fusion), so it is compared like the explain figures
    floats = {"explain": None, "score": None, "strength": None, "cosine": None}  # compared with a tolerance
    assert [{**h, **floats} for h in data["hits"]] == [{**h, **floats} for h in cli_hits]
    for key in ("score", "strength", "cosine"):
        assert [h.get(key) for h in data["hits"]] == pytest.approx([h.get(key) for h in cli_hits], abs=1e-5), key
    for ours, theirs in zip(data["hits"], cli_hits):  # a one-shot ONNX session may differ in the 7th digit
        assert ours["explain"].keys() == theirs["explain"].keys()
        for key, value in ours["explain"].items():
            if key == "chunks":  # the chunks of the section that matched, with their ranks: exact
                assert value == theirs["explain"][key]
                continue
            assert value == (None if theirs["explain"][key] is None else pytest.approx(theirs["explain"][key], abs=1e-5)), key
    # ?_format=json and the instance page answer the same
    assert (await ds.client.get("/polaris/-/polaris", params={**params, "_format": "json"})).json() == data
    instance = (await ds.client.get("/-/polaris.json", params=params)).json()
    assert instance["hits"] == data["hits"] and instance["databases"] == ["polaris"]


async def test_pages_link_to_their_json(ds: Datasette) -> None:
    r = await ds.client.get("/polaris/-/polaris", params={"q": "backup", "mode": "bm25"})
    link = re.search(r'<p class="export-links">This data as <a href="([^"]+)">json</a>', r.text).group(1)
    assert link == "/polaris/-/polaris.json?q=backup&amp;mode=bm25"
    assert '<link rel="alternate" type="application/json+datasette" href="/polaris/-/polaris.json?q=backup&amp;mode=bm25">' in r.text
    followed = await ds.client.get(link.replace("&amp;", "&"))
    assert followed.status_code == 200 and followed.json()["hits"][0]["heading_path"] == "Deployment > Backups"
    doc = await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md", "q": "session"})
    link = re.search(r'This data as <a href="([^"]+)">json</a>', doc.text).group(1).replace("&amp;", "&")
    assert link == "/polaris/-/polaris/document.json?id=docs%2Fauth.md&q=session"
    data = (await ds.client.get(link)).json()
    assert data["document"]["id"] == "docs/auth.md" and data["document"]["collection"] == "guides"
    chunks = data["chunks"]
    assert [c["ordinal"] for c in chunks] == [0, 1, 2]
    assert chunks[1]["heading_path"] == "Authentication > Sessions > Expired sessions"
    assert (chunks[0]["token_count"], chunks[0]["token_count_source"]) == (11, "stored")
    assert chunks[1]["token_count_source"] == "counted now" and chunks[1]["token_count"] > 0
    assert chunks[1]["overlap_previous"] == 20 and chunks[0]["overlap_next"] == 20
    assert set(chunks[0]) >= {"chunk_id", "node_id", "text", "start_char", "end_char", "metadata"}
    assert (await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md", "_format": "json"})).json() == \
        (await ds.client.get("/polaris/-/polaris/document.json", params={"id": "docs/auth.md"})).json()


async def test_bad_parameters_answer_400_naming_each(ds: Datasette) -> None:
    bad = {"q": "rate limits", "mode": "fuzzy", "k": "abc"}
    page = await ds.client.get("/polaris/-/polaris", params=bad)
    assert page.status_code == 400
    alert = page.text.split('role="alert"')[1].split("</div>")[0]
    assert "2 bad parameters" in alert and "mode must be one of hybrid, vector, bm25, not &#39;fuzzy&#39;" in alert
    assert "k must be a whole number" in alert and "&#39;abc&#39;" in alert
    assert "0 results" not in page.text and 'aria-invalid="true"' in page.text
    for url, params in (("/polaris/-/polaris.json", bad), ("/polaris/-/polaris", {**bad, "_format": "json"})):
        r = await ds.client.get(url, params=params)
        assert r.status_code == 400 and r.json()["ok"] is False and r.json()["status"] == 400
        assert set(r.json()["errors"]) == {"mode", "k"} and r.json()["hits"] == []
    r = await ds.client.get("/polaris/-/polaris", params={"q": "x", "view": "fancy", "_format": "xml"})
    assert r.status_code == 400 and "view must be one of rendered, raw" in r.text and "_format must be json" in r.text
    r = await ds.client.get("/polaris/-/polaris/document.json", params={"mode": "fuzzy"})
    assert r.status_code == 400 and set(r.json()["errors"]) == {"id", "mode"}
    r = await ds.client.get("/polaris/-/polaris/document")
    assert r.status_code == 400 and "id is required" in r.text
    r = await ds.client.get("/polaris/-/polaris/document.json", params={"id": "nope"})
    assert r.status_code == 404 and r.json()["error"] == "No document with id 'nope' in polaris."
    assert (await ds.client.get("/polaris/-/polaris", params={"q": "x", "k": "1000"})).status_code == 200  # clamped


async def test_chunks_table_uses_the_full_text_index(ds: Datasette, polaris_db: Path) -> None:
    r = await ds.client.get("/polaris/chunks.json", params={"_search": "expired", "_shape": "objects"})
    assert r.status_code == 200
    found = {row["id"] for row in r.json()["rows"]}
    with Store(polaris_db, readonly=True) as store:
        expected = {row[0] for row in store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH '\"expired\"'")}
        total = store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert found == expected and 0 < len(found) < total
    assert all("xpire" in row["text"] + row["heading_path"] for row in r.json()["rows"])
    page = await ds.client.get("/polaris/chunks")
    assert 'name="_search"' in page.text  # Datasette's search box on the table


async def test_vec0_tables_and_posting_lists_are_hidden_like_fts_tables(ds: Datasette) -> None:
    tables = {t["name"]: t["hidden"] for t in (await ds.client.get("/polaris.json")).json()["tables"]}
    vec = {name for name in tables if name.startswith("chunks_vec")}
    assert len(vec) == 7 and all(tables[name] for name in vec)  # chunks_vec and its six shadow tables
    assert all(tables[name] for name in tables if name.startswith("chunks_fts"))  # Datasette's own rule
    lists = {name for name in tables if name.startswith("chunks_bm25")}
    assert len(lists) == 4 and all(tables[name] for name in lists)  # the BM25 posting lists
    assert not any(tables[name] for name in ("chunks", "documents", "polaris_meta"))
    for path in ("/", "/polaris"):
        html = (await ds.client.get(path)).text
        assert "chunks_vec" not in html and "chunks" in html, path
    assert "chunks_vec_rowids" in (await ds.client.get("/polaris", params={"_show_hidden": "1"})).text
    assert (await ds.client.get("/polaris/chunks_vec.json", params={"_size": "1"})).status_code == 200  # still there
    assert not any(t["hidden"] for t in (await ds.client.get("/plain.json")).json()["tables"])


async def test_score_legend_shows_the_settings_in_effect(tmp_path: Path) -> None:
    db = build_polaris_db(tmp_path / "tuned.db", fts_tokenizer="unicode61")
    # the fixed fusion: with fusion_by_question (the default) the question's plan sets the weights,
    # heading boost and score fusion's vector weight, and the legend shows those (test_fusion_shown.py)
    (tmp_path / "polaris.toml").write_text("rrf_k = 33\nheading_boost = 0.07\nmmr_lambda = 0.6\nscore_fusion = 0.3\n"
                                           "score_fusion_vector = 0.25\nscore_fusion_depth = 40\n"
                                           "fusion_by_question = false\n")
    tuned = Datasette([str(db)])
    r = await tuned.client.get("/tuned/-/polaris", params={"q": "expired sessions", "k": "3"})
    assert r.status_code == 200
    legend_html = r.text.split('polaris-legend"')[1].split("</details>")[0]
    assert "RRF = 1/(33 + vector rank) + 1/(33 + BM25 rank)" in legend_html
    assert "0.07 × heading match" in legend_html and "Score = (0.6 × relevance − MMR penalty + 0.4)" in legend_html
    assert "Each list returns up to 60 chunks (candidate_pool, whatever k is" in legend_html
    first = r.text.split('id="hit-1"')[1].split('id="hit-2"')[0]
    titles = dict(re.findall(r'<dt title="([^"]+)" aria-describedby="legend-(\w+)">', first)[i][::-1] for i in range(14))
    assert list(titles) == ["vector_rank", "vector_distance", "bm25_rank", "bm25_score", "rrf_vector", "rrf_bm25", "rrf",
                            "fusion_vector", "fusion_bm25", "fused", "boost", "relevance", "mmr_penalty", "score"]
    assert "0.7 × RRF ÷ best RRF + 0.3 × score fusion ÷ best" in legend_html
    assert "0.25 × similarity + 0.75 × BM25" in legend_html and "rank 40 (0)" in legend_html
    assert "0.25 × the cosine similarity" in titles["fusion_vector"]
    assert "rrf_k = 33" in titles["rrf_vector"] and "mmr_lambda = 0.6" in titles["mmr_penalty"]
    hit = (await tuned.client.get("/tuned/-/polaris.json", params={"q": "expired sessions", "k": "3"})).json()["hits"][0]
    assert f">{hit['explain']['relevance']:.4f}<" in first and hit["explain"]["relevance"] is not None
    assert f">{hit['explain']['rrf']:.5f}<" in first and f">{hit['explain']['fused']:.3f}<" in first
    # this index was built without porter: "expired" marks "expired", never "expires"
    assert "token_<mark>expired</mark>" in first and "<mark>expires</mark>" not in first
    bm25 = await tuned.client.get("/tuned/-/polaris", params={"q": "backup", "mode": "bm25"})
    assert "Score = BM25 score ÷ the top hit&#39;s BM25 score" in bm25.text
    assert "Vector rank" not in bm25.text.split('id="hit-1"')[1]  # a bm25 hit has no vector figures


async def test_links_keep_the_search_state(ds: Datasette) -> None:
    state = {"q": "session", "mode": "bm25", "k": "4", "collection": "guides"}
    page = await ds.client.get("/polaris/-/polaris", params=state)
    doc_link = re.search(r'<p class="polaris-source"><a href="([^"]+)">docs/auth.md</a>', page.text).group(1)
    doc_url = doc_link.replace("&amp;", "&")
    assert doc_url.startswith("/polaris/-/polaris/document?id=docs%2Fauth.md&q=session&mode=bm25&k=4&collection=guides#chunk-")
    doc = await ds.client.get(doc_url.split("#")[0])
    back = re.search(r'<a class="polaris-back" href="([^"]+)">', doc.text).group(1).replace("&amp;", "&")
    assert back == "/polaris/-/polaris?q=session&mode=bm25&k=4&collection=guides"
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', doc.text))
    assert hidden == {"id": "docs/auth.md", "mode": "bm25", "k": "4", "collection": "guides"}
    toggle = re.search(r'<a href="([^"]+)">raw text</a>', page.text).group(1).replace("&amp;", "&")
    assert toggle == "/polaris/-/polaris?q=session&mode=bm25&k=4&collection=guides&view=raw"
    raw = await ds.client.get(toggle)
    assert "polaris-text-raw" in raw.text and "&amp;view=raw#chunk-" in raw.text  # carried to the document links


async def test_row_pages_link_to_the_document_view(ds: Datasette) -> None:
    chunk_id = sql_json(await ds.client.get("/polaris.json", params={
        "sql": "select id from chunks where heading_path like '%Expired sessions'", "_shape": "array"}))[0]["id"]
    row = await ds.client.get(f"/polaris/chunks/{chunk_id}")
    assert f'href="/polaris/-/polaris/document?id=docs%2Fauth.md#chunk-{chunk_id}">Polaris: this chunk in its document</a>' in row.text
    row = await ds.client.get("/polaris/documents/docs~2Fauth~2Emd")
    assert 'href="/polaris/-/polaris/document?id=docs%2Fauth.md">Polaris: this document</a>' in row.text
    followed = await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md"})
    assert followed.status_code == 200
    assert "Polaris:" not in (await ds.client.get("/plain/dogs/1")).text


async def test_pages_are_accessible_and_show_the_datasette_version(ds: Datasette) -> None:
    from datasette.version import __version__

    doc = (await ds.client.get("/polaris/-/polaris/document", params={"id": "docs/auth.md"})).text
    assert doc.count("<main") == 1 and doc.count("<h1") == 1
    assert re.findall(r'<h2 class="polaris-heading">', doc) and len(re.findall(r'<h2 class="polaris-heading">', doc)) == 3
    search = (await ds.client.get("/polaris/-/polaris", params={"q": "session", "k": "3"})).text
    assert search.count("<main") == 1 and len(re.findall(r'<h3 class="polaris-heading">', search)) == 3
    for html in (doc, search, (await ds.client.get("/-/polaris")).text):
        assert f'title="Datasette v{__version__}"' in html and 'title="Datasette v"' not in html


# -- bounded input, damaged files, stale documents (issue #12) -------------------------------------
async def test_inputs_are_bounded_in_every_datasette_door(ds: Datasette) -> None:
    import time

    from llama_index_polaris.engine.search.pipeline import MAX_QUERY_CHARS

    huge = "replace(hex(zeroblob(127500)), '00', 'expired ')"  # 1 MB made in SQL (a URL cannot carry it)
    started = time.perf_counter()  # release 0.1 embedded all of it: 5 to 28 s and 2 GB
    embed = await ds.client.get("/polaris.json", params={"sql": f"select polaris_embed({huge}) as v", "_shape": "array"})
    search = await ds.client.get("/polaris.json", params={"sql": f"select polaris_search({huge}, 3) as v", "_shape": "array"})
    page = await ds.client.get("/polaris/-/polaris.json", params={"q": "x" * 59_000})
    assert time.perf_counter() - started < 5  # refused before any work, far inside sql_time_limit_ms
    for response, name in ((embed, "polaris_embed"), (search, "polaris_search")):
        error = json.loads(response.json()[0]["v"])["error"]
        assert error.startswith(f"{name}") and "1,020,000 characters" in error and f"{MAX_QUERY_CHARS:,}" in error
    assert page.status_code == 400 and "q is 59,000 characters" in page.json()["errors"]["q"]
    ok = await ds.client.get("/polaris/-/polaris.json", params={"q": "expired " * 1200})  # just under the cap
    assert ok.status_code == 200 and ok.json()["hits"]


async def test_a_damaged_file_gets_a_page_that_says_so_not_a_500(tmp_path: Path) -> None:
    from test_identity import corrupt_full_text_pages

    path = build_polaris_db(tmp_path / "polaris.db")
    corrupt_full_text_pages(path)
    damaged = Datasette([str(path)])
    for url in ("/polaris/-/polaris?q=expired", "/polaris/-/polaris.json?q=expired",
                "/polaris.json?sql=select+polaris_search('expired',3)+as+v&_shape=array"):
        response = await damaged.client.get(url)
        assert response.status_code != 500, url
        assert "polaris.db is damaged (database disk image is malformed)" in response.text, url
        assert "polaris status --check" in response.text
    search_page = await damaged.client.get("/polaris/-/polaris?q=expired")
    assert search_page.status_code == 503
    datasette_own = await damaged.client.get("/polaris/chunks?_search=expired")
    assert datasette_own.status_code == 503 and "is damaged" in datasette_own.text


async def test_a_stale_document_is_marked_on_the_page(tmp_path: Path) -> None:
    path = build_polaris_db(tmp_path / "polaris.db")
    with Store(path) as store:
        store.set_status("docs/auth.md", "stale", "re-index failed, serving the version of 2026-11-30: not UTF-8")
    stale = Datasette([str(path)])
    page = await stale.client.get("/polaris/-/polaris", params={"q": "expired sessions janitor", "mode": "bm25"})
    assert page.status_code == 200
    assert 'polaris-status-stale">stale</span> re-index failed, serving the version of 2026-11-30' in page.text
    hits = (await stale.client.get("/polaris/-/polaris.json", params={"q": "janitor", "mode": "bm25"})).json()["hits"]
    assert hits[0]["document_status"] == "stale" and "not UTF-8" in hits[0]["document_error"]


async def test_a_section_hit_lists_the_chunks_that_matched(tmp_path: Path) -> None:
    """A section split into many chunks is one hit on the page and in JSON, with its chunks."""
    embedder = load_embedder(MODEL)
    path = tmp_path / "polaris.db"
    text = [f"Rotation step {i}: tokens rotate on a schedule, and the rotation log keeps step {i}." for i in range(8)]
    with Store(path) as store:
        store.bind_model(ModelBinding(embedder.model_id, embedder.dim, embedder.fingerprint))
        chunks = [ChunkRecord(node_id=f"rot#{i}", text=t, ordinal=i, heading_path="Keys > Rotation",
                              start_char=i * 100, end_char=i * 100 + len(t)) for i, t in enumerate(text)]
        chunks.append(ChunkRecord(node_id="other#0", text="Backups are kept for a month.", ordinal=8,
                                  heading_path="Keys > Backups", start_char=900, end_char=929))
        store.upsert_document(DocumentRecord("keys.md", path="keys.md"), chunks,
                              embedder.embed_documents([c.text for c in chunks]))
    ds = Datasette([str(path)])
    data = (await ds.client.get("/polaris/-/polaris.json", params={"q": "token rotation schedule", "k": "5"})).json()
    sections = [(h["document"], h["heading_path"]) for h in data["hits"]]
    assert len(sections) == len(set(sections)) == 2  # eight matching chunks, one hit
    top = data["hits"][0]
    assert top["unit"] == "section" and len(top["section_chunks"]) == 8
    assert (top["section_start"], top["section_end"]) == (0, 700 + len(text[7]))
    assert len(top["explain"]["chunks"]) >= 2 and {m["position"] for m in top["explain"]["chunks"]} <= set(range(1, 9))
    page = await ds.client.get("/polaris/-/polaris", params={"q": "token rotation schedule", "k": "5"})
    assert "Section of 8 chunks" in page.text and "Matched: " in page.text
    chunked = (await ds.client.get("/polaris.json", params={
        "sql": """select polaris_search('token rotation schedule', 5, '{"unit": "chunk"}') as v""", "_shape": "array"})).json()
    chunk_hits = json.loads(chunked[0]["v"])  # the SQL function takes the unit as the other doors do
    assert [h["heading_path"] for h in chunk_hits].count("Keys > Rotation") >= 4 and chunk_hits[0]["unit"] == "chunk"


async def test_the_document_page_finds_a_document_by_its_path(tmp_path: Path) -> None:
    """A document's id is <collection>:<path>; the page also takes the path a user sees,
    when one document has it, and names the ids when several do."""
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex

    for folder in ("guides", "notes"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "same.md").write_text(f"# Same\n\nThe {folder} copy.\n")
    (tmp_path / "guides" / "only.md").write_text("# Only\n\nOne document has this path.\n")
    (tmp_path / "polaris.toml").write_text('model_id = "all-minilm-l6-v2"\n')
    cfg = load_config(tmp_path, use_user_config=False)
    with PolarisIndex(tmp_path / "polaris.db", config=cfg) as index:
        index.index_paths([tmp_path / "guides"], collection="guides")
        index.index_paths([tmp_path / "notes"], collection="notes")
    ds = Datasette([str(tmp_path / "polaris.db")])
    by_path = await ds.client.get("/polaris/-/polaris/document.json", params={"id": "only.md"})
    by_id = await ds.client.get("/polaris/-/polaris/document.json", params={"id": "guides:only.md"})
    assert by_path.status_code == 200 and by_path.json() == by_id.json()
    assert by_path.json()["document"]["id"] == "guides:only.md"
    page = await ds.client.get("/polaris/-/polaris/document", params={"id": "only.md"})
    assert page.status_code == 200 and "One document has this path." in page.text
    both = await ds.client.get("/polaris/-/polaris/document.json", params={"id": "same.md"})
    assert both.status_code == 404
    assert both.json()["error"] == "2 documents have the path 'same.md': ask for one id, guides:same.md, notes:same.md."
