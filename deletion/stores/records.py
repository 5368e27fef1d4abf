"""Memory records, history included; only the content-free tombstones remain."""

from __future__ import annotations

from datetime import datetime

from deletion.models import Tombstone
from deletion.stores.base import Found, Job, Scope, Store, Verification, register
from memory_admin.memory.models import AuditEvent, MemoryRecord


@register
class RecordsStore(Store):
    """Memory records, history included; only the content-free tombstones remain. The audit trail's
    snapshots of these records are redacted too (who did what and when stays)."""

    name = "records"
    position = 10
    replayed = True

    def find(self, scope: Scope) -> Found:
        return Found(
            len(scope.records), {"ids": scope.record_ids, "memory_ids": scope.memory_ids}, scope.memory_ids[:5]
        )

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        # One UPDATE on the scope's condition (the subject's or predicate's index), not 10,000 ids.
        return (
            scope.records_query()
            .filter(tombstoned_at__isnull=True)
            .update(tombstoned_at=now, status=MemoryRecord.Status.DELETED, is_head=False)
        )

    def purge(self, job: Job) -> int:
        AuditEvent.objects.redact(job.tenant_id, job.targets["memory_ids"], job.redaction)
        _, by_model = MemoryRecord.all_objects.filter(pk__in=job.targets["ids"]).delete()
        return by_model.get(MemoryRecord._meta.label, 0)

    def verify(self, job: Job) -> Verification:
        rows = MemoryRecord.all_objects.filter(pk__in=job.targets["ids"]).count()
        snapshots = AuditEvent.objects.filter(
            tenant_id=job.tenant_id, object_id__in=job.targets["memory_ids"], redacted_at__isnull=True
        ).exclude(before__isnull=True, after__isnull=True)
        unredacted = snapshots.count()
        stones = Tombstone.objects.filter(
            request__tenant_id=job.tenant_id, request__public_id=job.request_public_id, kind=Tombstone.Kind.RECORD
        ).count()
        return Verification(
            rows + unredacted,
            {
                "query": "memory_memoryrecord WHERE id IN targets; audit snapshots of the memory ids",
                "rows_remaining": rows,
                "audit_snapshots_unredacted": unredacted,
                "tombstones": stones,
            },
        )
