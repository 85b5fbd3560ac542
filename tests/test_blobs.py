"""Blobs (#37 item 2): kept in the stored text, never embedded, never a chunk of their own.

The detector on real kinds of blob and on words that look like them; then the chunker with
the real tokenizer on generated Markdown full of playground links, ``data:`` URIs and hex
hashes (hypothesis): every character of the body is still in a chunk, no chunk's embedded
text is mostly blob (none holds a blob at all), and no chunk is without readable words
when its document has some.
"""

from __future__ import annotations

import base64
import importlib.util
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_polaris.engine.words.blobs import blob_spans, is_mostly_blob, masked, readable
from llama_index_polaris.engine.chunk import ChunkSettings, chunk_markdown
from llama_index_polaris.engine.ingest.recipe import Recipe

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_chunk.py"
_spec = importlib.util.spec_from_file_location("bench_chunk", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
COUNTER = bench.minilm_counter()


def payload(seed: int, size: int) -> str:
    """Base64 of compressed-looking bytes, as a playground link carries."""
    return base64.b64encode(random.Random(seed).randbytes(size)).decode()


PLAYGROUND = "[Try it in the Playground](https://play.vuejs.org/#eNqVkMFqwzAMhl9F+NSyke4cssBeYLBtt3kHNVa7gC0bWw4rxe8+x3QhHWMwYZB+/ZL5rIt6CqGbM6lejWmKXpJkXdO7sg5TVdNMHvoEk0cp0qh7SUBpTLJJZt7VPlmZKxkLVyO2d4k2dWpxDZ1eSdDLxVSuSdNYMtbWTU9WkRqt8QJyRkL7m7TiQMjRQnrcbRbC+DqyqiNaM3H9fhKj6qdW0tmYoJlLvvYhXxGxVH2y0dTtq92dfaHzJOFJp0/YgO8eRsg23LUC/YH1c4/lGuuq8R9H9B/Gj18hGSu5ZxDXwEeBAAJGP3MuRDc2TfNkPuEMhdXDdfhgVP0KqB9h)"
WORDS = st.sampled_from("the reactive state of a component updates when its props change and the effect runs".split())
PROSE = st.lists(WORDS, min_size=1, max_size=40).map(" ".join)


def blob_text() -> st.SearchStrategy[str]:
    """One blob as docs carry them: a playground link, a data: image, a hex hash, a bare base64 run."""
    seeds, sizes = st.integers(0, 10**6), st.integers(40, 3000)
    return st.one_of(
        st.builds(lambda s, n: f"[Playground](https://play.vuejs.org/#eNq{payload(s, n)})", seeds, sizes),
        st.builds(lambda s, n: f"![shot](data:image/png;base64,{payload(s, n)})", seeds, sizes),
        st.builds(lambda s: random.Random(s).randbytes(20).hex(), seeds),
        st.builds(lambda s, n: payload(s, n), seeds, sizes),
    )


PARAGRAPH = st.one_of(PROSE, blob_text(), st.builds(lambda a, b, c: f"{a} {b} {c}", PROSE, blob_text(), PROSE))
DOCUMENT = st.lists(
    st.tuples(st.sampled_from(["", "## Setup\n\n", "## Reactivity\n\n"]), PARAGRAPH), min_size=1, max_size=12
).map(lambda parts: "# Guide\n\n" + "\n\n".join(h + p for h, p in parts) + "\n")


def test_the_payload_of_a_playground_link_is_a_blob_and_its_text_and_host_are_not() -> None:
    text = f"See {PLAYGROUND} for a demo."
    assert readable(text) == "See [Try it in the Playground](https://play.vuejs.org/# ) for a demo."
    assert len(masked(text)) == len(text) and masked(text).count(" ") > 300


@pytest.mark.parametrize("blob", [
    "data:image/png;base64," + payload(1, 600),
    "data:image/svg+xml," + "%3Csvg%20xmlns%3D%22http%3A%2F%2Fwww.w3.org%2F2000%2Fsvg%22%3E%3C%2Fsvg%3E",
    "c771a70e6277c0a99b617c7a806ffedaca235ff9",
    "sha256:" + "62565a6e1cf69e10f5727360368e451d4b7f58beeac6173dc9db836a5b460b1f",
    payload(2, 200),
])
def test_each_kind_of_blob_is_found(blob: str) -> None:
    text = f"before {blob} after"
    spans = blob_spans(text)
    assert len(spans) == 1 and spans[0][1] - spans[0][0] >= 32
    kept = readable(text)
    assert kept.startswith("before ") and kept.endswith(" after") and len(kept) < 40
    assert is_mostly_blob(blob)


@pytest.mark.parametrize("word", [
    "option-cargo-generate-lockfile---verbose",
    "/listings/ch04-understanding-ownership/no-listing-15-dangling-reference-annotated/src/main.rs",
    "org/en-US/docs/Web/JavaScript/Reference/Global_Objects/String/prototype/replaceAll",
    "how-is-this-better-than-injecting-styles-during-rendering-or-uselayouteffect",
    "--enable-experimental-web-platform-features",
    "UNSAFE_componentWillReceiveProps_returns_something_else_entirely",
    "/path/to/poetry/cache/virtualenvs/test-O3eWbxRl-py3.12",
    "12345678901234567890123456789012345678901234567890",
    "renderToReadableStreamWithSomeVeryLongCamelCaseName",
])
def test_words_paths_and_identifiers_are_not_blobs(word: str) -> None:
    assert blob_spans(f"see {word} here") == []
    assert readable(word) == word


def chunks_of(text: str, max_tokens: int = 128):
    return chunk_markdown(text, ChunkSettings(max_tokens=max_tokens, count_tokens=COUNTER)).chunks


def embedded(span) -> str:
    recipe = Recipe(128, 200, 40, COUNTER, 256)
    return recipe.embed_text(span)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT)
def test_no_chunk_is_embedded_mostly_blob_and_every_blob_is_still_stored(text: str) -> None:
    chunks = chunks_of(text)
    for span in chunks:
        assert not is_mostly_blob(embedded(span)), span.text[:200]
        assert blob_spans(readable(span.text)) == []
        assert readable(span.text).strip(), f"a chunk with no readable words: {span.text[:120]!r}"
        assert span.token_count <= 128 or span.oversize
    for start, end in blob_spans(text):  # the blob is kept as written, in some chunk
        assert any(text[start:end] in span.text for span in chunks), text[start:start + 80]


def test_a_page_of_playground_links_makes_no_chunk_of_its_own() -> None:
    """118 links in one section: before #37 the payloads alone made most of its chunks."""
    items = "\n".join(f"- Example {i}: {PLAYGROUND.replace('eNqVkM', 'eNq' + payload(i, 900)[:60])}" for i in range(118))
    page = f"# Examples\n\n{items}\n"
    chunks = chunks_of(page, 200)
    assert all(readable(c.text).strip() for c in chunks)
    assert not any(is_mostly_blob(embedded(c)) for c in chunks)
    # the payloads take no room: as many chunks as the page without them
    assert len(chunks) <= len(chunks_of(readable(page), 200)) + 1
    assert sum(c.text.count("play.vuejs.org/#eNq") for c in chunks) == 118


def test_the_budget_counts_readable_tokens_only() -> None:
    blob = payload(7, 3000)
    chunks = chunks_of(f"# Page\n\nSome words before {blob} and after.\n")
    assert len(chunks) == 1 and blob in chunks[0].text
    assert chunks[0].token_count == COUNTER(readable(chunks[0].text))


# -- the index: blobs are stored, never words, never embedded (both backends) ----------------------
BLOB = payload(11, 1200)
PAGE = f"""# Reactivity

The reactive state of a component updates its view. Try it: {PLAYGROUND}

An inline image ![diagram](data:image/png;base64,{BLOB}) shows the update cycle.
"""


def test_an_index_stores_blobs_but_neither_finds_their_words_nor_embeds_them(backend_target: str, tmp_path: Path) -> None:
    from llama_index_polaris.engine.config import load_config
    from llama_index_polaris.engine.index import PolarisIndex
    from llama_index_polaris.engine.storage.records import text_hash

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "reactivity.md").write_text(PAGE, encoding="utf-8")
    cfg = load_config(use_user_config=False, config_file=None, project_root=tmp_path, model_id="all-minilm-l6-v2")
    with PolarisIndex(backend_target, config=cfg) as index:
        index.index_paths([docs])
        chunks = index.store.get_chunks(with_embedding=True)
        assert len(chunks) == 1 and BLOB in chunks[0].text and "eNqVkMFqwzAMhl9F" in chunks[0].text
        found = index.search("Playground diagram", mode="bm25", unit="chunk")
        assert [h.node_id for h in found] == [chunks[0].node_id] and BLOB in found[0].text
        assert not index.search(BLOB.split("+")[0].split("/")[0][:30], mode="bm25", unit="chunk")
        assert not index.search("eNqVkMFqwzAMhl9F", mode="bm25", unit="chunk")
        embedded = readable(f"heading_path: Reactivity\n\n{chunks[0].text}")
        assert chunks[0].text_hash == text_hash(embedded)
        vector = index.embedder.embed_documents([embedded])[0]
        assert float(vector @ chunks[0].embedding) > 0.9999
