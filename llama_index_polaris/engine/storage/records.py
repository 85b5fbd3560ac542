"""The records both backends store and return: documents, chunks, model bindings.

Shared by every backend of the storage contract (``storage.py``), with the rules a write
applies before it reaches either one: text in NFC, ids ``storable``, node ids unique, the
message for a model that does not match the one an index was built with.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import DatabaseError, InputError, ModelMismatchError, NodeIdError
from ..text import is_valid, nfc, storable, storable_value

DEFAULT_COLLECTION = "default"  # where a document goes when no collection is named
STATUSES = ("pending", "processing", "completed", "stale", "failed")
CHUNK_OWN_KEYS = ("heading_path", "heading_level", "chunk_index")  # a chunk's metadata of its own
UNKNOWN_MODEL = "unknown"  # the binding of vectors that came in without a model Polaris could name (see proof.py)

def check_status(status: str) -> None:
    """Refuse a document status that is not one of ``STATUSES``."""
    if status not in STATUSES:
        raise InputError(f"document status must be one of {', '.join(STATUSES)}, got {status!r}.")


def check_committable(doc: "DocumentRecord", chunks: Sequence["ChunkRecord"]) -> None:
    """Refuse chunks written under ``processing``: that status marks a document whose new version is
    not written yet, so that what it holds is its last committed version (``search.scope``)."""
    if doc.status == "processing" and chunks:
        raise InputError(
            f"document {doc.id!r}: chunks are written with the status they answer under, not 'processing'"
            " (a document whose new version is not written yet); write them as 'completed' (or 'pending')."
            " Nothing was written."
        )


def text_hash(text: str) -> str:
    """The content hash that lets a chunk reuse a vector already computed."""
    from hashlib import sha256  # here: loading OpenSSL is 5 ms of a cold search, which hashes nothing

    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def to_blob(vector: np.ndarray) -> bytes:
    """A vector as the little-endian float32 blob stored in chunks.embedding."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    """The inverse of ``to_blob``."""
    return np.frombuffer(blob, dtype="<f4")


@dataclass
class DocumentRecord:
    """One document (a LlamaIndex ref_doc_id): where it came from and its state."""

    id: str
    path: str | None = None
    name: str | None = None
    collection: str = DEFAULT_COLLECTION
    status: str = "completed"
    error: str | None = None
    content_hash: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: str | None = None
    updated_at: str | None = None
    text_stored: bool = False  # read: whether its indexed text is kept (``document_texts``); never written from


@dataclass
class ChunkRecord:
    """One chunk of a document, as stored; ``id`` and ``embedding`` are set when read."""

    node_id: str
    text: str
    ordinal: int = 0
    heading_path: str = ""
    heading_level: int = 0
    start_char: int | None = None
    end_char: int | None = None
    token_count: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    document_id: str | None = None
    id: int | None = None
    embedding: np.ndarray | None = None
    text_hash: str = ""  # hash of the text that was embedded; defaults to the text's
    node: str | None = None  # JSON of a LlamaIndex node's other fields (None for chunks `polaris index` made)

    def __post_init__(self) -> None:
        if not self.text_hash:
            self.text_hash = text_hash(self.text)


@dataclass(frozen=True)
class ModelBinding:
    """The model an index was built with; recorded on first write, checked on open."""

    model_id: str
    dim: int
    fingerprint: str = ""
    doc_prefix: str = ""
    query_prefix: str = ""


MAX_DIM = 65_536  # no embedding model's vectors are longer (the largest in use are a few thousand)


def recorded_dim(meta: dict[str, Any]) -> int:
    """The vector size an index's ``polaris_meta`` records (``embedding_dim``); DatabaseError when
    that row is missing or not a whole number from 1 to ``MAX_DIM`` (a file edited or damaged by hand)."""
    value = meta.get("embedding_dim")
    try:
        dim = int(str(value).strip())
    except ValueError:
        dim = 0
    if not 1 <= dim <= MAX_DIM or isinstance(value, (bool, float)):
        held = "no embedding_dim" if value is None else f"embedding_dim = {value!r}, not a vector size"
        raise DatabaseError(
            f"this index's polaris_meta records the model {meta.get('model_id')!r} but {held}: the file was"
            " edited or damaged. Restore it from a backup, or delete it and run `polaris index` again."
        )
    return dim


def recorded_binding(meta: dict[str, str], proven: ModelBinding | None) -> ModelBinding | None:
    """The model binding an index's ``polaris_meta`` records (None before the first write); a
    binding naming no model is the ``proven`` one when that has its size (its vectors were proven)."""
    if "model_id" not in meta:
        return None
    recorded = ModelBinding(meta["model_id"], recorded_dim(meta), meta.get("model_fingerprint", ""),
                            meta.get("doc_prefix", ""), meta.get("query_prefix", ""))
    if recorded.model_id == UNKNOWN_MODEL and proven is not None and proven.dim == recorded.dim:
        return proven
    return recorded


def check_binding(recorded: ModelBinding | None, wanted: ModelBinding, path: str) -> None:
    """Raise ModelMismatchError when ``wanted`` cannot use an index bound to ``recorded``."""
    if recorded is not None:
        message = mismatch_message(recorded, wanted, path)
        if message:
            raise ModelMismatchError(message)


def mismatch_message(recorded: ModelBinding, wanted: ModelBinding, path: str) -> str | None:
    """Why ``wanted`` cannot use an index built with ``recorded``, or None if it can."""
    if recorded.model_id == UNKNOWN_MODEL:
        same = (wanted.model_id, wanted.dim) == (UNKNOWN_MODEL, recorded.dim)  # more vectors naming no model
        return None if same else unknown_model_message(recorded, wanted, path)
    if (recorded.model_id, recorded.dim) != (wanted.model_id, wanted.dim):
        what = f"{wanted.model_id} at {wanted.dim} dims"
    elif recorded.fingerprint and wanted.fingerprint and recorded.fingerprint != wanted.fingerprint:
        what = f"a different build of {wanted.model_id} (ONNX sha256 {wanted.fingerprint[:12]}...)"
    else:
        return None
    built = f"ONNX sha256 {recorded.fingerprint[:12]}..." if recorded.fingerprint else "ONNX sha256 unknown"
    return (
        f"{path} was built with {recorded.model_id} at {recorded.dim} dims"
        f" ({built}), but {what} was asked for;"
        " vectors from two models cannot be compared. Re-index into a new file"
        f" (delete {path} or pass --db NEW.db), or use model_id = \"{recorded.model_id}\""
        f" with embedding_dim = {recorded.dim}."
    )


def spread_sample(conn: Any, n: int, placeholder: str) -> list[int]:
    """Up to ``n`` ids of chunks that have a vector, spread evenly from the lowest to the highest
    (the model proof's sample; ``placeholder`` is the driver's, ``?`` or ``%s``)."""
    low, high = conn.execute("SELECT min(id), max(id) FROM chunks WHERE embedding IS NOT NULL").fetchone()
    if low is None:
        return []
    ids: list[int] = []
    for i in range(n):
        row = conn.execute(f"SELECT id FROM chunks WHERE embedding IS NOT NULL AND id >= {placeholder} ORDER BY id"
                           " LIMIT 1", (low + (high - low) * i // max(n - 1, 1),)).fetchone()
        if row[0] not in ids:
            ids.append(row[0])
    return ids


def unknown_model_message(recorded: ModelBinding, wanted: ModelBinding, path: str) -> str:
    """Why ``wanted`` cannot simply be trusted with a file that does not name its model."""
    if wanted.dim != recorded.dim:
        return (
            f"{path} holds {recorded.dim}-dim vectors from a model it does not name, but {wanted.model_id} makes"
            f" {wanted.dim}-dim vectors, so it did not make them. Name the model that embedded them (model_id and"
            " embedding_dim in polaris.toml; in LlamaIndex, embed_model=), or re-index into a new file (delete it or"
            " pass --db NEW.db)."
        )
    if wanted.fingerprint:  # a Polaris model: it can prove itself (proof.py), but has not here
        return (
            f"{path} holds {recorded.dim}-dim vectors from a model it does not name, and {wanted.model_id} has"
            " not been shown to have made them. Open the file with it through any Polaris door (PolarisIndex,"
            " polaris search, PolarisEmbedding), which embeds a few chunks again and records the model when they"
            " match, or re-index into a new file."
        )
    return (
        f"{path} holds {recorded.dim}-dim vectors from a model it does not name, and {wanted.model_id} is not"
        " a Polaris model, so nothing can show that it made them. Open the file once with the Polaris model that"
        " embedded them (it re-embeds a few chunks and records itself), or write to a new file with"
        f" {wanted.model_id} named from the start."
    )


def is_relative_path(path: str) -> bool:
    """True for a clean relative POSIX path (what a file under a collection root is keyed by)."""
    parts = path.split("/")
    return not path.startswith("/") and ".." not in parts and "" not in parts


def normal_document(doc: DocumentRecord) -> DocumentRecord:
    """``doc`` with its path, name and collection in NFC (the spelling stored and compared), and
    its id, error and metadata ``storable`` (a lone surrogate written out, ``text.storable``)."""
    path, name = (None if v is None else nfc(v) for v in (doc.path, doc.name))
    error = None if doc.error is None else storable(doc.error)
    return dataclasses.replace(doc, id=storable(doc.id), path=path, name=name, collection=nfc(doc.collection),
                               error=error, metadata=_storable_metadata(doc.metadata))


def normal_chunk(chunk: ChunkRecord) -> ChunkRecord:
    """``chunk`` with its text and heading path in NFC (its offsets and text hash as given), and
    its node id, metadata and node JSON ``storable``."""
    text, heading_path, node_id = nfc(chunk.text), nfc(chunk.heading_path), storable(chunk.node_id)
    metadata, node = _storable_metadata(chunk.metadata), chunk.node
    if node is not None and not is_valid(node):
        node = json.dumps(storable_value(json.loads(node)), ensure_ascii=False)
    same = (text, heading_path, node_id, metadata, node)
    if all(a is b for a, b in zip(same, (chunk.text, chunk.heading_path, chunk.node_id, chunk.metadata, chunk.node))):
        return chunk
    return dataclasses.replace(chunk, text=text, heading_path=heading_path, node_id=node_id, metadata=metadata, node=node)


def _storable_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` unchanged, or as JSON holds it: with its strings ``storable`` when one holds a lone
    surrogate, and a NaN or an infinity as null (what JSON.stringify writes). Python's json writes
    them as NaN and Infinity, which SQLite reads (NaN as null, or as nan where no patch reads it) and
    Postgres refuses: one such value failed every filtered query on a Postgres index."""
    text = json.dumps(metadata, default=str)
    surrogate = "\\ud" in text  # ASCII JSON writes a surrogate as an escape
    if not surrogate and "NaN" not in text and "Infinity" not in text:
        return metadata
    value = json.loads(text, parse_constant=lambda _: None)
    return storable_value(value) if surrogate else value


def _check_unique(doc: DocumentRecord, chunks: Sequence[ChunkRecord]) -> None:
    counts = Counter(c.node_id for c in chunks)
    dupes = sorted(n for n, k in counts.items() if k > 1)
    if dupes:
        raise NodeIdError(
            f"document {doc.id!r}: duplicate node ids {', '.join(dupes[:5])}; a node id names one node, so give"
            " each node its own. Nothing was written."
        )


def _check_unique_across(groups: Sequence[tuple[DocumentRecord, Sequence[ChunkRecord]]]) -> None:
    """Refuse a node id given under two documents of one write."""
    owner: dict[str, str] = {}
    for doc, chunks in groups:
        for c in chunks:
            first = owner.setdefault(c.node_id, doc.id)
            if first != doc.id:
                raise NodeIdError(
                    f"node id {c.node_id!r} is given for two documents, {first!r} and {doc.id!r}, in one write;"
                    " a node id names one node of one document. Give one of them another id. Nothing was written."
                )




def file_document_id(collection: str, path: str) -> str:
    """The id a file gets when it is first indexed: ``collection:path``."""
    return f"{collection}:{path}"
