"""API throttles: per principal+token and per client address, in one scope per kind of work.

Scopes: `reads` (GET, HEAD, OPTIONS), `writes` (POST, PUT, PATCH, DELETE), `search` (`/search/`) and
`source_test` ("test this source", which makes the server fetch a canonical source). A view names a scope
other than the one its method gives with `throttle_scope` (a class attribute, or an `@action` keyword).
Rates come from `REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]` (`<scope>` per token, `<scope>_by_address` per
address), read on every request, so a changed setting applies at once (tests set tiny limits that way).

The count is a fixed window in the default cache (`cache.add` then `cache.incr`: atomic on Redis, locked
on locmem, good enough on the file cache, whose cull keeps the newest entries: `lib.filecache`), so it
costs one small key per window whatever the limit, and `Retry-After` is the time left in the window. A
refused request still counts: hammering stays refused.

When the cache cannot be reached (Redis down), the throttles fail open: the request is let through uncounted,
the outage is logged once and every uncounted request counted (`lib.outages`); counting resumes with the
first call the cache answers. A throttle is a guard against overuse, not the truth: refusing every request
because the counter is away would turn a cache outage into an outage of the whole API.
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace
from typing import Any, cast

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from memory_admin.lib import outages

READS, WRITES, SEARCH, SOURCE_TEST = "reads", "writes", "search", "source_test"
SCOPES = (READS, WRITES, SEARCH, SOURCE_TEST)

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def client_address(request: HttpRequest) -> str:
    """The address a request came from: REMOTE_ADDR, or, behind `TRUSTED_PROXY_COUNT` proxies that each
    append to X-Forwarded-For, the address the outermost trusted proxy saw. The header is never believed
    by default: any client can send one, and trusting it would let each request pick its own address."""
    remote = str(request.META.get("REMOTE_ADDR") or "")
    proxies = int(getattr(settings, "TRUSTED_PROXY_COUNT", 0) or 0)
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if proxies <= 0 or not forwarded:
        return remote
    hops = [hop.strip() for hop in str(forwarded).split(",") if hop.strip()]
    if not hops:
        return remote
    return hops[-min(proxies, len(hops))]


def parse_rate(rate: str) -> tuple[int, int]:
    """`600/min` -> (600, 60): requests allowed per window of so many seconds."""
    try:
        count, period = rate.split("/")
        return int(count), _PERIODS[period.strip()[0]]
    except (ValueError, KeyError, IndexError):
        raise ImproperlyConfigured(f"Throttle rate {rate!r}: use a number per s, min, hour or day (600/min)") from None


def scope_of(request: Request, view: Any) -> str:
    explicit = getattr(view, "throttle_scope", None)
    if explicit:
        return str(explicit)
    return READS if request.method in SAFE_METHODS else WRITES


class ThrottleScoped:
    """Mixin for viewsets: gives the class the `throttle_scope` attribute an `@action(throttle_scope=...)` sets
    (DRF accepts an action keyword only for an attribute the class has); `None` means "by method"."""

    throttle_scope: str | None = None


class _WindowThrottle(BaseThrottle):
    kind = ""
    rate_suffix = ""

    def __init__(self) -> None:
        self._wait: float | None = None

    def ident(self, request: Request) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: Any) -> bool:
        ident = self.ident(request)
        if ident is None:
            return True
        scope = scope_of(request, view)
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(scope + self.rate_suffix)
        if not isinstance(rate, str) or not rate:
            return True  # no rate configured for this scope and key: not throttled
        limit, duration = parse_rate(rate)
        now = time.time()
        window = int(now // duration)
        key = f"throttle:{self.kind}:{scope}:{duration}:{window}:{ident}"
        try:
            count = self._incr(key, duration)
        except outages.CACHE_ERRORS as exc:
            outages.cache_down("throttle", exc)
            return True  # fail open: see the module docstring
        outages.cache_up()
        if count <= limit:
            return True
        self._wait = (window + 1) * duration - now
        return False

    @staticmethod
    def _incr(key: str, duration: int) -> int:
        # The key outlives its window by a little, so a slow request at the edge still finds it.
        if cache.add(key, 1, timeout=duration + 5):
            return 1
        try:
            return int(cache.incr(key))
        except ValueError:  # expired between add and incr: start again
            cache.add(key, 1, timeout=duration + 5)
            return 1

    def wait(self) -> float | None:
        return None if self._wait is None else max(1.0, math.ceil(self._wait))


class TokenRateThrottle(_WindowThrottle):
    """Per principal and credential: each agent token has its own budget; a person's session has one too."""

    kind = "token"
    rate_suffix = ""

    def ident(self, request: Request) -> str | None:
        user = request.user
        if user is None or not getattr(user, "is_authenticated", False):
            return None
        token = getattr(request, "auth", None)  # a plain Django request (a dashboard page) has none: a session
        pk = getattr(token, "pk", None)
        credential = f"t{pk}" if pk is not None else "session"
        return f"{user.pk}:{credential}"


class AddressRateThrottle(_WindowThrottle):
    """Per client address (see `client_address`), whoever is signed in or not."""

    kind = "addr"
    rate_suffix = "_by_address"

    def ident(self, request: Request) -> str | None:
        # Addresses can hold ':' (IPv6): the key is only ever compared whole, so that is harmless.
        return client_address(request) or "unknown"


def throttle_wait(request: HttpRequest, scope: str) -> float | None:
    """The API's throttles of `scope` applied to a request outside DRF (a dashboard page doing the same work,
    "test this source"): the same classes, rates and counters, so the page and the API share one budget.
    None when allowed, else the seconds until the longest refusing window ends (for Retry-After)."""
    view = SimpleNamespace(throttle_scope=scope)
    waits = []
    for throttle_class in cast("list[type[BaseThrottle]]", api_settings.DEFAULT_THROTTLE_CLASSES):
        throttle = throttle_class()
        if not throttle.allow_request(request, view):  # type: ignore[arg-type]
            waits.append(throttle.wait() or 1.0)
    return max(waits) if waits else None
