"""The explorer's cost follows what it shows: a bounded document list, the filter's JSON
query, counts from what the file keeps; and docs/datasette.md states today's formula."""

from __future__ import annotations

import re
from pathlib import Path

from datasette.app import Datasette

from datasette_polaris import legend, views
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.sqlite.store import DocumentRecord, Store
from polaris_testing import REPO, fake_binding, make_chunks, unit_vectors


def many_documents(path: Path, n: int = 45) -> Path:
    """``n`` documents in two collections, each of (i % 3) + 1 chunks (fake 4-dim model)."""
    with Store(path) as store:
        store.bind_model(fake_binding(4))
        for i in range(n):
            doc_id, chunks = f"doc-{i:02d}", (i % 3) + 1
            collection = "guides" if i % 2 else "notes"
            store.upsert_document(DocumentRecord(doc_id, path=f"{collection}/Page-{i:02d}.md", collection=collection),
                                  make_chunks(doc_id, chunks), unit_vectors(chunks, 4, seed=i))
    return path


def test_the_docs_state_the_formula_of_the_defaults(built_handbook: Path) -> None:
    """docs/datasette.md's legend is the formula of its question on the example handbook, with the
    defaults and the weights the question got (``pipeline.used_weights``)."""
    from llama_index_polaris.engine.index import PolarisIndex

    text = (REPO / "docs" / "datasette.md").read_text()
    shown = text.split("**The score legend**")[1].split("```")[1].strip()
    config = load_config(use_user_config=False, model_id="all-minilm-l6-v2", db_path=str(built_handbook))
    with PolarisIndex(built_handbook, config=config, readonly=True) as index:
        hits = index.search("how do we rotate an api key", top_k=3)
    settings = {k: getattr(config, k) for k in views.SEARCH_SETTINGS} | hits.settings
    assert shown == legend.formula("hybrid", settings)


async def test_documents_json_is_bounded_paged_and_matches_any_part_in_any_case(tmp_path: Path) -> None:
    many_documents(tmp_path / "many.db")
    ds = Datasette([str(tmp_path / "many.db")])
    url = "/many/-/polaris/documents.json"
    first = (await ds.client.get(url, params={"q": "PAGE-1"})).json()
    assert first["count"] == 10 and [r["path"] for r in first["rows"]][:2] == ["guides/Page-11.md", "guides/Page-13.md"]
    assert {r["chunks"] for r in first["rows"]} == {(int(r["id"][4:]) % 3) + 1 for r in first["rows"]}
    assert first["next"] is None
    seen, page = [], (await ds.client.get(url, params={"_size": "20"})).json()
    while True:
        assert len(page["rows"]) <= 20 and page["count"] == 45
        seen += [r["id"] for r in page["rows"]]
        if page["next"] is None:
            break
        page = (await ds.client.get(page["next_url"])).json()
    assert sorted(seen) == [f"doc-{i:02d}" for i in range(45)] and len(seen) == 45
    capped = await ds.client.get(url, params={"_size": "1000"})  # clamped to DOCUMENTS_SIZE["max"], not refused
    assert capped.status_code == 200 and len(capped.json()["rows"]) == 45
    notes = (await ds.client.get(url, params={"q": "page", "collection": "notes"})).json()
    assert notes["count"] == 23 and {r["collection"] for r in notes["rows"]} == {"notes"}
    for params, name in (({"_size": "0"}, "_size"), ({"_next": "x"}, "_next")):
        bad = await ds.client.get(url, params=params)
        assert bad.status_code == 400 and name in bad.json()["errors"], bad.text
    unknown = await ds.client.get(url, params={"collection": "Guides"})
    assert unknown.status_code == 400 and "did you mean 'guides'" in unknown.text.lower()


async def test_the_page_lists_a_bounded_page_of_documents_and_counts_from_the_file(tmp_path: Path) -> None:
    path = many_documents(tmp_path / "many.db")
    ds = Datasette([str(path)])
    html = (await ds.client.get("/many/-/polaris")).text
    rows = re.findall(r'<td class="polaris-doc-path"><a href="[^"]+">([^<]+)</a>', html)
    assert len(rows) == views.DOCUMENTS_LISTED == 20
    assert rows[:2] == ["guides/Page-01.md", "guides/Page-03.md"]
    assert "the first 20 of 45" in html and "<option" not in html.split('id="polaris-doc-options"')[1].split("</datalist>")[0]
    index = (await ds.client.get("/many/-/polaris.json")).json()["index"]
    with Store(path, readonly=True) as store:
        chunks = store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert store.counts()["chunks"] == chunks  # FTS5's own row count: one row, not a scan
    assert (index["documents"], index["chunks"]) == (45, chunks) == (45, sum((i % 3) + 1 for i in range(45)))
