"""Cached answers and contexts: every key whose manifest names a deleted record, and the scope's fact keys."""

from __future__ import annotations

from datetime import datetime

from django.core.cache import cache
from django.db import transaction

from deletion.stores.base import Found, Job, Scope, Store, Verification
from memory_admin.derived.caches import fact_key
from memory_admin.derived.models import CacheEntry
from memory_admin.lib import outages, rows


def _fact_keys(scope: Scope) -> set[str]:
    """The cache key of each fact the scope's records belong to (one per fact, whatever its revisions)."""
    facts = {(r.subject_id, r.predicate) for r in scope.records}
    return {fact_key(scope.tenant_id, scope.project_key, subject, predicate) for subject, predicate in facts}


class CachesStore(Store):
    """Cached answers and contexts: every key whose manifest names a deleted record, and the scope's
    fact keys, confirmed absent."""

    name = "caches"
    label = "Caches"
    replayed = True

    def find(self, scope: Scope) -> Found:
        keys = set(CacheEntry.objects.filter(records__in=rows.among(scope.record_ids)).values_list("key", flat=True))
        keys |= _fact_keys(scope)
        return Found(len(keys), {"keys": sorted(keys)}, sorted(keys)[:5])

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        """The keys `find` will target, evicted once the acceptance commits. Not before: until the commit every
        reader still sees the records as they were and may refill a key from them, so an earlier eviction
        would hide nothing. After it, a read never trusts a key anyway (`caches.cached_answer` checks the
        tombstones, which commit with this transaction). The manifests stay for the purge, which deletes the
        keys again and confirms them absent."""
        manifests = CacheEntry.objects.filter(
            tenant_id=scope.tenant_id,
            id__in=CacheEntry.records.through.objects.filter(memoryrecord__in=scope.records_query()).values(
                "cacheentry_id"
            ),
        )
        keys = set(manifests.values_list("key", flat=True)) | _fact_keys(scope)
        evicted = sorted(keys)
        # With the cache server down, reads still never serve them (cached_answer checks the tombstones) and the
        # purge deletes them once it is back.
        transaction.on_commit(lambda: outages.quietly("deletion eviction", cache.delete_many, evicted))
        return len(evicted)

    def purge(self, job: Job) -> int:
        keys = job.targets["keys"]
        cache.delete_many(keys)
        CacheEntry.objects.filter(tenant_id=job.tenant_id, key__in=keys).delete()
        return len(keys)

    def verify(self, job: Job) -> Verification:
        keys = job.targets["keys"]
        present = [k for k, v in cache.get_many(keys).items() if v is not None]
        manifests = CacheEntry.objects.filter(tenant_id=job.tenant_id, key__in=keys).count()
        return Verification(
            len(present) + manifests, {"checked_keys": len(keys), "present": present[:20], "manifest_rows": manifests}
        )
