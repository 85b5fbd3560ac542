"""One index file with its config, store and (lazily) its embedder: what the CLI,
the Datasette plugin and the LlamaIndex adapters open."""

from __future__ import annotations

import functools
import importlib
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from .config import PolarisConfig, load_config
from .errors import DatabaseError, InputError, PolarisError
from .backends import bm25_cache_type, open_store, schema_versions, vector_cache_type
from .storage import is_server_uri, shown_target
from .storage.records import UNKNOWN_MODEL, ModelBinding


# The packages whose ``__init__`` imports their own modules, and the modules a search, a
# status or an index run imports on first use. A package imported for the first time by two
# threads at once can fail in one of them (CPython's per-module import locks see a cycle and
# one thread gets ImportError, "partially initialized module"): a door that answers calls in
# worker threads imports these first, in its own thread (``import_engine``).
ENGINE_MODULES = (
    "chunk", "sqlite", "embed", "embed.embedder", "embed.crossencoder", "storage.documents", "ingest.freshness",
    "ingest.indexer", "embed.proof", "ingest.removal", "ingest.sources", "storage.vectors", "search.pipeline",
    "search.rerank", "sqlite.bits", "sqlite.bm25_cache",
)
SERVER_MODULES = ("postgres", "postgres.connect", "postgres.schema", "postgres.bits")


def import_engine(target: str | Path | None = None) -> None:
    """Import, in the calling thread, every engine module a call may need (those of a database
    server too when ``target`` is its URI), before worker threads answer calls."""
    _import_modules(target is not None and is_server_uri(str(target)))


@functools.cache
def _import_modules(server: bool) -> None:  # once each way: later calls (every async call) cost nothing
    for name in ENGINE_MODULES:
        importlib.import_module(f"{__package__}.{name}")
    if server:
        try:
            for name in SERVER_MODULES:
                importlib.import_module(f"{__package__}.{name}")
        except ImportError:
            pass  # the extra is not installed: opening the index says so, and what to install


async def in_worker(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a worker thread (an adapter's async method), the engine imported
    first in the calling thread, so concurrent first calls cannot import it twice at once."""
    import asyncio

    import_engine()
    return await asyncio.to_thread(fn, *args, **kwargs)


def upgrade_schema(path: str | Path) -> tuple[int, int] | None:
    """Apply this Polaris's pending migrations to the index at ``path``: (from, to) versions, or
    None when it is current, not a Polaris index, or cannot be written here (a read-only
    open of it then says so and what to do)."""
    versions = schema_versions(path)
    if versions is None:
        return None
    version, current = versions
    if version == 0 or version >= current:
        return None
    open_store(str(path)).close()  # a writer's open migrates (on Postgres each step in its transaction)
    return version, current


def model_choice(config: PolarisConfig, recorded: ModelBinding | None) -> tuple[str, int | None]:
    """The model to use: the database's unless the config names one explicitly (or the file
    does not name its model: then the config's, which must prove itself, see proof.py)."""
    if recorded is not None and recorded.model_id != UNKNOWN_MODEL and not config.model_explicit:
        dim_explicit = config.is_explicit("embedding_dim")
        return recorded.model_id, config.embedding_dim if dim_explicit else recorded.dim
    return config.model_id, config.embedding_dim


class PolarisIndex:
    """A polaris.db opened with a validated config; the embedder loads on first use.

    ``fast_start`` is for processes that run one query and exit (`polaris search`).
    ``readonly=None`` writes where this process can, else reads (``Store``).
    """

    def __init__(
        self,
        db_path: str | Path | None = None,
        *,
        config: PolarisConfig | None = None,
        readonly: bool | None = False,
        fast_start: bool = False,
    ) -> None:
        self.config = config or load_config()
        target = str(db_path or self.config.db_path)
        self.path: Any = target if is_server_uri(target) else Path(target)  # a file, or a postgresql:// URI
        self.shown = shown_target(self.path)  # how messages and status name it: a URI without its password
        explicit = self.config.is_explicit("fts_tokenizer")
        new = isinstance(self.path, str) or not self.path.exists()  # a server keeps the tokenizer it was made with
        tokenizer = self.config.fts_tokenizer if explicit or new else None
        self.store = open_store(self.path, readonly=readonly, fts_tokenizer=None if readonly else tokenizer)
        self._embedder: Any = None
        self.fast_start = fast_start  # a one-shot process: a one-query ONNX session, no vector or BM25 cache
        self._vector_cache: Any = None
        self._bm25_cache: Any = None
        self._freshness: Any = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the database."""
        self.store.close()

    def __enter__(self) -> "PolarisIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def embedder(self) -> Any:
        """The embedder for this index (the recorded model unless the config names another).

        A file that does not name its model (``unknown``) is proven by the configured model
        on first use and records it (``proof.prove``), or the model is refused.
        """
        with self._lock:
            if self._embedder is None:
                from .embed import embedder_from_config, get_model_spec, resolve_dim

                if self.store.readonly and self.store.model is None:
                    raise DatabaseError(f"{self.shown} has no model recorded yet: nothing has been indexed into it.")
                model_id, dim = model_choice(self.config, self.store.model)
                # refuse a mismatch before any model file is looked for or loaded
                wanted = ModelBinding(model_id, resolve_dim(get_model_spec(model_id), dim))
                recorded = self.store.model
                if recorded is None or recorded.model_id != UNKNOWN_MODEL or recorded.dim != wanted.dim:
                    self.store.check_model(wanted)
                embedder = embedder_from_config(self.config, model_id, dim=dim, fast_start=self.fast_start)
                self._prove_or_check(embedder)
                self._embedder = embedder
            return self._embedder

    @property
    def embedder_loaded(self) -> bool:
        """Whether this index has its embedder yet (``embedder`` loads it on first use)."""
        return self._embedder is not None

    def use_embedder(self, embedder: Any) -> None:
        """Open this file with a door's own Polaris ``embedder`` (a ``PolarisEmbedding``'s).

        It is checked against the recorded model; a file that does not name its model is
        proven by it and records it (``proof.prove``). It then embeds for this index, unless
        the index already has an embedder.
        """
        with self._lock:
            self._prove_or_check(embedder)
            if self._embedder is None:
                self._embedder = embedder

    def _prove_or_check(self, embedder: Any) -> None:
        from .embed.proof import binding, prove

        recorded = self.store.model
        if recorded is not None and recorded.model_id == UNKNOWN_MODEL:
            prove(self.store, embedder)
        else:
            self.store.check_model(binding(embedder))

    def embed_query(self, query: str) -> Any:
        """``query`` embedded by this index's model, refused (``vectors.check_query``) unless it is a
        valid vector of the file's size: what a door that hands out query vectors returns."""
        from .storage.vectors import check_query

        vector = self.embedder.embed_query(query)
        model = self.store.model
        return check_query(vector, model.dim if model else None, model.model_id if model else None, self.shown)

    def searcher(self, embed_query: Callable[[str], Any] | None = None) -> Any:
        """A Searcher over this index; queries are embedded by ``embed_query``, else its embedder."""
        from .search.pipeline import Searcher

        embed = embed_query if embed_query is not None else (lambda q: self.embedder.embed_query(q))
        return Searcher(
            self.store, embed, self.config, self.vector_cache, self.bm25_cache,
            count_tokens=self.count_tokens,
            known_share=self.known_share,
        )

    def known_share(self, query: str) -> float:
        """Share of ``query``'s tokens this index's model knows (``Embedder.known_share``), read
        from its tokenizer alone; 1.0 (unmeasured) when this index has no model to ask: its
        files are not on this machine, nothing is indexed yet, or the file's vectors are not the
        configured model's (a door that brings its own query vectors still ranks)."""
        try:
            return self.embedder.known_share(query)
        except PolarisError:
            return 1.0

    @property
    def vector_cache(self) -> Any:
        """The sign bits in RAM for vector KNN (None for one-shot processes): the file's
        ``VectorCache``, or ``PgVectorCache`` on a server, which choose the same candidates."""
        if self.fast_start:  # before the imports: a one-shot search loads no cache module
            return None
        if self.store.kind == "postgres":
            cache = self._long_lived("_vector_cache", vector_cache_type("postgres"), "postgres")
            if cache is not None:
                self.store.warm_postings()  # once: the longest BM25 lists read ahead, as the file's cache loads
            return cache
        return self._long_lived("_vector_cache", vector_cache_type("sqlite"))

    @property
    def bm25_cache(self) -> Any:
        """Chunk lengths and common words' postings for BM25 from RAM (None for one-shot processes)."""
        if self.fast_start:
            return None
        return self._long_lived("_bm25_cache", bm25_cache_type())

    def _long_lived(self, attr: str, cache_type: type, kind: str = "sqlite") -> Any:
        """The cache held in ``attr``, made on first use (loading in the background), unless one-shot."""
        with self._lock:
            if getattr(self, attr) is None and not self.fast_start and self.store.kind == kind:
                setattr(self, attr, cache_type(self.store, background=True))
            return getattr(self, attr)

    def search(self, query: str, **kwargs: Any) -> list[Any]:
        """Run the query pipeline (see ``Searcher.search``)."""
        if self.store.model is None and not self.store.counts().get("chunks", 0):
            raise DatabaseError(f"{self.shown} holds no index yet. Build one with `polaris index PATH`.")
        return self.searcher().search(query, **kwargs)

    def status(self, check: bool = False, changes: bool = False) -> dict[str, Any]:
        """What the index holds: model, counts, collections and their roots, the chunk budget.

        ``check`` also reads every page (``PRAGMA quick_check``) into ``integrity``, and every
        stored vector into ``vectors``: how many rows vector search skips (``skipped``) and the
        first of them, each named (chunk id, node id, document, table, problem; ``vectors.scan``).
        ``changes`` compares every collection's files on disk with the index
        (``freshness``): ``changes`` per collection, and ``stale`` when any differ.
        """
        store = self.store
        model, counts, roots = store.model, store.counts(), store.collections()
        out: dict[str, Any] = {
            "db_path": self.shown, "model_id": model.model_id if model else None,
            "embedding_dim": model.dim if model else None, "model_fingerprint": model.fingerprint if model else None,
            "documents": counts["documents"], "chunks": counts["chunks"], "collections": counts["collections"],
            "roots": roots, "root_exists": {n: bool(r) and Path(r).is_dir() for n, r in roots.items()},
            "schema_version": store.schema_version(), "size_bytes": store.size_bytes(),
            "chunk_budget": self._chunk_budget(), "documents_without_text": self._without_text(),
        }
        if check:
            out["integrity"] = store.quick_check()
            out["vectors"] = self._vector_check() if model is not None and out["integrity"] == ["ok"] else None
        if changes:
            found = self.freshness.collections()
            out["changes"] = {name: c.summary() for name, c in found.items()}
            out["stale"] = any(c.stale for c in found.values())
        return out

    def _without_text(self) -> int:
        """Documents whose sections are rebuilt from chunks: no stored text (``documents.NOT_EXACT``)."""
        from .storage.documents import without_text

        with self.store.read() as conn:
            return without_text(conn)

    def _vector_check(self) -> dict[str, Any]:
        return self.store.vector_report()

    @property
    def freshness(self) -> Any:
        """The ``Freshness`` of this index's files (it remembers file hashes while the index is open)."""
        from .ingest.freshness import Freshness

        with self._lock:
            if self._freshness is None:
                self._freshness = Freshness(self.store, self.config)
            return self._freshness

    # -- documents and sections (``documents.py``) -------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by the index's model's tokenizer (what every budget counts); the
        characters' estimate (``text.heuristic_tokens``) when the index records no model (its text
        was added alone, through LlamaIndex)."""
        if self.store.model is None:
            from .text import heuristic_tokens

            return heuristic_tokens(text)
        return self.embedder.count_tokens(text)

    def outline(self, document: str, collection: str | None = None) -> Any:
        """The heading tree of ``document`` (path or id), each section's size in tokens."""
        from .storage import documents

        with self.store.read() as conn:
            doc = documents.load_document(conn, document, collection)
        return documents.outline_of(doc, self.count_tokens)

    def read_section(self, document: str | None = None, heading_path: str | None = None, *,
                     node_id: str | None = None, collection: str | None = None, max_tokens: int = 2000,
                     subsections: bool = False) -> Any:
        """One section of ``document`` by heading path (or the section of chunk ``node_id``), its
        text cut to ``max_tokens``, with its place among its siblings (``documents.Section``)."""
        from .storage import documents
        from .search.context import check_budget

        check_budget(max_tokens, "max_tokens")
        with self.store.read() as conn:
            doc = documents.load_document(conn, document, collection, node_id=node_id)
        return documents.section_of(doc, heading_path, self.count_tokens, max_tokens, subsections)

    def document_text(self, document: str, collection: str | None = None, max_tokens: int = 20_000) -> Any:
        """(``DocumentRef``, its indexed text cut to ``max_tokens``, tokens of the whole, whether cut)."""
        from .storage import documents
        from .search.context import check_budget

        check_budget(max_tokens, "max_tokens")
        with self.store.read() as conn:
            doc = documents.load_document(conn, document, collection)
        return (doc.ref, *documents.text_of(doc, self.count_tokens, max_tokens))

    def documents(self, collection: str | None = None, prefix: str | None = None, limit: int = 100,
                  offset: int = 0, contains: str | None = None) -> Any:
        """A page of the documents of ``collection`` (``documents.DocumentPage``)."""
        from .storage import documents

        with self.store.read() as conn:
            return documents.list_documents(conn, collection, prefix, limit, offset, contains)

    def _chunk_budget(self) -> dict[str, Any] | None:
        """The budget chunks were cut at (recorded when indexing) and why it is that number."""
        import json

        from .embed import get_model_spec

        recorded = self.store.meta.get("chunker")
        model = self.store.model
        if recorded is None or model is None:
            return None
        tokens = json.loads(recorded).get("max_tokens")
        asked = self.config.max_chunk_tokens
        try:
            window = get_model_spec(model.model_id).window
        except Exception:  # a model this Polaris does not know (a plugin's, or "unknown")
            window = None
        if tokens is not None and tokens < asked and window is not None:
            source = (f"{model.model_id} reads {window} tokens (less its special tokens and prefix);"
                      f" max_chunk_tokens {asked} ({self.config.sources.get('max_chunk_tokens', 'default')}) is larger")
        else:
            source = f"max_chunk_tokens ({self.config.sources.get('max_chunk_tokens', 'default')})"
        return {"tokens": tokens, "model_window": window, "source": source}

    def backup(self, dest: str | Path) -> Path:
        """A checked, consistent one-file copy of the index at ``dest`` (``Store.backup``)."""
        return self.store.backup(dest)

    def check_collection(self, name: str) -> None:
        """Refuse a collection the index does not have as a search scoped to it is refused: a
        ScopeError naming the collections there are and the closest (``search.names``)."""
        from .storage.names import collections_named

        with self.store.read() as conn:
            collections_named(conn, [name])

    def remove(self, collection: str, paths: Sequence[str | Path] | None = None) -> int:
        """Remove ``collection`` (its documents and root), or only its files under ``paths``: those
        keyed relative to its root, and those a door stored by their absolute path. An unknown
        collection, or a path that takes nothing, is refused and nothing is removed (``removal``)."""
        from .ingest.removal import documents_under

        self.check_collection(collection)
        with self.store.writer_lock(), self.store.run():
            if not paths:
                return self.store.remove_collection(collection)
            root = self.store.collection_root(collection)
            located = [d for d in self.store.documents(collection) if d.path and Path(d.path).is_absolute()]
            files = self.store.files(collection)
            if root is None and files:
                raise InputError(
                    f"collection '{collection}' records no folder its files' paths are relative to (they came in"
                    " through LlamaIndex without a root), so PATHs cannot name them. Remove the collection"
                    f" (`polaris remove --collection {collection}`) or its documents by id (PolarisVectorStore"
                    ".delete(ref_doc_id)); give PolarisNodeParser root_dir= to record the folder next time."
                )
            if root is None and not located:
                raise InputError(f"collection '{collection}' has no folder to remove paths from.")
            gone = documents_under(collection, paths, root, files, located, self.store.collections())
            return self.store.delete_documents(gone)

    def place_files(self, collection: str, files: Sequence[tuple[str | None, str | None]]) -> list[str | None]:
        """The path each document a door brings is stored by, as ``(file_path, location)`` pairs:
        ``file_path`` as the door gives it, ``location`` the file's absolute path when known.

        A relative ``file_path`` whose location ends with it says where its root is (what
        ``PolarisNodeParser(root_dir=...)`` makes of a ``SimpleDirectoryReader`` document): the
        collection records that root as `polaris index` would (``sources.plan_root``: a first
        root is recorded, a parent folder widens it, another folder is refused). A file under
        the collection's root is then keyed by its path relative to the root; any other keeps
        its ``file_path``.
        """
        from .ingest.sources import plan_root, root_of

        roots = {r for rel, loc in files if rel and loc and (r := root_of(loc, rel)) is not None}
        recorded = self.store.collection_root(collection)
        if roots and all(r.is_dir() for r in roots):
            plan = plan_root(recorded, sorted(roots), collection)
            if plan.change:
                renames = {p: plan.rename(p) for p in self.store.files(collection)} if plan.change == "widened" else {}
                self.store.set_collection_root(collection, str(plan.root), renames)
            recorded = str(plan.root)
        return [_under(recorded, loc or rel) or rel for rel, loc in files]

    def indexer(self, collection: str = "default", progress: Any = None, on_wait: Any = None,
                on_document: Any = None, stop: Any = None) -> Any:
        """An Indexer writing into this index."""
        from .ingest.indexer import Indexer

        return Indexer(
            self.store, self.embedder, self.config, collection=collection, progress=progress, on_wait=on_wait,
            on_document=on_document, stop=stop,
        )

    def index_paths(
        self, paths: Sequence[str | Path], collection: str = "default", progress: Any = None, on_wait: Any = None,
        on_document: Any = None, stop: Any = None,
    ) -> Any:
        """Index the files under ``paths`` incrementally (one run per file at a time). ``on_document``
        gets each document's ``Finished`` as it commits; once ``stop`` (a ``threading.Event``) is
        set, the run finishes the documents it started and stops (the rest wait for the next run)."""
        return self.indexer(collection, progress, on_wait, on_document, stop).index_paths(paths)


def _under(root: str | None, location: str | None) -> str | None:
    """``location``'s path relative to ``root`` (posix, NFC) when it is an absolute path under it."""
    from .text import nfc

    if root is None or location is None or not Path(location).is_absolute():
        return None
    place = Path(location).parent.resolve() / Path(location).name
    return nfc(place.relative_to(root).as_posix()) if place.is_relative_to(root) else None
