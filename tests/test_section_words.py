"""Whole-section BM25 for CJK questions (#36, ``search/section_words.py``): the maths, and the
list each backend gives, checked against BM25 computed here from the sections' own text."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterator

import pytest
from hypothesis import given, strategies as st

from llama_index_polaris.engine.backends import open_store
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.search import pipeline, section_words
from llama_index_polaris.engine.search.pipeline import Searcher
from llama_index_polaris.engine.sqlite.store import ChunkRecord, DocumentRecord
from polaris_testing import BACKENDS, fake_binding, module_target, unit_vectors

FILLER = "这一段讲别的事情，和问题没有关系。"
SECTIONS = {  # document -> [(heading path, [chunk texts])]: the words of the question spread over chunks
    "long": [("长文 > 第一节", ["组件" + FILLER, FILLER + "渲染时", FILLER + "值怎么", "缓存" + FILLER])],
    "short": [("短文 > 第二节", ["算出的值"])],
    "other": [("其他 > 样式", [FILLER * 2]), ("其他 > 渲染", ["服务端渲染会先输出 HTML。" + FILLER])],
    "english": [("Guide > Caching", ["The cache keeps rendered values between renders."])],
}
QUESTION = "组件渲染时算出的值怎么缓存"


def test_lucene_idf_is_positive_and_falls_with_the_chunks_holding_a_term() -> None:
    values = [section_words.lucene_idf(100, n) for n in (1, 10, 50, 90, 100)]
    assert all(v > 0 for v in values) and values == sorted(values, reverse=True)


@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from("abcdef")), min_size=1, max_size=40, unique_by=lambda t: t[0]),
       st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 10)))
def test_the_list_holds_each_section_once_at_its_best_chunk(hits: list, scores: dict) -> None:
    ranked = [(cid, 1.0) for cid, _ in hits]
    section_of = dict(hits)
    got = section_words.reorder(ranked, section_of, scores)
    firsts = {}
    for cid, sec in hits:
        firsts.setdefault(sec, cid)
    assert sorted(cid for cid, _ in got) == sorted(firsts.values())  # once each, at its first chunk
    values = [s for _, s in got]
    assert values == sorted(values, reverse=True)
    order = [cid for cid, _ in ranked]
    for (a, sa), (b, sb) in zip(got, got[1:]):
        assert sa > sb or order.index(a) < order.index(b)  # ties keep the chunk list's order


@pytest.fixture(scope="module", params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    made = open_store(module_target(request, tmp_path_factory))
    made.bind_model(fake_binding(4))
    seed = 0
    for doc, sections in SECTIONS.items():
        chunks, at = [], 0
        for heading, texts in sections:
            for text in texts:
                chunks.append(ChunkRecord(f"{doc}:{len(chunks)}", text, ordinal=len(chunks), heading_path=heading,
                                          start_char=at, end_char=at + len(text)))
                at += len(text)
        seed += 1
        made.upsert_document(DocumentRecord(doc, path=f"{doc}.md"), chunks, unit_vectors(len(chunks), 4, seed))
    yield made
    made.close()


def expected_scores(store: Any, question: str) -> dict[tuple[str, str], float]:
    """BM25 of every section as one text (its chunks' texts and headings, as FTS5 reads a chunk),
    with Lucene's idf over chunks and the average length over sections, computed here."""
    tokenizer = store.tokenizer()
    with store.read() as conn:
        rows = conn.execute("SELECT id, document_id, heading_path, text FROM chunks ORDER BY id").fetchall()
    counts, lengths = tokenizer.counts([(r[0], r[3], r[2]) for r in rows])
    by_section: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        by_section.setdefault((r[1], r[2]), []).append(r[0])
    terms = {t for word in tokenizer.terms(pipeline.query_words(question)) for t in word}
    n = len(rows)
    average = sum(lengths.values()) / len(by_section)
    out = {}
    for key, ids in by_section.items():
        tf = sum((Counter(counts[i]) for i in ids), Counter())
        length = sum(lengths[i] for i in ids)
        score = 0.0
        for t in terms:
            df = sum(1 for i in counts if counts[i].get(t))
            if df and tf[t]:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf[t] * 2.2 / (tf[t] + 1.2 * (0.25 + 0.75 * length / average))
        out[key] = score
    return out


def test_a_cjk_question_ranks_whole_sections_on_both(store: Any) -> None:
    """Section unit: the keyword list is the sections in whole-section BM25 order, each at its
    best chunk, with the scores computed from the sections' text; the section holding the
    question's words across two chunks comes first, where the chunk list put the short one."""
    cfg = load_config(None, use_user_config=False)
    searcher = Searcher(store, None, cfg)
    hits = searcher.search(QUESTION, top_k=10, mode="bm25", unit="section")
    chunks = searcher.search(QUESTION, top_k=10, mode="bm25", unit="chunk")
    want = expected_scores(store, QUESTION)
    got = {(h.document_id, h.heading_path): h.explain.bm25_score for h in hits}
    assert got == pytest.approx({k: v for k, v in want.items() if k in got}, rel=1e-9)
    assert [h.heading_path for h in hits][:1] == ["长文 > 第一节"]
    assert chunks[0].heading_path == "短文 > 第二节"  # at its best chunk, the long section loses
    assert len(got) == len(hits)  # each section once
    assert all(h.explain.bm25_unit == "section" for h in hits) and all(h.explain.bm25_unit is None for h in chunks)
    from llama_index_polaris.engine.search.explain import explain_line

    assert "(whole section)" in explain_line(hits[0].explain) and "(whole section)" not in explain_line(chunks[0].explain)


def test_a_question_without_cjk_keeps_the_chunk_list(store: Any) -> None:
    cfg = load_config(None, use_user_config=False)
    searcher = Searcher(store, None, cfg)
    with store.read():
        chunk_list = store.bm25("cache rendered values", 60, searcher.store.resolve_scope())
    hits = searcher.search("cache rendered values", top_k=10, mode="bm25", unit="section")
    assert [h.explain.bm25_score for h in hits] == pytest.approx([s for _, s in chunk_list[:len(hits)]], rel=1e-12)
    assert all(h.explain.bm25_unit is None for h in hits)


def test_both_backends_count_the_same(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> None:
    """``section_stats``: the same chunks, tokens, sections and chunk counts per term on both."""
    seen = {}
    for backend in BACKENDS:
        class _Request:  # module_target's view of a parametrised request
            param = backend
            getfixturevalue = request.getfixturevalue
        made = open_store(module_target(_Request, tmp_path_factory))
        made.bind_model(fake_binding(4))
        for doc, sections in SECTIONS.items():
            chunks = [ChunkRecord(f"{doc}:{i}", text, ordinal=i, heading_path=heading)
                      for i, (heading, text) in enumerate((h, t) for h, ts in sections for t in ts)]
            made.upsert_document(DocumentRecord(doc, path=f"{doc}.md"), chunks, unit_vectors(len(chunks), 4))
        with made.read():
            seen[backend] = made.section_stats(["缓存", "渲染", "cach", "nowhere"])
        made.close()
    assert seen["sqlite"] == seen["postgres"]
    chunks, tokens, sections, df = seen["sqlite"]
    assert (chunks, sections) == (8, 5) and tokens > chunks and df["缓存"] == 1 and df["nowhere"] == 0


def test_a_common_terms_counts_are_the_full_text_indexs(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file counts a term in few chunks from FTS5's vocabulary and a common one by tokenizing
    the chunks asked for: both give what FTS5 holds (and PostgreSQL's posting table gives it too)."""
    from llama_index_polaris.engine.sqlite import reads

    terms = list(dict.fromkeys(t for w in store.tokenizer().terms(pipeline.query_words(QUESTION + " cache")) for t in w))
    with store.read() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id").fetchall()]
        df = store.section_stats(terms)[3]
        found = store.chunk_terms(ids, terms, df)
        monkeypatch.setattr(reads, "RARE_TERM_CHUNKS", 0)  # every term "common" (the file; no effect on a server)
        assert store.chunk_terms(ids, terms, df) == found
    counts, lengths = found
    assert sum(n for c in counts.values() for n in c.values()) > 5 and set(lengths) == set(ids)


def test_asking_for_more_hits_leaves_the_first_where_they_were(store: Any) -> None:
    """A CJK question's whole-section list, at every k: each shorter list is the head of a longer one."""
    cfg = load_config(None, use_user_config=False)
    searcher = Searcher(store, None, cfg)
    lists = [[(h.node_id, round(h.score, 9)) for h in searcher.search(QUESTION, top_k=k, mode="bm25", unit="section")]
             for k in (1, 2, 3, 10)]
    assert len(lists[-1]) >= 3 and all(hits[0].explain.bm25_unit == "section"
                                       for hits in [searcher.search(QUESTION, top_k=1, mode="bm25")])
    for short, long in zip(lists, lists[1:]):
        assert long[:len(short)] == short


@pytest.fixture(scope="module", params=BACKENDS)
def many_sections(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """40 sections of 4 chunks, each chunk holding 缓存: more chunks than the first pool (60) holds."""
    made = open_store(module_target(request, tmp_path_factory))
    made.bind_model(fake_binding(4))
    for d in range(40):
        chunks = [ChunkRecord(f"d{d}:{i}", f"第{i}段：这里把结果缓存起来。" + FILLER * (i + d % 3), ordinal=i,
                              heading_path=f"文档{d} > 缓存") for i in range(4)]
        made.upsert_document(DocumentRecord(f"d{d}", path=f"d{d}.md"), chunks, unit_vectors(4, 4, d))
    yield made
    made.close()


def test_a_cjk_word_in_more_sections_than_the_first_pool_shows_finds_them_all(many_sections: Any) -> None:
    """A whole-section list is shorter than the chunks it came from: a pool that returned all
    60 chunks it was asked for is not the end of the list, so a deeper one is read (before,
    the search stopped there: 33 of the 40 sections here, and 30 of the 71 sections holding
    缓存 in react-zh for `polaris search --mode bm25 缓存 -k 40`)."""
    searcher = Searcher(many_sections, None, load_config(None, use_user_config=False))
    for k in (10, 40, 100):
        hits = searcher.search("缓存", top_k=k, mode="bm25", unit="section")
        assert len(hits) == min(k, 40) and len({h.document_id for h in hits}) == len(hits)
        assert all(h.explain.bm25_unit == "section" for h in hits)
