"""Cached answers, with a manifest of the records each key depends on (so a change finds its keys
without scanning the cache)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from deletion import tombstones
from memory_admin.derived.models import CacheEntry
from memory_admin.memory.models import MemoryRecord


def fact_key(tenant_id: int, project_id: str, subject_id: str, predicate: str) -> str:
    return f"fact:{tenant_id}:{project_id}:{subject_id}:{predicate}"[:250]


def store(tenant_id: int, key: str, value: Any, records: list[MemoryRecord], *, ttl: int, kind: str = "answer") -> None:
    """Cache `value` under `key` and record which records it was built from.

    The manifest row is written before the cache key, so a key never exists without its manifest.
    """
    if ttl <= 0 or not records:
        return
    with transaction.atomic():
        if MemoryRecord.all_objects.filter(pk__in=[r.pk for r in records], tombstoned_at__isnull=False).exists():
            return  # never fill a cache from a record a deletion has hidden
        entry, created = CacheEntry.objects.get_or_create(tenant_id=tenant_id, key=key, defaults={"kind": kind})
        if not created:
            CacheEntry.objects.filter(pk=entry.pk).update(evicted_at=None, created_at=timezone.now())
            entry.records.clear()
        entry.records.add(*records)
    cache.set(key, value, timeout=ttl)


def cached_fact(
    tenant_id: int, project_id: str, subject_id: str, predicate: str, compute: Callable[[], tuple[Any, MemoryRecord | None]]
) -> Any:  # fmt: skip
    """A fact answer from the cache, or computed and cached until its record changes (evicted by
    propagation) or its recheck falls due, whichever comes first."""
    key = fact_key(tenant_id, project_id, subject_id, predicate)
    hit = cache.get(key)
    if hit is not None and not tombstones.tombstoned_memory_ids(tenant_id, [hit.get("memory_id") or ""]):
        return hit
    value, record = compute()
    if record is not None:
        ttl = settings.FACT_CACHE_SECONDS
        if record.recheck_after is not None:
            ttl = min(ttl, int((record.recheck_after - timezone.now()).total_seconds()))
        try:
            store(tenant_id, key, value, [record], ttl=ttl)
        except IntegrityError:
            pass  # another request filled the same key at the same moment; its manifest stands
    return value


def keys_for(records: list[MemoryRecord]) -> list[str]:
    return list(
        CacheEntry.objects.filter(records__in=records, evicted_at__isnull=True).values_list("key", flat=True).distinct()
    )
