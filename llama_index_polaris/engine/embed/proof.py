"""A file proves its model; a sample of every write is checked against it.

A polaris.db records the model its vectors came from (``polaris_meta``). Vectors that
came in without a model Polaris could name (LlamaIndex nodes embedded by
``VectorStoreIndex(embed_model=...)`` or by the caller) are recorded as ``unknown``. The
first Polaris model that opens such a file, through any door, proves itself:

1. a few stored chunks that have a vector are taken, spread over the file (``SAMPLE``);
2. the text that was embedded for each is rebuilt from the file (``embedded_text``: the
   chunk's text, rendered with its node's metadata, templates and excluded keys as
   LlamaIndex renders it for embedding) and kept only when its sha256 is the chunk's
   ``text_hash``, the hash of what was embedded;
3. the model embeds those texts again; when every one is at cosine ``PROOF_COSINE`` or
   more to its stored vector, the file records the model's full binding (id, dim, ONNX
   fingerprint, prefixes) and every door trusts it from then on. Otherwise the model is
   refused, with the figures that were compared.

The same model gives 0.99999 on the bundled MiniLM (the int8 graph is deterministic on one
machine, batched or not); another model of the same size gives about 0.02.

``check_vector`` is the lighter check of vectors being written or queried against a
recorded Polaris model: one text embedded again, refused below ``MATCH_COSINE`` (a write) or
``QUERY_COSINE`` (a query, whose vector may be of other text on purpose: HyDE).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np

from ..errors import ModelMismatchError
from ..words.blobs import readable
from ..storage import Storage
from ..storage.records import UNKNOWN_MODEL, ChunkRecord, ModelBinding, text_hash, unknown_model_message
from ..storage.vectors import problem

SAMPLE = 4  # chunks re-embedded to prove a file's model
LOOKED_AT = 32  # chunks read to find SAMPLE whose embedded text can be rebuilt
PROOF_COSINE = 0.999  # a proof records the model for good: every chunk must match this closely
MATCH_COSINE = 0.98  # a write against a recorded model: far above another model's ~0.02
# A query vector may be of other text than the question on purpose (HyDE's made-up answer, a
# QueryBundle's custom_embedding_strs): it need only lie in the model's space. The bundled model
# gives 0.33 to 0.78 between a question and a passage answering it; another model's vector of
# the question itself (a rotation of the space) -0.05 to 0.09, a constant vector 0.00 to 0.03.
QUERY_COSINE = 0.25

# LlamaIndex's defaults (llama_index.core.schema), for nodes stored without their own
DEFAULT_TEXT_TEMPLATE = "{metadata_str}\n\n{content}"
DEFAULT_METADATA_TEMPLATE = "{key}: {value}"
DEFAULT_METADATA_SEPARATOR = "\n"


def binding(embedder: Any) -> ModelBinding:
    """The full binding of a Polaris ``Embedder``: id, dim, ONNX fingerprint and prefixes."""
    spec = embedder.spec
    return ModelBinding(embedder.model_id, embedder.dim, embedder.fingerprint, spec.doc_prefix, spec.query_prefix)


def render_for_embedding(text: str, metadata: dict[str, Any], fields: dict[str, Any]) -> str:
    """A node's text as LlamaIndex renders it for embedding (``MetadataMode.EMBED``):
    metadata not in ``excluded_embed_metadata_keys``, ``key: value`` lines, a blank line, the text."""
    excluded = set(fields.get("excluded_embed_metadata_keys") or ())
    template = fields.get("metadata_template") or DEFAULT_METADATA_TEMPLATE
    separator = fields.get("metadata_separator", DEFAULT_METADATA_SEPARATOR)
    lines = [template.format(key=k, value=str(v)) for k, v in metadata.items() if k not in excluded]
    metadata_str = separator.join(lines).strip()
    if not metadata_str:
        return text
    return (fields.get("text_template") or DEFAULT_TEXT_TEMPLATE).format(content=text, metadata_str=metadata_str).strip()


def _renderings(chunk: ChunkRecord) -> Iterator[str]:
    if chunk.node is not None:  # a LlamaIndex node: its own templates and excluded keys
        try:
            fields = json.loads(chunk.node)
            yield render_for_embedding(chunk.text, chunk.metadata, fields if isinstance(fields, dict) else {})
        except (ValueError, KeyError, IndexError):  # a template this rendering cannot fill
            pass
    else:  # a chunk `polaris index` made: its heading path in front (recipe.DEFAULT_CONTEXT)
        excluded = [k for k in chunk.metadata if k != "heading_path"]
        yield render_for_embedding(chunk.text, chunk.metadata, {"excluded_embed_metadata_keys": excluded})
    yield chunk.text


def embedded_text(chunk: ChunkRecord) -> str | None:
    """The text that was embedded for ``chunk``, when the file holds it: a rendering (without its
    blobs, or as written by a version that embedded them) whose sha256 is the chunk's ``text_hash``
    (None when none is)."""
    for candidate in dict.fromkeys(c for r in _renderings(chunk) for c in (readable(r), r)):
        if text_hash(candidate) == chunk.text_hash:
            return candidate
    return None


def cosine(a: Any, b: Any) -> float:
    """Cosine similarity of two vectors (0.0 when either is all zeros)."""
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norm if norm else 0.0


def prove(store: Storage, embedder: Any) -> ModelBinding:
    """Prove that ``embedder`` made the vectors of a file recorded as ``unknown``, and record it.

    Returns the binding now recorded. Raises ModelMismatchError, saying what was compared,
    when the dims differ, when no stored chunk keeps the text that was embedded, or when
    any re-embedded chunk is below ``PROOF_COSINE``.
    """
    recorded, wanted = store.model, binding(embedder)
    if recorded is None or recorded.model_id != UNKNOWN_MODEL:
        store.check_model(wanted)
        return wanted
    if recorded.dim != wanted.dim:
        raise ModelMismatchError(unknown_model_message(recorded, wanted, store.path))
    looked_at = store.vector_sample(LOOKED_AT)
    # a stored value that is not a valid vector (vectors.problem) proves nothing either way: skipped
    usable = [(c, t) for c in looked_at if c.embedding is not None and problem(c.embedding, recorded.dim) is None
              and (t := embedded_text(c)) is not None]
    if not usable:
        raise ModelMismatchError(
            f"{store.path} holds {recorded.dim}-dim vectors from a model it does not name, and none of the"
            f" {len(looked_at)} chunks looked at keeps the text that was embedded for it (a rendering whose sha256"
            f" is the chunk's text_hash) and a valid vector, so {wanted.model_id} cannot show that it made"
            f" them. Re-index into a new file with {wanted.model_id} named (polaris index, or"
            " PolarisVectorStore(embed_model=...))."
        )
    sample = [usable[int(i)] for i in np.unique(np.linspace(0, len(usable) - 1, min(SAMPLE, len(usable))).round())]
    mine = embedder.embed_documents([t for _, t in sample])
    figures = [(c.node_id, cosine(m, c.embedding)) for (c, _), m in zip(sample, mine)]
    if not min(f for _, f in figures) >= PROOF_COSINE:  # NaN is no match
        cosines = ", ".join(f"{f:.3f}" for _, f in figures)
        chunks = ", ".join(_short(node_id) for node_id, _ in figures)
        raise ModelMismatchError(
            f"{store.path} holds {recorded.dim}-dim vectors from a model it does not name, and {wanted.model_id}"
            f" did not make them: it embedded the text stored for {len(figures)} of its chunks ({chunks}) again"
            f" and got cosine {cosines} against their stored vectors ({PROOF_COSINE} needed for each). Open the"
            " file with the model that embedded them (model_id in polaris.toml; in LlamaIndex, the embed_model the"
            " nodes were embedded with), or re-index into a new file (delete it or pass --db NEW.db)."
        )
    store.record_proof(wanted)
    return wanted


def _short(node_id: str) -> str:
    return node_id if len(node_id) <= 16 else node_id[:8] + "..."


def check_vector(store: Storage, embedder: Any, text: str, vector: Any, *, query: bool) -> float:
    """Refuse ``vector`` unless the recorded model (``embedder``) gives nearly the same for ``text``.

    ``query``: ``text`` is a query (embedded with the query prefix), else a document's
    embedded text. Returns the cosine.
    """
    mine = embedder.embed_query(text) if query else embedder.embed_documents([text])[0]
    similarity = cosine(mine, vector)
    if not similarity >= (QUERY_COSINE if query else MATCH_COSINE):  # NaN (a vector with NaN values) is no match
        if query:
            raise ModelMismatchError(
                f"the query embedding does not come from {embedder.model_id}, which {store.path} was built with"
                f" (cosine {similarity:.3f} against {embedder.model_id}'s own embedding of the question; a vector"
                f" of {embedder.model_id} for other text that answers it, as HyDE makes, reads {QUERY_COSINE} and"
                f" more); embed with {embedder.model_id} (in LlamaIndex: PolarisEmbedding(model_id="
                f"{embedder.model_id!r})) or use another file."
            )
        if similarity >= 0.5:  # the model's space, another text: the one LlamaIndex embeds is the one stored
            raise ModelMismatchError(
                f"these nodes' embeddings look like {embedder.model_id}'s, but not of the text {store.path} stores"
                f" as embedded for them (cosine {similarity:.3f} against {embedder.model_id}'s embedding of"
                " node.get_content(MetadataMode.EMBED), the text LlamaIndex embeds for a node); embed that text,"
                " metadata included as the node renders it, as VectorStoreIndex and IngestionPipeline do."
            )
        raise ModelMismatchError(
            f"these nodes' embeddings do not come from {embedder.model_id}, which {store.path} was built with"
            f" (cosine {similarity:.3f} against {embedder.model_id}'s own embedding of the same text);"
            f" embed with {embedder.model_id} (in LlamaIndex: PolarisEmbedding(model_id={embedder.model_id!r}),"
            " the text being node.get_content(MetadataMode.EMBED)) or use another file."
        )
    return similarity
