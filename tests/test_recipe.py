"""The ingestion recipe: the heading context embedded with each chunk, in every form measured."""

from __future__ import annotations

import pytest

from llama_index_polaris.engine.chunk import ChunkSpan
from llama_index_polaris.engine.errors import ConfigError
from llama_index_polaris.engine.ingest.recipe import Recipe

SPAN = ChunkSpan("### Auth\n\nbody", 0, 14, ("Guide", "Security", "Auth"), 3, 5)


def words(text: str) -> int:
    return len(text.split())


def recipe(context: str, window: int) -> Recipe:
    return Recipe(254, 200, 50, words, window, context)


def test_parents_are_trimmed_from_the_top_when_the_window_is_tight() -> None:
    assert recipe("parents", 100).embed_text(SPAN) == "Guide > Security\n\n### Auth\n\nbody"
    assert recipe("parents", 6).embed_text(SPAN) == "Security\n\n### Auth\n\nbody"
    assert recipe("parents", 5).embed_text(SPAN) == SPAN.text
    assert recipe("section", 100).embed_text(SPAN) == "section: Guide > Security\n\n### Auth\n\nbody"
    assert recipe("section", 7).embed_text(SPAN) == "section: Security\n\n### Auth\n\nbody"


def test_a_heading_path_is_embedded_whole_or_not_at_all() -> None:
    full = "heading_path: Guide > Security > Auth\n\n### Auth\n\nbody"
    assert recipe("heading_path", 100).embed_text(SPAN) == full
    assert recipe("heading_path", 5 + words(full.split("\n\n")[0])).embed_text(SPAN) == full
    assert recipe("heading_path", 5 + words(full.split("\n\n")[0]) - 1).embed_text(SPAN) == SPAN.text
    assert recipe("none", 100).embed_text(SPAN) == SPAN.text


def test_a_chunk_before_any_heading_gets_the_document_title_as_context() -> None:
    preamble = ChunkSpan("Intro text.", 0, 11, ("guide.md",), 0, 2)
    assert recipe("parents", 100).embed_text(preamble) == "guide.md\n\nIntro text."
    assert recipe("heading_path", 100).embed_text(preamble) == "heading_path: guide.md\n\nIntro text."


def test_an_unknown_context_is_refused() -> None:
    with pytest.raises(ConfigError, match="heading context must be one of"):
        recipe("everything", 100)
