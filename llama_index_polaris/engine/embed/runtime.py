"""ONNX Runtime and tokenizer plumbing: loading, token-count batches, dynamic padding."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ModelError
from . import graph_cache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tokenizers:
    """The model's tokenizer twice: truncating at the window (to embed) and not (to count).

    The counter is parsed on first use (chunking counts tokens, a search does not: 15 to
    20 ms of a cold `polaris search` for the bundled MiniLM's tokenizer.json)."""

    encoder: Any
    source: bytes  # tokenizer.json as read
    pad_id: int
    n_special: int

    @functools.cached_property
    def counter(self) -> Any:
        """The tokenizer without padding or truncation, to count a text's tokens."""
        from tokenizers import Tokenizer

        counter = Tokenizer.from_buffer(self.source)
        counter.no_padding()
        counter.no_truncation()
        return counter

    @functools.cached_property
    def unknown_id(self) -> int | None:
        """The id of the model's unknown token (``[UNK]``), None when its vocabulary has none."""
        import json

        model = json.loads(self.source).get("model") or {}
        if isinstance(model.get("unk_id"), int):  # Unigram (SentencePiece) models
            return model["unk_id"]
        token = model.get("unk_token")
        return self.encoder.token_to_id(token) if isinstance(token, str) else None

    def known_share(self, text: str) -> float:
        """Share of ``text``'s tokens that the model's vocabulary holds (1.0 for no tokens): the
        rest reach the model as its unknown token, so they carry no meaning into the vector.
        Read by the embedding tokenizer (what the model is given), so a search parses no counter."""
        enc = self.encoder.encode(text, add_special_tokens=False)
        ids = [i for i, m in zip(enc.ids, enc.attention_mask) if m]
        unknown = self.unknown_id
        if not ids or unknown is None:
            return 1.0
        return 1.0 - ids.count(unknown) / len(ids)


@dataclass(frozen=True)
class Session:
    """A loaded ONNX session with the input names it declares and the output to read."""

    session: Any
    inputs: frozenset[str]
    output: str


def load_tokenizers(path: Path, window: int) -> Tokenizers:
    """Load tokenizer.json, replacing its own padding/truncation with ours (dynamic padding, window)."""
    from tokenizers import Tokenizer

    try:
        text = path.read_bytes()
        encoder = Tokenizer.from_buffer(text)  # 2 ms less than decoding to str for from_str
    except Exception as exc:  # tokenizers raises plain Exception subclasses
        raise ModelError(f"cannot read tokenizer {path}: {exc}") from exc
    pad_id = (encoder.padding or {}).get("pad_id", 0)
    encoder.no_padding()
    encoder.enable_truncation(max_length=window)
    return Tokenizers(encoder, text, pad_id, encoder.num_special_tokens_to_add(is_pair=False))


def create_session(path: Path, setting: tuple[int | None, bool, str | None]) -> Session:
    """An ONNX Runtime CPU session for ``setting = (threads, fast_start, fingerprint)``.

    ``threads=None`` lets ONNX Runtime use the physical cores. With the model's sha256
    (``fingerprint``) the graph comes optimised from the user cache (``graph_cache``), written
    there by the first session: measured on the bundled int8 MiniLM here, the session plus a
    first query take 17 ms from the cache with ``fast_start`` (weights not prepacked) and
    45 ms without, against 240 ms optimising (``ORT_ENABLE_ALL``) and 70 to 90 ms with no
    optimisation (its first query alone 35 to 50 ms: the int8 weights are cast on each run).
    Without a fingerprint, or a cache that cannot be written, ``fast_start`` turns the graph
    optimisation off (a one-shot process) and otherwise it is on.
    """
    import onnxruntime as ort

    threads, fast_start, fingerprint = setting
    level = ort.GraphOptimizationLevel
    session = None
    if fingerprint is not None:
        cached = graph_cache.cached_graph(fingerprint)
        if cached is not None:
            try:
                session = _session(cached, _options(threads, level.ORT_DISABLE_ALL, one_shot=fast_start))
            except ModelError as exc:
                log.warning("the cached optimised graph %s did not load (%s); writing it again", cached, exc)
                graph_cache.remove_graph(fingerprint)
        if session is None:
            session = graph_cache.save_graph(path, fingerprint, _options(threads, level.ORT_ENABLE_EXTENDED), _PROVIDERS)
    if session is None:
        session = _session(path, _options(threads, level.ORT_DISABLE_ALL if fast_start else level.ORT_ENABLE_ALL, one_shot=fast_start))
    outputs = [o.name for o in session.get_outputs()]
    output = "last_hidden_state" if "last_hidden_state" in outputs else outputs[0]
    return Session(session, frozenset(i.name for i in session.get_inputs()), output)


_PROVIDERS = ["CPUExecutionProvider"]


def _options(threads: int | None, level: Any, *, one_shot: bool = False) -> Any:
    """Session options; ``one_shot`` (a query or two, then exit) starts no thread pool unless
    ``threads`` asks for one, and does not prepack the weights (measured: each saves 10 to 20 ms)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads is None and one_shot:
        threads = 1
    options.intra_op_num_threads = threads or 0  # 0: ONNX Runtime's default, one per physical core
    options.inter_op_num_threads = 1
    options.graph_optimization_level = level
    options.enable_mem_pattern = False  # shapes change every batch: patterns only cost memory (-130 MB peak)
    options.log_severity_level = 3
    if one_shot:  # repacking the weights for fast batches costs more than one short query saves
        options.add_session_config_entry("session.disable_prepacking", "1")
    return options


def _session(path: Path, options: Any) -> Any:
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=_PROVIDERS)
    except Exception as exc:  # onnxruntime raises its own pybind exception types
        raise ModelError(f"cannot load ONNX model {path}: {exc}".strip()) from exc


def plan_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Indices grouped into batches of similar token counts (sorted), so padding stays small."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pad_batch(encodings: Sequence[Any], pad_id: int) -> dict[str, np.ndarray]:
    """input_ids, attention_mask and token_type_ids padded to the longest in this batch."""
    width = max(len(e.ids) for e in encodings)
    ids = np.full((len(encodings), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    types = np.zeros((len(encodings), width), dtype=np.int64)
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        ids[row, :n] = enc.ids
        mask[row, :n] = 1
        types[row, :n] = enc.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
