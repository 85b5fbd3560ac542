"""Collections and documents by name, as a search scope names them; a name the index lacks
is a ``ScopeError`` saying so and what there is, never a silent empty list (#23).

Names are compared in NFC (``text.nfc``): a document first indexed from a macOS NFD
file name is found by the NFC spelling of its path and the other way round. A document
is named by its id or by its path under its collection's root.

What exists. A collection exists once something was written to it (its row in
``collections``), even when it holds no searchable document now: such a scope answers
an empty list. The one name that needs no row is ``default``, where documents go when
none is named, in a file that has no collection at all yet (a new file, or a LlamaIndex
store queried before its first ``add``): it reads as empty. Once a file has collections,
``default`` is a name like any other.

The message is bounded whatever the file holds: at most ``LISTED`` collection names, and
for documents their number and at most ``SUGGESTED`` close matches (same name in any
folder or case, then ``difflib`` over at most ``SUGGEST_POOL`` names: all of them in a small
file, those in the named folder in a larger one).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from .dialect import execute, where as _where
from .records import DEFAULT_COLLECTION
from ..errors import ScopeError
from ..text import is_valid, nfc, spellings

LISTED = 20  # collection names a message lists
SUGGESTED = 3  # close matches a message suggests
SUGGEST_POOL = 1_000  # names difflib compares against (~0.15 ms a name when they look alike)
CLOSE = 0.75  # difflib's similarity ratio for a suggestion (its default 0.6 offers 'e.md' for 'a.mdx')
CLOSER = 0.1  # and at most this far below the best one (paths share their folders' letters)


def collections_named(conn: Any, names: Sequence[str]) -> list[str]:
    """The stored names of the collections ``names`` (NFC aside), in order; a ScopeError names
    the ones the index does not have."""
    stored = [r[0] for r in execute(conn, "SELECT name FROM collections ORDER BY name")]
    by_form: dict[str, list[str]] = {}
    for name in stored:
        by_form.setdefault(nfc(name), []).append(name)
    found: dict[str, None] = {}
    missing = []
    for name in names:
        if nfc(name) in by_form:
            found.update(dict.fromkeys(by_form[nfc(name)]))
        elif not (stored == [] and nfc(name) == DEFAULT_COLLECTION):
            missing.append(name)
    if missing:
        raise ScopeError({"collection": _no_collection(missing, stored, _where(conn))})
    return list(found)


def documents_named(conn: Any, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(ids of the documents whose id or path is one of ``names``, NFC aside; the names no
    document has). Two collections may hold the same path: a name can stand for several."""
    forms: dict[str, set[str]] = {}
    for name in names:
        for form in spellings(name):
            if is_valid(form) and "\x00" not in form:  # what is stored is valid Unicode (``storable``):
                forms.setdefault(form, set()).add(name)  # a lone surrogate's escaped form (nfc) is the one to
                # look up; no stored name holds a NUL (a Postgres text cannot), so it is no document's
    keys = json.dumps(list(forms))
    rows = execute(conn, 
        "SELECT id, path FROM documents WHERE id IN (SELECT value FROM json_each(?))"
        " OR path IN (SELECT value FROM json_each(?))", (keys, keys),
    ).fetchall()
    matched = {n for doc_id, path in rows for key in (doc_id, path) for n in forms.get(key, ())}
    return list(dict.fromkeys(r[0] for r in rows)), [n for n in names if n not in matched]


def known_documents(conn: Any, names: Sequence[str]) -> list[str]:
    """The ids ``documents_named`` finds; a ScopeError names the names no document has."""
    ids, missing = documents_named(conn, names)
    if missing:
        raise ScopeError({"document": no_document(conn, missing)})
    return ids


def _no_collection(missing: Sequence[str], stored: Sequence[str], where: str) -> str:
    what = _quoted(missing, "collection")
    if not stored:
        return f"no {what} in {where}: nothing has been indexed into it yet."
    shown = ", ".join(f"'{n}'" for n in stored[:LISTED]) + (f" and {len(stored) - LISTED} more" if len(stored) > LISTED else "")
    hint = _hint([m for name in missing for m in _close(name, stored)])
    return f"no {what} in {where}, which has {len(stored)}: {shown}.{hint}"


def no_document(conn: Any, missing: Sequence[str]) -> str:
    """The sentence for ``missing`` document names: how many documents there are, close matches."""
    total = execute(conn, "SELECT count(*) FROM documents").fetchone()[0]
    what, where = _quoted(missing, "document"), _where(conn)
    if not total:
        return f"no {what} in {where}: it holds no documents yet."
    pool = [r[0] for r in execute(conn, "SELECT coalesce(path, id) FROM documents")]
    hint = _hint([m for name in missing for m in _close(name, pool)])
    return (f"no {what} in {where}, which holds {total:,} document{'s' if total != 1 else ''}"
            f" (a document is named by its id or its path under its collection's root).{hint}")


def close_names(name: str, pool: Sequence[str]) -> list[str]:
    """The names in ``pool`` close to ``name`` (at most ``SUGGESTED``), closest first."""
    return _close(name, pool)


def did_you_mean(matches: Sequence[str]) -> str:
    """`` Did you mean 'x' or 'y'?`` for ``matches`` ("" when there are none)."""
    return _hint(matches)


def _quoted(names: Sequence[str], kind: str) -> str:
    return f"{kind}{'s' if len(names) > 1 else ''} " + ", ".join(f"'{n}'" for n in names)


def _hint(matches: Sequence[str]) -> str:
    matches = list(dict.fromkeys(matches))[:SUGGESTED]
    if not matches:
        return ""
    quoted = [repr(m) for m in matches]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f" Did you mean {listed}?"


def _close(name: str, pool: Sequence[str]) -> list[str]:
    """Names in ``pool`` like ``name``: the same up to case, the same file name in another
    folder, then ``difflib``'s closest among at most ``SUGGEST_POOL`` of them."""
    key = nfc(name).casefold()
    folder, _, base = key.rpartition("/")
    folded = [p.casefold() for p in pool]  # stored names are NFC
    same = [p for p, f in zip(pool, folded) if f == key or f.rpartition("/")[2] == base]
    if len(pool) > SUGGEST_POOL:  # a large file: the names in the same folder, up to the bound
        pool = [p for p, f in zip(pool, folded) if f.rpartition("/")[0] == folder][:SUGGEST_POOL]
    import difflib  # here: a search that finds its names never loads it

    near = difflib.get_close_matches(name, pool, n=SUGGESTED, cutoff=CLOSE)
    ratios = [difflib.SequenceMatcher(None, name, m).ratio() for m in near]
    near = [m for m, r in zip(near, ratios) if r >= ratios[0] - CLOSER]  # not 'guide/tokens.md' beside 'guide/sessions.md'
    return list(dict.fromkeys([*same, *near]))[:SUGGESTED]
