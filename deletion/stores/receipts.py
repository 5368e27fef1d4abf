"""Decision receipts (memory.receipts): the value a read for acting served is erased from them; the receipts stay.

A receipt's signed document holds no value, only a commitment to it (`value_commitment`) beside the fact's
identifiers; the value itself sits in `disclosure`, outside the signature. At acceptance the disclosures of the
scope's receipts are erased (set-based on the scope, so the receipts endpoint stops answering the value at once),
and the purge does it again for any written in between; the receipts, their signatures and the chain still hold."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from deletion.models import DeletionRequest
from deletion.stores.base import Found, Job, Scope, Store, Verification
from memory_admin.lib import rows
from memory_admin.memory.models import DecisionReceipt


def _in_scope(tenant_id: int, project_key: str, kind: str, value: object, memory_ids: list[str]) -> Q:
    where = Q(tenant_id=tenant_id, project_key=project_key)
    if kind == DeletionRequest.ScopeKind.SUBJECT:
        return where & Q(subject_id=value)
    if kind == DeletionRequest.ScopeKind.PREDICATE:
        return where & Q(predicate=value)
    return where & Q(memory_id__in=rows.among(memory_ids))


class ReceiptsStore(Store):
    name = "receipts"
    label = "Decision receipts"
    # A backup taken before the deletion holds the disclosures: a restore's replay erases them again (by the
    # restored records' memory ids: a replay's scope has no kind).
    replayed = True

    def find(self, scope: Scope) -> Found:
        # Every receipt of the scope, whether its value was erased at acceptance already or not.
        receipts = DecisionReceipt.objects.filter(
            _in_scope(scope.tenant_id, scope.project_key, scope.kind, scope.value, scope.memory_ids)
        )
        targets = {"kind": scope.kind, "value": scope.value, "memory_ids": scope.memory_ids}
        if scope.kind in (DeletionRequest.ScopeKind.SUBJECT, DeletionRequest.ScopeKind.PREDICATE):
            targets["memory_ids"] = []  # the subject or field selects them (a replay's scope has no kind: its ids do)
        return Found(receipts.count(), targets, list(receipts.values_list("public_id", flat=True)[:5]))

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        return self._erase(scope.tenant_id, scope.project_key, scope.kind, scope.value, scope.memory_ids, now)

    @staticmethod
    def _erase(tenant_id: int, project_key: str, kind: str, value: object, memory_ids: list[str], now: datetime) -> int:
        return DecisionReceipt.objects.filter(
            _in_scope(tenant_id, project_key, kind, value, memory_ids), disclosure__isnull=False
        ).update(disclosure=None, redacted_at=now)

    def purge(self, job: Job) -> int:
        targets = job.targets
        return self._erase(
            job.tenant_id,
            job.project_key,
            str(targets.get("kind", "")),
            targets.get("value"),
            list(targets.get("memory_ids") or []),
            timezone.now(),
        )

    def verify(self, job: Job) -> Verification:
        targets = job.targets
        scoped = DecisionReceipt.objects.filter(
            _in_scope(
                job.tenant_id,
                job.project_key,
                str(targets.get("kind", "")),
                targets.get("value"),
                list(targets.get("memory_ids") or []),
            )
        )
        disclosed = scoped.filter(disclosure__isnull=False).count()
        return Verification(
            disclosed,
            {
                "query": "memory_decisionreceipt of the scope WHERE disclosure IS NOT NULL",
                "values_still_disclosed": disclosed,
                "receipts_kept_value_free": scoped.count() - disclosed,
            },
        )
