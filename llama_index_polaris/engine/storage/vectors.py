"""What a valid vector is, decided once for every door.

A vector can be stored and searched with when it has the index's size, every component
is a finite number (no NaN, no infinity) and its length lies between ``MIN_NORM`` and
``MAX_NORM``: a vector of length zero has no direction, and one much shorter or longer
than 1 under- or overflows the float32 arithmetic of sqlite-vec's cosine. For any of these
vec0 answers a NULL (NaN) distance, and NaN distances also upset its top-k selection: one
such row used to take vector search down for the whole file.

- Writes refuse them (``check``): the store checks every vector it writes (``Store``'s
  upserts: `polaris index`, ``PolarisVectorStore.add``, any other door), before anything
  is written, naming the node.
- Queries refuse them (``check_query``), whoever embedded the query.
- Reads skip them (``decode``, ``decode_rows``): a stored value that is not a valid vector
  (written by raw SQL, another tool, or an older Polaris) is never compared, and ``scan``
  names every such row for ``polaris status --check``.

Stored vectors are little-endian float32 blobs (``store.to_blob``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import VectorError

MIN_NORM = 1e-15  # shorter: its squared components underflow float32 (cosine needs their sum > 0)
MAX_NORM = 1e15  # longer: its dot products overflow float32
SCAN_BATCH = 1_000  # rows read per statement by ``scan``


def problem(vector: np.ndarray, dim: int | None = None) -> str | None:
    """What is wrong with one float32 vector, as the end of a sentence ("has NaN values"), or None."""
    v = np.asarray(vector)
    if v.ndim != 1 or v.shape[0] == 0:
        return "is not a list of numbers"
    if dim is not None and v.shape[0] != dim:
        return f"has {v.shape[0]} dims, but this index holds {dim}-dim vectors"
    if np.isnan(v).any():
        return "has NaN values"
    if np.isinf(v).any():
        return "has infinite values"
    norm = float(np.linalg.norm(v.astype(np.float64)))
    if norm == 0.0:
        return "is all zeros"
    if norm < MIN_NORM:
        return f"has a length of {norm:.1e}, too close to zero to compare by cosine (at least {MIN_NORM:.0e})"
    if norm > MAX_NORM:
        return f"has a length of {norm:.1e}, too large to compare by cosine (at most {MAX_NORM:.0e})"
    return None


def valid_rows(matrix: np.ndarray) -> np.ndarray:
    """A boolean mask of the rows of a float32 matrix that are valid vectors (see ``problem``)."""
    m = np.asarray(matrix)
    if m.ndim != 2 or m.shape[1] == 0:
        return np.zeros(len(m), dtype=bool)
    finite = np.isfinite(m).all(axis=1)
    if not finite.all():
        m = np.where(finite[:, None], m, 0)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float64))  # no float64 copy of the matrix
    return finite & (norms >= MIN_NORM) & (norms <= MAX_NORM)


def as_matrix(vectors: Any, what: str = "the vectors") -> np.ndarray:
    """``vectors`` (a matrix, or a sequence of equal-sized sequences of numbers) as float32 rows."""
    try:
        m = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise VectorError(f"{what} must be lists of numbers of one size ({exc}).") from None
    if m.ndim != 2:
        raise VectorError(f"{what} must be lists of numbers of one size.")
    return m


def check(vectors: Any, names: Sequence[str], dim: int | None = None) -> np.ndarray:
    """``vectors`` as float32 rows, one per entry of ``names`` ("node 'x'"), each a valid vector
    of ``dim`` (any one size when None); else VectorError naming the first bad one."""
    if dim is not None and not isinstance(vectors, np.ndarray):
        vectors = list(vectors)
        for name, v in zip(names, vectors):
            size = np.size(v)
            if size != dim:
                raise VectorError(f"the embedding of {name} has {size} dims, but this index holds {dim}-dim vectors;"
                                  " embed it with the index's model. Nothing was written.")
    m = as_matrix(vectors, "embeddings")
    if len(m) != len(names):
        raise VectorError(f"{len(names)} nodes but {len(m)} vectors.")
    if len(m) == 0:
        return m
    bad = np.flatnonzero(~valid_rows(m)) if dim is None or m.shape[1] == dim else [0]
    if len(bad):
        i = int(bad[0])
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise VectorError(
            f"the embedding of {names[i]}{more} {problem(m[i], dim)}: such a vector cannot be compared with any"
            " other, so nothing was written. Embed its text again with the index's model and add it again."
        )
    return m


def check_query(vector: Any, dim: int | None, model_id: str | None = None, path: str | None = None) -> np.ndarray:
    """A query vector as float32, refused (VectorError) unless it is a valid vector of ``dim``."""
    try:
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise VectorError(f"the query vector must be a list of numbers ({exc}).") from None
    model = model_id or "the index's model"
    if dim is not None and v.shape[0] != dim:
        raise VectorError(
            f"the query vector has {v.shape[0]} dims but {path or 'the index'} holds {dim}-dim vectors of"
            f" {model}; embed the query with that model."
        )
    wrong = problem(v)
    if wrong is not None:
        raise VectorError(f"the query vector {wrong}: such a vector is no nearer to one chunk than to another."
                          f" Embed the query text with {model} again.")
    return v


def stored(value: Any) -> np.ndarray | None:
    """A stored value as it was written, when it is a float32 blob (None otherwise): what
    ``get_nodes`` gives back, valid or not."""
    if not isinstance(value, (bytes, memoryview)) or len(value) % 4:
        return None
    return np.frombuffer(value, dtype="<f4")


def decode(value: Any, dim: int | None) -> np.ndarray | None:
    """A stored value as a vector to compare with, or None when it is not a valid vector of ``dim``."""
    v = stored(value)
    if v is None or problem(v, dim) is not None:
        return None
    return v


def decode_rows(ids: Sequence[int], values: Sequence[Any], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of stored ``values`` that are valid vectors of ``dim``: (their ids, a float32 matrix)."""
    size = 4 * dim
    keep = [i for i, v in enumerate(values) if isinstance(v, (bytes, memoryview)) and len(v) == size]
    if not keep:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32)
    found = np.fromiter((ids[i] for i in keep), dtype=np.int64, count=len(keep))
    matrix = np.frombuffer(b"".join(values[i] for i in keep), dtype="<f4").reshape(len(keep), dim)
    ok = valid_rows(matrix)
    return (found, matrix) if ok.all() else (found[ok], matrix[ok])


# -- finding the rows search skips (polaris status --check) -------------------------------------
@dataclass(frozen=True)
class BadVector:
    """A stored row vector search skips: where it is and what is wrong with it."""

    chunk_id: int
    node_id: str | None
    document: str | None
    table: str  # "chunks" (chunks.embedding) or "chunks_vec"
    problem: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line for people."""
        node = f"node {self.node_id}" if self.node_id else "no chunk"
        where = f", {self.document}" if self.document else ""
        return f"chunk {self.chunk_id} ({node}{where}): {self.table} {self.problem}"


def stored_problem(value: Any, dim: int) -> str | None:
    """What is wrong with a stored ``chunks.embedding`` value, or None for a valid vector of ``dim``."""
    if value is None:
        return "holds no vector (NULL): vector search cannot find it, BM25 still does"
    if isinstance(value, str):
        return "holds text, not a float32 blob"
    if not isinstance(value, (bytes, memoryview)):
        return f"holds a {type(value).__name__}, not a float32 blob"
    if len(value) != 4 * dim:
        return f"holds {len(value)} bytes, not the {4 * dim} of a {dim}-dim float32 vector"
    wrong = problem(np.frombuffer(value, dtype="<f4"))
    return None if wrong is None else f"holds a vector that {wrong}"


def scan(conn: Any, dim: int) -> Iterator[BadVector]:
    """Every row vector search skips: chunks whose ``embedding`` is not a valid vector of
    ``dim``, and ``chunks_vec`` rows that are missing, invalid, different from their chunk's
    vector, or left without a chunk. Reads the file in batches, in chunk id order."""
    last = -(2**63)
    while True:
        rows = conn.execute(
            "SELECT c.id, c.node_id, coalesce(d.path, c.document_id), c.embedding, v.embedding, v.rowid IS NOT NULL"
            " FROM chunks c LEFT JOIN documents d ON d.id = c.document_id"
            " LEFT JOIN chunks_vec v ON v.rowid = c.id WHERE c.id > ? ORDER BY c.id LIMIT ?",
            (last, SCAN_BATCH),
        ).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        for chunk_id, node_id, document, value, indexed, present in rows:
            wrong = stored_problem(value, dim)
            if wrong is not None:
                yield BadVector(chunk_id, node_id, document, "chunks.embedding", wrong)
                continue
            if not present:
                yield BadVector(chunk_id, node_id, document, "chunks_vec",
                                "has no row for it: exact vector search cannot find it")
            elif bytes(indexed) != bytes(value):
                bad = stored_problem(indexed, dim)
                yield BadVector(chunk_id, node_id, document, "chunks_vec",
                                bad or "holds another vector than chunks.embedding")
    orphans = conn.execute(
        "SELECT v.rowid FROM chunks_vec v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.rowid)"
        " ORDER BY v.rowid"
    ).fetchall()
    for (rowid,) in orphans:
        yield BadVector(rowid, None, None, "chunks_vec", "has a row for a chunk that does not exist")


def report(conn: Any, dim: int, limit: int = 100) -> dict[str, Any]:
    """``scan`` as a JSON-ready report: how many rows search skips and the first ``limit``, named."""
    found = list(scan(conn, dim))
    return {"skipped": len(found), "rows": [b.to_dict() for b in found[:limit]]}
