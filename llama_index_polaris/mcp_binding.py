"""Where `polaris mcp --http` may listen, and for which hosts: checked before the MCP SDK loads.

Pure checks on the command's arguments (no SDK, no socket opened), so a refused bind is said at
once, not after the SDK's second of imports. ``mcp_server.http_security`` turns a ``Binding`` into
the SDK's DNS-rebinding settings.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Sequence

from .engine.errors import PolarisError

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")  # the names a server on this machine always answers for
HOST_NAME = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?")


@dataclass(frozen=True)
class Binding:
    """An HTTP bind that may be opened: the Host and Origin values served, and the notice to print
    (None on loopback)."""

    host: str
    port: int | None
    allowed_hosts: list[str]
    allowed_origins: list[str]
    notice: str | None


def parse_address(value: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` as (host, port); a port alone binds loopback."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise PolarisError(f"--http takes PORT or HOST:PORT (e.g. 127.0.0.1:8765), got {value!r}.")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def in_url(host: str) -> str:
    """``host`` as a URL (and a Host header) writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def host_name(value: str) -> str:
    """An ``--allow-host`` value as a Host header writes it: ``docs.example``, ``192.0.2.1``, ``[::1]``
    (a bare IPv6 address is bracketed), with a port when one is named (``docs.example:8443``)."""
    try:
        value = in_url(str(ipaddress.IPv6Address(value)))
    except ValueError:
        pass
    if not HOST_NAME.fullmatch(value):
        raise PolarisError("--allow-host takes a host name or address as clients write it in the URL (docs.example,"
                           f" 192.0.2.1, [::1], docs.example:8443), got {value!r}.")
    return value


def _patterns(name: str) -> tuple[list[str], list[str]]:
    """The Host and Origin values the SDK's check accepts for one host (any port unless it names one)."""
    hosts = [name] if re.search(r":[0-9]+$", name) else [name, f"{name}:*"]
    return hosts, [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]


def binding(host: str, allow_hosts: Sequence[str], *, port: int | None = None) -> Binding:
    """The bind of ``host``: requests must name, in Host (and Origin, when sent), a loopback name, a
    loopback ``host`` itself, or one of ``allow_hosts``; beyond loopback those must be named."""
    named = [host_name(h) for h in allow_hosts]
    local = is_loopback(host)
    shown = in_url(host)
    if not local and not named:
        example = socket.gethostname() if host in ("0.0.0.0", "::") else shown
        where = f"{shown}:{port}" if port is not None else shown
        raise PolarisError(
            f"--http {where} is reachable from other machines: name the hosts its clients will use with"
            f" --allow-host HOST (e.g. --allow-host docs.example --allow-host {example}); requests naming any"
            " other Host or Origin are refused (DNS-rebinding protection). To keep it on this machine, bind 127.0.0.1.")
    names = list(dict.fromkeys([*LOOPBACK, *([shown] if local else []), *named]))
    hosts, origins = ([p for n in names for p in _patterns(n)[i]] for i in (0, 1))
    notice = None if local else (
        f"listening on {shown}, reachable from other machines, without authentication; only requests for"
        f" {', '.join(names)} (Host, and Origin when sent) are served. Use 127.0.0.1 to keep it on this machine.")
    return Binding(host, port, hosts, origins, notice)


def http_binding(http: str | None, allow_hosts: Sequence[str]) -> Binding | None:
    """The bind `polaris mcp` was asked for (None: stdio), or the error that refuses it."""
    if http is None:
        if allow_hosts:
            raise PolarisError("--allow-host names the hosts an HTTP server answers for: use it with --http HOST:PORT.")
        return None
    host, port = parse_address(http)
    return binding(host, allow_hosts, port=port)
