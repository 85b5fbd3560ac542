"""TokenCounter: the word-cache count equals the tokenizer's own count, always.

The all-MiniLM-L6-v2 tokenizer is the real one from the bundled model package; the
reference is its plain ``encode`` on the whole text, never the counter's own path.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from llama_index_polaris.engine.chunk import TokenCounter
from llama_index_polaris.engine.chunk.tokens import measure_for
from polaris_testing import examples

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_chunk.py"
_spec = importlib.util.spec_from_file_location("bench_chunk", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

ODD = [
    "[CLS]",
    "x[MASK]y",
    "[mask]",
    "naïve",
    "中文字符",
    "a\x0cb",
    "a\x1fb",
    "a\x85b",
    "ＡＢＣ",
    "Straße",
    "e\u0301",
    "\u200b",
    "😀x",
    "İstanbul",
    "x" * 120,
    "y" * 99 + "é",
    "don't",
    "https://example.com/a_b?c=1",
    "\x00",
    "a\u00a0b",
    "a\u3000b",
]


@pytest.fixture(scope="module")
def minilm() -> TokenCounter:
    return bench.minilm_counter()


def raw_count(counter: TokenCounter, text: str) -> int:
    return len(counter._tokenizer.encode(text, add_special_tokens=False))


def test_bert_tokenizer_is_counted_per_word(minilm):
    assert minilm.word_local


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=30), st.sampled_from(ODD)), max_size=12).map(" ".join))
def test_count_equals_the_tokenizer_on_any_text(minilm, text):
    assert minilm(text) == raw_count(minilm, text)
    assert minilm.count_many([text, text + " tail"]) == [raw_count(minilm, text), raw_count(minilm, text + " tail")]


def test_count_equals_the_tokenizer_on_real_docs_and_their_parts(minilm):
    corpus = [text for _, text in bench.markdown_corpus()][:40]
    assert minilm.count_many(corpus) == [raw_count(minilm, t) for t in corpus]
    rnd = random.Random(7)
    for text in corpus:
        spaces = [m.start() for m in re.finditer(r"\s", text)] or [0]
        cuts = sorted({0, len(text), *rnd.sample(spaces, min(6, len(spaces)))})
        measure = measure_for(text, list(zip(cuts, cuts[1:])), minilm, limit=50)
        for _ in range(20):
            a, b = sorted(rnd.sample(spaces, 2)) if len(spaces) > 1 else (0, len(text))
            assert measure(a, b) == raw_count(minilm, text[a:b]), (a, b)


def test_the_word_cache_never_changes_an_answer(minilm):
    words = ["tokenization", "Tokenization", "tokenization,", "[SEP]"]
    first = [minilm(w) for w in words]
    assert [minilm(w) for w in words] == first == [raw_count(minilm, w) for w in words]


def small_vocab() -> dict[str, int]:
    return {tok: i for i, tok in enumerate(["[UNK]", "▁the", "▁cat", "sat", "▁on", "▁mat", "▁a", "b"])}


@pytest.mark.parametrize(
    "build",
    [
        lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Metaspace()),
        lambda t: setattr(t, "normalizer", normalizers.NFKC()) or setattr(t, "pre_tokenizer", pre_tokenizers.Whitespace()),
        lambda t: t.add_tokens(["the cat"]) and setattr(t, "pre_tokenizer", pre_tokenizers.Whitespace()),
    ],
    ids=["metaspace", "nfkc", "added-token-with-space"],
)
def test_tokenizers_that_may_cross_whitespace_are_encoded_whole(build):
    tokenizer = Tokenizer(models.WordLevel(small_vocab(), unk_token="[UNK]"))
    build(tokenizer)
    counter = TokenCounter(tokenizer)
    assert not counter.word_local
    text = "the cat sat on a mat the cat"
    assert counter(text) == len(tokenizer.encode(text, add_special_tokens=False))
    assert counter.count_many([text, "b b"]) == [len(tokenizer.encode(t, add_special_tokens=False)) for t in (text, "b b")]


def test_sequences_of_local_parts_are_word_local():
    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.BertPreTokenizer()])
    counter = TokenCounter(tokenizer)
    assert counter.word_local
    assert json.loads(tokenizer.to_str())["normalizer"]["type"] == "Sequence"
    for text in ["ab a AB", "Áb, a", "ab\x0cab"]:
        assert counter(text) == len(tokenizer.encode(text, add_special_tokens=False))


def test_a_full_word_cache_starts_afresh_without_losing_an_answer(monkeypatch):
    from llama_index_polaris.engine.chunk import tokens

    counter = bench.minilm_counter()
    monkeypatch.setattr(tokens, "_CACHE_LIMIT", 6)
    assert counter("alpha beta") == raw_count(counter, "alpha beta")
    # two known words, five new ones: over the limit, so the cache starts afresh mid-call
    texts = ["alpha gamma delta", "beta epsilon zeta eta theta"]
    assert counter.count_many(texts) == [raw_count(counter, t) for t in texts]
    assert counter("beta iota kappa lambda mu nu") == raw_count(counter, "beta iota kappa lambda mu nu")
    assert len(counter._words) <= 7  # one call's distinct words at most, here
