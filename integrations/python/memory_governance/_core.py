"""What the sync and async clients share: each API call as data (`Call`), the mapping of an answer to a
result or an exception, the retry rule, and cursor pagination. The clients only move bytes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs, urlsplit

import httpx

from memory_governance.errors import ERRORS_BY_CODE, ERRORS_BY_STATUS, ApiError

T = TypeVar("T")

API_PREFIX = "/api/v1/"
DEFAULT_TIMEOUT = 10.0


def _as_is(data: Any) -> Any:
    return data


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request: method, path under /api/v1/, query parameters, JSON body, and how to read the
    answer (`parse` maps the decoded JSON to the typed result)."""

    method: str
    path: str
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None
    parse: Callable[[Any], T] = _as_is

    @property
    def idempotent(self) -> bool:
        return self.method in ("GET", "HEAD", "OPTIONS")


@dataclass(frozen=True)
class RetryPolicy:
    """Retries on connection errors and on 503 only — never on a 4xx (409 and 428 are answers the
    caller must act on; retrying them would turn compare-and-swap into last-writer-wins). A write is
    retried after a connection error only when the request never reached the server (connect errors)."""

    attempts: int = 3  # tries in all, the first included
    backoff: float = 0.2  # seconds before the 2nd try, doubled for each next one
    max_delay: float = 5.0  # cap on a server's Retry-After

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        if response is not None and (after := response.headers.get("Retry-After")):
            try:
                return min(float(after), self.max_delay)
            except ValueError:
                pass
        return float(min(self.backoff * (2 ** (attempt - 1)), self.max_delay))

    def retry_error(self, call: Call[Any], exc: httpx.TransportError, attempt: int) -> bool:
        if attempt >= self.attempts:
            return False
        never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        return never_sent or call.idempotent

    def retry_response(self, response: httpx.Response, attempt: int) -> bool:
        return response.status_code == 503 and attempt < self.attempts


def clean(params: Mapping[str, Any]) -> dict[str, Any]:
    """Query parameters without the unset ones; datetimes as ISO 8601 (they must carry an offset)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = iso(value) if isinstance(value, datetime) else value
    return out


def iso(value: datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError("Datetimes sent to the API need an offset (e.g. datetime.now(timezone.utc)).")
    return value.isoformat()


def request_kwargs(call: Call[Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"params": clean(call.params)}
    if call.body is not None:
        kwargs["content"] = json.dumps(call.body, default=_json_default)
        kwargs["headers"] = {"Content-Type": "application/json"}
    return kwargs


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def url_of(call: Call[Any]) -> str:
    return call.path if call.path.startswith(("http://", "https://", "/")) else API_PREFIX + call.path


def result(call: Call[T], response: httpx.Response) -> T:
    """The typed result of a 2xx answer, else the exception its error code names."""
    if response.is_success:
        return call.parse(response.json() if response.content else None)
    raise error_of(response)


def error_of(response: httpx.Response) -> ApiError:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or "code" not in payload:
        code = "service_unavailable" if response.status_code == 503 else f"http_{response.status_code}"
        payload = {"code": code, "detail": response.text[:500] or response.reason_phrase}
    if response.headers.get("Retry-After"):
        payload["_retry_after"] = response.headers["Retry-After"]
    code = str(payload["code"])
    cls = ERRORS_BY_CODE.get(code) or ERRORS_BY_STATUS.get(response.status_code, ApiError)
    return cls(response.status_code, code, str(payload.get("detail", "")), payload)


def next_page(call: Call[Any], page: Mapping[str, Any]) -> Call[Any] | None:
    """The call for the page after `page` of a cursor-paginated list (None after the last one)."""
    link = page.get("next")
    if not link:
        return None
    query = {k: v[-1] for k, v in parse_qs(urlsplit(link).query).items()}
    return Call("GET", call.path, {**call.params, **query}, parse=call.parse)


def headers(token: str, user_agent: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json", "User-Agent": user_agent}
