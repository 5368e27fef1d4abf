"""Disputes between the scope's records: resolution reasons and audit events redacted."""

from __future__ import annotations

from datetime import datetime

from deletion.stores.base import REDACTION, Found, Job, Scope, Store, Verification
from memory_admin.lib import rows
from memory_admin.memory.models import AuditEvent, Dispute


class DisputesStore(Store):
    """Disputes between the scope's records. A person's resolution reason is written about the values
    ("kept 1350, the partner's price"), so it is redacted at acceptance, with the disputes' audit events
    at the purge; a dispute whose every candidate is deleted has nothing left to dispute and is deleted."""

    name = "disputes"
    label = "Disputes"

    def find(self, scope: Scope) -> Found:
        disputes = Dispute.objects.filter(
            tenant_id=scope.tenant_id, candidates__in=rows.among(scope.record_ids)
        ).distinct()
        found = list(disputes.values_list("id", "public_id"))
        covered = set(scope.record_ids)
        links = Dispute.candidates.through.objects.filter(dispute_id__in=[pk for pk, _ in found])
        outside = set(links.exclude(memoryrecord_id__in=covered).values_list("dispute_id", flat=True))
        return Found(
            len(found),
            {
                "ids": [pk for pk, _ in found],
                "public_ids": [p for _, p in found],
                "wholly_deleted": [pk for pk, _ in found if pk not in outside],
            },
            [p for _, p in found[:5]],
        )

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        # The disputes `find` targets, joined to the scope's records through the candidate links.
        marker = REDACTION.format(request=scope.request_public_id)
        every_link = Dispute.candidates.through.objects
        links = every_link.filter(memoryrecord__in=scope.records_query())
        disputes = Dispute.objects.filter(tenant_id=scope.tenant_id, id__in=links.values("dispute_id"))
        redacted = (
            disputes.exclude(resolution_reason="").exclude(resolution_reason=marker).update(resolution_reason=marker)
        )
        # An open dispute whose every candidate is deleted has nothing left to dispute: closed now (the purge deletes
        # it), so the fact's next disagreement can open its own (one open dispute per fact).
        outside = every_link.filter(dispute_id__in=links.values("dispute_id")).exclude(
            memoryrecord__in=scope.records_query()
        )
        closed = (
            disputes.filter(status=Dispute.Status.OPEN)
            .exclude(id__in=outside.values("dispute_id"))
            .update(status=Dispute.Status.RESOLVED, resolved_at=now, resolution_reason=marker)
        )
        return redacted + closed

    def purge(self, job: Job) -> int:
        t = job.targets
        marker = job.redaction
        redacted = AuditEvent.objects.redact(job.tenant_id, t["public_ids"], marker)
        Dispute.objects.filter(pk__in=t["ids"]).exclude(resolution_reason="").update(resolution_reason=marker)
        deleted, _ = Dispute.objects.filter(pk__in=t["wholly_deleted"]).delete()
        return redacted + deleted

    def verify(self, job: Job) -> Verification:
        t = job.targets
        marker = job.redaction
        reasons = (
            Dispute.objects.filter(pk__in=t["ids"]).exclude(resolution_reason="").exclude(resolution_reason=marker)
        ).count()
        kept = Dispute.objects.filter(pk__in=t["wholly_deleted"]).count()
        audit = AuditEvent.objects.filter(
            tenant_id=job.tenant_id, object_type="dispute", object_id__in=t["public_ids"], redacted_at__isnull=True
        ).count()
        return Verification(
            reasons + kept + audit,
            {
                "check": "resolution reasons and audit events of the disputes "
                "redacted; disputes with no candidate left deleted",
                "reasons_unredacted": reasons,
                "audit_unredacted": audit,
                "wholly_deleted_remaining": kept,
            },
        )
