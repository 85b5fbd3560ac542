"""`polaris tune`: fitted on labelled questions over a real index (the example handbook on the
bundled model), it writes [fusion_weights] only when the cross-validated gain's interval is
above 0, and every search then ranks with them; it refuses, writing nothing, when they do
not help; malformed labels are errors that say what to write."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from llama_index_polaris import cli
from llama_index_polaris.engine.tune import fit as tune
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.search import learned
from polaris_testing import REPO, copy_index

MODEL = "all-minilm-l6-v2"


def questions(n: int = 40) -> list[str]:
    """Sentences of the handbook's prose, cut to their first eight words: questions in its own words."""
    out = []
    for path in sorted((REPO / "examples" / "handbook").rglob("*.md")):
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "|", "-", "`", "*", ">")) and len(line.split()) >= 6:
                out.append(" ".join(re.findall(r"[A-Za-z]+", line)[:8]))
    return out[::max(1, len(out) // n)][:n]


@pytest.fixture
def project(tmp_path: Path, built_handbook: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy_index(built_handbook, tmp_path)
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"  # the project\'s own line\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    return tmp_path


def labelled(project: Path, pick) -> Path:
    """A JSONL labels file: each question with the section ``pick(index, question)`` names."""
    path = project / "labels.jsonl"
    with PolarisIndex(project / "polaris.db", config=load_config(project, use_user_config=False), readonly=True) as index:
        rows = [{"question": q, **pick(index, q)} for q in questions()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def first_of(mode: str):
    def pick(index, q):
        h = index.search(q, top_k=1, mode=mode)[0]
        return {"path": h.document, "heading": h.heading_path}
    return pick


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["tune", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tune_writes_weights_that_help_and_every_search_ranks_with_them(project: Path, capsys) -> None:
    # the vector list's first section is the answer: the fixed fusion, which mixes in BM25, often puts another first
    labels = labelled(project, first_of("vector"))
    with PolarisIndex(project / "polaris.db", config=load_config(project, use_user_config=False), readonly=True) as index:
        before = sum(index.search(q, top_k=1)[0].heading_path == index.search(q, top_k=1, mode="vector")[0].heading_path
                     for q in questions())
    code, out, _ = run(capsys, str(labels))
    assert code == 0, out
    assert "| fixed fusion (before) |" in out and "kept: the cross-validated gain +" in out
    toml = (project / "polaris.toml").read_text()
    assert toml.startswith(f'model_id = "{MODEL}"  # the project\'s own line\n') and "[fusion_weights]" in toml
    cfg = load_config(project, use_user_config=False)
    assert cfg.fusion_weights and set(cfg.fusion_weights) <= set(learned.NAMES)
    with PolarisIndex(project / "polaris.db", config=cfg, readonly=True) as index:
        after = 0
        for q in questions():
            hit = index.search(q, top_k=1)[0]
            assert sum(hit.explain.contributions.values()) == pytest.approx(hit.score)
            after += hit.heading_path == index.search(q, top_k=1, mode="vector")[0].heading_path
    assert after > before  # in sample, as a user would see it
    assert cli.main(["search", questions()[0], "--json", "--explain"]) == 0  # the CLI ranks with them too
    hit = json.loads(capsys.readouterr().out)[0]
    assert set(hit["explain"]["contributions"]) == set(cfg.fusion_weights)  # each weighted feature's share


def test_tune_refuses_when_the_fixed_fusion_already_ranks_the_answers_first(project: Path, capsys) -> None:
    labels = labelled(project, first_of("hybrid"))
    before = (project / "polaris.toml").read_text()
    code, out, _ = run(capsys, str(labels))
    assert code == 0
    assert "| fixed fusion (before) | 1.0000 |" in out
    assert "not written: the cross-validated gain" in out and "is not above 0" in out
    assert (project / "polaris.toml").read_text() == before


def test_tune_refuses_labels_that_no_feature_explains(project: Path, capsys) -> None:
    rng = np.random.default_rng(5)

    def random_pick(index, q):
        hits = index.search(q, top_k=10)
        h = hits[int(rng.integers(len(hits)))]
        return {"path": h.document, "heading": h.heading_path}

    labels = labelled(project, random_pick)
    code, out, _ = run(capsys, str(labels), "--json")
    result = json.loads(out)
    assert code == 0 and result["keep"] is False and result["written"] is None and result["low"] <= 0
    assert "[fusion_weights]" not in (project / "polaris.toml").read_text()


@pytest.mark.parametrize("line, message", [
    ("not json", "not valid JSON"),
    ('{"path": "auth/tokens.md"}', 'no "question" text'),
    ('{"question": "tokens"}', 'each answer needs a "path"'),
    ('{"question": "tokens", "relevant": []}', '"relevant" must be a non-empty list'),
    ('{"question": "tokens", "path": "auth/tokens.md", "grade": 0}', '"grade" must be a whole number of 1 or more'),
    ('{"question": "tokens", "path": "nowhere.md"}', "the index has no document 'nowhere.md'"),
])
def test_malformed_labels_say_what_to_write(project: Path, capsys, line: str, message: str) -> None:
    (project / "bad.jsonl").write_text(line + "\n")
    code, _, err = run(capsys, "bad.jsonl")
    assert code == 1 and message in err and "polaris: error:" in err
    assert "[fusion_weights]" not in (project / "polaris.toml").read_text()


def test_folds_below_two_are_refused(project: Path, capsys) -> None:
    code, _, err = run(capsys, "labels.jsonl", "--folds", "1")
    assert code == 1 and "--folds must be 2 or more" in err


def test_labels_that_do_not_exist_say_what_to_give(project: Path, capsys) -> None:
    code, _, err = run(capsys, "missing.jsonl")
    assert code == 1 and "give a BEIR folder" in err
    (project / "beir").mkdir()
    code, _, err = run(capsys, "beir")
    assert code == 1 and "a BEIR folder has corpus.jsonl" in err


def test_a_polaris_table_gets_its_weights_inside_it(tmp_path: Path) -> None:
    from llama_index_polaris.engine.tune.labels import write_weights

    path = tmp_path / "polaris.toml"
    path.write_text(f'[polaris]\nmodel_id = "{MODEL}"\n\n[polaris.fusion_weights]\nfixed = 2.0\n')
    write_weights(path, tune.weights_table({"fixed": 1.0, "depth": -0.5}))
    cfg = load_config(tmp_path, use_user_config=False)
    assert cfg.fusion_weights == {"fixed": 1.0, "depth": -0.5} and cfg.model_id == MODEL


def test_the_decision_is_the_interval_not_the_mean() -> None:
    """Pure: a consistent small gain is kept, a large noisy one is not."""
    assert tune.paired_interval(np.full(50, 0.01))[1] > 0
    noisy = np.array([0.5, -0.45] * 25)
    mean, low, high = tune.paired_interval(noisy)
    assert mean > 0 and low < 0 < high


def test_a_beir_folder_is_tuned_on_its_own_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The BEIR layout `polaris eval` reads: indexed into the eval cache, a hit graded by its document id.
    Each question is its document's title, which the fixed fusion already ranks first: refused."""
    topics = ["sourdough bread baking", "volcanic eruptions", "tidal energy", "honeybee colonies", "glacier retreat",
              "jazz improvisation", "chess openings", "coral reef bleaching", "solar eclipses", "origami folding",
              "kite surfing", "desert cacti"]
    beir = tmp_path / "tiny"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("".join(json.dumps(
        {"_id": f"d{i}", "title": t.title(), "text": f"This page is about {t}. " * 3}) + "\n" for i, t in enumerate(topics)))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(topics)))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(len(topics))))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    code, out, _ = run(capsys, "tiny")
    assert code == 0 and out.startswith("tiny (test): 12 questions")
    assert "| fixed fusion (before) | 1.0000 | 1.0000 |" in out and "not written" in out
    assert list((tmp_path / "cache" / "polaris" / "eval").glob("tiny-*.db"))


def synthetic(n: int, seed: int = 0) -> list[tune.Sample]:
    """Questions whose relevant section (fixed fusion's 3rd) is the one with the most ``same_chunk``."""
    rng = np.random.default_rng(seed)
    j_fixed, j_same = learned.NAMES.index("fixed"), learned.NAMES.index("same_chunk")
    out = []
    for _ in range(n):
        x = rng.uniform(0, 1, size=(8, len(learned.NAMES)))
        x[:, j_fixed] = np.linspace(1.0, 0.3, 8)
        x[:, j_same] = 0.0
        x[2, j_same] = 1.0
        grades = np.zeros(8)
        grades[2] = 1
        out.append(tune.Sample(x, grades, np.where(grades > 0, 0, -1), (1.0,)))
    return out


def test_the_fit_finds_the_feature_that_orders_the_answers() -> None:
    fitted = tune.fit(synthetic(30))
    w = dict(zip(learned.NAMES, fitted))
    assert w["same_chunk"] == max(v for n, v in w.items() if n != "fixed") and w["same_chunk"] > 0.5
    # unseen questions (the other features are uniform noise: one in ten may still tip a question)
    assert sum(int(np.argmax(learned.scores(s.x, fitted))) == 2 for s in synthetic(10, seed=1)) >= 9
    result = tune.decide(synthetic(30))
    assert result.before == pytest.approx(0.5) and result.after > 0.9 and result.keep  # each question ranked by a model fitted without it


def test_too_few_questions_are_refused_whatever_the_gain() -> None:
    result = tune.decide(synthetic(6))
    assert not result.keep and "at least 10 are needed" in result.reason
