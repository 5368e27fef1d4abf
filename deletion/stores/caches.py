"""Cached answers and contexts: every key whose manifest names a deleted record, and the scope's fact keys."""

from __future__ import annotations

from django.core.cache import cache

from deletion.stores.base import Found, Job, Scope, Store, Verification, register
from memory_admin.derived.caches import fact_key
from memory_admin.derived.models import CacheEntry


@register
class CachesStore(Store):
    """Cached answers and contexts: every key whose manifest names a deleted record, and the scope's
    fact keys, confirmed absent."""

    name = "caches"
    position = 60
    replayed = True

    def find(self, scope: Scope) -> Found:
        keys = set(CacheEntry.objects.filter(records__in=scope.record_ids).values_list("key", flat=True))
        keys |= {fact_key(scope.tenant_id, scope.project_key, r.subject_id, r.predicate) for r in scope.records}
        return Found(len(keys), {"keys": sorted(keys)}, sorted(keys)[:5])

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
