"""A query's WordPiece ids in Python (``embed.wordpiece``) are the ids tokenizers gives, for every
ASCII text, or the query goes to tokenizers; a cold search then needs no tokenizer.json (#38)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from llama_index_polaris.engine.embed import clear_embedders, get_model_spec, load_embedder, wordpiece
from llama_index_polaris.engine.embed.cache import resolve
from llama_index_polaris.engine.embed.fingerprint import file_sha256

MODEL = "all-minilm-l6-v2"
WINDOW = get_model_spec(MODEL).window
SOURCE = resolve(get_model_spec(MODEL)).tokenizer.read_bytes()


def real() -> Tokenizer:
    tok = Tokenizer.from_buffer(SOURCE)
    tok.no_padding()
    tok.enable_truncation(max_length=WINDOW)
    return tok


REAL = real()
DERIVED = wordpiece.derive(SOURCE)
OURS = wordpiece.parse(wordpiece.written(DERIVED), WINDOW)
PIECES = [t.removeprefix("##") for t in DERIVED["vocab"] if t.isascii()]

ascii_text = st.text(alphabet=st.characters(max_codepoint=127), max_size=80)
glued = st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).flatmap(
    lambda parts: st.sampled_from(["", " ", "-", "_", ".", "\t", "\x0b", "\x00", "\x7f", "/"]).map(
        lambda glue: glue.join(parts)))


def agree(text: str) -> None:
    ours = OURS.encode(text)
    if ours is None:  # left to tokenizers: not ASCII, a special token's text, or over the window
        assert not text.isascii() or any(t in text for t in OURS.added) or len(REAL.encode(text).ids) >= WINDOW - 1
        return
    theirs = REAL.encode(text)
    assert ours.ids == theirs.ids and ours.type_ids == theirs.type_ids and ours.attention_mask == theirs.attention_mask
    assert OURS.known_share(text) == pytest.approx(
        1 - theirs.ids[1:-1].count(OURS.unk) / max(1, len(theirs.ids) - 2) if len(theirs.ids) > 2 else 1.0)


@settings(max_examples=400, deadline=None)
@given(ascii_text)
def test_any_ascii_text_gets_the_ids_tokenizers_gives(text: str) -> None:
    agree(text)


@settings(max_examples=300, deadline=None)
@given(glued, st.booleans())
def test_vocabulary_pieces_glued_get_the_ids_tokenizers_gives(text: str, upper: bool) -> None:
    agree(text.upper() if upper else text)


@pytest.mark.parametrize("text", ["how do we rotate an API key?", "a" * 100, "a" * 101, "x" * 300,
                                  "e.g. foo_bar(1, 2) == [3]", "[MASK] me", "[mask] me", "", "\t\r\n",
                                  "word " * 300, "café au lait", "生命周期"])
def test_edge_cases_agree_or_go_to_tokenizers(text: str) -> None:
    agree(text)


def test_non_ascii_and_special_tokens_go_to_tokenizers() -> None:
    assert OURS.encode("café") is None and OURS.encode("a [SEP] b") is None
    assert OURS.encode("word " * 300) is None  # the window's truncation is tokenizers' to make


def test_only_a_plain_bert_tokenizer_is_derived() -> None:
    spec = json.loads(SOURCE)
    for change in (
        lambda s: s["model"].update(type="Unigram"),
        lambda s: s["normalizer"].update(lowercase=False),
        lambda s: s["normalizer"].update(strip_accents=False),
        lambda s: s.update(pre_tokenizer={"type": "Whitespace"}),
        lambda s: s["post_processor"].update(type="RobertaProcessing"),
        lambda s: s["post_processor"]["single"].pop(),
        lambda s: s["model"]["vocab"].update({"two\nlines": 30522}),
        lambda s: s["model"]["vocab"].update({"minus": -1}),
        lambda s: s.pop("normalizer"),
    ):
        edited = json.loads(SOURCE)
        change(edited)
        assert wordpiece.derive(json.dumps(edited).encode()) is None
    assert wordpiece.derive(json.dumps(spec).encode()) == DERIVED
    assert wordpiece.derive(b"not json") is None


def test_the_sorted_vocabulary_finds_every_token_and_nothing_else() -> None:
    vocab = DERIVED["vocab"]
    assert all(OURS.vocab.get(t) == i for t, i in vocab.items())
    for missing in ("", "zzzzzzzzzz", "##", "\x00", "~~~~~~~~", "rotatee"):
        assert OURS.vocab.get(missing) == vocab.get(missing)


def test_a_derived_tokenizer_that_differs_from_the_real_one_is_not_kept(tmp_path: Path, monkeypatch) -> None:
    """The probes catch a tokenizer.json whose vocabulary is not the one the encoder uses."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    edited = json.loads(SOURCE)
    vocab = edited["model"]["vocab"]
    a, b = vocab["rotate"], vocab["key"]
    vocab["rotate"], vocab["key"] = b, a
    assert wordpiece.save("edited", json.dumps(edited).encode(), REAL, WINDOW) is None
    assert not wordpiece.cached_path("edited").exists()
    assert wordpiece.save("plain", SOURCE, REAL, WINDOW) is not None
    assert wordpiece.cached_path("plain").is_file()


def test_a_damaged_cached_file_is_not_used(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    wordpiece.save("sha", SOURCE, REAL, WINDOW)
    path = wordpiece.cached_path("sha")
    whole = path.read_text(encoding="utf-8")
    assert wordpiece.load("sha", WINDOW) is not None
    for damaged in (whole[: len(whole) // 2], "garbage\n" + whole, "", whole.replace('"format": 3', '"format": 99')):
        path.write_text(damaged, encoding="utf-8")
        assert wordpiece.load("sha", WINDOW) is None
    path.write_bytes(b"\xff\xfe" + whole.encode())
    assert wordpiece.load("sha", WINDOW) is None


def test_a_file_edited_by_hand_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """Edits that keep the file's shape (two tokens or two ids swapped, a token renamed, a
    header setting changed) would give other ids with no error: the header's CRC refuses them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    wordpiece.save("sha", SOURCE, REAL, WINDOW)
    path = wordpiece.cached_path("sha")
    whole = path.read_text(encoding="utf-8")
    header, ids, *tokens = whole.split("\n")
    width = json.loads(header)["width"]
    a, b = tokens.index("rotate"), tokens.index("key")
    swapped = list(tokens)
    swapped[a], swapped[b] = swapped[b], swapped[a]
    ids_swapped = list(ids)
    ids_swapped[a * width:(a + 1) * width], ids_swapped[b * width:(b + 1) * width] = (
        ids[b * width:(b + 1) * width], ids[a * width:(a + 1) * width])
    renamed = [("apj" if t == "api" else t) for t in tokens]
    edits = ["\n".join([header, ids, *swapped]), "\n".join([header, "".join(ids_swapped), *tokens]),
             "\n".join([header, ids, *renamed]), whole.replace('"max_chars": 100', '"max_chars": 3'),
             whole.replace('"cls": 101', '"cls": 0'), whole[:-1]]
    for edited in edits:
        assert edited != whole
        path.write_text(edited, encoding="utf-8")
        assert wordpiece.load("sha", WINDOW) is None
    path.write_text(whole, encoding="utf-8")
    assert wordpiece.load("sha", WINDOW).encode("rotate the api key").ids == REAL.encode("rotate the api key").ids


def test_added_tokens_matched_after_normalising_are_left_to_tokenizers() -> None:
    """tokenizers matches an added token with ``normalized: true`` in the lower-cased text (and
    ``lstrip``/``rstrip``/``single_word`` tokens with their spaces): the substring test does not
    cover them, so such a tokenizer gets no Python path at all."""
    for flag in ("normalized", "lstrip", "rstrip", "single_word"):
        edited = json.loads(SOURCE)
        edited["added_tokens"][4][flag] = True
        assert wordpiece.derive(json.dumps(edited).encode()) is None
    extended = Tokenizer.from_buffer(SOURCE)
    extended.add_tokens(["apikey"])  # what a fine-tuned model's tokenizer.json holds: normalized true
    source = extended.to_str().encode()
    assert wordpiece.derive(source) is None
    extended.no_padding()
    extended.enable_truncation(max_length=WINDOW)
    assert extended.encode("rotate the APIKEY").ids != REAL.encode("rotate the APIKEY").ids  # it would differ


def test_a_vocabulary_that_cannot_be_put_in_place_leaves_no_temporary_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    wordpiece.cached_path("sha").mkdir(parents=True)  # a folder where the file goes: the rename fails
    assert wordpiece.save("sha", SOURCE, REAL, WINDOW) is not None  # this process still has it
    assert sorted(p.name for p in wordpiece.cached_path("sha").parent.iterdir()) == [wordpiece.cached_path("sha").name]


def test_a_damaged_cached_file_is_written_again_by_the_next_process_that_loads_tokenizers(own_cache: Path) -> None:
    embedder = load_embedder(MODEL)
    path = wordpiece.cached_path(file_sha256(embedder.files.tokenizer))
    path.parent.mkdir(parents=True)
    path.write_text('{"format": 3}\n0\n[PAD]', encoding="utf-8")
    assert embedder._query_tokenizer() is None
    embedder.embed_query("é")  # not ASCII: loads tokenizers, which writes the file again
    clear_embedders()
    assert load_embedder(MODEL)._query_tokenizer() is not None


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    clear_embedders()
    yield tmp_path / "cache"
    clear_embedders()


QUERIES = ["how do we rotate an api key", "What is the on-call handover?", "Straße und Café", "生命周期",
           "x" * 150, "[CLS] token", "word " * 300]


def test_query_vectors_are_the_same_with_and_without_the_python_path(own_cache: Path) -> None:
    embedder = load_embedder(MODEL)
    assert embedder._query_tokenizer() is None  # nothing cached yet: tokenizers does it
    before = [embedder.embed_query(q) for q in QUERIES]
    shares = [embedder.known_share(q) for q in QUERIES]
    sha = file_sha256(embedder.files.tokenizer)
    assert wordpiece.cached_path(sha).is_file()  # the process that loaded tokenizers wrote it
    clear_embedders()
    fresh = load_embedder(MODEL)
    assert fresh._query_tokenizer() is not None
    after = [fresh.embed_query(q) for q in QUERIES]
    assert fresh._tokenizers is not None  # the non-ASCII, special and over-long queries needed it
    for q, x, y in zip(QUERIES, before, after):
        assert np.array_equal(x, y), q
    assert [fresh.known_share(q) for q in QUERIES] == shares


SEARCH = """
import io, json, sys, contextlib
from llama_index_polaris.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(['search', sys.argv[1], '--json'])
print(json.dumps({"code": code, "hits": [[h["node_id"], h["score"]] for h in json.loads(out.getvalue())],
                  "tokenizers": "tokenizers" in sys.modules}))
"""


def test_a_cold_search_needs_no_tokenizer_json_once_the_cache_holds_its_vocabulary(
        built_handbook: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copy(built_handbook, tmp_path / "polaris.db")
    (tmp_path / "polaris.toml").write_text(f'model_id = "{MODEL}"\n')
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("POLARIS_")},
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def search(query: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", SEARCH, query], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert search("how do we rotate an api key")["tokenizers"]  # writes the optimised graph and the vocabulary
    for kept in (tmp_path / "cache" / "polaris" / wordpiece.FOLDER).iterdir():
        kept.unlink()
    first = search("how do we rotate an api key")  # the same session from the cached graph, tokenizers
    second = search("how do we rotate an api key")
    assert first["tokenizers"] and not second["tokenizers"]
    assert first["hits"] == second["hits"] and first["hits"]
    assert search("Schlüssel rotieren")["tokenizers"]  # not ASCII: tokenizers, as before


def test_a_tokenizer_replaced_by_one_of_the_same_size_and_mtime_is_hashed_again(tmp_path: Path, monkeypatch) -> None:
    """`cp -p`, `rsync -a` and tar keep a file's mtime; the sha256 memo also keys on the change
    time and inode, which a copy cannot keep, so the replaced file's own vocabulary is used."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "tokenizer.json"
    path.write_bytes(SOURCE)
    first = file_sha256(path)
    edited = SOURCE.replace(b'"api":', b'"apx":', 1)
    assert len(edited) == len(SOURCE) and edited != SOURCE
    st = os.stat(path)
    replacement = tmp_path / "incoming.json"
    replacement.write_bytes(edited)
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, path)  # same size, same mtime
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns
    assert file_sha256(path) != first
    path.write_bytes(SOURCE)  # rewritten in place with the first bytes, the mtime set back
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert file_sha256(path) == first
