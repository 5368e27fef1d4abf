"""One adapter per store a deletion must reach, behind one interface: find, hide, purge, verify.

`find` runs when the request is accepted and records the store's targets (ids and keys, never
content), so purging does not depend on the order in which stores run. `hide` is the store's part of
stage 2 and runs in the acceptance transaction (database stores only). `purge` and `verify` run in
Celery tasks; both are idempotent, and `verify` reads the store again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from deletion.models import Backup, DeletionRequest, StoreProgress
from memory_admin.derived.models import (
    CacheEntry,
    ContextItem,
    Event,
    EventSubject,
    ExportFile,
    Invalidation,
    ScheduledAction,
    Summary,
)
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord

REDACTION = "[redacted by deletion {request}]"
NOTICE_REASON = "Deleted by request {request}."


@dataclass
class Scope:
    """What a request covers, resolved to records (history included)."""

    tenant_id: int
    project_id: int
    project_key: str
    records: list[MemoryRecord]
    subjects: list[str] = field(default_factory=list)

    @property
    def memory_ids(self) -> list[str]:
        return [r.memory_id for r in self.records]

    @property
    def record_ids(self) -> list[int]:
        return [r.pk for r in self.records]


@dataclass
class Found:
    count: int
    targets: dict[str, Any]
    samples: list[str]


@dataclass
class Verification:
    remaining: int
    evidence: dict[str, Any]
    waiting: bool = False  # nothing left to do here but wait (holders to acknowledge)


class Store:
    name: ClassVar[str]

    def find(self, scope: Scope) -> Found:
        raise NotImplementedError

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        return 0

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        return 0

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        raise NotImplementedError


class RecordsStore(Store):
    """Memory records, history included; only the content-free tombstones remain. The audit trail's
    snapshots of these records are redacted too (who did what and when stays)."""

    name = "records"

    def find(self, scope: Scope) -> Found:
        return Found(
            len(scope.records), {"ids": scope.record_ids, "memory_ids": scope.memory_ids}, scope.memory_ids[:5]
        )

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        return MemoryRecord.all_objects.filter(pk__in=progress.targets["ids"], tombstoned_at__isnull=True).update(
            tombstoned_at=now, status=MemoryRecord.Status.DELETED, is_head=False
        )

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        memory_ids = progress.targets["memory_ids"]
        AuditEvent.objects.redact(request.tenant_id, memory_ids, REDACTION.format(request=request.public_id))
        _, by_model = MemoryRecord.all_objects.filter(pk__in=progress.targets["ids"]).delete()
        return by_model.get(MemoryRecord._meta.label, 0)

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        rows = MemoryRecord.all_objects.filter(pk__in=progress.targets["ids"]).count()
        snapshots = AuditEvent.objects.filter(
            tenant_id=request.tenant_id, object_id__in=progress.targets["memory_ids"], redacted_at__isnull=True
        ).exclude(before__isnull=True, after__isnull=True)
        unredacted = snapshots.count()
        stones = request.tombstones.filter(kind="record").count()
        return Verification(
            rows + unredacted,
            {"query": "memory_memoryrecord WHERE id IN targets; audit snapshots of the memory ids",
             "rows_remaining": rows, "audit_snapshots_unredacted": unredacted, "tombstones": stones},
        )  # fmt: skip


# A log line that names no subject but quotes a deleted value (PRODUCT.md rule 12: raw logs are a copy).
# Tombstones keep only keyed hashes, which cannot be matched against free text, so the lines are found
# while the records still exist, at acceptance: untagged lines of the project whose text contains one of
# the records' string values. Bounded, so a big subject stays a few statements and short values ("yes",
# "Room 3") do not take unrelated lines with them; lines tagged with another subject are that subject's.
QUOTE_MIN_CHARS, QUOTE_MAX_CHARS = 8, 1000
QUOTE_MAX_VALUES = 200  # current values first, then the longest
QUOTE_CHUNK = 50  # LIKE conditions per statement


def _strings(value: Any) -> list[str]:
    """The strings in a JSON value (itself, or the leaves of its lists and objects)."""
    if isinstance(value, str):
        return [value.strip()]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def quoted_values(records: list[MemoryRecord]) -> tuple[list[str], int]:
    """The records' string values to look for in untagged log lines, and how many the bound left out."""
    heads: set[str] = set()
    found: set[str] = set()
    for record in records:
        strings = {s for s in _strings(record.value) if QUOTE_MIN_CHARS <= len(s) <= QUOTE_MAX_CHARS}
        found |= strings
        if record.is_head:
            heads |= strings
    ranked = sorted(found, key=lambda s: (s not in heads, -len(s), s))
    return ranked[:QUOTE_MAX_VALUES], max(0, len(ranked) - QUOTE_MAX_VALUES)


def lines_quoting_values(scope: Scope) -> tuple[list[int], dict[str, int]]:
    """Ids of the project's lines that name no subject and quote one of the scope's values; with counts
    (never the values: targets and evidence stay content-free)."""
    values, left_out = quoted_values(scope.records)
    untagged = Event.objects.filter(tenant_id=scope.tenant_id, project_id=scope.project_id).filter(
        ~Exists(EventSubject.objects.filter(event_id=OuterRef("pk")))
    )
    ids: set[int] = set()
    for start in range(0, len(values), QUOTE_CHUNK):
        q = Q()
        for value in values[start : start + QUOTE_CHUNK]:
            q |= Q(text__contains=value)
        ids |= set(untagged.filter(q).values_list("id", flat=True))
    return sorted(ids), {"values_searched": len(values), "values_left_out": left_out, "lines": len(ids)}


class LogsStore(Store):
    """Raw conversation events: the matching lines are redacted, a marker stays."""

    name = "logs"

    def _matching(self, tenant_id: int, project_id: int, subjects: list[str], event_ids: list[str]) -> Any:
        """Lines the records were extracted from, and lines naming the subject (tagged or in the text).

        One condition per subject, never one per record: a subject with 10,000 records is one pattern.
        Tagged lines come from the EventSubject index (tenant, subject, project), on every backend.
        """
        q = Q(public_id__in=event_ids)
        if subjects:
            tagged = EventSubject.objects.filter(tenant_id=tenant_id, subject_id__in=subjects, project_id=project_id)
            q |= Q(pk__in=tagged.values("event_id"))
        for subject in subjects:
            # LIKE '%…%': case-sensitive on PostgreSQL; SQLite's LIKE ignores ASCII case, so there it may
            # redact a few more lines, never fewer.
            q |= Q(text__contains=subject)
        return Event.objects.filter(tenant_id=tenant_id, project_id=project_id).filter(q)

    def find(self, scope: Scope) -> Found:
        event_ids = sorted({e for r in scope.records for e in r.source_event_ids})
        events = self._matching(scope.tenant_id, scope.project_id, scope.subjects, event_ids)
        ids = list(events.values_list("id", flat=True))
        samples = list(events.values_list("public_id", flat=True)[:5])
        quoting, counts = lines_quoting_values(scope)
        ids += sorted(set(quoting) - set(ids))
        return Found(len(ids), {"ids": ids, "subjects": scope.subjects, "event_ids": event_ids,
                                "untagged_lines_quoting_values": counts}, samples)  # fmt: skip

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        return Event.objects.filter(pk__in=progress.targets["ids"], hidden_at__isnull=True).update(hidden_at=now)

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        ids = progress.targets["ids"]
        with transaction.atomic():
            # The tags go with the text: a redacted line names no subject, in its row or in the index.
            EventSubject.objects.filter(event_id__in=ids).delete()
            return Event.objects.filter(pk__in=ids, redacted_at__isnull=True).update(
                text=REDACTION.format(request=request.public_id), subject_ids=[], redacted_at=timezone.now()
            )

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        t = progress.targets
        remaining = self._matching(request.tenant_id, request.project_id, t["subjects"], [])
        remaining = remaining.filter(redacted_at__isnull=True).count()
        unredacted = Event.objects.filter(pk__in=t["ids"], redacted_at__isnull=True).count()
        tags = EventSubject.objects.filter(event_id__in=t["ids"]).count()
        return Verification(
            remaining + unredacted + tags,
            {"query": "events of the project whose text or subject tags name the scope's subject",
             "lines_mentioning_scope": remaining, "target_lines_unredacted": unredacted, "target_subject_tags": tags,
             "redacted_with_marker": Event.objects.filter(pk__in=t["ids"], redacted_at__isnull=False).count()},
        )  # fmt: skip


class SummariesStore(Store):
    """Summaries built on deleted records: deleted, or regenerated from the remaining bases only."""

    name = "summaries"

    @staticmethod
    def built_on(scope: Scope) -> Any:
        """Summaries with a base among the scope's records (through the indexed base rows)."""
        return Summary.objects.filter(tenant_id=scope.tenant_id, bases__record_id__in=scope.record_ids).distinct()

    def find(self, scope: Scope) -> Found:
        summaries = self.built_on(scope)
        ids = list(summaries.values_list("id", flat=True))
        return Found(len(ids), {"ids": ids, "memory_ids": scope.memory_ids},
                     list(summaries.values_list("public_id", flat=True)[:5]))  # fmt: skip

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        return Summary.objects.filter(pk__in=progress.targets["ids"], hidden_at__isnull=True).update(
            hidden_at=now, status=Summary.Status.WITHDRAWN, status_reason=f"Deletion {request.public_id}."
        )

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        from memory_admin.derived.lineage import BaseRef, create_summary, regenerate_from

        deleted = set(progress.targets["memory_ids"])
        count = 0
        for summary in Summary.objects.filter(pk__in=progress.targets["ids"]).select_related("project", "created_by"):
            remaining = [b for b in summary.derived_from if b["memory_id"] not in deleted]
            text = regenerate_from(summary, remaining)
            if text is not None:
                create_summary(summary.created_by, project_id=summary.project.key, text=text, kind=summary.kind,
                               bases=[BaseRef(b["memory_id"], b["revision"]) for b in remaining])  # fmt: skip
            summary.delete()
            count += 1
        return count

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        rows = Summary.objects.filter(pk__in=progress.targets["ids"]).count()
        # Anything written since the acceptance that names a deleted memory (a late job).
        deleted = set(progress.targets["memory_ids"])
        since = Summary.objects.filter(tenant_id=request.tenant_id, created_at__gte=request.accepted_at)
        late = [s.public_id for s in since.only("public_id", "derived_from")
                if deleted & {b.get("memory_id") for b in s.derived_from}]  # fmt: skip
        return Verification(rows + len(late), {"check": "target summaries gone; none written since names a deleted "
                                               "memory", "target_rows": rows, "built_on_deleted_since": late[:20]})  # fmt: skip


class CachesStore(Store):
    """Cached answers and contexts: every key whose manifest names a deleted record, and the scope's
    fact keys, confirmed absent."""

    name = "caches"

    def find(self, scope: Scope) -> Found:
        from memory_admin.derived.caches import fact_key

        keys = set(CacheEntry.objects.filter(records__in=scope.record_ids).values_list("key", flat=True))
        keys |= {fact_key(scope.tenant_id, scope.project_key, r.subject_id, r.predicate) for r in scope.records}
        return Found(len(keys), {"keys": sorted(keys)}, sorted(keys)[:5])

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        keys = progress.targets["keys"]
        cache.delete_many(keys)
        CacheEntry.objects.filter(tenant_id=request.tenant_id, key__in=keys).delete()
        return len(keys)

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        keys = progress.targets["keys"]
        present = [k for k, v in cache.get_many(keys).items() if v is not None]
        manifests = CacheEntry.objects.filter(tenant_id=request.tenant_id, key__in=keys).count()
        return Verification(len(present) + manifests, {"checked_keys": len(keys), "present": present[:20],
                                                       "manifest_rows": manifests})  # fmt: skip


class EmbeddingsStore(Store):
    """The vector index: entries deleted, then compacted with old versions cleaned, so the verify step
    can show the data is physically gone from every version still on disk."""

    name = "embeddings"

    def find(self, scope: Scope) -> Found:
        from memory_admin.derived.vectors import get_index

        summary_ids = list(SummariesStore.built_on(scope).values_list("public_id", flat=True))
        entries = get_index().find(tenant_id=scope.tenant_id, object_ids=scope.memory_ids + summary_ids)
        return Found(len(entries), {"object_ids": scope.memory_ids + summary_ids}, [e.entry_id for e in entries[:5]])

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        from memory_admin.derived.vectors import get_index

        index = get_index()
        removed = index.delete_where_object(request.tenant_id, progress.targets["object_ids"])
        progress.evidence["compaction"] = index.compact_and_cleanup()
        return removed

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        from memory_admin.derived.vectors import get_index, where_objects

        index = get_index()
        where = (
            where_objects(request.tenant_id, progress.targets["object_ids"]) if progress.targets["object_ids"] else None
        )
        in_any = index.rows_in_any_version(where) if where else 0
        return Verification(in_any, {"check": "rows matching the scope in every table version on disk",
                                     "where": where, "rows_in_any_version": in_any, "versions": index.versions(),
                                     "compaction": progress.evidence.get("compaction")})  # fmt: skip


class ExportsStore(Store):
    """Exported files: withheld from download, then rewritten without the scope's lines."""

    name = "exports"

    def _lines(self, path: str, memory_ids: set[str]) -> int:
        if not os.path.exists(path):
            return 0
        with open(path, encoding="utf-8") as handle:
            return sum(1 for line in handle if json.loads(line).get("memory_id") in memory_ids)

    def find(self, scope: Scope) -> Found:
        ids = set(scope.memory_ids)
        files = [e for e in ExportFile.objects.filter(tenant_id=scope.tenant_id, removed_at__isnull=True)
                 if self._lines(e.path, ids)]  # fmt: skip
        return Found(len(files), {"ids": [f.pk for f in files], "memory_ids": scope.memory_ids},
                     [Path(f.path).name for f in files[:5]])  # fmt: skip

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        return ExportFile.objects.filter(pk__in=progress.targets["ids"]).update(withheld=True)

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        ids = set(progress.targets["memory_ids"])
        rewritten = 0
        for export in ExportFile.objects.filter(pk__in=progress.targets["ids"]):
            if not os.path.exists(export.path):
                continue
            tmp = export.path + ".rewrite"
            kept = 0
            with open(export.path, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as dst:
                for line in src:
                    if json.loads(line).get("memory_id") not in ids:
                        dst.write(line)
                        kept += 1
            os.replace(tmp, export.path)
            ExportFile.objects.filter(pk=export.pk).update(rows=kept, withheld=False)
            rewritten += 1
        return rewritten

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        ids = set(progress.targets["memory_ids"])
        exports = list(ExportFile.objects.filter(tenant_id=request.tenant_id, removed_at__isnull=True))
        lines = sum(self._lines(e.path, ids) for e in exports)
        return Verification(lines, {"files_scanned": len(exports), "lines_with_scope": lines})


class ContextsStore(Store):
    """Agents' loaded contexts: a notice per loaded copy; verified when every holder acknowledged or its
    session expired."""

    name = "contexts"

    def find(self, scope: Scope) -> Found:
        items = ContextItem.objects.filter(record_id__in=scope.record_ids).select_related("load")
        loads = sorted({i.load_id for i in items})
        return Found(len(loads), {"loads": loads, "memory_ids": scope.memory_ids},
                     sorted({i.load.public_id for i in items})[:5])  # fmt: skip

    @staticmethod
    def _notices(progress: StoreProgress) -> Any:
        return Invalidation.objects.filter(
            load_id__in=progress.targets["loads"], memory_id__in=progress.targets["memory_ids"]
        )

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        # A notice repeats the reason of the change that sent it ("Excluded: <a person's words>"), which
        # may quote the deleted value. The notice stays (its holder must still acknowledge it); its reason
        # becomes the deletion's.
        reason = NOTICE_REASON.format(request=request.public_id)
        return self._notices(progress).exclude(reason=reason).update(reason=reason)

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        now = timezone.now()
        waiting = (
            self._notices(progress)
            .filter(acknowledged_at__isnull=True, load__expires_at__gt=now)
            .select_related("agent", "load")
        )
        holders = sorted({f"{n.agent.name}/{n.load.session_id}" for n in waiting})
        reasons = self._notices(progress).exclude(reason=NOTICE_REASON.format(request=request.public_id)).count()
        return Verification(len(holders) + reasons, {"holders_not_acknowledged": holders,
                                                     "loads": len(progress.targets["loads"]),
                                                     "notice_reasons_not_replaced": reasons},
                            waiting=bool(holders) and not reasons)  # fmt: skip


class ScheduledActionsStore(Store):
    """Actions agents planned from deleted records: their payloads carry the values (a reminder's
    recipient, a message's text). At acceptance every read of them answers 410 (the API checks the
    tombstones of `derived_from`) and the live ones are cancelled; the purge blanks the payload and the
    status reason. The row stays, content-free, so the agent that planned it learns why it will not run."""

    name = "scheduled_actions"
    ACTIVE = (ScheduledAction.Status.SCHEDULED, ScheduledAction.Status.SUSPENDED)

    @staticmethod
    def _redacted(request: DeletionRequest) -> dict[str, str]:
        return {"redacted": REDACTION.format(request=request.public_id)}

    def find(self, scope: Scope) -> Found:
        actions = ScheduledAction.objects.filter(
            tenant_id=scope.tenant_id, bases__record_id__in=scope.record_ids
        ).distinct()
        ids = sorted(actions.values_list("id", flat=True))
        return Found(len(ids), {"ids": ids}, list(actions.values_list("public_id", flat=True)[:5]))

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        ids = progress.targets["ids"]
        ScheduledAction.objects.filter(pk__in=ids, status__in=self.ACTIVE).update(
            status=ScheduledAction.Status.CANCELLED, status_changed_at=now
        )
        return ScheduledAction.objects.filter(pk__in=ids).update(
            status_reason=f"Withdrawn: planned from memory deleted by request {request.public_id}."
        )

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        return (
            ScheduledAction.objects.filter(pk__in=progress.targets["ids"])
            .exclude(payload=self._redacted(request))
            .update(payload=self._redacted(request), status_reason=REDACTION.format(request=request.public_id))
        )

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        targets = ScheduledAction.objects.filter(pk__in=progress.targets["ids"])
        payloads = targets.exclude(payload=self._redacted(request)).count()
        active = targets.filter(status__in=self.ACTIVE).count()
        return Verification(payloads + active, {"check": "target actions cancelled, payload and reason blanked",
                                                "payloads_not_blanked": payloads, "still_active": active,
                                                "rows_kept_content_free": targets.count()})  # fmt: skip


class DisputesStore(Store):
    """Disputes between the scope's records. A person's resolution reason is written about the values
    ("kept 1350, the partner's price"), so it is redacted at acceptance, with the disputes' audit events
    at the purge; a dispute whose every candidate is deleted has nothing left to dispute and is deleted."""

    name = "disputes"

    def find(self, scope: Scope) -> Found:
        disputes = Dispute.objects.filter(tenant_id=scope.tenant_id, candidates__in=scope.record_ids).distinct()
        found = list(disputes.values_list("id", "public_id"))
        covered = set(scope.record_ids)
        links = Dispute.candidates.through.objects.filter(dispute_id__in=[pk for pk, _ in found])
        outside = set(links.exclude(memoryrecord_id__in=covered).values_list("dispute_id", flat=True))
        return Found(len(found), {"ids": [pk for pk, _ in found], "public_ids": [p for _, p in found],
                                  "wholly_deleted": [pk for pk, _ in found if pk not in outside]},
                     [p for _, p in found[:5]])  # fmt: skip

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        marker = REDACTION.format(request=request.public_id)
        return (
            Dispute.objects.filter(pk__in=progress.targets["ids"])
            .exclude(resolution_reason="")
            .exclude(resolution_reason=marker)
            .update(resolution_reason=marker)
        )

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        t = progress.targets
        marker = REDACTION.format(request=request.public_id)
        redacted = AuditEvent.objects.redact(request.tenant_id, t["public_ids"], marker)
        Dispute.objects.filter(pk__in=t["ids"]).exclude(resolution_reason="").update(resolution_reason=marker)
        deleted, _ = Dispute.objects.filter(pk__in=t["wholly_deleted"]).delete()
        return redacted + deleted

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        t = progress.targets
        marker = REDACTION.format(request=request.public_id)
        reasons = (
            Dispute.objects.filter(pk__in=t["ids"]).exclude(resolution_reason="").exclude(resolution_reason=marker)
        ).count()
        kept = Dispute.objects.filter(pk__in=t["wholly_deleted"]).count()
        audit = AuditEvent.objects.filter(
            tenant_id=request.tenant_id, object_type="dispute", object_id__in=t["public_ids"], redacted_at__isnull=True
        ).count()
        return Verification(reasons + kept + audit, {"check": "resolution reasons and audit events of the disputes "
                                                     "redacted; disputes with no candidate left deleted",
                                                     "reasons_unredacted": reasons, "audit_unredacted": audit,
                                                     "wholly_deleted_remaining": kept})  # fmt: skip


class BackupsStore(Store):
    """The backup catalogue: nothing is purged here; it gives stage 4."""

    name = "backups"

    def find(self, scope: Scope) -> Found:
        backups = list(Backup.objects.filter(expires_at__gt=timezone.now()).order_by("taken_at"))
        return Found(len(backups), {}, [Path(b.path).name for b in backups[:5]])

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        held = Backup.objects.filter(
            taken_at__lte=request.purge_confirmed_at or timezone.now(), expires_at__gt=timezone.now()
        )
        latest = max((b.expires_at for b in held), default=None)
        return Verification(0, {"backups_still_holding": held.count(),
                                "latest_expiry": latest.isoformat() if latest else None,
                                "note": "Backups are not rewritten; they age out by their retention."})  # fmt: skip


STORES: dict[str, Store] = {
    s.name: s
    for s in (
        RecordsStore(),
        LogsStore(),
        EmbeddingsStore(),
        SummariesStore(),
        ScheduledActionsStore(),
        CachesStore(),
        ExportsStore(),
        ContextsStore(),
        DisputesStore(),
        BackupsStore(),
    )
}
