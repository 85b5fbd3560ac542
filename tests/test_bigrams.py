"""CJK runs as character bigrams (#36): the pure functions, and index-time terms against query-time terms."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from llama_index_polaris.engine.words.bigrams import bigrams, has_cjk, is_cjk, original_span, spaced, spaced_origin
from llama_index_polaris.engine.search.terms import MAX_TERMS, content_terms, query_words, words
from llama_index_polaris.engine.words.tokenize import DEFAULT_TOKENIZER, Tokenizer

LATIN = "abcxyzABCZ019_-. ,:/()'\n`éüß"
CJK = "缓存生命周期组件插槽的数据库をはコンポーネントー使う々데이터베이스가"
mixed = st.text(alphabet=st.sampled_from(LATIN + CJK), max_size=40)
latin = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60).filter(lambda t: not has_cjk(t))
TOKENIZER = Tokenizer(DEFAULT_TOKENIZER)


def test_a_run_becomes_its_overlapping_bigrams_and_a_lone_character_stays():
    assert bigrams("生命周期") == ["生命", "命周", "周期"]
    assert bigrams("缓") == ["缓"]
    assert spaced("React的生命周期", unigrams=False) == "React 的生 生命 命周 周期 "
    assert spaced("使用 slot。插槽", unigrams=False) == " 使用  slot。 插槽 "
    assert words("コンポーネントを使う") == ["コン", "ンポ", "ポー", "ーネ", "ネン", "ント", "を", "使", "う"]  # a run per script
    assert words("算出プロパティはキャッシュされる") == ["算出", "プロ", "ロパ", "パテ", "ティ", "は", "キャ", "ャッ", "ッシ", "シュ", "され", "れる"]
    assert words("데이터 가") == ["데이", "이터", "가"]


def test_a_han_run_adds_its_characters_and_a_kana_or_hangul_run_does_not():
    assert spaced("React的生命周期") == "React 的生 生命 命周 周期 的 生 命 周 期 "
    assert spaced("缓存を使う") == " 缓存 缓 存  を  使  う "  # a lone character is one term, not two
    assert spaced("コンポーネント") == spaced("コンポーネント", unigrams=False)
    assert spaced("데이터") == spaced("데이터", unigrams=False)
    assert words("报错了", unigrams=True) == ["报错", "错了", "报", "错", "了"]
    assert words("报错了") == ["报错", "错了"]  # the words a person marks: the bigrams


def test_a_query_asks_for_the_characters_and_the_highlighter_marks_the_words():
    from llama_index_polaris.engine.search.highlight import Highlighter
    from llama_index_polaris.engine.search.terms import fts_query

    assert query_words("生命周期") == ["生命", "命周", "周期", "生", "命", "周", "期"]
    assert fts_query("缓存", unigrams=False) == '"缓存"'
    text = "缓存的数据存在内存里，缓存很快"
    marked = [text[s:e] for s, e in Highlighter("缓存").spans(text)]
    assert marked == ["缓存", "缓存"]  # not each 存 of 存在 and 内存


def test_kana_punctuation_is_no_letter_of_a_run():
    assert words("キー・バリュー") == ["キー", "バリ", "リュ", "ュー"]


@given(latin)
def test_text_without_cjk_letters_is_left_exactly_as_it_was(text):
    assert spaced(text) == text
    assert spaced_origin(text) == (text, list(range(len(text))))


@given(mixed)
def test_spaced_again_makes_the_same_terms(text):
    """A query's words are spaced once more where they are read (``Tokenizer.terms``): no new term."""
    assert spaced(spaced(text, unigrams=False), unigrams=False).split() == spaced(text, unigrams=False).split()
    assert set(spaced(spaced(text)).split()) == set(spaced(text).split())
    assert set(spaced(text, unigrams=False).split()) <= set(spaced(text).split())


@given(mixed, st.booleans())
def test_every_term_maps_back_to_the_characters_it_came_from(text, unigrams):
    out, origin = spaced_origin(text, unigrams)
    assert out == spaced(text, unigrams) and len(origin) == len(out)
    pos = 0
    for term in out.split(" "):
        if term and is_cjk(term):
            start, end = original_span(origin, pos, pos + len(term))
            assert text[start:end] == term
        pos += len(term) + 1


def test_cjk_words_of_two_characters_count_for_the_boost_and_excerpts():
    assert content_terms("缓存 is a cache", 3) == ["缓存", "cache"]


def _index_terms(text: str) -> set[str]:
    counts, _ = TOKENIZER.counts([(1, text, "")])
    return set(counts[1])


def _query_terms(text: str) -> set[str]:
    return {t for phrase in TOKENIZER.terms(query_words(text)) for t in phrase}


@settings(max_examples=300, deadline=None)
@given(mixed)
def test_index_terms_and_query_terms_of_a_text_agree(text):
    """The terms FTS5 (and so both backends' posting lists) index for a text are those its query
    searches for, stop words aside: a text found by its own words, and nothing else asked."""
    words_asked = query_words(text)
    if len(words_asked) >= MAX_TERMS:
        return
    indexed, asked = _index_terms(text), _query_terms(text)
    assert asked <= indexed
    assert indexed - TOKENIZER.stop_terms <= asked


def test_a_question_over_the_term_cap_keeps_its_words_and_loses_single_characters_first():
    run = "".join(chr(0x4E00 + 7 * i) for i in range(40))  # 40 distinct Han characters: 39 bigrams, 40 unigrams
    asked = query_words(run)
    assert len(asked) == MAX_TERMS and set(bigrams(run)) <= set(asked)
