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
from django.db.models import Q
from django.utils import timezone

from deletion.models import Backup, DeletionRequest, StoreProgress
from memory_admin.derived.models import CacheEntry, ContextItem, Event, ExportFile, Invalidation, Summary
from memory_admin.memory.models import AuditEvent, MemoryRecord

REDACTION = "[redacted by deletion {request}]"


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


class LogsStore(Store):
    """Raw conversation events: the matching lines are redacted, a marker stays."""

    name = "logs"

    def _matching(self, tenant_id: int, project_id: int, subjects: list[str], event_ids: list[str]) -> Any:
        """Lines the records were extracted from, and lines naming the subject (tagged or in the text).

        One condition per subject, never one per record: a subject with 10,000 records is one pattern.
        """
        q = Q(public_id__in=event_ids)
        for subject in subjects:
            q |= Q(subject_ids__contains=[subject]) | Q(text__contains=subject)
        return Event.objects.filter(tenant_id=tenant_id, project_id=project_id).filter(q)

    def find(self, scope: Scope) -> Found:
        event_ids = sorted({e for r in scope.records for e in r.source_event_ids})
        events = self._matching(scope.tenant_id, scope.project_id, scope.subjects, event_ids)
        ids = list(events.values_list("id", flat=True))
        samples = list(events.values_list("public_id", flat=True)[:5])
        return Found(len(ids), {"ids": ids, "subjects": scope.subjects, "event_ids": event_ids}, samples)

    def hide(self, request: DeletionRequest, progress: StoreProgress, now: datetime) -> int:
        return Event.objects.filter(pk__in=progress.targets["ids"], hidden_at__isnull=True).update(hidden_at=now)

    def purge(self, request: DeletionRequest, progress: StoreProgress) -> int:
        return Event.objects.filter(pk__in=progress.targets["ids"], redacted_at__isnull=True).update(
            text=REDACTION.format(request=request.public_id), subject_ids=[], redacted_at=timezone.now()
        )

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        t = progress.targets
        remaining = self._matching(request.tenant_id, request.project_id, t["subjects"], [])
        remaining = remaining.filter(redacted_at__isnull=True).count()
        unredacted = Event.objects.filter(pk__in=t["ids"], redacted_at__isnull=True).count()
        return Verification(
            remaining + unredacted,
            {"query": "events of the project whose text or subject_ids name the scope's subject",
             "lines_mentioning_scope": remaining, "target_lines_unredacted": unredacted,
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

    def verify(self, request: DeletionRequest, progress: StoreProgress) -> Verification:
        now = timezone.now()
        waiting = Invalidation.objects.filter(
            load_id__in=progress.targets["loads"], memory_id__in=progress.targets["memory_ids"],
            acknowledged_at__isnull=True, load__expires_at__gt=now,
        ).select_related("agent", "load")  # fmt: skip
        holders = sorted({f"{n.agent.name}/{n.load.session_id}" for n in waiting})
        return Verification(len(holders), {"holders_not_acknowledged": holders,
                                           "loads": len(progress.targets["loads"])}, waiting=bool(holders))  # fmt: skip


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
        CachesStore(),
        ExportsStore(),
        ContextsStore(),
        BackupsStore(),
    )
}
