"""Memory records, history included; only the content-free tombstones remain."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import CASCADE, DO_NOTHING, SET_NULL, QuerySet
from django.db.models.deletion import get_candidate_relations_to_delete
from django.db.models.signals import post_delete, pre_delete

from deletion import ledger, tombstones
from deletion.models import DeletionRequest, Tombstone
from deletion.stores.base import Found, Job, Scope, Store, Verification
from memory_admin.lib import rows
from memory_admin.memory import stats
from memory_admin.memory.models import AuditEvent, MemoryRecord, RecordHide

# The scopes hidden by a rule at acceptance (one row) rather than by an UPDATE of every record.
RULED = (DeletionRequest.ScopeKind.SUBJECT, DeletionRequest.ScopeKind.PREDICATE)


def delete_records(ids: list[int]) -> int:
    """Delete the records `ids`, set-based, with what Django's delete collector would do to the rows that
    point at them, one statement per relation joined to the ids (the collector lists every related row's
    id, and nulls `superseded_by` on the very revisions it then deletes):

    1. CASCADE relations: their rows are deleted with `QuerySet.delete()` on a subquery (their own
       relations handled by Django, in one DELETE when they have none);
    2. SET_NULL relations: nulled, except on records being deleted themselves (the self-reference);
    3. the records, in one DELETE.
    Any other kind of relation (PROTECT, RESTRICT, SET_DEFAULT, ...), or a delete signal on the records,
    falls back to the collector, so nothing it would do is skipped. Answers how many records were deleted.
    """
    records = MemoryRecord.all_objects.filter(pk__in=rows.among(ids))
    relations: list[Any] = list(get_candidate_relations_to_delete(MemoryRecord._meta))  # type: ignore[arg-type]
    plain = all(r.on_delete in (CASCADE, SET_NULL, DO_NOTHING) for r in relations)
    if not plain or pre_delete.has_listeners(MemoryRecord) or post_delete.has_listeners(MemoryRecord):
        _, by_model = records.delete()
        return by_model.get(MemoryRecord._meta.label, 0)
    chosen = records.values("pk")
    with transaction.atomic():
        for relation in relations:
            field = relation.field
            model: Any = relation.related_model
            related: QuerySet[Any] = model._base_manager.filter(**{f"{field.name}__in": chosen})
            if relation.on_delete is CASCADE:
                related.delete()
            elif relation.on_delete is SET_NULL:
                if model is MemoryRecord:
                    related = related.exclude(pk__in=chosen)
                related.update(**{field.name: None})
        return int(records._raw_delete(records.db))


def hides_by_rule(scope: Scope) -> bool:
    """Whether a request's acceptance hides the scope's records by one rule row (RecordHide), its records'
    tombstones then written by `mark_hidden` when the purge starts: a subject's or a predicate's records."""
    return scope.kind in RULED and bool(scope.request_public_id) and bool(scope.records)


def mark_hidden(tenant_id: int, request_public_id: str) -> int:
    """Turn a request's rules (RecordHide) into what an acceptance without them would have left: the records'
    tombstones (and their ledger lines), and the records marked as an UPDATE would have marked them, their
    counters moved then; then delete the rules, so the subject id stays nowhere. The first step of the records'
    purge, and of lifting one of the request's tombstones before it (a write let through must not find the
    hidden rows as the fact's current ones). Idempotent; answers how many records were marked."""
    marked = 0
    with transaction.atomic():
        rules = list(
            RecordHide.objects.select_for_update(of=("self",))
            .select_related("project")
            .filter(tenant_id=tenant_id, hidden_by=request_public_id)
        )
        if not rules:
            return 0
        request = DeletionRequest.objects.get(tenant_id=tenant_id, public_id=request_public_id)
        for rule in rules:
            covered = rule.covered()
            stones = covered.order_by("id").values_list(*tombstones.STONE_FIELDS, named=True)
            entries = tombstones.insert_for_request(request, rule.project.key, stones, rule.created_at)
            ledger.append_entries_after_commit(entries)
            marked += stats.update_uncounted(
                covered.filter(tombstoned_at__isnull=True),
                tombstoned_at=rule.created_at,
                status=MemoryRecord.Status.DELETED,
                is_head=False,
            )
            rule.delete()
    return marked


class RecordsStore(Store):
    """Memory records, history included; only the content-free tombstones remain. The audit trail's
    snapshots of these records are redacted too (who did what and when stays)."""

    name = "records"
    label = "Memory records"
    replayed = True

    def find(self, scope: Scope) -> Found:
        return Found(
            len(scope.records), {"ids": scope.record_ids, "memory_ids": scope.memory_ids}, scope.memory_ids[:5]
        )

    def hide_scope(self, scope: Scope, now: datetime) -> int:
        live = scope.records_query().live()
        if hides_by_rule(scope):
            # A subject's or a predicate's records: one rule row (RecordHide), not an UPDATE of each record, and
            # the overview's counters moved to "deleted" by one grouped INSERT; the purge marks the rows.
            counted = stats.count_as_deleted(live)
            ids = scope.record_ids
            RecordHide.objects.create(
                tenant_id=scope.tenant_id,
                project_id=scope.project_id,
                subject_id=scope.value if scope.kind == DeletionRequest.ScopeKind.SUBJECT else "",
                predicate=scope.value if scope.kind == DeletionRequest.ScopeKind.PREDICATE else "",
                first_id=min(ids),
                last_id=max(ids),
                hidden_by=scope.request_public_id,
                created_at=now,
            )
            return counted
        # A list of memory ids: one UPDATE on the scope's condition, with the overview's counters moved by the
        # same statement (not by a trigger call per record).
        return stats.update_counted(live, tombstoned_at=now, status=MemoryRecord.Status.DELETED, is_head=False)

    def purge(self, job: Job) -> int:
        with transaction.atomic():
            mark_hidden(job.tenant_id, job.request_public_id)
            AuditEvent.objects.redact(job.tenant_id, job.targets["memory_ids"], job.redaction)
            return delete_records(job.targets["ids"])

    def verify(self, job: Job) -> Verification:
        remaining = MemoryRecord.all_objects.filter(pk__in=rows.among(job.targets["ids"])).count()
        snapshots = AuditEvent.objects.filter(
            tenant_id=job.tenant_id, object_id__in=rows.among(job.targets["memory_ids"]), redacted_at__isnull=True
        ).exclude(before__isnull=True, after__isnull=True)
        unredacted = snapshots.count()
        stones = Tombstone.objects.filter(
            request__tenant_id=job.tenant_id, request__public_id=job.request_public_id, kind=Tombstone.Kind.RECORD
        ).count()
        return Verification(
            remaining + unredacted,
            {
                "query": "memory_memoryrecord WHERE id IN targets; audit snapshots of the memory ids",
                "rows_remaining": remaining,
                "audit_snapshots_unredacted": unredacted,
                "tombstones": stones,
            },
        )
