"""An in-process HTTP client for the API: real requests through the real WSGI app (middleware, token
authentication, throttles, views), on this thread and so on this thread's database connection.

Like Django's test client, it keeps Django from closing the connection at the end of each request
(`close_old_connections`), because the target runs a case inside one transaction that it rolls back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import httpx
from django.conf import settings
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections

# One line per in-process request would bury the suite's table; the product's own logs are unchanged.
logging.getLogger("httpx").setLevel(logging.WARNING)

_lock = threading.Lock()
_handler: WSGIHandler | None = None


def _app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    global _handler
    with _lock:
        if _handler is None:
            _handler = WSGIHandler()
    started = signals.request_started.disconnect(close_old_connections)
    finished = signals.request_finished.disconnect(close_old_connections)
    try:
        result = _handler(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()  # sends request_finished, without closing the connection
        return [body]
    finally:
        if started:  # put back only what was there (a test client may have taken them off already)
            signals.request_started.connect(close_old_connections)
        if finished:
            signals.request_finished.connect(close_old_connections)


def host() -> str:
    """A host name this deployment answers to (ALLOWED_HOSTS), so the request passes Django's host check."""
    for name in settings.ALLOWED_HOSTS:
        name = name.lstrip(".")
        if name and name != "*":
            return name
    return "localhost"


def client(token: str) -> httpx.Client:
    """A client that calls /api/v1/ as the token's principal, over https (so the production profile's
    redirect to https does not apply)."""
    return httpx.Client(
        transport=httpx.WSGITransport(app=_app),
        base_url=f"https://{host()}",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
