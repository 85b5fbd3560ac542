"""PolarisVectorStore: a LlamaIndex vector store over one ``polaris.db`` (engine.store + engine.search).

A thin adapter: it translates LlamaIndex types (nodes, ``VectorStoreQuery``,
``MetadataFilters``) into engine calls and back; every piece of retrieval logic lives
in ``engine.search``.

Collections. A store reads and writes one collection (``collection="default"``, the one
`polaris index` fills by default): ``add``, ``query``, ``get_nodes``, ``delete``,
``delete_nodes`` and ``clear`` never touch another. ``collection=None`` reads every
collection and refuses writes. Reading a collection the file does not have raises
``InputError`` (``engine.search.names``; ``default`` in a file without collections reads
as empty).

Nodes round-trip: the node's class, excluded metadata keys, templates and relationships
are stored with it (``chunks.node``) and restored by ``get_nodes`` and ``query``.

Model identity. A ``polaris.db`` records the model its vectors came from and refuses
vectors from another one. The model of an ``add`` is, in order: ``embed_model=`` given
here, ``model_id=`` given here, ``Settings.embed_model`` when it is set, else the one the
file records. A ``PolarisEmbedding`` is recorded by id, dim and ONNX fingerprint; another
embedding class by ``ClassName:model_name``. Vectors that nothing names
(``VectorStoreIndex(embed_model=...)`` does not tell its store) make a new file record
``unknown``; the first Polaris model that opens such a file, through any door, proves
itself on a few stored chunks and the file records it (engine ``proof``), or it is
refused with the figures compared. Once a Polaris model is recorded, one node of every
``add`` is embedded again and refused below cosine 0.98, whoever embedded it: the store's
``embed_model`` names a model, it does not vouch for vectors the store did not make (it
makes none). Each query vector is checked against its query string the same way (a query
embedded by a PolarisEmbedding of that model in this process is not embedded twice).

Query modes: ``DEFAULT`` (what ``index.as_retriever()`` and ``as_query_engine()`` send
with no mode) runs what the store's ``default_mode`` says: ``"hybrid"`` (the default) is
what `polaris search` answers, the full pipeline in the configured unit with the top hit
1.0; ``"vector"`` is LlamaIndex's plain vector KNN over chunks (similarities are cosine
similarities, ``1 - distance``), as LanceDB's ``query_type`` setting lets its store
decide. The explicit modes keep their meaning: ``TEXT_SEARCH`` is BM25 over
``query_str``; ``HYBRID`` is the full pipeline (KNN + BM25, RRF weighted by ``alpha`` when
given: 1 = vector only, 0 = BM25 only; heading boost; MMR); ``MMR`` re-ranks the vector
candidates by MMR with ``mmr_threshold`` as lambda (default: the config's ``mmr_lambda``).
The hybrid runs answer in the configured unit (one node per section by default, as every
other door); the other modes return chunks, as LlamaIndex's own stores do. Every node a
query returns carries its hit's explanation in ``metadata["polaris_explain"]``, hidden
from the LLM and embed renderings. ``mmr_threshold`` may come with the query or as a
keyword of ``query`` (LlamaIndex's ``vector_store_kwargs``). ``similarity_top_k`` is
returned as asked (up to 4,096; the 1..100 clamp is the command line's rule for agents).
Similarities (``node.score``) are match strengths (``node_score``), in every mode. Empty
``doc_ids``/``node_ids`` lists mean no filter (``VectorStoreIndex.as_retriever()`` passes
``node_ids=[]``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from .engine.config import PolarisConfig, load_config
from .engine.embed import get_model_spec
from .engine.errors import InputError, ModelError, ModelMismatchError, VectorError
from .engine.index import in_worker
from .engine.ingest.recipe import STRUCTURAL_KEYS
from .engine.storage.filters import Condition, Filter, FilterGroup
from .engine.search.pipeline import Hit
from .engine.sqlite.vector import MAX_K
from .engine.index import PolarisIndex
from .engine.embed.proof import check_vector
from .engine.words.blobs import readable
from .engine.sqlite.store import UNKNOWN_MODEL, DEFAULT_COLLECTION, ChunkRecord, DocumentRecord, ModelBinding, Store, text_hash
from .engine.storage.vectors import check as check_vectors, check_query

DEFAULT_MODES = ("hybrid", "vector")  # what LlamaIndex's DEFAULT query mode runs (the store's default_mode)

_MODES = {
    VectorStoreQueryMode.DEFAULT: "vector",
    VectorStoreQueryMode.TEXT_SEARCH: "bm25",
    VectorStoreQueryMode.HYBRID: "hybrid",
    VectorStoreQueryMode.MMR: "vector",
}
# the node fields kept in their own columns, not in chunks.node
_COLUMN_FIELDS = ("id_", "embedding", "metadata", "text", "start_char_idx", "end_char_idx")


def to_engine_filter(filters: MetadataFilters | MetadataFilter | None) -> Filter | None:
    """LlamaIndex ``MetadataFilters`` (nested to any depth) as the engine's filter tree."""
    if filters is None:
        return None
    if isinstance(filters, MetadataFilters):
        condition = filters.condition.value if filters.condition is not None else "and"
        return FilterGroup(tuple(to_engine_filter(f) for f in filters.filters), condition)
    if isinstance(filters, MetadataFilter):
        return Condition(filters.key, filters.operator.value, filters.value)
    raise InputError(f"filters must be MetadataFilters or MetadataFilter, got {type(filters).__name__}.")


def to_node(
    node_id: str, text: str, metadata: Dict[str, Any], document_id: str,
    start_char: int | None, end_char: int | None, embedding: Any = None, node: str | None = None,
) -> BaseNode:
    """A stored chunk as a LlamaIndex node: the node that was added, or a TextNode for `polaris index` chunks."""
    vector = None if embedding is None else [float(x) for x in embedding]
    if node is not None:
        fields = json.loads(node)
        fields.update(id_=node_id, text=text, metadata=metadata, start_char_idx=start_char, end_char_idx=end_char,
                      embedding=vector)
        return metadata_dict_to_node({"_node_content": json.dumps(fields), "_node_type": fields.get("class_name")})
    return TextNode(
        id_=node_id, text=text, metadata=metadata, start_char_idx=start_char, end_char_idx=end_char,
        embedding=vector, relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=document_id)},
        excluded_llm_metadata_keys=[k for k in STRUCTURAL_KEYS if k in metadata],
        excluded_embed_metadata_keys=[k for k in metadata if k != "heading_path"],
    )


SECTION_TEXT_KEY = "section_text"  # for MetadataReplacementPostProcessor(target_metadata_key=...)
EXPLAIN_KEY = "polaris_explain"  # a store query's hit: the figures of `polaris search --explain`
RELATIVE_KEY = "relative_score"  # the hit's score relative to the best (top hit 1.0); node.score is its strength
STRENGTH_KEY = "match_strength"  # how well it matches, one scale for every query (``engine/search/strength.py``)
GOOD_KEY, NO_GOOD_KEY = "good_match", "no_good_match"  # the hit matches well; no hit of its result does


def node_score(hit: Hit) -> float:
    """A hit's ``NodeWithScore.score`` in every LlamaIndex door: its match strength (higher is better,
    comparable across queries, so ``SimilarityPostprocessor(similarity_cutoff=...)`` works); 0.0
    when there is nothing to read one from. The relative score is ``metadata["relative_score"]``."""
    return hit.strength if hit.strength is not None else 0.0


def hit_to_node(hit: Hit, *, explain: bool = False, no_good_match: bool | None = None) -> BaseNode:
    """A search hit as a LlamaIndex node; the section's bounded text, when asked for, in
    ``metadata["section_text"]``, with ``explain`` the hit's explanation (as in ``polaris
    search --json --explain``) in ``metadata["polaris_explain"]``, and the hit's relative score
    (top hit 1.0), match strength, ``good_match`` and its result's ``no_good_match``, all hidden
    from the LLM and embed renderings."""
    node = to_node(hit.node_id, hit.text, hit.metadata, hit.document_id, hit.start_char, hit.end_char, node=hit.node)
    hidden = {SECTION_TEXT_KEY: hit.section_text, EXPLAIN_KEY: asdict(hit.explain) if explain else None,
              RELATIVE_KEY: hit.score, STRENGTH_KEY: hit.strength, GOOD_KEY: hit.good_match, NO_GOOD_KEY: no_good_match}
    for key, value in hidden.items():
        if value is None:
            continue
        node.metadata[key] = value
        for keys in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
            if key not in keys:
                keys.append(key)
    return node


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _located(node: BaseNode) -> tuple[Optional[str], Optional[str]]:
    """A node's ``file_path`` and, when its source document names it, the file's absolute path
    (a ``SimpleDirectoryReader`` document's ``file_path``, before ``PolarisNodeParser(root_dir=)``
    made the node's relative): what ``PolarisIndex.place_files`` keys the document by."""
    source = node.source_node
    location = _str_or_none(source.metadata.get("file_path")) if source is not None and source.metadata else None
    return _str_or_none(node.metadata.get("file_path")), location if location and Path(location).is_absolute() else None


def _chunk(node: BaseNode, position: int, path: Optional[str] = None) -> ChunkRecord:
    meta = dict(node.metadata)
    if path is not None and "file_path" in meta:
        meta["file_path"] = path  # keyed as the document is (relative to the collection's root)
    heading = meta.get("heading_path")
    rest = {k: v for k, v in node.model_dump(mode="json").items() if k not in _COLUMN_FIELDS}
    return ChunkRecord(
        node_id=node.node_id,
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        ordinal=_int_or(meta.get("chunk_index"), position),
        heading_path=heading if isinstance(heading, str) else "",
        heading_level=_int_or(meta.get("heading_level"), 0),
        start_char=node.start_char_idx,
        end_char=node.end_char_idx,
        metadata=meta,
        node=json.dumps(rest, ensure_ascii=False),
        text_hash=text_hash(readable(node.get_content(metadata_mode=MetadataMode.EMBED))),  # what was embedded, as the indexer
    )


class PolarisVectorStore(BasePydanticVectorStore):
    """LlamaIndex vector store over a ``polaris.db`` (SQLite + sqlite-vec + FTS5).

    ``PolarisVectorStore(db_path="polaris.db", collection="default", embed_model=None,
    default_mode="hybrid")``; arguments left out come from the merged ``polaris.toml``. See
    the module docstring for collections, model identity and query modes.
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False
    db_path: str
    model_id: Optional[str] = None
    collection: Optional[str] = DEFAULT_COLLECTION
    default_mode: str = "hybrid"

    _index: PolarisIndex = PrivateAttr()
    _embed_model: Any = PrivateAttr(default=None)

    def __init__(
        self,
        db_path: str | Path | None = None,
        *,
        model_id: Optional[str] = None,
        embed_model: Any = None,
        collection: Optional[str] = DEFAULT_COLLECTION,
        default_mode: str = "hybrid",
        config: Optional[PolarisConfig] = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise InputError(
                f"PolarisVectorStore does not take {', '.join(sorted(kwargs))}; it takes db_path, collection,"
                " embed_model, model_id, default_mode and config."
            )
        if default_mode not in DEFAULT_MODES:
            raise InputError(
                f"default_mode must be {' or '.join(repr(m) for m in DEFAULT_MODES)} (what a query in LlamaIndex's"
                f" DEFAULT mode runs, as index.as_retriever() sends), got {default_mode!r}."
            )
        cfg = config if config is not None else load_config()
        path = str(db_path if db_path is not None else cfg.db_path)
        if embed_model is not None and not isinstance(embed_model, BaseEmbedding):
            raise InputError(
                f"embed_model must be a LlamaIndex embedding (a BaseEmbedding such as PolarisEmbedding),"
                f" got {type(embed_model).__name__}."
            )
        if embed_model is not None and model_id is not None and model_id != model_name(embed_model):
            raise InputError(f"model_id {model_id!r} and embed_model ({model_name(embed_model)}) disagree; pass one.")
        super().__init__(
            db_path=path, model_id=model_name(embed_model) if embed_model is not None else model_id,
            collection=collection, default_mode=default_mode,
        )
        self._index = PolarisIndex(path, config=cfg, readonly=None)  # read-only where it cannot write
        self._embed_model = embed_model
        if binding_of(embed_model) is not None:  # a PolarisEmbedding: checked, or proven on a file naming none
            self._index.use_embedder(embed_model.embedder)

    @classmethod
    def class_name(cls) -> str:
        return "PolarisVectorStore"

    @property
    def client(self) -> Store:
        """The engine ``Store`` (one SQLite connection)."""
        return self._index.store

    @property
    def index(self) -> PolarisIndex:
        """The engine session: store, config and (lazily) the recorded model's embedder."""
        return self._index

    @property
    def config(self) -> PolarisConfig:
        """The merged, validated configuration in use."""
        return self._index.config

    def close(self) -> None:
        """Close the database connection."""
        self._index.close()

    def recorded_embed_model(self) -> BaseEmbedding:
        """The embed model to reopen this file with: the one given, else a ``PolarisEmbedding`` of
        the model the file records (the configured one for a file that names none yet, which
        the store then proves on first use)."""
        if self._embed_model is not None:
            return self._embed_model
        from .embedding import PolarisEmbedding

        recorded = self.client.model
        if recorded is None or recorded.model_id == UNKNOWN_MODEL:  # the configured model (proven on first use)
            return PolarisEmbedding(config=self.config)
        if not _is_polaris_model(recorded.model_id):
            raise InputError(
                f"{self.client.path} was embedded by {recorded.model_id}, not a Polaris model: pass that model as"
                " embed_model, e.g. VectorStoreIndex.from_vector_store(store, embed_model=...)."
            )
        return PolarisEmbedding(recorded.model_id, embedding_dim=recorded.dim, config=self.config)

    def as_index(self, **kwargs: Any) -> Any:
        """``VectorStoreIndex.from_vector_store(self, embed_model=self.recorded_embed_model(), **kwargs)``:
        the file reopened with the model it records, whatever ``Settings.embed_model`` says."""
        from llama_index.core import VectorStoreIndex

        kwargs.setdefault("embed_model", self.recorded_embed_model())
        return VectorStoreIndex.from_vector_store(self, **kwargs)

    def _writable(self) -> str:
        if self.collection is None:
            raise InputError("this store reads every collection (collection=None); open one with collection=NAME to write.")
        return self.collection

    # -- writes -------------------------------------------------------------------
    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> List[str]:
        """Upsert ``nodes`` by node id, grouped into documents by ``ref_doc_id``, in this collection,
        in one transaction: every node is written or none. A node id given for two documents, or
        stored under another document, is refused (``NodeIdError``), as is an embedding with NaN
        or infinite values, all zeros or the wrong size (``VectorError``)."""
        collection = self._writable()
        if not nodes:
            return []
        vectors = self._vectors(nodes)
        groups: Dict[str, List[int]] = defaultdict(list)
        for i, node in enumerate(nodes):
            groups[node.ref_doc_id or node.node_id].append(i)
        with self.client.run():  # one write run: polaris.db holds all of it at the end
            paths = self._index.place_files(collection, [_located(nodes[m[0]]) for m in groups.values()])
            writes = []
            for (doc_id, members), path in zip(groups.items(), paths):
                first = nodes[members[0]].metadata
                doc = DocumentRecord(doc_id, path=path, name=_str_or_none(first.get("file_name")), collection=collection)
                chunks = [_chunk(nodes[i], pos, path) for pos, i in enumerate(members)]
                writes.append((doc, chunks, None if vectors is None else vectors[members]))
            self.client.upsert_nodes(writes)
        return [n.node_id for n in nodes]

    def _vectors(self, nodes: Sequence[BaseNode]) -> Optional[np.ndarray]:
        """The nodes' embeddings as one matrix (None when none has one), their model bound and checked."""
        have = [n.embedding is not None for n in nodes]
        if not any(have):
            return None
        if not all(have):
            missing = next(n.node_id for n in nodes if n.embedding is None)
            raise InputError(f"node {missing!r} has no embedding while others do; embed all nodes or none.")
        dims = {len(n.embedding) for n in nodes}
        if len(dims) != 1:
            raise VectorError(f"the nodes' embeddings have different sizes: {sorted(dims)}.")
        # finite, not all zeros (the dim is checked against the file's by _bind, then by the store)
        vectors = check_vectors([n.embedding for n in nodes], [f"node {n.node_id!r}" for n in nodes])
        self._bind(vectors.shape[1])
        # whoever embedded them (the store's embed_model names a model, it made none of these vectors)
        self._check_vector(nodes[0].get_content(metadata_mode=MetadataMode.EMBED), vectors[0], query=False)
        return vectors

    def _wanted(self, dim: int) -> Optional[ModelBinding]:
        """The model these vectors claim to come from (None: nothing says)."""
        if self._embed_model is not None:
            return binding_of(self._embed_model, dim)
        if self.model_id is not None:
            return ModelBinding(self.model_id, dim)
        settings_model = _settings_embed_model()
        return binding_of(settings_model, dim) if settings_model is not None else None

    def _bind(self, dim: int) -> None:
        """Record or check the model of ``dim``-dim vectors; a file naming no model is proven
        by the Polaris model these vectors claim (engine ``proof``)."""
        store = self.client
        recorded, wanted = store.model, self._wanted(dim)
        if recorded is not None and recorded.dim != dim:
            unnamed = recorded.model_id == UNKNOWN_MODEL
            of, model = ("a model it does not name", "the model that made them") if unnamed else (
                recorded.model_id, recorded.model_id)
            raise ModelMismatchError(
                f"{store.path} holds {recorded.dim}-dim vectors of {of}, but these nodes carry {dim}-dim"
                f" embeddings; vectors from two models cannot be compared. Embed with {model} or write to a new file."
            )
        if recorded is not None and recorded.model_id == UNKNOWN_MODEL and wanted is not None:
            embedder = self._polaris_embedder(wanted)
            if embedder is not None:
                self._index.use_embedder(embedder)
                recorded = store.model
        store.bind_model(wanted or recorded or ModelBinding(UNKNOWN_MODEL, dim))

    def _polaris_embedder(self, wanted: ModelBinding) -> Any:
        """The engine embedder of ``wanted`` when it is a Polaris model (None for another library's)."""
        for model in (self._embed_model, _settings_embed_model()):
            if binding_of(model) == wanted:
                return model.embedder
        if not _is_polaris_model(wanted.model_id):
            return None
        from .engine.embed import embedder_from_config

        return embedder_from_config(self.config, wanted.model_id, dim=wanted.dim)

    def _recorded_embedder(self) -> Any:
        """The embedder of the recorded model: a PolarisEmbedding at hand that is it, else the index's."""
        recorded = self.client.model
        for model in (self._embed_model, _settings_embed_model()):
            found = binding_of(model)
            if found is not None and (found.model_id, found.dim, found.fingerprint) == (
                    recorded.model_id, recorded.dim, recorded.fingerprint):
                return model.embedder
        return self._index.embedder

    def _check_vector(self, text: str, vector: np.ndarray, *, query: bool) -> None:
        """Embed ``text`` with the recorded Polaris model and refuse ``vector`` if it is not that model's."""
        recorded = self.client.model
        if recorded is None or not _is_polaris_model(recorded.model_id):
            return  # another library's model, or none named: only its recorded name and dim can be checked
        try:
            embedder = self._recorded_embedder()
        except ModelError as exc:
            raise ModelError(
                f"cannot check that these vectors come from {recorded.model_id}, which {self.client.path} records:"
                f" {exc}"
            ) from exc
        check_vector(self.client, embedder, text, vector, query=query)

    def check_query_vector(self, query: str, vector: Any) -> None:
        """Refuse a query vector that is not a valid vector of the file's size (``engine.vectors``),
        or that the recorded Polaris model would not make for ``query``."""
        recorded = self.client.model
        checked = check_query(vector, recorded.dim if recorded else None,
                              recorded.model_id if recorded else None, self.client.path)
        self._check_vector(query, checked, query=True)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Remove the document ``ref_doc_id`` of this collection with all its nodes."""
        self.client.delete_document(ref_doc_id, collection=self._writable())

    def delete_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None, **delete_kwargs: Any
    ) -> None:
        """Remove this collection's nodes in ``node_ids`` that pass ``filters``; with neither, nothing."""
        collection = self._writable()
        if node_ids is None and filters is None:
            return
        self.client.delete_chunks(node_ids=node_ids, filters=to_engine_filter(filters), collection=collection)

    def clear(self) -> None:
        """Remove every document and node of this collection (the model binding and the collection,
        now empty, stay: a query answers no nodes)."""
        self.client.remove_collection(self._writable(), keep=True)

    # -- reads --------------------------------------------------------------------
    def get_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None
    ) -> List[BaseNode]:
        """This collection's nodes by id and/or metadata filters (all when both are None), with embeddings."""
        chunks = self.client.get_chunks(
            node_ids=node_ids, filters=to_engine_filter(filters), with_embedding=True, collection=self.collection
        )
        if node_ids is not None:  # in the order asked for
            order = {n: i for i, n in enumerate(node_ids)}
            chunks.sort(key=lambda c: order[c.node_id])
        return [
            to_node(c.node_id, c.text, c.metadata, c.document_id or "", c.start_char, c.end_char, c.embedding, c.node)
            for c in chunks
        ]

    def search(self, query: str, *, embed_query: Callable[[str], Any] | None = None, **kwargs: Any) -> List[Hit]:
        """Run the engine pipeline (``Searcher.search``) in this collection; ``embed_query`` embeds the query."""
        return self._index.searcher(embed_query).search(query, within_collection=self.collection, **kwargs)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Answer a LlamaIndex query in mode DEFAULT (what ``default_mode`` says), TEXT_SEARCH, HYBRID or MMR."""
        if query.mode not in _MODES:
            supported = ", ".join(m.name for m in _MODES)
            raise InputError(f"PolarisVectorStore does not support query mode {query.mode.name}; use {supported}.")
        runs = self._runs(query.mode)
        mode = _MODES[runs]
        if query.query_embedding is None and query.query_str is not None and not query.query_str.strip():
            # nothing asked and nothing embedded (LlamaIndex embeds no empty question): the engine's
            # answer to an empty query, not an error about the missing vector
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        if mode != "bm25" and query.query_embedding is None:
            raise InputError(f"query mode {query.mode.name} needs query_embedding.")
        if query.mode in (VectorStoreQueryMode.HYBRID, VectorStoreQueryMode.TEXT_SEARCH) and query.query_str is None:
            raise InputError(f"query mode {query.mode.name} needs query_str.")
        if mode != "bm25" and query.query_str:
            self.check_query_vector(query.query_str, query.query_embedding)
        hybrid = runs == VectorStoreQueryMode.HYBRID
        top_k = query.similarity_top_k
        if hybrid and query.hybrid_top_k is not None:
            top_k = query.hybrid_top_k
        hits = self.search(
            query.query_str or "",
            top_k=top_k,
            max_top_k=MAX_K,
            mode=mode,
            documents=query.doc_ids or None,
            filters=to_engine_filter(query.filters),
            node_ids=query.node_ids or None,
            query_vector=None if mode == "bm25" else query.query_embedding,
            mmr_lambda=self._mmr_lambda(query, runs, kwargs),
            alpha=query.alpha if hybrid else None,
            unit=None if hybrid else "chunk",  # the other modes: LlamaIndex's nodes
            context_tokens=kwargs.get("context_tokens"),
        )
        weak = getattr(hits, "no_good_match", None)
        return VectorStoreQueryResult(
            nodes=[hit_to_node(h, explain=True, no_good_match=weak) for h in hits],
            similarities=[node_score(h) for h in hits],
            ids=[h.node_id for h in hits],
        )

    def _runs(self, mode: VectorStoreQueryMode) -> VectorStoreQueryMode:
        """The mode a query runs in: DEFAULT (``as_retriever()`` with no mode) is the store's
        ``default_mode``, HYBRID unless it is ``"vector"``; the explicit modes are themselves."""
        if mode == VectorStoreQueryMode.DEFAULT and self.default_mode == "hybrid":
            return VectorStoreQueryMode.HYBRID
        return mode

    def _mmr_lambda(
        self, query: VectorStoreQuery, runs: VectorStoreQueryMode, kwargs: Dict[str, Any]
    ) -> Optional[float]:
        """MMR's lambda: the query's mmr_threshold, else the keyword, else (MMR mode) the config's."""
        unknown = set(kwargs) - {"mmr_threshold", "context_tokens"}
        if unknown:
            raise InputError(f"PolarisVectorStore.query does not take {', '.join(sorted(unknown))}.")
        threshold = query.mmr_threshold if query.mmr_threshold is not None else kwargs.get("mmr_threshold")
        if threshold is not None and runs in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH):
            why = " (this store's default_mode is 'vector')" if runs == VectorStoreQueryMode.DEFAULT else ""
            raise InputError(f"mmr_threshold applies to the MMR and HYBRID query modes, not {query.mode.name}{why}.")
        if threshold is None and runs == VectorStoreQueryMode.MMR:
            return self.config.mmr_lambda
        return threshold

    # -- async: the same calls in a worker thread (the store is thread-safe) ------------
    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[str]:
        return await in_worker(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await in_worker(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None, **delete_kwargs: Any
    ) -> None:
        await in_worker(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aclear(self) -> None:
        await in_worker(self.clear)

    async def aget_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None
    ) -> List[BaseNode]:
        return await in_worker(self.get_nodes, node_ids, filters)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return await in_worker(self.query, query, **kwargs)


def binding_of(embed_model: Any, dim: Optional[int] = None) -> Optional[ModelBinding]:
    """The model binding of an embedding model: full for a ``PolarisEmbedding``, by name for others.

    None for no model, or for another class when ``dim`` is not known yet.
    """
    if embed_model is None:
        return None
    embedder = getattr(embed_model, "embedder", None)
    if embedder is not None and hasattr(embedder, "fingerprint"):
        return ModelBinding(
            embedder.model_id, embedder.dim, embedder.fingerprint, embedder.spec.doc_prefix, embedder.spec.query_prefix
        )
    return None if dim is None else ModelBinding(model_name(embed_model), dim)


def model_name(embed_model: Any) -> str:
    """How a model is recorded: a Polaris model id, else ``ClassName:model_name``."""
    embedder = getattr(embed_model, "embedder", None)
    if embedder is not None and hasattr(embedder, "fingerprint"):
        return embedder.model_id
    return f"{type(embed_model).__name__}:{getattr(embed_model, 'model_name', None) or 'unknown'}"


def _settings_embed_model() -> Any:
    """``Settings.embed_model`` if the user set one (reading the property would resolve a default)."""
    from llama_index.core import Settings

    return getattr(Settings, "_embed_model", None)


def _is_polaris_model(model_id: str) -> bool:
    try:
        get_model_spec(model_id)
    except ModelError:
        return False
    return True


def _str_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None
