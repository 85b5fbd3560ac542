"""The labelled questions `polaris tune` learns from: reading them, running them, writing the weights.

Two layouts:

- a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``), as
  `polaris eval` reads it: the corpus is indexed into the eval cache and a hit is graded
  by its document's id;
- a JSONL file of the user's own questions against their index, one per line::

      {"question": "how long does a token live", "path": "guide/auth.md", "heading": "Tokens"}
      {"question": "...", "relevant": [{"path": "a.md", "heading": "A > B", "grade": 2}, {"path": "b.md"}]}

  ``path`` is the document's path under its collection's root (as `polaris search`
  prints it); ``heading`` (optional) is the section's heading path or its last heading;
  without it any section of the document counts, once; ``grade`` defaults to 1.

Each question is asked once with the fixed fusion (``learned.EVERY``: weight 1 on ``fixed``,
0 on every other feature, so all are computed) and every section
of its first candidate pool is kept with its features and grade (``tune.Sample``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import InputError
from ..search import learned
from .fit import Sample

JSONL_HELP = ('each line is {"question": "...", "path": "docs/file.md", "heading": "optional heading"}'
              ' or {"question": "...", "relevant": [{"path": ..., "heading": ..., "grade": 1}, ...]}')


@dataclass(frozen=True)
class Label:
    """One relevant answer: a document (path or id) and, optionally, a section's heading."""

    path: str
    heading: str | None = None
    grade: int = 1

    def matches(self, document: str, document_id: str, heading_path: str) -> bool:
        """True when a hit of that document and heading path is this answer."""
        if self.path not in (document, document_id):
            return False
        return self.heading is None or heading_path == self.heading or heading_path.endswith(" > " + self.heading)


@dataclass(frozen=True)
class Question:
    """A labelled question."""

    text: str
    labels: tuple[Label, ...] = field(default_factory=tuple)


def read_jsonl(path: Path) -> list[Question]:
    """The questions of a JSONL labels file; a malformed line is an error naming it."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                out.append(_question(line, f"{path}:{n}"))
    if not out:
        raise InputError(f"{path}: no questions; {JSONL_HELP}.")
    return out


def _question(line: str, where: str) -> Question:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg}); {JSONL_HELP}.") from None
    if not isinstance(row, dict) or not isinstance(row.get("question"), str) or not row["question"].strip():
        raise InputError(f"{where}: no \"question\" text; {JSONL_HELP}.")
    given = row["relevant"] if "relevant" in row else [row]
    if not isinstance(given, list) or not given:
        raise InputError(f"{where}: \"relevant\" must be a non-empty list; {JSONL_HELP}.")
    return Question(row["question"].strip(), tuple(_label(g, where) for g in given))


def _label(g: Any, where: str) -> Label:
    if not isinstance(g, dict) or not isinstance(g.get("path"), str) or not g["path"]:
        raise InputError(f"{where}: each answer needs a \"path\" (the document as `polaris search` prints it); {JSONL_HELP}.")
    heading, grade = g.get("heading"), g.get("grade", 1)
    if heading is not None and (not isinstance(heading, str) or not heading.strip()):
        raise InputError(f"{where}: \"heading\" must be a heading path or a heading, got {heading!r}.")
    if isinstance(grade, bool) or not isinstance(grade, int) or grade < 1:
        raise InputError(f"{where}: \"grade\" must be a whole number of 1 or more, got {grade!r}.")
    return Label(g["path"], heading.strip() if heading else None, grade)


def beir_questions(beir: Any) -> list[Question]:
    """A BEIR split's labelled questions (a hit is graded by its document id)."""
    return [Question(beir.queries[qid], tuple(Label(d, None, g) for d, g in rels.items() if g > 0))
            for qid, rels in sorted(beir.qrels.items()) if qid in beir.queries and any(g > 0 for g in rels.values())]


def check_known(questions: Sequence[Question], documents: Iterable[str], source: str) -> None:
    """Every label names a document the index has, else an error saying which and what to do."""
    known = set(documents)
    missing = sorted({label.path for q in questions for label in q.labels} - known)
    if missing:
        shown = ", ".join(map(repr, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(f"{source}: the index has no document {shown}; label documents by their path as"
                         " `polaris search` prints it (relative to the collection's root), or index them first.")


def sample(searcher: Any, q: Question, pool: int) -> Sample:
    """One question asked with the fixed fusion: its first pool's sections as a ``Sample``."""
    hits = [h for h in searcher.search(q.text, top_k=4 * pool) if h.explain.pool == pool]
    rows, grades, labels = [], [], []
    for h in hits:
        match = next((i for i, lab in enumerate(q.labels) if lab.matches(h.document, h.document_id, h.heading_path)), -1)
        rows.append([h.explain.features[n] for n in learned.NAMES])
        grades.append(q.labels[match].grade if match >= 0 else 0)
        labels.append(match)
    x = np.array(rows, dtype=np.float64).reshape(-1, len(learned.NAMES))
    return Sample(x, np.array(grades, dtype=np.float64), np.array(labels, dtype=int),
                  tuple(float(lab.grade) for lab in q.labels))


def samples(index: Any, questions: Sequence[Question], progress: Callable[[int, int], None] | None = None) -> list[Sample]:
    """Every question run through ``index`` with the fixed fusion, its features kept."""
    from ..search.pipeline import Searcher

    cfg = index.config.replace(fusion_weights=learned.EVERY, mmr_lambda=1.0)
    searcher = Searcher(index.store, lambda t: index.embedder.embed_query(t), cfg, index.vector_cache, index.bm25_cache)
    searcher.max_top_k = 4 * cfg.candidate_pool
    out = []
    for i, q in enumerate(questions, start=1):
        out.append(sample(searcher, q, cfg.candidate_pool))
        if progress:
            progress(i, len(questions))
    return out


_TABLE = re.compile(r"^\[(polaris\.)?fusion_weights\][^\n]*\n(?:(?!\[)[^\n]*\n?)*", re.M)


def write_weights(path: Path, table: str) -> None:
    """Put ``table`` (a ``[fusion_weights]`` TOML table) into polaris.toml at ``path``, replacing
    the one there, keeping everything else (a file with a ``[polaris]`` table gets
    ``[polaris.fusion_weights]``)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    text = _TABLE.sub("", text)
    if re.search(r"^\[polaris\]", text, re.M):
        table = table.replace("[fusion_weights]", "[polaris.fusion_weights]", 1)
    text = text.rstrip("\n")
    path.write_text((text + "\n\n" if text else "") + table, encoding="utf-8")
