"""examples/quickstart.ipynb runs in a real Jupyter kernel; its hits render as the explorer's."""

from __future__ import annotations

import html as html_module
import re
import shutil
from pathlib import Path

import pytest
from datasette.app import Datasette

from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from polaris_testing import REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

QUERY = "how do we handle expired sessions"
FIGURE = re.compile(r'<dt title="[^"]*"(?: aria-describedby="[^"]*")?>([^<]+)</dt><dd>([^<]+)</dd>')


def outputs(cell: dict, kind: str) -> str:
    """Everything of one output kind (a MIME type, or "stream") a cell printed."""
    if kind == "stream":
        return "".join(o["text"] for o in cell["outputs"] if o["output_type"] == "stream")
    return "".join(o["data"].get(kind, "") if isinstance(o["data"].get(kind), str) else str(o["data"].get(kind, ""))
                   for o in cell["outputs"] if o["output_type"] in ("execute_result", "display_data"))


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    work = tmp_path_factory.mktemp("notebook")
    shutil.copytree(REPO / "examples" / "handbook", work / "handbook")
    notebook = nbformat.read(REPO / "examples" / "quickstart.ipynb", as_version=4)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("XDG_CONFIG_HOME", str(work / "xdg"))  # the kernel inherits it: no user config
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(work)}}).execute()
    return notebook, work


def test_the_quickstart_notebook_runs_in_a_kernel(executed: tuple[dict, Path]) -> None:
    notebook, work = executed
    code = [c for c in notebook.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert errors == []
    index_cell, search_cell, why_cell, llama_cell = code
    assert "11 added, 0 updated" in outputs(index_cell, "stream")
    # tqdm.auto's notebook bar: a widget, not a terminal bar printed to stderr
    assert "application/vnd.jupyter.widget-view+json" in {k for o in index_cell["outputs"] for k in o.get("data", {})}
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    bars = [m["state"] for m in state.values() if m["model_name"] == "FloatProgressModel"]
    assert [(b["value"], b["max"]) for b in bars] == [(11, 11)]  # the run's files, all done
    assert "vector #" in outputs(why_cell, "stream") and outputs(why_cell, "text/html").count('class="p-hit"') == 1
    assert outputs(llama_cell, "stream").count("›") == 5
    config = load_config(use_user_config=False, model_id="all-minilm-l6-v2")
    with PolarisIndex(work / "quickstart.db", config=config, readonly=True) as index:
        expected = index.search(QUERY, top_k=5)._repr_html_()
    assert outputs(search_cell, "text/html") == expected  # what the engine's result list renders, in the kernel


async def test_a_notebook_hit_shows_the_explorers_fields(executed: tuple[dict, Path]) -> None:
    notebook, work = executed
    table = outputs([c for c in notebook.cells if c.cell_type == "code"][1], "text/html")
    first_row = table.split('<tr class="p-hit">')[1]
    ds = Datasette([str(work / "quickstart.db")])
    page = (await ds.client.get("/quickstart/-/polaris", params={"q": QUERY, "k": "5"})).text
    first_hit = page.split('id="hit-1"')[1].split('id="hit-2"')[0]
    figures = [(label, value) for label, value in FIGURE.findall(first_row)]
    assert len(figures) == 14 and figures == FIGURE.findall(first_hit)  # the same figures, labels and values
    headings = _spans(first_row.split('class="p-heading">')[1].split("</div>")[0])
    page_headings = _spans(first_hit.split('class="polaris-heading">')[1].split("</h3>")[0])
    assert headings == page_headings and len(headings) >= 2
    score = re.search(r'class="p-score">([\d.]+)<span class="p-bar"><span style="width: ([\d.]+)%', first_row)
    assert score.group(1) == "1.000" and score.group(1) in first_hit.split('class="polaris-score"')[1][:200]
    assert float(score.group(2)) == 100.0
    document = re.search(r'class="p-doc">([^<]+)<span class="p-tag">([^<]+)</span>', first_row)
    assert f">{document.group(1)}</a>" in first_hit and f'polaris-tag">{document.group(2)}</span>' in first_hit
    assert "<details><summary>Why: vector #" in first_row and "<mark>" in first_row


def _spans(html: str) -> list[str]:
    """The text of each <span> (marks and escapes taken out)."""
    return [html_module.unescape(re.sub(r"<[^>]+>", "", s)) for s in re.findall(r"<span>(.*?)</span>", html)]
