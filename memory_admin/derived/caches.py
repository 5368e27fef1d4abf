"""Cached answers, with a manifest of the records each key depends on (so a change finds its keys
without scanning the cache).

Keys are never built by joining user strings (PRODUCT.md, security rules): `cache_key` hashes a JSON
array of the whole identifying tuple, so ("pc:s", "t") and ("pc", "s:t") differ, and long identifiers
are never cut into a shared prefix. Each cached value also carries its tuple, and a read whose tuple does
not match is a miss, so even a key collision could not hand one fact's answer to another.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from memory_admin.derived.models import CacheEntry
from memory_admin.lib import outages
from memory_admin.memory import hooks
from memory_admin.memory.models import MemoryRecord

# Bumped when the key scheme or the cached envelope changes, so old entries are simply never read.
KEY_VERSION = 2

Part = str | int
# The shape `cache_key` produces; `store` refuses any other key, so no key is ever joined from user strings.
_KEY_SHAPE = re.compile(r"[a-z_]+:v[0-9]+:[0-9a-f]{64}")


def cache_key(kind: str, *parts: Part) -> str:
    """An unambiguous cache key for (`kind`, *parts): `kind:v2:` and the SHA-256 of the JSON array.

    JSON encodes each part with its type and its own quoting, so no two different tuples share an
    encoding; the digest has a fixed length, well under memcached's 250 characters and `CacheEntry.key`.
    """
    if not re.fullmatch(r"[a-z_]+", kind):
        raise ValueError(f"cache key kind must be lowercase letters, not {kind!r}")
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, str | int):
            raise TypeError(f"cache key parts are str or int, not {type(part).__name__}")
    encoded = json.dumps([kind, *parts], ensure_ascii=False, separators=(",", ":"))
    return f"{kind}:v{KEY_VERSION}:{hashlib.sha256(encoded.encode()).hexdigest()}"


def fact_key(tenant_id: int, project_id: str, subject_id: str, predicate: str) -> str:
    return cache_key("fact", tenant_id, project_id, subject_id, predicate)


def store(tenant_id: int, key: str, value: Any, records: list[MemoryRecord], *, ttl: int, kind: str = "answer") -> None:
    """Cache `value` under `key` and record which records it was built from.

    The manifest row is written before the cache key, so a key never exists without its manifest.
    `key` must come from `cache_key` (or a builder on it, such as `fact_key`).
    """
    if not _KEY_SHAPE.fullmatch(key):
        raise ValueError("cache keys are built by cache_key(), never by joining strings")
    if ttl <= 0 or not records:
        return
    with transaction.atomic():
        if MemoryRecord.all_objects.filter(pk__in=[r.pk for r in records]).removed().exists():
            return  # never fill a cache from a record a deletion has hidden
        entry, created = CacheEntry.objects.get_or_create(tenant_id=tenant_id, key=key, defaults={"kind": kind})
        if not created:
            CacheEntry.objects.filter(pk=entry.pk).update(evicted_at=None, created_at=timezone.now())
            entry.records.clear()
        entry.records.add(*records)
    # The cache server down: the answer is simply not cached (the manifest row says only where it would be).
    outages.quietly("cache fill", cache.set, key, value, ttl)


def evict(keys: list[str]) -> None:
    """Delete cached answers built on a change, now (so the change's own transaction reads miss them) and again
    after commit (in case a concurrent reader refilled one from the old committed value in between).

    With the cache server down the keys cannot be deleted, and a key left behind would serve the old answer
    once the server is back: the change is refused with 503 `service_unavailable` (its transaction rolls
    back). After commit, a failure is only logged: the keys were deleted a moment before."""
    try:
        cache.delete_many(keys)
    except outages.CACHE_ERRORS as exc:
        outages.cache_down("cache eviction", exc)
        raise outages.ServiceUnavailable(
            "The cache server cannot be reached, so answers cached from this fact cannot be evicted; "
            "nothing was changed. Try again shortly."
        ) from None
    outages.cache_up()
    transaction.on_commit(lambda: outages.quietly("cache eviction after commit", cache.delete_many, keys))


def answer_ttl(record: MemoryRecord) -> int:
    """Seconds an answer built on `record` may be served from the cache: the configured time, cut at the
    record's recheck (it becomes unverified then) and at the end of its validity (a scheduled successor
    takes over then, even if the valid-time transition task has not run yet)."""
    now = timezone.now()
    ttl = settings.FACT_CACHE_SECONDS
    for until in (record.recheck_after, record.valid_to):
        if until is not None:
            ttl = min(ttl, int((until - now).total_seconds()))
    return ttl


def cached_answer(tenant_id: int, project_id: str, subject_id: str, predicate: str) -> Any | None:
    """The cached answer for "now" to one fact, or None (a miss). Reads only: an entry whose identity does
    not match, or whose record a deletion has tombstoned since, is a miss."""
    hit = outages.quietly("cached answer", cache.get, fact_key(tenant_id, project_id, subject_id, predicate))
    if isinstance(hit, dict) and hit.get("key") == ["fact", tenant_id, project_id, subject_id, predicate]:
        value = hit.get("value")
        memory_id = value.get("memory_id") if isinstance(value, dict) else None
        if not hooks.hidden_memory_ids(tenant_id, [memory_id or ""]):
            return value
    return None


def remember_answer(
    tenant_id: int, project_id: str, subject_id: str, predicate: str, value: Any, record: MemoryRecord | None
) -> None:
    """Fill the cache with an answer just computed (the write a cached read makes, kept out of the read):
    cached until its record changes (evicted by propagation), its recheck falls due or its validity ends,
    whichever comes first. An answer built on no record (a dispute) is not cached."""
    if record is None:
        return
    identity = ["fact", tenant_id, project_id, subject_id, predicate]
    key = fact_key(tenant_id, project_id, subject_id, predicate)
    try:
        store(tenant_id, key, {"key": identity, "value": value}, [record], ttl=answer_ttl(record))
    except IntegrityError:
        pass  # another request filled the same key at the same moment; its manifest stands


def cached_fact(
    tenant_id: int,
    project_id: str,
    subject_id: str,
    predicate: str,
    compute: Callable[[], tuple[Any, MemoryRecord | None]],
) -> Any:
    """A fact answer from the cache, or computed and remembered (`cached_answer`, then `remember_answer`)."""
    hit = cached_answer(tenant_id, project_id, subject_id, predicate)
    if hit is not None:
        return hit
    value, record = compute()
    remember_answer(tenant_id, project_id, subject_id, predicate, value, record)
    return value
