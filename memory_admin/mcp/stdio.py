"""The MCP server over stdio (`manage.py mcp`), with every line read by the API's guarded JSON reader first.

The SDK's stdio transport decodes the input with `errors="replace"` and parses each line with its own JSON reader:
a key named twice keeps its last value, a byte that is not UTF-8 becomes U+FFFD, and a line it cannot parse gets
no answer at all. Here the SDK's transport (`stdio_server`, through its public `stdin`/`stdout` parameters) reads
lines this module has checked with `lib.parsers.loads_guarded`, the reader of every other JSON door; a refused line
is answered with a JSON-RPC parse error (-32700) naming the reason (never a value), with the request's id when
one can be read from it.

Both channels are this module's: the wire out is a private copy of file descriptor 1, and descriptor 1 itself is
pointed at standard error while serving, so nothing else printed by the process can land between two messages.
One lock orders every write to the wire (the SDK's answers and these parse errors).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import IO, Any

import anyio
from mcp.server.stdio import stdio_server

from memory_admin.lib.parsers import BadJSON, loads_guarded
from memory_admin.mcp.http import PARSE_ERROR
from memory_admin.mcp.server import get_server


class _Wire:
    """The wire out: whole lines, one writer at a time, flushed after each."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._lock = anyio.Lock()

    async def write(self, text: str) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._write_line, text.encode("utf-8"))

    def _write_line(self, data: bytes) -> None:
        self._handle.write(data)
        self._handle.flush()

    async def flush(self) -> None:  # each write is flushed already
        return None


class _GuardedLines:
    """The lines of the wire in, as text, each checked by `loads_guarded`; a refused one is answered on the wire
    out and not passed on."""

    def __init__(self, handle: IO[bytes], wire: _Wire) -> None:
        self._lines = anyio.wrap_file(handle)
        self._wire = wire

    def __aiter__(self) -> AsyncIterator[str]:
        return self._checked()

    async def _checked(self) -> AsyncIterator[str]:
        async for raw in self._lines:
            if not raw.strip():
                continue
            try:
                loads_guarded(raw)
            except BadJSON as exc:
                await self._wire.write(parse_error(raw, str(exc)) + "\n")
                continue
            yield raw.decode("utf-8")  # loads_guarded decoded it already: valid UTF-8


def parse_error(raw: bytes, reason: str) -> str:
    """The JSON-RPC answer to a refused line: -32700 with the reason, and the line's id when it has a readable one
    (so the client matches the answer to its request), else null."""
    request_id: Any = None
    try:
        found = json.loads(raw.decode("utf-8"))  # last key wins here: only the id is taken, and only if plain
        if isinstance(found, dict) and isinstance(found.get("id"), str | int) and not isinstance(found["id"], bool):
            request_id = found["id"]
    except (ValueError, RecursionError):
        pass
    error = {"code": PARSE_ERROR, "message": f"Parse error: {reason}"}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


@contextmanager
def _wire_out() -> Iterator[IO[bytes]]:
    """A private copy of standard output for the protocol, with descriptor 1 sent to standard error meanwhile."""
    sys.stdout.flush()
    private = os.dup(1)
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with os.fdopen(private, "wb", buffering=0) as handle:
            yield handle
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


async def _serve() -> None:
    lowlevel = get_server()._lowlevel_server  # as the HTTP bridge reaches it
    with _wire_out() as out:
        wire = _Wire(out)
        stdin = _GuardedLines(sys.stdin.buffer, wire)
        # The transport iterates `stdin` and awaits `stdout.write`/`flush`: the two objects here do just that.
        async with stdio_server(stdin=stdin, stdout=wire) as (read_stream, write_stream):  # type: ignore[arg-type]
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def serve_stdio() -> None:
    """Serve MCP on stdin/stdout until stdin closes."""
    anyio.run(_serve)
