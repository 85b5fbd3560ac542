"""The numbers the README and docs/datasette.md quote are the current defaults, and the score
formula docs/datasette.md shows is the one the explorer page prints for them."""

from __future__ import annotations

import html
import re
from pathlib import Path

from datasette.app import Datasette

from llama_index_polaris.engine.config import load_config

ROOT = Path(__file__).parent.parent


def defaults():
    return load_config(use_user_config=False)


def docs_formula() -> str:
    text = (ROOT / "docs" / "datasette.md").read_text()
    legend = text[text.index("**The score legend**"):]
    return re.search(r"```\n(.*?)\n```", legend, flags=re.S).group(1)


def plain(text: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


async def test_the_formula_in_docs_is_the_pages(built_handbook):
    page = await Datasette([str(built_handbook)]).client.get("/-/polaris", params={"q": "expired sessions"})
    assert page.status_code == 200
    assert " ".join(docs_formula().split()) in plain(page.text)


def test_the_formula_in_docs_has_the_default_numbers():
    cfg = defaults()
    formula = docs_formula()
    assert f"/({cfg.rrf_k} + vector rank)" in formula  # over the weight the question got (test_explorer_scale.py)
    assert f"+ {cfg.heading_boost} × heading match" in formula
    assert f"{1 - cfg.score_fusion:g} × RRF ÷ best RRF + {cfg.score_fusion:g} × score fusion" in formula
    assert f"to its rank {cfg.score_fusion_depth} (0)" in formula
    assert f"mmr_lambda = {cfg.mmr_lambda}" in formula


def test_the_settings_quoted_in_docs_are_the_defaults():
    cfg = defaults()
    quoted = re.findall(r'"(rrf_k|heading_boost|mmr_lambda|candidate_pool)": ([0-9.]+)',
                        (ROOT / "docs" / "datasette.md").read_text())
    assert len(quoted) >= 4
    for key, value in quoted:
        assert float(value) == getattr(cfg, key), key


def test_the_readme_quotes_the_default_ranking():
    cfg = defaults()
    readme = (ROOT / "README.md").read_text()
    line = " ".join(readme[readme.index("Quality (defaults:"):].split("\n\n")[0].split())
    assert f"RRF (rrf_k {cfg.rrf_k})" in line
    assert f"heading boost {cfg.heading_boost}" in line
    assert ("half and half with score fusion" in line) == (cfg.score_fusion == 0.5)
    assert ("MMR off" in line) == (cfg.mmr_lambda >= 1.0)
