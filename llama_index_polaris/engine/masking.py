"""Passwords kept out of what Polaris shows: status text and JSON, messages, errors.

One rule for every door. A ``postgresql://`` URI is shown with the password of its user info
(``user:pw@``) and of a ``password=`` parameter as ``***`` (``shown_target``). A message that
may repeat a password (an error psycopg or libpq raised, which can echo part of the URI) is
``scrub``-bed: the passwords of the URIs it concerns, ``PGPASSWORD``'s value and every
``password=...`` or ``user:pw@`` written in it are replaced. A passfile or a service file is
never read by Polaris (libpq reads them), so their contents cannot be shown.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any, Iterable

MASK = "***"
SERVER_SCHEMES = ("postgresql://", "postgres://")
_URI = re.compile(r"postgres(?:ql)?://[^\s'\"`<>]+", re.IGNORECASE)
_PASSWORD_PARAM = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\"`]+)", re.IGNORECASE)


def shown_target(target: Any) -> str:
    """``target`` as messages name it: a file's path as given, a URI with every password as ``***``."""
    text = str(target)
    if not text.lower().startswith(SERVER_SCHEMES):
        return text
    scheme, _, rest = text.partition("://")
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if userinfo.partition(":")[2]:
            netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    path, question, query = tail.partition("?")
    if question:
        query, hash_, fragment = query.partition("#")
        params = [f"{p.split('=', 1)[0]}={MASK}" if _key(p) == "password" and p.partition("=")[2] else p
                  for p in query.split("&")]
        tail = f"{path}?{'&'.join(params)}{hash_}{fragment}"
    return f"{scheme}://{netloc}{tail}"


def secrets(target: Any) -> list[str]:
    """The passwords written in ``target`` (a URI), as written and decoded."""
    text = str(target)
    if not text.lower().startswith(SERVER_SCHEMES):
        return []
    found: list[str] = []
    rest = text.partition("://")[2]
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    userinfo = rest[:end].rsplit("@", 1)[0] if "@" in rest[:end] else ""
    if ":" in userinfo:
        found.append(userinfo.split(":", 1)[1])
    query = rest[end:].partition("?")[2].partition("#")[0]
    found += [p.split("=", 1)[1] for p in query.split("&") if _key(p) == "password" and "=" in p]
    return [s for raw in found for s in {raw, urllib.parse.unquote(raw)} if s]


def scrub(message: str, targets: Iterable[Any] = ()) -> str:
    """``message`` with every password it may hold replaced by ``***``: those of ``targets``, of
    ``PGPASSWORD``, and any written as ``password=...`` or in a URI's user info."""
    known = [s for t in targets for s in secrets(t)]
    if os.environ.get("PGPASSWORD"):
        known.append(os.environ["PGPASSWORD"])
    text = _URI.sub(lambda m: shown_target(m.group(0)), message)
    text = _PASSWORD_PARAM.sub(lambda m: m.group(1) + MASK, text)
    for secret in sorted(set(known), key=len, reverse=True):
        if secret == MASK:
            continue
        if len(secret) >= 4:
            text = text.replace(secret, MASK)
        else:  # a short one only where it stands alone (not every "a" of the message)
            text = re.sub(rf"(?<![\w%]){re.escape(secret)}(?![\w%])", MASK, text)
    return text


def _key(param: str) -> str:
    return urllib.parse.unquote(param.split("=", 1)[0]).strip().lower()
