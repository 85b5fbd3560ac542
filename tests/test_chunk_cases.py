"""Chunker behaviour on specific inputs: structure, budget cascade, overlap, floor, bad input."""

from __future__ import annotations

import time

import pytest

from llama_index_polaris.engine import InputError, load_config
from llama_index_polaris.engine.errors import ConfigError
from llama_index_polaris.engine.chunk import (
    ChunkSettings,
    chunk_document,
    chunk_markdown,
    chunk_text,
    chunkers,
    decode_source,
    heading_text,
)

SMALL = ChunkSettings(max_tokens=30, overlap_chars=0, min_chars=0)


def test_section_within_budget_stays_whole_with_its_heading_path():
    src = "# Guide\n\nIntro.\n\n## Authentication\n\nTokens expire after an hour.\n\n### Refresh\n\nCall refresh.\n"
    doc = chunk_markdown(src, ChunkSettings(min_chars=0))
    assert [c.heading_path_str for c in doc.chunks] == ["Guide", "Guide > Authentication", "Guide > Authentication > Refresh"]
    assert [c.heading_level for c in doc.chunks] == [1, 2, 3]
    assert all(c.text == src[c.start : c.end] for c in doc.chunks)
    assert doc.title == "Guide"


def test_heading_markup_is_stripped_and_setext_headings_count():
    assert heading_text("Use `polaris index` with *care* and [links](http://x) { #anchor }") == "Use polaris index with care and links"
    assert heading_text("Plain   words {: .class }") == "Plain words"
    src = "Guide\n=====\n\nText here is long enough.\n\nSetup\n-----\n\nMore text that is long enough.\n"
    paths = [c.heading_path for c in chunk_markdown(src, ChunkSettings(min_chars=0)).chunks]
    assert paths == [("Guide",), ("Guide", "Setup")]


def test_text_before_the_first_heading_takes_the_title():
    src = "Some preamble text that is long enough to stand alone.\n\n# Real\n\nBody text that is long enough too.\n"
    assert chunk_markdown(src, title="notes.md").chunks[0].heading_path == ("notes.md",)
    assert chunk_markdown(src).chunks[0].heading_path == ()


def test_front_matter_is_metadata_not_body():
    src = "---\ntitle: Sessions\ndate: 2024-05-01\ntags: [auth]\n---\nFirst paragraph of the body, long enough.\n"
    doc = chunk_markdown(src)
    assert doc.metadata == {"title": "Sessions", "date": "2024-05-01", "tags": ["auth"]}
    assert doc.title == "Sessions"
    assert [c.text for c in doc.chunks] == ["First paragraph of the body, long enough."]
    assert doc.chunks[0].start == src.index("First")
    assert doc.chunks[0].heading_path == ("Sessions",)


def test_dashes_around_prose_are_not_front_matter():
    src = "---\nJust prose: with a colon: here.\n---\n\nBody.\n"
    assert chunk_markdown(src).metadata == {}
    assert "Just prose" in chunk_markdown(src).chunks[0].text


def test_front_matter_kept_as_text_is_body_under_the_title_never_a_heading():
    """Broken YAML (or prose) between the two rules stays text, and its closing rule does not
    turn its last lines into a setext heading; a setext heading elsewhere is still one."""
    broken = ('---\ntitle: Front matter page\nauthor: "Someone"\nweird: [unclosed\ndate: 2024-01-01\n---\n\n'
              "# Front matter body\n\nBody text of the page, long enough to stand alone.\n")
    for src in (broken, "---\nJust prose: with a colon: here.\n---\n\nBody text long enough to stand alone.\n"):
        doc = chunk_markdown(src, title="page.md")
        assert doc.metadata == {}
        assert doc.chunks[0].heading_path == ("page.md",) and src[doc.chunks[0].start:].startswith("---")
        assert all("title:" not in " ".join(c.heading_path) and "prose" not in " ".join(c.heading_path) for c in doc.chunks)
    assert chunk_markdown(broken, title="page.md").chunks[-1].heading_path == ("Front matter body",)
    setext = "Intro paragraph\n---\n\nText under it, long enough to stand alone.\n"
    assert chunk_markdown(setext, title="s.md").chunks[0].heading_path == ("Intro paragraph",)


def test_cascade_prefers_sentences_then_words():
    sentences = " ".join(f"Sentence number {i} ends here." for i in range(40))
    chunks = chunk_markdown(sentences, SMALL).chunks
    assert len(chunks) > 3
    assert all(c.text.endswith(".") for c in chunks)
    words = " ".join(["word"] * 400)
    assert all(c.token_count <= 30 and not c.oversize for c in chunk_markdown(words, SMALL).chunks)


def test_big_fence_is_cut_between_lines_and_refenced():
    code = "\n".join(f"line_{i} = {i}" for i in range(200))
    src = f"# Code\n\n```python\n{code}\n```\n"
    chunks = chunk_markdown(src, SMALL).chunks
    assert len(chunks) > 5
    for c in chunks:
        assert c.text.count("```") == 2, c.text
        assert c.token_count <= 30
    assert chunks[1].text.startswith("```python\n")


def test_small_fence_is_never_cut():
    code = "\n".join(f"x{i} = {i}" for i in range(10))
    src = "# Code\n\n" + " ".join(["Prose sentence."] * 20) + f"\n\n```\n{code}\n```\n"
    fence = f"```\n{code}\n```"
    assert any(fence in c.text for c in chunk_markdown(src, ChunkSettings(max_tokens=60, overlap_chars=0)).chunks)


def test_overlap_starts_on_a_boundary_and_stays_in_the_section():
    text = " ".join(f"Fact {i} is stated." for i in range(60))
    src = f"# A\n\n{text}\n\n# B\n\n{text}\n"
    chunks = chunk_markdown(src, ChunkSettings(max_tokens=40, overlap_chars=40, min_chars=0)).chunks
    for prev, c in zip(chunks, chunks[1:]):
        if prev.heading_path == c.heading_path:
            assert c.start < prev.end and c.text.startswith("Fact")
        else:
            assert c.start >= prev.end


def test_small_pieces_merge_into_the_previous_or_next_chunk():
    src = "# One\n\nA paragraph that is comfortably longer than fifty characters.\n\n# Two\n\nTiny.\n"
    chunks = chunk_markdown(src).chunks
    assert len(chunks) == 1 and chunks[0].heading_path == ("One",)
    src = "Hi.\n\n# Guide\n\nA paragraph that is comfortably longer than fifty characters.\n"
    chunks = chunk_markdown(src).chunks
    assert len(chunks) == 1 and chunks[0].start == 0 and chunks[0].heading_path == ("Guide",)


def test_empty_and_structure_only_inputs():
    assert chunk_markdown("").chunks == []
    assert chunk_markdown("   \n\n").chunks == []
    only_front = chunk_markdown("---\ntitle: T\n---\n")
    assert only_front.chunks == [] and only_front.metadata == {"title": "T"}
    only_code = chunk_markdown("```\nprint(1)\n```\n")
    assert [c.text for c in only_code.chunks] == ["```\nprint(1)\n```"]
    assert [c.heading_path for c in chunk_markdown("#\n\n##\n\ntext under empty headings, long enough to stand alone\n").chunks] == [()]
    refs_only = chunk_markdown("[a]: http://example.com\n")
    assert refs_only.chunks[0].text == "[a]: http://example.com"


def test_deeply_nested_lists():
    src = "".join("  " * d + f"- level {d} item with a few words in it\n" for d in range(60))
    chunks = chunk_markdown(src, SMALL).chunks
    assert "".join(c.text for c in chunks).count("level") == 60
    assert all(c.token_count <= 30 for c in chunks)


def test_ten_megabyte_paragraph_is_fast_and_cut_at_words():
    src = " ".join(["lorem ipsum dolor sit amet consectetur"] * 260_000)  # ~10 MB, no sentence ends
    assert len(src) > 10_000_000
    started = time.perf_counter()
    chunks = chunk_markdown(src).chunks
    assert time.perf_counter() - started < 20
    assert all(src[c.start - 1] == " " for c in chunks[1:])
    assert all(c.token_count <= 450 for c in chunks)


def test_one_word_over_budget_is_cut_inside_at_the_budget_and_reported():
    src = "Before the word.\n\n" + "x" * 500 + "\n\nAfter the word.\n"
    doc = chunk_markdown(src, SMALL)
    pieces = [c for c in doc.chunks if c.forced_cut]
    assert "".join(c.text for c in pieces) == "x" * 500  # nothing dropped, in order
    assert [c.token_count for c in pieces] == [30, 30, 30, 30, 5] and not any(c.oversize for c in doc.chunks)
    assert [c.text for c in doc.chunks if not c.forced_cut] == ["Before the word.", "After the word."]
    assert doc.warnings == ("5 chunks cut inside a word or code line longer than the 30-token budget, with no space"
                            " or line break to cut at (first at character 18); every piece is indexed",)


def test_offsets_are_exact_with_crlf_and_bom():
    src = "\ufeff---\r\ntitle: T\r\n---\r\n# Head\r\n\r\nBody text that is long enough to be a chunk.\r\n"
    doc = chunk_markdown(src)
    assert doc.metadata == {"title": "T"}
    assert [src[c.start : c.end] for c in doc.chunks] == [c.text for c in doc.chunks]
    assert doc.chunks[0].text.startswith("# Head")


def test_plain_text_fallback_has_no_heading_path():
    src = "# Not a heading here\n\n" + " ".join(["A plain sentence."] * 100)
    doc = chunk_text(src, SMALL, title="notes.txt")
    assert doc.title == "notes.txt" and len(doc.chunks) > 3
    assert all(c.heading_path == () and c.heading_level == 0 for c in doc.chunks)


def test_dispatch_by_extension_through_the_plugin_hook():
    table = chunkers()
    assert table[".md"] is chunk_markdown and table[".txt"] is chunk_text and table["*"] is chunk_text
    src = "# Title\n\nBody text that is long enough to be a chunk.\n"
    assert chunk_document(src, SMALL, path="a/b.MD").chunks[0].heading_path == ("Title",)
    assert chunk_document(src, SMALL, path="notes.txt").chunks[0].heading_path == ()
    assert chunk_document(src, SMALL, path="data.weird").chunks[0].heading_path == ()
    assert chunk_document(src, SMALL).chunks[0].heading_path == ("Title",)


def test_decode_source_is_strict():
    assert decode_source("\ufeffhé".encode("utf-8")) == "hé"
    with pytest.raises(InputError, match=r"not valid UTF-8 \(byte 0xe9 at offset 1\)"):
        decode_source("hé".encode("latin-1"), name="old.md")
    with pytest.raises(InputError, match="binary"):
        decode_source(b"\x89PNG\r\n\x1a\n\x00\x00", name="logo.png")


def test_settings_from_config(tmp_path):
    from llama_index_polaris.engine.ingest.recipe import make_recipe

    (tmp_path / "polaris.toml").write_text("max_chunk_tokens = 300\nchunk_overlap_chars = 100\n")
    cfg = load_config(tmp_path, use_user_config=False)
    assert make_recipe(cfg, 1000, None).settings == ChunkSettings(max_tokens=300, overlap_chars=100, min_chars=50)
    with pytest.raises(ConfigError, match="reads at most 254 tokens"):  # an explicit budget over the window
        make_recipe(cfg, 254, None)
    assert make_recipe(load_config(use_user_config=False), 254, None).max_tokens == 254  # the default is capped


def test_a_plugin_adds_file_types_but_cannot_replace_a_built_in_chunker(caplog):
    from llama_index_polaris.engine.hookspecs import hookimpl
    from llama_index_polaris.engine.plugins import plugin_manager

    def rst(text, settings, *, title=None):
        return chunk_text(text, settings, title=title)

    class Plugin:
        @hookimpl
        def register_chunkers(self, register):
            register((".rst", ".md"), rst)

    plugin_manager().register(Plugin(), name="rst-plugin")
    chunkers.cache_clear()
    try:
        table = chunkers()
        assert table[".rst"] is rst and table[".md"] is chunk_markdown  # the same rule as for models
        assert "chunker for '.md' is registered twice; keeping the first" in caplog.text
    finally:
        plugin_manager().unregister(name="rst-plugin")
        chunkers.cache_clear()
