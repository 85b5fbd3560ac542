"""Chinese, Japanese and Korean words are found through every door, on both backends (#36).

A small CJK handbook is indexed once into a polaris.db and once into PostgreSQL through the CLI.
``polaris search --mode bm25 缓存`` must find every section holding the word, first, and then
those holding one of its characters (a Han character is a term too), the same on both; the engine, the LlamaIndex retriever and the MCP server answer alike; the
Datasette page marks every occurrence; a query whose keywords match nothing says so. The
property: for mixed CJK/Latin text, the terms each backend stores for a chunk are the terms
its query searches for.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llama_index_polaris import PolarisEmbedding, PolarisRetriever, PolarisVectorStore
from llama_index_polaris.engine.backends import open_store
from llama_index_polaris.engine.config import load_config
from llama_index_polaris.engine.index import PolarisIndex
from llama_index_polaris.engine.storage.scope import Scope
from llama_index_polaris.engine.search.terms import MAX_TERMS, query_words
from llama_index_polaris.engine.sqlite.store import DocumentRecord, ChunkRecord
from polaris_testing import BACKENDS, fake_binding, module_target, new_database, unit_vectors

MODEL = "all-minilm-l6-v2"
POLARIS = str(Path(sys.executable).with_name("polaris"))
WORD = "缓存"
DOCS = {
    "react/memo.md": """# 性能优化

## 记忆化

使用 useMemo缓存计算结果，依赖项不变时直接返回上一次的值。

## 缓存函数

useCallback 会缓存函数定义，传给子组件时避免不必要的重新渲染。服务端的数据缓存由框架处理。
""",
    "react/lifecycle.md": """# 组件的生命周期

## 挂载

组件挂载后 Effect 开始运行。开发环境下 Effect 会运行两次，用来发现缺少清理函数的问题。

## 卸载

卸载时 React 调用清理函数，断开连接、取消订阅。
""",
    "react/state.md": """# 状态

## 更新队列

调用 setCount 之后马上读取 state，得到的还是旧值：React 把更新放进队列，在下一次渲染时处理。

## 浏览器的 HTTP 缓存

静态资源会被浏览器缓存，这与 React 的状态无关。
""",
    "vue/components.md": """# コンポーネントの基礎

## プロップス

親コンポーネントから子コンポーネントへデータを渡すにはプロップスを使う。

## スロット

スロットを使うと、親がテンプレートの一部を子に渡せる。算出プロパティはキャッシュされる。
""",
    "en/guide.md": """# Guide

## Caching

The cache keeps computed values; a miss recomputes them. See the Chinese pages for 缓 alone.
""",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("cjk")
    for rel, text in DOCS.items():
        (root / "docs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "docs" / rel).write_text(text, encoding="utf-8")
    (root / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    targets = {"sqlite": str(root / "polaris.db"), "postgres": new_database(pg_server, "polaris_cjk")}
    for target in targets.values():
        run = polaris(root, "index", "docs", "--db", target)
        assert run.returncode == 0, run.stderr
    yield {"root": root, **targets}


def polaris(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([POLARIS, *args], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"XDG_CONFIG_HOME": str(root / ".xdg"), "PATH": str(Path(sys.executable).parent)})


def search_json(project: dict, backend: str, *args: str) -> list[dict]:
    run = polaris(project["root"], "search", *args, "--json", "--explain", "--db", project[backend])
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def sections_holding(db: str, word: str) -> set[tuple[str, str]]:
    """(document, heading path) of every section one of whose chunks holds ``word``, read from the file."""
    from llama_index_polaris.engine.sqlite import sqlite_module

    conn = sqlite_module().connect(db)
    try:
        return set(conn.execute("SELECT d.path, c.heading_path FROM chunks AS c JOIN documents AS d ON d.id ="
                                " c.document_id WHERE instr(c.text, ?) OR instr(c.heading_path, ?)", (word, word)))
    finally:
        conn.close()


def test_bm25_finds_every_section_holding_the_word_the_same_on_both(project: dict) -> None:
    found = {b: search_json(project, b, WORD, "--mode", "bm25", "-k", "50") for b in BACKENDS}
    want = sections_holding(project["sqlite"], WORD)
    assert len(want) >= 2 and all(d != "en/guide.md" for d, _ in want)  # guide.md has 缓 alone
    some = set().union(*(sections_holding(project["sqlite"], c) for c in WORD))
    for backend, hits in found.items():
        got = [(h["document"], h["heading_path"]) for h in hits]
        assert set(got[:len(want)]) == want, backend  # every section holding the word, before any other
        assert set(got) == some and ("en/guide.md", "Guide > Caching") in got[len(want):]  # then one character of it
        assert all(h["explain"]["keyword_match"] is True for h in hits)
    assert [(h["node_id"], h["heading_path"]) for h in found["postgres"]] == \
        [(h["node_id"], h["heading_path"]) for h in found["sqlite"]]
    sqlite_scores = [h["explain"]["bm25_score"] for h in found["sqlite"]]
    assert [h["explain"]["bm25_score"] for h in found["postgres"]] == pytest.approx(sqlite_scores, rel=1e-6)


def test_a_lone_character_and_a_japanese_word_are_found(project: dict) -> None:
    for backend in BACKENDS:
        slot = search_json(project, backend, "スロット", "--mode", "bm25")
        assert slot[0]["heading_path"].endswith("スロット")
        alone = search_json(project, backend, "缓", "--mode", "bm25", "-k", "50")  # one character is a term
        assert {(h["document"], h["heading_path"]) for h in alone} == sections_holding(project["sqlite"], "缓")
        assert "en/guide.md" in {h["document"] for h in alone}  # where it stands alone, and inside 缓存


def test_a_query_whose_keywords_match_nothing_says_so(project: dict) -> None:
    for backend in BACKENDS:
        hits = search_json(project, backend, "鳄鱼蝙蝠", "-k", "3")  # "crocodile bat": no character of it in any document
        assert hits and all(h["explain"]["keyword_match"] is False for h in hits)
        assert search_json(project, backend, "鳄鱼蝙蝠", "--mode", "vector", "-k", "1")[0]["explain"]["keyword_match"] is None
        lines = polaris(project["root"], "search", "鳄鱼蝙蝠", "--explain", "-k", "1", "--db", project[backend]).stdout
        assert "bm25 no keyword match" in lines


def test_the_engine_and_the_retriever_answer_the_same_on_both(project: dict) -> None:
    query = "开发环境下 Effect 为什么运行两次"
    got: dict[str, Any] = {}
    embed = PolarisEmbedding(model_id=MODEL)
    for backend in BACKENDS:
        cfg = load_config(project["root"], use_user_config=False)
        with PolarisIndex(project[backend], config=cfg) as index:
            hits = index.search(query, top_k=3, mode="hybrid")
        store = PolarisVectorStore(db_path=project[backend], embed_model=embed, config=cfg)
        try:
            nodes = PolarisRetriever(vector_store=store, embed_model=embed, similarity_top_k=3).retrieve(query)
        finally:
            store.close()
        got[backend] = ([(h.node_id, h.heading_path) for h in hits], [n.node_id for n in nodes])
    assert got["postgres"] == got["sqlite"]
    assert got["sqlite"][0][0][1] == "组件的生命周期 > 挂载"
    assert got["sqlite"][1][0] == got["sqlite"][0][0][0]


def test_the_mcp_server_answers_the_same_on_both(project: dict) -> None:
    from mcp_testing import McpSession, stdio, text_of

    answers = {}
    for backend in BACKENDS:
        session = McpSession(stdio(project["root"], "--db", project[backend]))
        try:
            result = session.call("search", {"query": "スロットでテンプレートを渡す", "k": 3})
            assert not result.is_error, text_of(result)
            answers[backend] = result.structured_content
        finally:
            session.close()
    hits = {b: a["hits"] if isinstance(a, dict) and "hits" in a else a for b, a in answers.items()}
    assert [h["heading_path"] for h in hits["postgres"]] == [h["heading_path"] for h in hits["sqlite"]]
    assert hits["sqlite"][0]["heading_path"].endswith("スロット")


async def test_the_page_marks_every_occurrence(project: dict, tmp_path: Path) -> None:
    """On the page (the Datasette explorer reads files: the Postgres index through ``polaris copy``)
    every 缓存 of every hit is marked, and nothing else: not the lone 缓 or 存 that ranked a section
    lower (a Han character is a term, not a word to mark)."""
    from datasette.app import Datasette

    copied = tmp_path / "copied.db"
    run = polaris(project["root"], "copy", project["postgres"], str(copied))
    assert run.returncode == 0, run.stderr
    pages = []
    for db in (project["sqlite"], str(copied)):
        name = Path(db).stem
        page = (await Datasette([db]).client.get(f"/{name}/-/polaris", params={"q": WORD, "mode": "bm25"})).text
        hits = re.findall(r'id="hit-\d+".*?(?=id="hit-\d+"|$)', page, re.S)
        holding = len(sections_holding(project["sqlite"], WORD))
        assert len(hits) > holding and all("<mark>" in h for h in hits[:holding])
        marks = [m for h in hits for m in re.findall(r"<mark>(.*?)</mark>", h)]
        assert set(marks) == {WORD} and len(marks) >= sum(t.count(WORD) for t in DOCS.values())
        pages.append(marks)
    assert pages[0] == pages[1]


def test_the_vector_store_answers_a_keyword_query_as_the_engine_on_both(project: dict) -> None:
    """PolarisVectorStore in TEXT_SEARCH and HYBRID modes finds the CJK word's sections as the
    engine ranks them, on both backends, and more hits leave the first ones where they were."""
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    embed = PolarisEmbedding(model_id=MODEL)
    vector = embed.get_query_embedding(WORD)
    got: dict[str, Any] = {}
    for backend in BACKENDS:
        cfg = load_config(project["root"], use_user_config=False)
        with PolarisIndex(project[backend], config=cfg) as index:
            engine = {m: [h.node_id for h in index.search(WORD, top_k=3, mode=m)] for m in ("bm25", "hybrid")}
        store = PolarisVectorStore(db_path=project[backend], embed_model=embed, config=cfg)
        try:
            door = {}
            for name, mode in (("bm25", VectorStoreQueryMode.TEXT_SEARCH), ("hybrid", VectorStoreQueryMode.HYBRID)):
                lists = [store.query(VectorStoreQuery(query_embedding=vector, query_str=WORD, similarity_top_k=k,
                                                      mode=mode)).ids for k in (3, 6)]
                assert lists[1][:3] == lists[0], (backend, name)
                door[name] = lists[0]
        finally:
            store.close()
        assert door == engine, backend
        got[backend] = door
    assert got["postgres"] == got["sqlite"]


async def test_the_datasette_json_and_sql_function_answer_as_the_engine(project: dict) -> None:
    """The explorer's JSON twin and ``polaris_search()`` find the CJK word as the engine does."""
    from datasette.app import Datasette

    db = project["sqlite"]
    name = Path(db).stem
    with PolarisIndex(db, config=load_config(project["root"], use_user_config=False)) as index:
        engine = [h.heading_path for h in index.search(WORD, top_k=5, mode="bm25")]
    ds = Datasette([db])
    twin = (await ds.client.get(f"/{name}/-/polaris.json", params={"q": WORD, "mode": "bm25", "k": "5"})).json()
    assert [h["heading_path"] for h in twin["hits"]] == engine
    sql = "select json_extract(value, '$.heading_path') as heading from json_each(polaris_search(:q, 5, :opts))"
    rows = (await ds.client.get(f"/{name}.json", params={"sql": sql, "q": WORD, "opts": json.dumps({"mode": "bm25"}),
                                                          "_shape": "array"})).json()
    want = sections_holding(db, WORD)
    assert [r["heading"] for r in rows] == engine and set(engine[:len(want)]) == {h for _, h in want}


# -- index-time terms are query-time terms, on both backends ----------------------------------
LATIN = "abcxyzABC019_-. ,:/()'é"
CJK = "缓存生命周期组件插槽的をはコンポーネントー使う데이터가"
mixed = st.text(alphabet=st.sampled_from(LATIN + CJK), min_size=1, max_size=30)


@pytest.fixture(scope="module", params=BACKENDS)
def term_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    store = open_store(module_target(request, tmp_path_factory))
    store.bind_model(fake_binding(4))
    yield store
    store.close()


def stored_terms(store: Any, chunk_id: int) -> set[str]:
    with store.read() as conn:
        if hasattr(conn, "pgconn"):
            return {r[0] for r in conn.execute("SELECT term FROM chunks_bm25 WHERE chunk_id = %s", (chunk_id,))}
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.terms_seen USING fts5vocab(main, chunks_fts, instance)")
        return {r[0] for r in conn.execute("SELECT term FROM temp.terms_seen WHERE doc = ?", (chunk_id,))}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mixed, heading=mixed)
def test_the_terms_a_backend_stores_are_the_terms_its_query_asks(term_store: Any, text: str, heading: str) -> None:
    chunk = ChunkRecord(node_id="p:0", text=text, ordinal=0, heading_path=heading, start_char=0, end_char=len(text))
    term_store.upsert_document(DocumentRecord("p"), [chunk], unit_vectors(1, 4))
    with term_store.read() as conn:
        row = conn.execute("SELECT id FROM chunks WHERE node_id = 'p:0'").fetchone()
    stored = stored_terms(term_store, row[0])
    tokenizer = term_store.tokenizer()
    words = query_words(f"{text} {heading}")
    if len(words) >= MAX_TERMS:
        return
    asked = {t for phrase in tokenizer.terms(words) for t in phrase}
    assert asked <= stored
    assert stored - tokenizer.stop_terms <= asked
    if asked - tokenizer.stop_terms:
        with term_store.read():
            assert [h[0] for h in term_store.bm25(f"{text} {heading}", 5, Scope())] == [row[0]]


def test_a_question_the_model_cannot_read_is_measured_by_its_words(project: dict) -> None:
    """A Chinese question reaches the English model mostly as [UNK]: its cosine to a chunk means
    nothing, so a hit's match strength is read from the share of its words alone
    (``strength.COSINE_KNOWN``), the same on both backends; the cosine is still shown."""
    from llama_index_polaris.engine.search import strength

    query = "开发环境下 Effect 为什么运行两次"
    got = {}
    for backend in BACKENDS:
        with PolarisIndex(project[backend], config=load_config(project["root"], use_user_config=False)) as index:
            assert index.known_share(query) < strength.COSINE_KNOWN
            hits = index.search(query, top_k=3)
        assert hits and all(h.cosine is not None for h in hits)
        assert [h.strength for h in hits] == pytest.approx([strength.strength(None, h.term_share).value for h in hits])
        engine = [h.strength for h in hits]
        cli = search_json(project, backend, query, "-k", "3")
        assert [h["strength"] for h in cli] == pytest.approx(engine, abs=1e-6)
        store = PolarisVectorStore(db_path=project[backend], config=load_config(project["root"], use_user_config=False))
        try:
            nodes = PolarisRetriever(vector_store=store, similarity_top_k=3).retrieve(query)
        finally:
            store.close()
        assert [n.score for n in nodes] == pytest.approx(engine, abs=1e-6)  # node.score is the strength
        got[backend] = [(h.heading_path, round(h.strength, 6)) for h in hits]
    assert got["postgres"] == got["sqlite"]
    assert strength.readable_cosine(0.7, 1.0) == 0.7 and strength.readable_cosine(0.7, 0.5) is None
