"""Heading boost: which query words count, and the size of the bonus."""

from __future__ import annotations

import pytest

from llama_index_polaris.engine.search.boost import boost_terms, heading_boost, heading_match
from llama_index_polaris.engine.search.terms import STOP_WORDS


def test_stop_words_and_short_words_are_not_terms():
    assert boost_terms("how do we handle expired sessions in the db") == ["handle", "expir", "session"]
    assert boost_terms("How IS the API?") == ["api"]
    assert boost_terms("to be or not to be") == []
    assert {"how", "the", "what", "with"} <= STOP_WORDS


def test_terms_are_distinct_and_stemmed():
    assert boost_terms("Sessions session sessions' tokens") == ["session", "token"]


def test_match_fraction_uses_heading_words_by_stem():
    terms = boost_terms("expired sessions and tokens")  # expir, session, token
    assert heading_match(terms, "Guide > Session lifetime") == pytest.approx(1 / 3)
    assert heading_match(terms, "Auth > Sessions > Tokens") == pytest.approx(2 / 3)
    assert heading_match(terms, "Auth > Expiring sessions > Tokens") == pytest.approx(1.0)  # 'expiring' -> 'expir'
    assert heading_match(terms, "") == 0.0
    assert heading_match([], "Anything") == 0.0
    # a word inside another word is not a match
    assert heading_match(["token"], "Tokenizer") == 0.0


def test_boost_is_weight_times_fraction_and_zero_disables():
    terms = ["session", "token"]
    assert heading_boost(terms, "Sessions", 0.05) == pytest.approx(0.025)
    assert heading_boost(terms, "Sessions > Tokens", 0.05) == pytest.approx(0.05)
    assert heading_boost(terms, "Sessions > Tokens", 0.0) == 0.0
