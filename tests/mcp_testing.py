"""Helpers for the MCP tests: a real `polaris mcp` process driven by the SDK's own client.

``McpSession`` holds one client session (``mcp.Client``: over stdio it starts the server
process itself; over HTTP it connects to a URL) open in a thread of its own, with its own
event loop, so a module-scoped fixture can keep it for many tests and a test calls it
like a function. ``http_server`` starts ``polaris mcp --http 127.0.0.1:0`` (or another
loopback address) and reads the address it announces.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Iterator

from mcp import Client, StdioServerParameters

POLARIS = str(Path(sys.executable).with_name("polaris"))
TIMEOUT = 120


def environment(project: Path) -> dict[str, str]:
    """The environment of a server or CLI run in ``project``: no user-wide polaris.toml."""
    return {**os.environ, "XDG_CONFIG_HOME": str(project / ".xdg")}


def stdio(project: Path, *args: str) -> StdioServerParameters:
    """How to start `polaris mcp ARGS` in ``project`` over stdio."""
    return StdioServerParameters(command=POLARIS, args=["mcp", *args], cwd=str(project), env=environment(project))


class McpSession:
    """One open client session of the SDK, in a thread; ``call`` and friends block until answered."""

    def __init__(self, server: StdioServerParameters | str, mode: str = "auto") -> None:
        self.server, self.mode = server, mode
        self.client: Any = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(TIMEOUT):
            raise TimeoutError(f"no MCP session with {server} within {TIMEOUT}s")
        if self._failed is not None:
            raise self._failed

    async def _main(self) -> None:
        try:
            async with Client(self.server, mode=self.mode) as client:
                self.client, self._loop, self._stop = client, asyncio.get_running_loop(), asyncio.Event()
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001  reported to the test that opened the session
            self._failed = exc
            self._ready.set()

    def run(self, work: Callable[[Any], Awaitable[Any]]) -> Any:
        """``await work(client)`` in the session's loop."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(work(self.client), self._loop).result(TIMEOUT)

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """The CallToolResult of ``tool``."""
        return self.run(lambda c: c.call_tool(tool, arguments or {}))

    def hits_at(self, query: str, ks: Iterable[int]) -> dict[int, list[tuple[str, float]]]:
        """The search tool's (node id, score) hits for ``query`` at each k."""
        out = {}
        for k in ks:
            result = self.call("search", {"query": query, "k": k})
            assert not result.is_error, result.content
            out[k] = [(h["node_id"], h["score"]) for h in result.structured_content["hits"]]
        return out

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(TIMEOUT)


def text_of(result: Any) -> str:
    """The text content of a tool result (one text block)."""
    assert len(result.content) == 1 and result.content[0].type == "text", result.content
    return result.content[0].text


def http_server(project: Path, *args: str, address: str = "127.0.0.1:0") -> Iterator[tuple[str, list[str]]]:
    """``polaris mcp --http ADDRESS ARGS`` in ``project``: yields (its URL, the lines it wrote on stderr so
    far and from then on), then stops it."""
    proc = subprocess.Popen([POLARIS, "mcp", "--http", address, *args], cwd=project, env=environment(project),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    url = None
    deadline = time.monotonic() + TIMEOUT
    assert proc.stderr is not None
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        found = re.search(r"MCP server at (http://\S+/mcp)", line)
        url = found.group(1) if found else None
    assert url, f"no address announced: {''.join(lines)!r}"
    drain = threading.Thread(target=lambda: [lines.append(x) for x in proc.stderr], daemon=True)  # type: ignore[union-attr]
    drain.start()
    try:
        yield url, lines
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
