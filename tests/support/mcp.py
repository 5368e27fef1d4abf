"""The MCP server through the official SDK's own client: a session over Streamable HTTP or over stdio, run to its
end, and the parts of a tool's answer."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from tests.support import DEADLINE, ROOT
from tests.support.celery_worker import _test_database_url

TOOLS = {
    "remember",
    "recall",
    "recall_as_of",
    "history",
    "search_memory",
    "list_conflicts",
    "pending_notices",
    "acknowledge_notice",
    "request_forget",
}
FACT = {**DEADLINE}


@asynccontextmanager
async def over_http(base_url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(f"{base_url}/mcp/", http_client=http)) as client:
            yield client


@asynccontextmanager
async def over_stdio(token: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--token", token],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": _test_database_url()},
    )
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


def run[T](session: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(session())  # type: ignore[arg-type]


def data(result: CallToolResult) -> dict[str, Any]:
    """The structured content, which the second text block carries as JSON too (for clients without it)."""
    assert result.structured_content is not None
    assert json.loads(result.content[1].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


def summary(result: CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


REMEMBER = {
    **FACT,
    "value": "2026-10-30T17:00+09:00",
    "source_ref": "task-system:project-a/task-proposal-017",
    "source_revision": "r17",
    "valid_from": "2026-10-20T09:00:00+09:00",
}
