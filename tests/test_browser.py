"""A real browser: headless Chromium against `datasette` serving a real polaris.db on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from test_datasette import build_polaris_db

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium chromium-driver)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LONG_FILLER = "".join(f"Paragraph {i} of the field guide says nothing that anyone searches for.\n\n" for i in range(30))
LONG_TEXT = LONG_FILLER + "The zeppelin mooring mast stands at the far end of the field.\n"


def add_long_document(db: Path) -> None:
    """A chunk whose only matched words come after thirty paragraphs (far below its box's fold)."""
    from llama_index_polaris.engine.embed import load_embedder
    from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord, Store

    embedder = load_embedder("all-minilm-l6-v2")
    with Store(db) as store:
        chunk = ChunkRecord(node_id="notes/field.md#0", text=LONG_TEXT, heading_path="Field guide",
                            start_char=0, end_char=len(LONG_TEXT))
        store.upsert_document(DocumentRecord(id="notes/field.md", path="notes/field.md", collection="notes"),
                              [chunk], embedder.embed_documents([LONG_TEXT]))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = build_polaris_db(tmp_path_factory.mktemp("browser") / "polaris.db")
    add_long_document(db)
    port = free_port()
    log = open(db.parent / "datasette.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "datasette", "serve", str(db), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base, proc, log)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _wait_until_up(base: str, proc: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"datasette exited with {proc.returncode}:\n{log.read()}")
        try:
            with urllib.request.urlopen(base + "/-/versions.json", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail("datasette did not answer within 30 s")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            headless=True, args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser):
    page = browser.new_page()
    page.problems = []  # console errors, uncaught exceptions, dialogs (an alert() means XSS)
    page.on("console", lambda m: m.type == "error" and page.problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: page.problems.append(f"pageerror: {e}"))
    page.on("dialog", lambda d: (page.problems.append(f"dialog: {d.message}"), d.dismiss()))
    yield page
    page.close()


def _settings(server: str) -> dict:
    with urllib.request.urlopen(server + "/polaris/-/polaris.json") as r:
        return json.load(r)["settings"]


def _no_page_scroll(page) -> None:
    """The page itself never scrolls sideways (an inner code block or table may)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"page is {width}px wide"


def test_search_in_the_browser(server: str, page) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(server + "/polaris/-/polaris")
    assert page.title().startswith("Polaris")
    page.fill("input[name=q]", "how do expired sessions work")
    page.click(".polaris-searchbar button[type=submit]")
    page.wait_for_selector(".polaris-hit")
    assert "q=how+do+expired+sessions+work" in page.url
    first = page.locator(".polaris-hit").first
    assert "Expired sessions" in first.locator(".polaris-heading").inner_text()
    assert first.locator(".polaris-score").inner_text().startswith("1.000")
    assert first.locator("mark").count() >= 2
    # FTS5's tokenizer splits token_expired: the highlighter marks "expired" inside it
    assert first.locator("code mark").all_inner_texts() == ["expired"]
    assert first.locator("code").first.inner_text() == "token_expired"
    # the legend states the formula with the settings in effect; every figure has a tooltip
    rrf_k = _settings(server)["rrf_k"]
    assert not page.locator(".polaris-formula").is_visible()  # folded: the hits come first
    page.click(".polaris-legend summary")
    with urllib.request.urlopen(server + "/polaris/-/polaris.json?q=how+do+expired+sessions+work") as r:
        shown = json.load(r)["settings"]  # the weights this question got (``pipeline.used_weights``)
    weight = f"{shown['vector_weight']:.2f}".rstrip("0").rstrip(".")
    assert f"{weight}/({rrf_k} + vector rank)" in page.locator(".polaris-formula").inner_text()
    labels = first.locator(".polaris-stages dt")
    assert labels.count() == 14
    assert all(labels.nth(i).get_attribute("title") for i in range(14))
    assert "Relevance" in labels.all_inner_texts()
    _no_page_scroll(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "polaris-page-1280.png"), full_page=True)
    assert page.problems == []


def test_phone_width_has_no_sideways_scroll(server: str, page) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(server + "/polaris/-/polaris?q=how+do+expired+sessions+work")
    page.wait_for_selector(".polaris-hit")
    _no_page_scroll(page)
    for box in [s.bounding_box() for s in page.locator(".polaris-stage-score").all()]:
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390  # Score in view, no inner scroll
    assert page.locator(".polaris-hit").evaluate_all("hits => hits.every(h => h.scrollWidth <= h.clientWidth)")
    docs = page.locator(".polaris-docs").bounding_box()
    assert docs["x"] + docs["width"] <= 390
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "polaris-page-390.png"), full_page=True)
    for url in ("/polaris/-/polaris?q=session&view=raw", "/polaris/-/polaris/document?id=notes/evil.md",
                "/polaris/-/polaris/document?id=docs/auth.md&q=session&view=raw"):
        page.goto(server + url)
        _no_page_scroll(page)
    page.goto(server + "/polaris/-/polaris/document?id=docs/auth.md&q=expired+session")
    _no_page_scroll(page)
    page.screenshot(path=str(ARTIFACTS / "polaris-document-390.png"), full_page=True)
    assert page.problems == []


def test_sidebar_stays_readable_while_scrolling(server: str, page) -> None:
    page.set_viewport_size({"width": 1280, "height": 600})
    page.goto(server + "/polaris/-/polaris?q=session")
    aside = page.locator(".polaris-aside")
    for summary in aside.locator("summary").all():
        summary.click()
    assert aside.evaluate("a => a.scrollHeight") > 600  # taller than the window once both panels are open
    layout = page.locator(".polaris-layout")
    # scroll to the middle of the results (a sticky box leaves with the end of its column)
    page.evaluate("l => window.scrollTo(0, l.offsetTop + (l.offsetHeight - innerHeight) / 2)", layout.element_handle())
    assert page.evaluate("scrollY") > 300
    box = aside.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= 600  # the whole box is on screen...
    aside.evaluate("a => { a.scrollTop = a.scrollHeight; }")
    links = aside.locator(".polaris-links").bounding_box()
    assert 0 <= links["y"] and links["y"] + links["height"] <= 600  # ...and its end can be scrolled to
    assert page.problems == []


def test_panels_stay_open_when_another_opens(server: str, page) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(server + "/polaris/-/polaris?q=session")
    panels = page.locator("details.polaris-panel")
    assert panels.count() == 4  # the scope, the score legend, the settings, polaris_meta
    for i in range(4):
        panels.nth(i).locator("summary").click()
    page.locator(".polaris-hit .polaris-text").first.click()  # a click elsewhere on the page
    assert panels.evaluate_all("ps => ps.map(p => p.open)") == [True, True, True, True]
    panels.nth(2).locator("summary").click()  # the reader can still close one
    assert panels.evaluate_all("ps => ps.map(p => p.open)") == [True, True, False, True]
    menu = page.locator("details.nav-menu")  # Datasette's own menu keeps its behaviour
    menu.locator("summary").click()
    assert menu.evaluate("m => m.open")
    page.locator("h1").click()
    assert not menu.evaluate("m => m.open")
    assert panels.evaluate_all("ps => ps.map(p => p.open)") == [True, True, False, True]
    assert page.problems == []


def test_state_survives_the_links(server: str, page) -> None:
    page.goto(server + "/polaris/-/polaris?q=session&mode=bm25&k=4&collection=guides")
    page.click("text=raw text")
    page.wait_for_selector(".polaris-text-raw")
    assert page.url.endswith("?q=session&mode=bm25&k=4&collection=guides&view=raw")
    page.click(".polaris-hit .polaris-source a")
    page.wait_for_selector(".polaris-chunk")
    assert "q=session&mode=bm25&k=4&collection=guides&view=raw#chunk-" in page.url
    page.fill(".polaris-searchbar input[name=q]", "cookie")
    page.click(".polaris-searchbar button")
    page.wait_for_selector(".polaris-chunk mark")
    assert "q=cookie" in page.url and "mode=bm25" in page.url and "view=raw" in page.url
    page.click("a.polaris-back")
    page.wait_for_selector(".polaris-hit")
    assert page.url.endswith("/polaris/-/polaris?q=cookie&mode=bm25&k=4&collection=guides&view=raw")
    assert page.locator("select[name=mode]").input_value() == "bm25"
    assert page.locator("input[name=k]").input_value() == "4"
    assert page.problems == []


def test_chunk_view_and_payloads_stay_inert(server: str, page) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    for view in ("rendered", "raw"):
        page.goto(server + f"/polaris/-/polaris?q=payloads+alert+script&view={view}")
        page.wait_for_selector(".polaris-hit")
        page.click(".polaris-hit .polaris-source a")
        page.wait_for_selector(".polaris-chunk")
        text = page.locator(".polaris-chunk .polaris-text").first
        assert "<script>alert('xss-script')</script>" in text.inner_text()
        assert page.locator(".polaris-chunk img, .polaris-chunk script, .polaris-chunk iframe").count() == 0
        hrefs = text.locator("a").evaluate_all("links => links.map(a => a.protocol)")
        assert set(hrefs) <= {"http:", "https:"}, hrefs
        for link in text.locator("a").all():
            link.hover()  # an injected onmouseover would fire here
        if view == "rendered":
            assert text.locator("a[title]").get_attribute("title") == "x\" onmouseover=\"alert('xss-title')"
            assert text.locator("a").count() == 4  # http(s), relative and the image's link; nothing else
    page.goto(server + "/polaris/-/polaris/document?id=docs/auth.md&q=session")
    assert page.locator(".polaris-chunk").count() == 3
    assert page.locator("main h2.polaris-heading").count() == 3
    page.screenshot(path=str(ARTIFACTS / "polaris-document-1280.png"), full_page=True)
    assert page.problems == []


def _inside(inner: dict, outer: dict) -> bool:
    return (outer["y"] - 0.5 <= inner["y"] and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 0.5
            and outer["x"] - 0.5 <= inner["x"] and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5)


def test_phone_first_screen_shows_the_first_hit_and_why(server: str, page) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    screen = {"x": 0, "y": 0, "width": 390, "height": 844}
    for q in ("how do expired sessions work", "zeppelin mooring"):
        page.goto(server + "/polaris/-/polaris?" + urllib.parse.urlencode({"q": q}))
        page.wait_for_selector(".polaris-hit")
        first = page.locator(".polaris-hit").first
        assert page.evaluate("scrollY") == 0
        for part in (".polaris-rank", ".polaris-heading", ".polaris-score", ".polaris-text mark"):
            box = first.locator(part).first.bounding_box()
            assert box is not None and _inside(box, screen), (q, part, box)
        assert not page.locator(".polaris-formula").is_visible()  # the legend is folded
        assert not page.locator(".polaris-doc-filter").is_visible()  # so is the scope
        _no_page_scroll(page)
    page.screenshot(path=str(ARTIFACTS / "polaris-first-screen-390.png"))
    assert page.problems == []


def test_each_hit_opens_at_its_first_marked_word(server: str, page) -> None:
    for width, height in ((1280, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(server + "/polaris/-/polaris?q=zeppelin+mooring&mode=bm25")
        page.wait_for_selector(".polaris-hit")
        text = page.locator(".polaris-hit").first.locator(".polaris-text")
        assert text.evaluate("t => t.scrollHeight > 3 * t.clientHeight")  # the words are far below the fold
        assert text.evaluate("t => t.scrollTop") > 0
        mark = text.locator("mark").first
        assert mark.inner_text().lower() == "zeppelin"
        assert _inside(mark.bounding_box(), text.bounding_box())
        page.goto(server + "/polaris/-/polaris?q=session")  # boxes whose match is in view stay at their top
        page.wait_for_selector(".polaris-hit")
        for box in page.locator(".polaris-hit .polaris-text").all():
            marks = box.locator("mark")
            if marks.count():
                assert _inside(marks.first.bounding_box(), box.bounding_box())
    assert page.problems == []


def test_document_filter_asks_a_bounded_query_as_one_types(server: str, page) -> None:
    asked: list[str] = []
    page.on("request", lambda r: "/documents.json" in r.url and asked.append(r.url))
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(server + "/polaris/-/polaris?q=session")
    page.click(".polaris-scope summary")
    page.locator(".polaris-doc-filter").press_sequentially("AUTH", delay=30)
    page.wait_for_function("document.querySelectorAll('#polaris-doc-options option').length > 0")
    options = page.locator("#polaris-doc-options option")
    assert options.evaluate_all("os => os.map(o => o.value)") == ["docs/auth.md"]  # any case, any part of the path
    assert "_size=20" in asked[-1] and "q=AUTH" in asked[-1]
    assert page.locator(".polaris-doc-found").inner_text() == "1 document"
    page.locator(".polaris-doc-filter").fill("docs/auth.md")  # what picking the suggestion types
    chip = page.locator(".polaris-doc-chosen input[name=document]")
    assert chip.evaluate_all("cs => cs.map(c => [c.value, c.checked])") == [["docs/auth.md", True]]
    assert page.locator(".polaris-doc-filter").input_value() == ""
    page.click(".polaris-searchbar button")
    page.wait_for_selector(".polaris-hit")
    assert "document=docs%2Fauth.md" in page.url and page.url.count("document=") == 1
    assert set(page.locator(".polaris-hit .polaris-source a:first-child").all_inner_texts()) == {"docs/auth.md"}
    assert page.locator(".polaris-scope").evaluate("d => d.open")  # a scoped search shows its scope
    page.screenshot(path=str(ARTIFACTS / "polaris-document-filter-1280.png"))
    assert page.problems == []
