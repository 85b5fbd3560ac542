"""One highlighter for the Datasette page and the notebook (#34, items 13b and 13c).

The words marked in a hit's text are the ones the BM25 stage matches under the index's own FTS5
tokenizer (``engine.search.highlight``): "expired" is marked inside ``token_expired`` on the page
and in the notebook's table alike, on both backends. A single ``Hit`` renders as its row of the list.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from datasette.app import Datasette

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex

MARK = re.compile(r"<mark>(.*?)</mark>")
TEXT = """# Sessions

## Expiry

A session token expires after an hour. The API then answers `token_expired`; an expired
refresh token means a new login.
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "sessions.md").write_text(TEXT)
    return tmp_path / "docs"


def build(target: str, folder: Path) -> PolarisIndex:
    index = PolarisIndex(target, config=load_config(use_user_config=False, model_id="all-minilm-l6-v2"))
    index.index_paths([folder])
    return index


def row_marks(html: str) -> list[str]:
    return MARK.findall(html.split('<div class="p-text">')[1].split("</div>")[0])


def test_the_notebook_marks_what_bm25_matched(targets, folder: Path) -> None:
    with build(targets.new(), folder) as index:
        hits = index.search("expired", top_k=3, mode="bm25")
        marks = row_marks(hits._repr_html_())
    assert marks.count("expired") == 2 and "expires" in marks  # token_expired's "expired" too (porter: expir)


async def test_the_page_and_the_notebook_mark_the_same_words(tmp_path: Path, folder: Path) -> None:
    db = str(tmp_path / "polaris.db")
    with build(db, folder) as index:
        notebook = row_marks(index.search("expired", top_k=3, mode="bm25")._repr_html_())
    page = (await Datasette([db]).client.get("/polaris/-/polaris", params={"q": "expired", "mode": "bm25"})).text
    first_hit = page.split('id="hit-1"')[1].split('id="hit-2"')[0]
    assert MARK.findall(first_hit) == notebook and "expired" in notebook


def test_a_single_hit_renders_as_its_row_of_the_list(targets, folder: Path) -> None:
    with build(targets.new(), folder) as index:
        hits = index.search("expired session", top_k=3)
    table = hits._repr_html_()
    rows = re.findall(r'<tr class="p-hit">.*?</tr>', table, re.S)
    assert len(rows) == len(hits) >= 1
    for hit, row in zip(hits, rows):
        single = hit._repr_html_()
        assert re.findall(r'<tr class="p-hit">.*?</tr>', single, re.S) == [row]
        assert single.startswith('<div class="polaris-hits-repr"><style>') and "<mark>" in single
