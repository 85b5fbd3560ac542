"""Identifiers as written (engine/search/literal.py): which query terms are identifiers, where
a text names one as itself, and the BM25 list with those hits first. Pure functions; the
doors' test of a lookup is in test_sections_doors.py."""

from __future__ import annotations

from hypothesis import given, strategies as st

from llama_index_polaris.engine.search.literal import identifiers, is_identifier, is_lookup, lift, named


def test_identifier_spellings() -> None:
    for term in ("--locked", "-n", "OUT_DIR", "~1.2.3", "cargo::rustc-cfg", "build.rustflags", "[workspace.package]",
                 "[env]", "is_eager=True", "@model_serializer", "SerializeAsAny", "RUSTFLAGS", "Cargo.lock"):
        assert is_identifier(term), term
    for term in ("cargo", "install", "features", "the", "a", "-", "--", "Cargo"):
        assert not is_identifier(term), term


def test_a_lookup_is_a_query_of_identifiers_only() -> None:
    assert is_lookup("OUT_DIR") and is_lookup("`--no-sources`") and is_lookup("the [workspace.package]")
    assert identifiers("what is `OUT_DIR`?") == ["OUT_DIR"]
    assert not is_lookup("cargo install --locked") and identifiers("cargo install --locked") == ["--locked"]
    assert not is_lookup("how do I pin a version") and not is_lookup("") and not is_lookup("the a")


def test_a_text_names_an_identifier_as_itself_only() -> None:
    out_dir, pre = ["OUT_DIR"], ["--pre"]
    assert named("Cargo sets `OUT_DIR` for build scripts.", out_dir) == 1
    assert named("set out_dir first", out_dir) == 1 and named("OUT_DIR", out_dir) == 1  # case aside; edges
    assert named("the --out-dir flag, an out dir, MY_OUT_DIR, OUT_DIRS", out_dir) == 0  # other identifiers
    assert named("pass --pre-glob", pre) == 0 and named("pass --pre.", pre) == 1 and named("--pre-x or --pre", pre) == 1
    assert named("OUT_DIR.join", out_dir) == 0  # a longer dotted name
    assert named("~1.2.3 means", ["~1.2.3"]) == 1 and named("1.2.3 means", ["~1.2.3"]) == 0
    assert named("naïve_OUT_DIR é", out_dir) == 0 and named("é OUT_DIR", out_dir) == 1
    assert named("OUT_DIR and --pre", out_dir + pre) == 2


hits_lists = st.lists(st.floats(0.1, 50.0), min_size=0, max_size=30).map(
    lambda scores: [(i, s) for i, s in enumerate(sorted(scores, reverse=True))])


@given(hits_lists, st.sets(st.integers(0, 29)))
def test_lift_moves_the_naming_hits_first_and_keeps_the_scores_falling(hits: list, naming: set) -> None:
    texts = {cid: ("uses OUT_DIR" if cid in naming else "the out dir") for cid, _ in hits}
    out = lift(hits, texts, ["OUT_DIR"])
    assert sorted(c for c, _ in out) == sorted(c for c, _ in hits)  # the same hits
    first = [c for c, _ in out if c in naming]
    assert [c for c, _ in out] == first + [c for c, _ in out if c not in naming]  # naming hits first
    assert first == [c for c, _ in hits if c in naming]  # BM25 order within each group
    assert [c for c, _ in out if c not in naming] == [c for c, _ in hits if c not in naming]
    assert [s for _, s in out] == [s for _, s in hits]  # each takes the score of its new place


def test_lift_without_a_naming_hit_changes_nothing() -> None:
    hits = [(3, 9.0), (1, 4.0)]
    assert lift(hits, {3: "out dir", 1: "dir out"}, ["OUT_DIR"]) == hits
    assert lift(hits, {}, []) == hits and lift([], {}, ["OUT_DIR"]) == []


def test_a_hit_explaining_the_identifier_in_prose_comes_before_one_using_it_in_code() -> None:
    hits = [(1, 9.0), (2, 7.0), (3, 5.0)]
    texts = {1: "Build it:\n\n```sh\nuv sync --frozen\n```\n", 2: "no flag here",
             3: "`--frozen` uses the lockfile as it is, without checking it."}
    assert lift(hits, texts, ["--frozen"]) == [(3, 9.0), (1, 7.0), (2, 5.0)]
    unclosed = {1: "```sh\nuv sync --frozen", 3: "pass --frozen"}
    assert [c for c, _ in lift(hits, unclosed, ["--frozen"])] == [3, 1, 2]


def test_code_blocks_are_fenced_lines_indented_or_not() -> None:
    from llama_index_polaris.engine.search.literal import outside_code

    text = "Use it:\n\n1. Run:\n\n   ```sh\n   uv sync --frozen\n   ```\n\n`--frozen` keeps the lock.\n~~~\nx\n~~~\nend"
    assert outside_code(text) == "Use it:\n\n1. Run:\n\n\n`--frozen` keeps the lock.\nend"
    assert outside_code("a\n```\nb ~~~ c\n```\nd") == "a\nd"  # the other fence does not close it


def test_the_section_headed_by_the_identifier_comes_first_among_those_naming_it() -> None:
    hits = [(1, 9.0), (2, 7.0), (3, 5.0)]
    texts = {1: "Version 1.2\nThe `site_url` setting is now required for sitemaps.",
             2: "Changes\nnothing about it",
             3: "`site_url`\nSet the canonical URL of the site with site_url."}
    assert [c for c, _ in lift(hits, texts, ["site_url"])] == [3, 1, 2]
    texts[3] = "Site\nSet the canonical URL of the site with site_url."  # not headed by it: BM25 order
    assert [c for c, _ in lift(hits, texts, ["site_url"])] == [1, 3, 2]


def test_stop_words_in_capitals_are_not_identifiers_and_terms_are_capped() -> None:
    assert identifiers("CARGO_HOME AND RUSTUP_HOME OR NOT IS") == ["CARGO_HOME", "RUSTUP_HOME"]
    assert is_lookup("CARGO_HOME AND RUSTUP_HOME")
    assert len(identifiers(" ".join(f"VAR_{i}" for i in range(500)))) == 64  # as many as the BM25 query has


def test_an_identifier_joined_to_another_by_a_dot_on_either_side_is_not_named() -> None:
    assert named("set profile.release.lto", ["release.lto"]) == 0 and named("set release.lto.x", ["release.lto"]) == 0
    assert named("[build] rustflags or build.rustflags", ["RUSTFLAGS"]) == 1  # the first is the word itself
    assert named("only build.rustflags here", ["RUSTFLAGS"]) == 0
    assert named("see .python-version.", [".python-version"]) == 1  # a name that starts with the dot
    assert named("x écafé_mode", ["café_mode"]) == 0 and named("x (café_mode)", ["café_mode"]) == 1


def test_a_fence_closes_only_with_its_own_character_at_least_as_long() -> None:
    from llama_index_polaris.engine.search.literal import outside_code

    four = "a\n````md\n```\n--offline inside\n```\n````\nafter"
    assert outside_code(four) == "a\nafter"
    assert outside_code("x\n~~~\ncode\n~~~~\ny") == "x\ny"
    assert outside_code("x\n```\ncode\n``` not a close\n```\ny") == "x\ny"


def test_a_heading_of_aliases_defines_each_of_them() -> None:
    hits = [(1, 9.0), (2, 5.0)]
    texts = {1: "Output\nUse --verbose for more.", 2: "-v, --verbose\nPrint more: --verbose or -v."}
    assert [c for c, _ in lift(hits, texts, ["--verbose"])] == [2, 1]
