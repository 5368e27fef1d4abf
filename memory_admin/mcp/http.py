"""Streamable HTTP at `/mcp/`, inside the Django app, under WSGI (runserver in `make run`, gunicorn in production).

Why a bridge and not a separate ASGI server: the SDK's Streamable HTTP transport is an ASGI app, but the web
app is served by WSGI servers, and a second server on its own port would be one more process to start, secure
and document. In stateless mode with JSON answers the transport needs no long-lived stream: each POST is one
JSON-RPC message answered by one JSON body (and 2026-07-28 clients speak exactly that). So each request is
handed to a fresh stateless session manager of the SDK, run to completion in an event loop (`async_to_sync`)
while the WSGI thread waits; the tools' database work comes back to this same thread (`sync_to_async(
thread_sensitive=True)`), so it uses the request's connection and tenant. A GET (a server-sent event stream)
is answered 405 here, before the SDK (which would hold it open as an event stream); clients then work
without it.

Authentication happens here, once, before the SDK sees the request: the API's bearer token authentication
(accounts/auth.py). No token, or a bad, revoked or expired one → 401 in the API's error shape.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework import exceptions

from memory_admin.accounts.auth import BearerTokenAuthentication
from memory_admin.lib.parsers import BadJSON, loads_guarded
from memory_admin.mcp.server import Caller, acting_as, get_server

# The SDK logs each stateless manager's start and stop, and each transport's end, at INFO: lines for every
# request here, which say nothing.
for _name in ("mcp.server.streamable_http_manager", "mcp.server.streamable_http"):
    logging.getLogger(_name).setLevel(logging.WARNING)

PARSE_ERROR = -32700  # JSON-RPC's code for a body that is not the JSON it must be

# Headers of the SDK's answer that WSGI must not be given (hop-by-hop) or that Django sets itself.
_SKIPPED_HEADERS = {"content-length", "connection", "transfer-encoding"}


def _refused(code: str, detail: str, status: int) -> JsonResponse:
    response = JsonResponse({"code": code, "detail": detail}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="mcp"'
    return response


def _scope(request: HttpRequest) -> dict[str, Any]:
    host, _, port = request.get_host().partition(":")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1", "replace"),
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1", "replace")) for k, v in request.headers.items()],
        "client": (request.META.get("REMOTE_ADDR") or "", 0),
        "server": (host, int(port) if port.isdigit() else 80),
    }


async def _serve(caller: Caller, scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request through a fresh stateless session manager of the SDK; returns status, headers and body."""
    answered = anyio.Event()
    sent = False
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # the client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    lowlevel = get_server()._lowlevel_server  # the SDK's own in-process Client reaches it the same way
    manager = StreamableHTTPSessionManager(app=lowlevel, json_response=True, stateless=True)
    with acting_as(caller):
        async with manager.run():
            await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]
    answered.set()
    return status, headers, b"".join(chunks)


@csrf_exempt  # token authentication, no cookies: there is no session for a cross-site request to ride on
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    try:
        authenticated = BearerTokenAuthentication().authenticate(request)  # type: ignore[arg-type]
    except exceptions.AuthenticationFailed as exc:
        return _refused("authentication_failed", str(exc.detail), 401)
    if authenticated is None:
        return _refused("not_authenticated", "Send the agent token: Authorization: Bearer <token>.", 401)
    principal, token = authenticated
    if request.method != "POST":
        # Stateless: no server-sent event stream to open (a GET would hold the worker for ever), no session to end.
        refused = _refused("method_not_allowed", "This MCP endpoint answers POST only (stateless, JSON).", 405)
        refused["Allow"] = "POST"
        return refused
    if not getattr(principal, "tenant_id", None):
        return _refused("forbidden", "This principal belongs to no tenant.", 403)
    # The API's throttles count per principal and token, and per address (lib/throttling).
    request.user = principal
    request.auth = token  # type: ignore[attr-defined]
    try:
        body = request.body
    except RequestDataTooBig:
        return _refused("payload_too_large", "The request body is larger than this server accepts.", 413)
    try:
        # The API's guarded reader first: the SDK's parser keeps the last of a key named twice (a proxy or an
        # audit tool reading the first would see other arguments), and takes NUL, lone surrogates and any depth.
        loads_guarded(body)
    except BadJSON as exc:
        return JsonResponse(
            {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": f"Parse error: {exc}"}},
            status=400,
        )
    caller = Caller(authenticate=lambda: (principal, token), transport="http", request=request)
    status, headers, content = async_to_sync(_serve)(caller, _scope(request), body)
    response = HttpResponse(content, status=status)
    for name, value in headers:
        if name.lower() not in _SKIPPED_HEADERS:
            response[name] = value
    retry_after = getattr(request, "mcp_retry_after", None)
    if retry_after is not None:  # a throttled tool call: its result says retry_after, the header too
        response["Retry-After"] = str(retry_after)
    return response
