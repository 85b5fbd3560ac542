"""A real browser: headless Chromium against `datasette` serving a real polaris.db on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = build_polaris_db(tmp_path_factory.mktemp("browser") / "polaris.db")
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


def test_search_in_the_browser(server: str, page) -> None:
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
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "polaris-page.png"), full_page=True)
    assert page.problems == []


def test_chunk_view_and_payloads_stay_inert(server: str, page) -> None:
    page.goto(server + "/polaris/-/polaris?q=payloads+alert+script")
    page.wait_for_selector(".polaris-hit")
    page.click(".polaris-hit .polaris-source a")
    page.wait_for_selector(".polaris-chunk")
    assert "<script>alert('xss-script')</script>" in page.locator(".polaris-chunk .polaris-text").first.inner_text()
    assert page.locator(".polaris-chunk img").count() == 0
    page.goto(server + "/polaris/-/polaris/document?id=docs/auth.md&q=session")
    assert page.locator(".polaris-chunk").count() == 3
    page.screenshot(path=str(ARTIFACTS / "polaris-document.png"), full_page=True)
    assert page.problems == []
