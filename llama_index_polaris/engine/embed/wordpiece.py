"""A query's BERT WordPiece ids without the tokenizers library, for ASCII text.

A cold ``polaris search`` embeds one short query, and importing tokenizers and parsing the
model's tokenizer.json cost it 25 to 30 ms (the 30,522-entry vocabulary is built in Rust from
JSON). For a plain BERT tokenizer (``BertNormalizer``, ``BertPreTokenizer``, ``WordPiece`` and
``[CLS] $A [SEP]``) the ids of an ASCII text follow from the vocabulary alone, which loads from
a text file in 1 to 2 ms. That file (``$XDG_CACHE_HOME/polaris/query-tokenizers/<sha256 of
tokenizer.json>-v<format>.txt``) is written by a process that has loaded the real tokenizer,
only after both gave the same ids on a set of probe texts. Any other text (not ASCII, holding a special
token, or longer than the model's window) goes to the real tokenizer, so the ids are always
the ones tokenizers gives.

The file is a JSON header line, the ids as one line of fixed-width numbers, then the tokens in
sorted order, one a line: a lookup is a bisection, so loading builds no dictionary (split, 1 ms).
The header holds the CRC-32 of the whole, so a file damaged or edited by hand is not used.
"""

from __future__ import annotations

import json
import logging
import os
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..paths import cache_root

log = logging.getLogger(__name__)

FOLDER = "query-tokenizers"
FORMAT = 3

# BERT's normaliser on ASCII: \t \n \r become spaces, the other control characters (category
# Cc: 0-31 and 127) are dropped, letters are lower-cased. Accents and CJK padding cannot occur.
_NORMALISE = {c: None for c in (*range(32), 127)} | {9: " ", 10: " ", 13: " "} | {
    c: chr(c + 32) for c in range(ord("A"), ord("Z") + 1)
}
# BERT's pre-tokeniser: words split at spaces, every ASCII punctuation mark a word of its own.
_PUNCT = r"!-/:-@\[-`{-~"
_WORDS = re.compile(rf"[^ {_PUNCT}]+|[{_PUNCT}]")


@dataclass(frozen=True)
class Encoding:
    """The parts of a ``tokenizers.Encoding`` the embedder reads."""

    ids: list[int]
    type_ids: list[int]
    attention_mask: list[int]
    overflowing: list[Any] = field(default_factory=list)


def words(text: str) -> list[str]:
    """BERT's normalised, pre-tokenised words of an ASCII ``text``."""
    return _WORDS.findall(text.translate(_NORMALISE))


class SortedVocab:
    """Token ids looked up by bisection in sorted tokens, their ids read from fixed-width digits."""

    def __init__(self, tokens: list[str], ids: str, width: int) -> None:
        self.tokens, self.ids, self.width = tokens, ids, width

    def get(self, token: str) -> int | None:
        """The id of ``token``, None when the vocabulary does not hold it."""
        i = bisect_left(self.tokens, token)
        if i < len(self.tokens) and self.tokens[i] == token:
            return int(self.ids[i * self.width:(i + 1) * self.width])
        return None


def wordpiece(word: str, vocab: Mapping[str, int] | SortedVocab, unk: int, prefix: str = "##", max_chars: int = 100) -> list[int]:
    """Greedy longest-match-first pieces of one word; the unknown id alone when a part has none."""
    if len(word) > max_chars:
        return [unk]
    pieces: list[int] = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            found = vocab.get(word[start:end] if start == 0 else prefix + word[start:end])
            if found is not None:
                break
            end -= 1
        else:
            return [unk]
        pieces.append(found)
        start = end
    return pieces


@dataclass(frozen=True)
class QueryTokenizer:
    """A plain BERT tokenizer's vocabulary and settings, for ASCII queries."""

    vocab: SortedVocab
    unk: int
    cls: int
    sep: int
    prefix: str
    max_chars: int
    window: int
    added: tuple[str, ...]  # special tokens' texts: a query holding one goes to tokenizers

    def encode(self, text: str, *, specials: bool = True) -> Encoding | None:
        """``text``'s encoding as tokenizers gives it, or None when this class does not cover it."""
        if not text.isascii() or any(token in text for token in self.added):
            return None
        ids = [i for word in words(text) for i in wordpiece(word, self.vocab, self.unk, self.prefix, self.max_chars)]
        if len(ids) + 2 > self.window:  # truncation is left to tokenizers
            return None
        if specials:
            ids = [self.cls, *ids, self.sep]
        return Encoding(ids, [0] * len(ids), [1] * len(ids))

    def known_share(self, text: str) -> float | None:
        """Share of ``text``'s tokens that are not the unknown token (1.0 for none); None: not covered."""
        enc = self.encode(text, specials=False)
        if enc is None:
            return None
        return 1.0 - enc.ids.count(self.unk) / len(enc.ids) if enc.ids else 1.0


def derive(source: bytes) -> dict[str, Any] | None:
    """The header and vocabulary (token to id) of a plain BERT tokenizer.json, None for any other."""
    try:
        spec = json.loads(source)
        model, norm, post = spec["model"], spec["normalizer"], spec["post_processor"]
        if (
            model.get("type") != "WordPiece"
            or norm.get("type") != "BertNormalizer"
            or not norm.get("clean_text") or not norm.get("lowercase")
            or norm.get("strip_accents") not in (None, True)
            or (spec.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer"
        ):
            return None
        vocab = model["vocab"]
        if not all(isinstance(i, int) and i >= 0 for i in vocab.values()) or any("\n" in t or "\r" in t for t in vocab):
            return None
        added = spec.get("added_tokens") or []
        if any(t.get(flag) for t in added for flag in ("normalized", "lstrip", "rstrip", "single_word")):
            return None  # matched after normalising or with spaces taken in: the substring test does not cover it
        if post.get("type") == "TemplateProcessing":
            single = post["single"]
            shape = [("S", p["SpecialToken"]["id"]) if "SpecialToken" in p else ("A", p["Sequence"]["id"]) for p in single]
            if len(shape) != 3 or [k for k, _ in shape] != ["S", "A", "S"] or any(
                next(iter(p.values()))["type_id"] != 0 for p in single
            ):
                return None
            cls, sep = (post["special_tokens"][shape[0][1]]["ids"], post["special_tokens"][shape[2][1]]["ids"])
            if len(cls) != 1 or len(sep) != 1:
                return None
            cls, sep = cls[0], sep[0]
        elif post.get("type") == "BertProcessing":
            cls, sep = post["cls"][1], post["sep"][1]
        else:
            return None
        header = {
            "format": FORMAT,
            "unk": vocab[model["unk_token"]],
            "cls": cls,
            "sep": sep,
            "prefix": model["continuing_subword_prefix"],
            "max_chars": model["max_input_chars_per_word"],
            "added": sorted({t["content"] for t in added}),
            "tokens": len(vocab),
            "width": len(str(max(vocab.values(), default=0))),
        }
    except (ValueError, KeyError, TypeError, AttributeError, StopIteration):
        return None
    return {"header": header, "vocab": vocab}


def written(derived: dict[str, Any]) -> str:
    """The cached file's text for ``derive``'s result."""
    header, vocab = derived["header"], derived["vocab"]
    tokens = sorted(vocab)
    ids = "".join(str(vocab[t]).rjust(header["width"], "0") for t in tokens)
    body = "\n".join([ids, *tokens])
    return json.dumps({**header, "crc32": _crc32(json.dumps(header) + "\n" + body)}) + "\n" + body


def _crc32(body: str) -> int:
    from zlib import crc32

    return crc32(body.encode("utf-8"))


def parse(text: str, window: int) -> QueryTokenizer | None:
    """A ``QueryTokenizer`` from a cached file's text, None when it is not of this format."""
    try:
        first, body = text.split("\n", 1)
        header = json.loads(first)
        crc = header.pop("crc32", None)
        if header.get("format") != FORMAT or crc != _crc32(json.dumps(header) + "\n" + body):
            return None
        ids, rest = body.split("\n", 1)
        tokens, width = rest.split("\n"), int(header["width"])
        if len(tokens) != header["tokens"] or len(ids) != width * len(tokens):  # not the file written
            return None
        return QueryTokenizer(
            SortedVocab(tokens, ids, width), int(header["unk"]), int(header["cls"]), int(header["sep"]), str(header["prefix"]),
            int(header["max_chars"]), window, tuple(str(t) for t in header["added"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def cached_path(sha256: str) -> Path:
    """Where the query tokenizer of the tokenizer.json with this sha256 is kept."""
    return cache_root() / FOLDER / f"{sha256}-v{FORMAT}.txt"  # another version of Polaris keeps its own


def load(sha256: str, window: int) -> QueryTokenizer | None:
    """The cached query tokenizer for this tokenizer.json, None when none was written."""
    try:
        text = cached_path(sha256).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return parse(text, window)


def probes(tokens: list[str], n: int = 300) -> list[str]:
    """Texts to check a derived tokenizer against tokenizers: vocabulary pieces glued in every
    way, mixed case, punctuation, control characters, digits and over-long words."""
    import random

    rng = random.Random(0)
    alphabet = [chr(c) for c in range(128)]
    plain = [t for t in tokens if t.isascii() and not t.startswith("[")]
    out = ["", " ", "how do we rotate an API key?", "x" * 101, "a" * 100, "[CLS] x", "e.g. foo_bar(1, 2)"]
    for _ in range(n):
        kind = rng.random()
        if kind < 0.5:
            parts = [rng.choice(plain) for _ in range(rng.randint(1, 8))]
            glue = rng.choice(["", " ", "-", ".", "\t", "\x0b", "\x1f", "\x7f", "_"])
            text = glue.join(p.replace("##", "") for p in parts)
            out.append(text.upper() if rng.random() < 0.2 else text)
        else:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    return out


def save(sha256: str, source: bytes, encoder: Any, window: int) -> QueryTokenizer | None:
    """Derive the query tokenizer of ``source`` (tokenizer.json), check it against ``encoder``
    (the real tokenizer, truncating at ``window``), and keep it; None when it is not plain BERT
    or any probe differs (then nothing is written and tokenizers does every query)."""
    derived = derive(source)
    if derived is None:
        return None
    text = written(derived)
    tokenizer = parse(text, window)
    if tokenizer is None:
        return None
    for probe in probes(list(derived["vocab"])):
        ours = tokenizer.encode(probe)
        if ours is None:
            continue
        theirs = encoder.encode(probe, add_special_tokens=True)
        if ours.ids != list(theirs.ids) or ours.type_ids != list(theirs.type_ids):
            log.warning("the query tokenizer derived from %s differs from tokenizers on %r; not used", sha256, probe)
            return None
    target = cached_path(sha256)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:  # a read-only or full cache: tokenizers does every query
        log.debug("cannot write %s: %s", target, exc)
        try:
            tmp.unlink()
        except OSError:
            pass
    return tokenizer
