"""`polaris eval`: metrics against hand-computed cases, BEIR files, and the command end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_polaris.engine.errors import InputError
from llama_index_polaris.engine.tune.evaluate import (
    documents_in_order,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
    score_run,
)

POLARIS = str(Path(sys.executable).with_name("polaris"))


def test_ndcg_by_hand():
    # relevant: a (grade 2), b (grade 1); ranking: x, a, b
    dcg = 0 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(["x", "a", "b"], {"a": 2, "b": 1}, 10) == pytest.approx(dcg / ideal)
    assert ndcg_at_k(["a", "b"], {"a": 2, "b": 1}, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "y"], {"a": 1}, 10) == 0.0
    assert ndcg_at_k(["x", "a"], {"a": 1}, 1) == 0.0  # cut at k
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0  # no relevant documents at all


def test_recall_and_mrr_by_hand():
    rels = {"a": 1, "b": 1, "c": 1, "z": 0}
    assert recall_at_k(["a", "x", "b"], rels, 10) == pytest.approx(2 / 3)
    assert recall_at_k(["a", "x", "b"], rels, 1) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "z", "c"], rels, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y"], rels, 10) == 0.0
    assert mrr_at_k(["x", "c"], rels, 1) == 0.0


def test_score_run_averages_over_judged_queries_and_counts_missing_runs_as_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    scores = score_run({"q1": ["a"], "q3": ["b"]}, qrels)
    assert scores["ndcg@10"] == pytest.approx(0.5) and scores["mrr@10"] == pytest.approx(0.5)


def test_score_run_takes_the_metrics_by_name_in_the_order_given():
    qrels = {"q1": {"a": 1, "b": 1}}
    scores = score_run({"q1": ["x", "a", "b"]}, qrels, ("recall@2", "mrr@1", "ndcg@3"))
    assert list(scores) == ["recall@2", "mrr@1", "ndcg@3"]
    assert scores["recall@2"] == pytest.approx(0.5) and scores["mrr@1"] == 0.0
    assert scores["ndcg@3"] == pytest.approx(ndcg_at_k(["x", "a", "b"], qrels["q1"], 3))


def test_chunk_hits_become_a_document_ranking_at_the_best_chunk():
    assert documents_in_order(["d2", "d1", "d2", "d3", "d1"]) == ["d2", "d1", "d3"]


def write_beir(root: Path) -> Path:
    root.mkdir()
    docs = [
        ("d1", "Token lifetime", "Access tokens expire after fifteen minutes; refresh them with the refresh token."),
        ("d2", "Deploys", "Deploys go out from the main branch after the checks pass."),
        ("d3", "Backups", "Backups run nightly and are kept for thirty days."),
        ("d4", "Rate limits", "Each API key may send sixty requests per minute."),
    ]
    with open(root / "corpus.jsonl", "w") as fh:
        for i, title, text in docs:
            fh.write(json.dumps({"_id": i, "title": title, "text": text, "metadata": {}}) + "\n")
    with open(root / "queries.jsonl", "w") as fh:
        for qid, text in [("q1", "when do access tokens expire"), ("q2", "how long are backups kept"),
                          ("q3", "requests per minute limit")]:
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\nq3\td4\t1\n")
    return root


def test_load_beir_and_its_errors(tmp_path: Path):
    beir = load_beir(write_beir(tmp_path / "set"))
    assert len(beir.corpus) == 4 and beir.qrels["q2"] == {"d3": 1}
    with pytest.raises(InputError, match="qrels/train.tsv"):
        load_beir(tmp_path / "set", "train")
    (tmp_path / "set" / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\nnot json\n')
    with pytest.raises(InputError, match="queries.jsonl:2: not valid JSON"):
        load_beir(tmp_path / "set")


def test_polaris_eval_end_to_end_with_a_cached_index(tmp_path: Path):
    beir = write_beir(tmp_path / "tiny")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    cmd = [POLARIS, "eval", str(beir), "--model", "all-minilm-l6-v2", "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    results = json.loads(first.stdout)
    assert set(results) == {"vector", "bm25", "hybrid"}
    for mode in results.values():
        assert set(mode) >= {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    assert results["hybrid"]["recall@10"] == 1.0 and results["hybrid"]["ndcg@10"] > 0.9
    assert len(list((tmp_path / "cache" / "polaris" / "eval").glob("tiny-*.db"))) == 1
    table = subprocess.run(cmd[:-1], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert "4 unchanged" in table.stderr and "0 chunks embedded" in table.stderr  # the cache was reused
    assert table.stdout.splitlines()[0].startswith("| mode | ndcg@10 | recall@10 | recall@100 | mrr@10")


def test_whole_documents_is_one_chunk_per_entry_in_its_own_cache(tmp_path: Path):
    from llama_index_polaris.engine.sqlite.store import Store

    beir = write_beir(tmp_path / "tiny")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    for extra in ([], ["--whole-documents"]):
        proc = subprocess.run([POLARIS, "eval", str(beir), "--model", "all-minilm-l6-v2", "--json", *extra],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
    caches = sorted((tmp_path / "cache" / "polaris" / "eval").glob("tiny-*.db"))
    assert len(caches) == 2  # the setting is part of the cache key
    whole = []
    for path in caches:
        with Store(path, readonly=True) as store:
            if '"whole_documents": true' in store.meta["chunker"]:
                whole.append(store.conn.execute("SELECT document_id, count(*) FROM chunks GROUP BY 1").fetchall())
    assert len(whole) == 1 and len(whole[0]) == 4 and all(n == 1 for _, n in whole[0])
