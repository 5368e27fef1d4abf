"""A service the product depends on is down (the cache server, the database): how each door degrades.

- The cache (Redis, or the file cache) holds throttle counts and cached fact answers, nothing that is the
  truth. When it cannot be reached, the throttles let requests through (fail open), a cached answer is a miss,
  and filling the cache is skipped; a write that must evict a cached answer, which it cannot do with the cache
  down, is refused with 503 `service_unavailable` and `Retry-After` (nothing of it applied), so no stale
  answer can outlive the outage. `cache_down` logs the first failure of an outage once, counts every one, and
  `cache_up` logs the recovery once.
- Anything else that still fails on an unreachable cache or database is answered 503 `service_unavailable`
  with `Retry-After` by the 500 handler (`memory_admin.http_errors.server_error`, through `unavailable`),
  never 500: the client retries (the Python client's RetryPolicy does).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import InterfaceError, OperationalError

from memory_admin.lib.errors import DomainError

log = logging.getLogger(__name__)

# Seconds a client is told to wait before trying again while a dependency is down.
RETRY_AFTER_SECONDS = 5


def _cache_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from redis import exceptions as redis_errors

        errors += [redis_errors.ConnectionError, redis_errors.TimeoutError, redis_errors.BusyLoadingError]
    except ImportError:  # pragma: no cover - redis is a dependency; the embedded default does not use it
        pass
    try:
        from django_redis.exceptions import ConnectionInterrupted

        errors.append(ConnectionInterrupted)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


# What a cache call raises when the cache server cannot be reached (django-redis wraps redis' errors in
# ConnectionInterrupted; the file cache raises OSError subclasses such as ConnectionError only on network disks).
CACHE_ERRORS: tuple[type[BaseException], ...] = _cache_errors()
DATABASE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)


class ServiceUnavailable(DomainError):
    """A dependency is down and this change cannot be made safely now; nothing of it was applied."""

    code = "service_unavailable"
    status = 503
    retry_after = RETRY_AFTER_SECONDS


class _CacheHealth:
    """Per process: whether the cache is failing now, and how many calls failed since the process started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.down = False
        self.failures = 0

    def failed(self, where: str, exc: BaseException) -> None:
        with self.lock:
            self.failures += 1
            first = not self.down
            self.down = True
        if first:  # once per outage; the exception's class only (its message may carry the server's address)
            log.warning("cache unreachable (%s: %s); degrading until it answers again", where, type(exc).__name__)

    def answered(self) -> None:
        if not self.down:
            return
        with self.lock:
            was_down, self.down = self.down, False
        if was_down:
            log.warning("cache reachable again after %d failed calls in this process", self.failures)


CACHE_HEALTH = _CacheHealth()


def cache_down(where: str, exc: BaseException) -> None:
    """Record that a cache call in `where` failed because the cache is unreachable (logged once per outage)."""
    CACHE_HEALTH.failed(where, exc)


def cache_up() -> None:
    """Record that a cache call succeeded (ends a logged outage)."""
    CACHE_HEALTH.answered()


def cache_failures() -> int:
    """Cache calls that failed on an unreachable cache in this process since it started."""
    return CACHE_HEALTH.failures


def unavailable(exc: BaseException | None) -> str | None:
    """Which dependency `exc` says is unreachable: "cache", "database", or None (a real failure)."""
    if exc is None:
        return None
    if isinstance(exc, CACHE_ERRORS):
        return "cache"
    if isinstance(exc, DATABASE_ERRORS):
        return "database"
    return None


def quietly(where: str, call: Any, *args: Any) -> Any:
    """Run a cache call whose failure only costs a cache miss or a skipped fill: None when the cache is down."""
    try:
        result = call(*args)
    except CACHE_ERRORS as exc:
        cache_down(where, exc)
        return None
    cache_up()
    return result
