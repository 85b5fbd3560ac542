"""A document's sections as a reader asks for them: its outline, one section with its place
among its siblings, its whole indexed text, and the documents of a collection.

A section is what a search hit is (``Searcher._add_sections``): the chunks of one document
that share a heading path, in order; its text is the document's own text over their span
(``context.section_text``: the file's slice, byte for byte, when the document's text is stored;
else the chunks stitched, and the section says it is not ``exact``), cut to a token budget
(``context.bounded``). A section read here at a budget is therefore the ``section_text`` that a
hit on that section shows at the same budget, whichever door asks.

The outline is the heading tree. A heading path is the headings from the document's top
one down, joined by " > "; a section's parent is its path without the last heading. A
heading with no text of its own (a title followed at once by its first subsection: the
chunker puts the title line into that subsection's first chunk) has no chunks; the outline
still lists it, with no tokens of its own, as its subsections' parent, and reading it reads
its subsections. Sizes are in the embedding model's tokens (``count_tokens``): ``tokens``
for a section's own text, ``total_tokens`` with all its subsections'.

A document is named as a search scope names it, by its path under its collection's root or
by its id (``names.documents_named``); a path that two collections hold needs the
collection. A section is named by its heading path, or by its title or the end of its path
when that names one section only; an unknown name is an error suggesting close ones.

Reading (``load_document``) takes a connection in one snapshot; everything after it is pure
and counts tokens outside the store's lock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from ..errors import InputError, ScopeError
from ..search.context import bounded, runs, section_text
from .dialect import execute
from .names import close_names, collections_named, did_you_mean, documents_named, no_document
from .records import DocumentRecord, is_relative_path
from ..text import nfc, storable

SEPARATOR = " > "  # between the headings of a heading path (``ChunkSpan.heading_path_str``)
LISTED = 5  # sections an ambiguous name lists

CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class DocumentRef:
    """One stored document: its key, where it is and its state."""

    id: str
    path: str | None
    collection: str
    status: str
    error: str | None = None

    @property
    def name(self) -> str:
        """How a reader names it: its path under its collection's root, else its id."""
        return self.path or self.id


@dataclass(frozen=True)
class ChunkRow:
    node_id: str
    heading_path: str
    text: str
    start: int | None
    end: int | None
    ordinal: int = 0


@dataclass(frozen=True)
class LoadedDocument:
    """A document and all its chunks in document order, as read in one snapshot."""

    ref: DocumentRef
    chunks: tuple[ChunkRow, ...]
    node_id: str | None = None  # the chunk the document was found by, if it was named by node id
    source: str | None = None  # its indexed text (``document_texts``), None when not stored


@dataclass
class OutlineEntry:
    """One heading of a document's outline."""

    heading_path: str
    title: str
    depth: int  # 1 for the top heading
    parent: str | None
    tokens: int = 0  # its own text's
    total_tokens: int = 0  # with all its subsections'
    start_char: int | None = None  # its span in the document (its subsections' for a heading without text)
    end_char: int | None = None
    chunks: int = 0  # its own
    children: list[str] = field(default_factory=list)


@dataclass
class Outline:
    """A document's heading tree, entries in document order (each heading before its subsections)."""

    document: DocumentRef
    entries: list[OutlineEntry]

    @property
    def tokens(self) -> int:
        """The document's indexed text, in tokens (the sum of its sections')."""
        return sum(e.tokens for e in self.entries)


@dataclass
class Section:
    """One section's text and its place in the outline."""

    document: DocumentRef
    heading_path: str
    title: str
    depth: int
    text: str  # bounded by the budget (ends with ``context.ELLIPSIS`` when cut)
    tokens: int  # the whole text's, before the budget
    truncated: bool
    with_subsections: bool  # the text runs on through its subsections
    start_char: int | None
    end_char: int | None
    node_ids: list[str]
    position: int  # among its siblings, from 1
    siblings: int  # how many there are, itself included
    parent: str | None
    previous: str | None
    next: str | None
    children: list[str]
    exact: bool = True  # the text is the file's own (False: rebuilt from chunks, the document's text is not stored)


NOT_EXACT = ("rebuilt from its chunks: this document's text is not stored (indexed before Polaris kept it,"
             " or added as LlamaIndex nodes), so overlap or a re-fenced code block may differ from the file;"
             " `polaris index` stores it")


@dataclass(frozen=True)
class DocumentRow:
    """A document as a list of documents shows it."""

    id: str
    path: str | None
    collection: str
    status: str
    error: str | None
    chunks: int
    sections: int
    updated_at: str | None
    content_hash: str | None


@dataclass(frozen=True)
class DocumentPage:
    """Some documents of a list, ordered by collection and path, and how many there are in all."""

    total: int
    offset: int
    rows: list[DocumentRow]


# -- the document rows of both stores (Store and PgStore: get_document, documents, files) ------
DOCUMENT_COLUMNS = ("id, path, name, collection, status, error, content_hash, metadata, created_at, updated_at,"
                    " EXISTS (SELECT 1 FROM document_texts t WHERE t.document_id = documents.id)")


def document_records(conn: Any, *, document_id: str | None = None, collection: str | None = None,
                     as_added: bool = False) -> list[DocumentRecord]:
    """The document with id ``document_id``, or the documents of ``collection``, or all of them, by
    path (or id when there is none; equal ones by collection and id), or with ``as_added`` in the
    order they were first added (rowid: what ``polaris copy`` writes, so that the copy lists its
    documents as the source does). The same SQL in either dialect (``dialect.execute``)."""
    where, args = "", ()
    if document_id is not None:
        where, args = "WHERE id = ?", (storable(document_id),)
    elif collection is not None:
        where, args = "WHERE collection = ?", (nfc(collection),)
    order = "rowid" if as_added else "coalesce(path, id), collection, id"
    rows = execute(conn, f"SELECT {DOCUMENT_COLUMNS} FROM documents {where} ORDER BY {order}", args).fetchall()
    return [DocumentRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], json.loads(r[7]), r[8], r[9], bool(r[10]))
            for r in rows]


def text_batches(conn: Any, batch: int = 200) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """Every stored document text as ``("texts", [(document id, text), ...])`` batches by id: what
    ``export_rows`` gives after the documents, so that ``polaris copy`` carries them."""
    last = ""
    while True:
        rows = execute(conn, "SELECT document_id, text FROM document_texts WHERE document_id > ?"
                             " ORDER BY document_id LIMIT ?", (last, batch)).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        yield "texts", [(r[0], r[1]) for r in rows]


def without_text(conn: Any) -> int:
    """How many documents have no stored text (their sections are rebuilt from chunks, ``NOT_EXACT``);
    a document with no chunks (failed, or new and cut off mid-run by a crash) has nothing to rebuild
    and is not counted."""
    return execute(conn, "SELECT count(*) FROM documents d WHERE coalesce(d.status, '') <> 'failed' AND NOT EXISTS"
                         " (SELECT 1 FROM document_texts t WHERE t.document_id = d.id)"
                         " AND EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id)").fetchone()[0]


def files_of(docs: Sequence[DocumentRecord]) -> dict[str, DocumentRecord]:
    """The documents among ``docs`` that are files under their collection's root, by relative path."""
    return {d.path: d for d in docs if d.path and is_relative_path(d.path)}


def collection_root(conn: Any, collection: str) -> str | None:
    """The folder a collection's file paths are relative to (None: not set yet, or no such collection)."""
    row = execute(conn, "SELECT root FROM collections WHERE name = ?", (nfc(collection),)).fetchone()
    return row[0] if row else None


def collection_roots(conn: Any) -> dict[str, str | None]:
    """Every collection and its root, by name."""
    return dict(execute(conn, "SELECT name, root FROM collections ORDER BY name").fetchall())


def add_collection(conn: Any, collection: str) -> None:
    """Record ``collection`` (empty, no root) unless it is there (inside the caller's write)."""
    execute(conn, "INSERT INTO collections (name) VALUES (?) ON CONFLICT DO NOTHING", (nfc(collection),))


# -- reading ------------------------------------------------------------------------------
def find_document(conn: Any, name: str, collection: str | None = None) -> DocumentRef:
    """The document named ``name`` (path or id), in ``collection`` when given. A name the
    index lacks is a ScopeError (with close names); one that two collections hold needs one."""
    if not isinstance(name, str) or not name:
        raise InputError(f"a document is named by its path or id, got {name!r}.")
    stored = collections_named(conn, [collection]) if collection is not None else None
    ids, missing = documents_named(conn, [name])
    if missing:
        raise ScopeError({"document": no_document(conn, missing)})
    refs = [_ref(r) for r in execute(conn, 
        "SELECT id, path, collection, status, error FROM documents WHERE id IN (SELECT value FROM json_each(?))"
        " ORDER BY collection", (_json(ids),))]
    if stored is not None:
        inside = [r for r in refs if r.collection in stored]
        if not inside:
            elsewhere = ", ".join(f"'{r.collection}'" for r in refs)
            raise ScopeError({"document": f"no document '{name}' in collection '{collection}'; {elsewhere} has it."})
        refs = inside
    if len(refs) > 1:
        listed = ", ".join(f"'{r.collection}'" for r in refs)
        raise InputError(f"document '{name}' is in {len(refs)} collections ({listed}): name the collection.")
    return refs[0]


def load_document(conn: Any, name: str | None = None, collection: str | None = None,
                  node_id: str | None = None) -> LoadedDocument:
    """A document with its chunks: named by ``name`` (and ``collection``), or found by the node
    id of one of its chunks (which must then be in the document named, if one is)."""
    if node_id is not None:
        row = execute(conn, "SELECT document_id FROM chunks WHERE node_id = ?", (node_id,)).fetchone()
        if row is None:
            raise InputError(f"no chunk has node id {node_id!r}; node ids come from search hits"
                             " (node_id, section_chunks).")
        by_node = find_document(conn, row[0], collection)
        if name is not None and find_document(conn, name, collection).id != by_node.id:
            raise InputError(f"node {node_id!r} is a chunk of '{by_node.name}', not of '{name}'.")
        ref = by_node
    elif name is None:
        raise InputError("name a document (its path or id) or a node id.")
    else:
        ref = find_document(conn, name, collection)
    rows = execute(conn,
        "SELECT node_id, heading_path, text, start_char, end_char, ordinal FROM chunks WHERE document_id = ?"
        " ORDER BY ordinal", (ref.id,),
    ).fetchall()
    source = execute(conn, "SELECT text FROM document_texts WHERE document_id = ?", (ref.id,)).fetchone()
    return LoadedDocument(ref, tuple(ChunkRow(*r) for r in rows), node_id, source[0] if source else None)


MAX_ROW = 2**63 - 1  # the largest offset or limit either backend's integers hold


def list_documents(conn: Any, collection: str | Sequence[str] | None = None, prefix: str | None = None,
                   limit: int = 100, offset: int = 0, contains: str | None = None) -> DocumentPage:
    """The documents of ``collection`` (all when None) whose path (or id) starts with
    ``prefix`` (and, with ``contains``, holds that text in any case), ``limit`` of them from
    ``offset``, with their chunk and section counts.

    They come in the order of the ``(collection, path)`` index (documents without a path, added
    through LlamaIndex, first, as they were added), and only the chunks of the listed documents
    are counted (``chunks_document_ordinal``): without a filter a page of 20 out of 100k
    documents reads 20 index entries and their chunks, never the whole file."""
    for value, what, low in ((limit, "limit", 1), (offset, "offset", 0)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_ROW:
            raise InputError(f"{what} must be a whole number from {low} to {MAX_ROW}, got {value!r}.")
    if "\x00" in (prefix or "") + (contains or ""):  # no stored name holds a NUL (a Postgres text cannot)
        return DocumentPage(0, offset, [])
    where, args = ["1 = 1"], []
    if collection is not None:  # a name, or several
        where.append("d.collection IN (SELECT value FROM json_each(?))")
        args.append(_json(collections_named(conn, [collection] if isinstance(collection, str) else list(collection))))
    if prefix:
        where.append("substr(coalesce(d.path, d.id), 1, length(?)) = ?")
        args += [nfc(prefix), nfc(prefix)]
    if contains:
        where.append("instr(lower(coalesce(d.path, d.id)), lower(?)) > 0")
        args.append(nfc(contains))
    condition = " AND ".join(where)
    filtered = bool(prefix or contains)  # a filter reads every row once: the page and the count in one pass
    docs = execute(conn,
        "SELECT d.id, d.path, d.collection, d.status, d.error, d.updated_at, d.content_hash,"
        f" {'count(*) OVER ()' if filtered else 'NULL'} FROM documents d WHERE {condition}"
        # the order of documents_collection_path, no sort: SQLite's NULLs come first and equal keys go
        # by rowid anyway; Postgres's index is built so (postgres/schema.py, migration 2)
        " ORDER BY d.collection, d.path NULLS FIRST, d.rowid LIMIT ? OFFSET ?",
        [*args, limit, offset],
    ).fetchall()
    if filtered and docs:
        total = docs[0][-1]
    else:  # unfiltered: counted from an index
        total = execute(conn, f"SELECT count(*) FROM documents d WHERE {condition}", args).fetchone()[0]
    docs = [r[:-1] for r in docs]
    counts = dict.fromkeys((r[0] for r in docs), (0, 0))
    counts.update((r[0], (r[1], r[2])) for r in execute(conn,
        "SELECT document_id, count(*), count(DISTINCT heading_path) FROM chunks"
        " WHERE document_id IN (SELECT value FROM json_each(?)) GROUP BY document_id",
        (_json([r[0] for r in docs]),),
    ))
    return DocumentPage(total, offset, [DocumentRow(*r[:5], *counts[r[0]], *r[5:]) for r in docs])


def _ref(row: Sequence[Any]) -> DocumentRef:
    return DocumentRef(row[0], row[1], row[2], row[3], row[4] if row[3] in ("stale", "failed") else None)


def _json(values: Sequence[str]) -> str:
    return json.dumps(list(values))


# -- the outline (pure) ---------------------------------------------------------------------
def headings(heading_path: str) -> list[str]:
    """The headings of a heading path, top first."""
    return heading_path.split(SEPARATOR)


def build_outline(sections: Sequence[tuple[str, int, int | None, int | None, int]]) -> list[OutlineEntry]:
    """The heading tree of ``sections`` (heading path, tokens, start, end, chunks), given in
    document order: a heading missing from them (one without text) is added before its first
    subsection; totals and spans are summed up the tree."""
    entries: dict[str, OutlineEntry] = {}
    for path, tokens, start, end, chunks in sections:
        parts = headings(path)
        for depth in range(1, len(parts) + 1):
            key = SEPARATOR.join(parts[:depth])
            if key not in entries:
                parent = SEPARATOR.join(parts[: depth - 1]) if depth > 1 else None
                entries[key] = OutlineEntry(key, parts[depth - 1], depth, parent)
                if parent is not None:
                    entries[parent].children.append(key)
        own = entries[path]
        own.tokens, own.start_char, own.end_char, own.chunks = tokens, start, end, chunks
    for entry in reversed(list(entries.values())):  # subsections come after their parent: sum bottom-up
        kids = [entries[c] for c in entry.children]
        entry.total_tokens = entry.tokens + sum(k.total_tokens for k in kids)
        starts = [s for s in [entry.start_char, *(k.start_char for k in kids)] if s is not None]
        ends = [e for e in [entry.end_char, *(k.end_char for k in kids)] if e is not None]
        entry.start_char, entry.end_char = (min(starts) if starts else None), (max(ends) if ends else None)
    return list(entries.values())


def _groups(doc: LoadedDocument) -> dict[str, list[ChunkRow]]:
    """The document's chunks by heading path, sections in the order they first appear."""
    groups: dict[str, list[ChunkRow]] = {}
    for c in doc.chunks:
        groups.setdefault(c.heading_path, []).append(c)
    return groups


def _text(doc: LoadedDocument, chunks: Sequence[ChunkRow]) -> tuple[str, bool]:
    """(text, exact) of ``chunks`` of ``doc``: its stored text over their runs, else stitched."""
    spans = runs([(c.ordinal, c.start, c.end) for c in chunks])
    slices = None if spans is None or doc.source is None else [doc.source[s:e] for s, e in spans]
    return section_text(slices, [(c.text, c.start, c.end) for c in chunks])


def _span(chunks: Sequence[ChunkRow]) -> tuple[int | None, int | None]:
    starts = [c.start for c in chunks if c.start is not None]
    ends = [c.end for c in chunks if c.end is not None]
    return (min(starts) if starts else None), (max(ends) if ends else None)


def _sections(doc: LoadedDocument, count_tokens: CountTokens | None) -> list[tuple[str, int, int | None, int | None, int]]:
    out = []
    for path, chunks in _groups(doc).items():
        tokens = count_tokens(_text(doc, chunks)[0]) if count_tokens is not None else 0
        out.append((path, tokens, *_span(chunks), len(chunks)))
    return out


def outline_of(doc: LoadedDocument, count_tokens: CountTokens) -> Outline:
    """The document's outline, each section's size counted by ``count_tokens``."""
    return Outline(doc.ref, build_outline(_sections(doc, count_tokens)))


def resolve_heading(entries: Sequence[OutlineEntry], heading_path: str, document: str) -> OutlineEntry:
    """The entry ``heading_path`` names: its whole path, else the one entry whose title or
    path end it is (case aside); InputError naming the candidates or close paths otherwise."""
    if not isinstance(heading_path, str):
        raise InputError(f"heading_path must be a string, got {type(heading_path).__name__}.")
    wanted = nfc(heading_path).strip()
    by_path = {e.heading_path: e for e in entries}
    if wanted in by_path:
        return by_path[wanted]
    folded = wanted.casefold()
    matches = [e for e in entries if e.heading_path.casefold() == folded or e.title.casefold() == folded
               or e.heading_path.casefold().endswith(SEPARATOR + folded)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        listed = ", ".join(f"'{e.heading_path}'" for e in matches[:LISTED])
        raise InputError(f"'{heading_path}' names {len(matches)} sections of '{document}' ({listed}):"
                         " give the whole heading path.")
    titles: dict[str, str] = {}
    for e in entries:
        titles.setdefault(e.title, e.heading_path)
    near = [*close_names(wanted, list(by_path)), *(titles[t] for t in close_names(wanted, list(titles)))]
    hint = did_you_mean(list(dict.fromkeys(near))) or " Its outline lists them."
    raise InputError(f"no section '{heading_path}' in '{document}', which has {len(entries)}"
                     f" heading{'s' if len(entries) != 1 else ''}.{hint}")


def section_of(doc: LoadedDocument, heading_path: str | None, count_tokens: CountTokens, budget: int,
               subsections: bool = False) -> Section:
    """One section's text cut to ``budget`` tokens and its place among its siblings. The section
    is ``heading_path``, else the one holding the chunk the document was found by. Its own text,
    unless ``subsections`` (or it has no text of its own): then it runs on through them."""
    entries = build_outline(_sections(doc, None))
    if heading_path is None:
        if doc.node_id is None:
            raise InputError("name the section to read: its heading path (a search hit's heading_path, or one"
                             " from the document's outline) or the node id of one of its chunks.")
        heading_path = next(c.heading_path for c in doc.chunks if c.node_id == doc.node_id)
    entry = resolve_heading(entries, heading_path, doc.ref.name)
    own = [c for c in doc.chunks if c.heading_path == entry.heading_path]
    whole = subsections or not own
    inside = entry.heading_path + SEPARATOR
    chunks = [c for c in doc.chunks if c.heading_path == entry.heading_path or c.heading_path.startswith(inside)] \
        if whole else own
    full, exact = _text(doc, chunks)
    text = bounded(full, count_tokens, budget)
    family = [e.heading_path for e in entries if e.parent == entry.parent]
    i = family.index(entry.heading_path)
    start, end = _span(chunks)
    return Section(
        document=doc.ref, heading_path=entry.heading_path, title=entry.title, depth=entry.depth, text=text,
        tokens=count_tokens(full), truncated=text != full, with_subsections=whole, start_char=start, end_char=end,
        node_ids=[c.node_id for c in chunks], position=i + 1, siblings=len(family), parent=entry.parent,
        previous=family[i - 1] if i else None, next=family[i + 1] if i + 1 < len(family) else None,
        children=list(entry.children), exact=exact,
    )


def text_of(doc: LoadedDocument, count_tokens: CountTokens, budget: int) -> tuple[str, int, bool]:
    """The document's indexed text (its own text over all its chunks, front matter aside; stitched
    when not stored) cut to ``budget`` tokens: (text, tokens of the whole, whether it was cut)."""
    full, _exact = _text(doc, doc.chunks)
    text = bounded(full, count_tokens, budget)
    return text, count_tokens(full), text != full
