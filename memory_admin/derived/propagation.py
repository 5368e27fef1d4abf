"""Stale propagation (PRODUCT.md rule 10): fixing the record does not fix the answers.

`propagate` is the one function called whenever records stop being the current belief (superseded,
expired, excluded, disputed, or a dispute resolved against them). It runs inside the caller's
transaction; what lies outside the database (cache keys, vector entries) is changed after commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from memory_admin.derived.models import (
    ActionBase,
    CacheEntry,
    ContextItem,
    ContextLoad,
    Invalidation,
    Propagation,
    ScheduledAction,
    Summary,
    SummaryBase,
)
from memory_admin.derived.tasks import refresh_record_vectors, regenerate_summaries
from memory_admin.memory.models import MemoryRecord, new_public_id
from memory_admin.queueing import enqueue_after_commit, enqueue_batched_after_commit

Kind = Propagation.Kind


@dataclass
class PropagationResult:
    summaries: list[int] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    notices: int = 0
    cache_keys: list[str] = field(default_factory=list)
    vector_records: list[str] = field(default_factory=list)


def propagate(records: Sequence[MemoryRecord], *, reason: str, now: datetime | None = None) -> PropagationResult:
    """Tell every dependant of `records` that they are no longer the current belief.

    1. summaries built on them → stale (a registered regenerator rebuilds them, after commit, from the
       current bases only);
    2. scheduled actions built on them → suspended until re-confirmed against the current value;
    3. loaded contexts that have not expired → one invalidation notice per loaded copy, open until the
       agent acknowledges it;
    4. cache keys whose manifest names them → evicted after commit;
    5. their vector entries → marked unusable after commit (a Celery task).
    Each dependant touched gets a Propagation row, so a person can see what was done.
    """
    result = PropagationResult()
    if not records:
        return result
    now = now or timezone.now()
    by_pk = {r.pk: r for r in records}
    pks = list(by_pk)
    tenant_id = records[0].tenant_id
    log: list[Propagation] = []

    def note(record_id: int, kind: str, dependant: str, action: str) -> None:
        log.append(Propagation(tenant_id=tenant_id, record_id=record_id, dependant_kind=kind, dependant_id=dependant,
                               action=action, reason=reason, at=now))  # fmt: skip

    # Most changes have no dependant but their vector entry: one round trip says which kinds to visit.
    present = _dependant_kinds(pks, now)

    # 1. Summaries.
    uses = (
        []
        if "summaries" not in present
        else list(
            SummaryBase.objects.filter(record_id__in=pks, summary__status=Summary.Status.CURRENT).values_list(
                "summary_id", "summary__public_id", "record_id"
            )
        )
    )
    result.summaries = sorted({summary_id for summary_id, _, _ in uses})
    if result.summaries:
        Summary.objects.filter(id__in=result.summaries, status=Summary.Status.CURRENT).update(
            status=Summary.Status.STALE, status_reason=reason, status_changed_at=now
        )
        for _, public_id, record_id in uses:
            note(record_id, Kind.SUMMARY, public_id, "marked_stale")
        enqueue_after_commit(regenerate_summaries, result.summaries)

    # 2. Scheduled actions.
    planned = (
        []
        if "actions" not in present
        else list(
            ActionBase.objects.filter(record_id__in=pks, action__status=ScheduledAction.Status.SCHEDULED).values_list(
                "action_id", "action__public_id", "record_id"
            )
        )
    )
    result.actions = sorted({action_id for action_id, _, _ in planned})
    if result.actions:
        ScheduledAction.objects.filter(id__in=result.actions, status=ScheduledAction.Status.SCHEDULED).update(
            status=ScheduledAction.Status.SUSPENDED, status_reason=reason, status_changed_at=now
        )
        for _, public_id, record_id in planned:
            note(record_id, Kind.ACTION, public_id, "suspended")

    # 3. Loaded contexts.
    loaded = (
        []
        if "contexts" not in present
        else list(
            ContextItem.objects.filter(record_id__in=pks, load__expires_at__gt=now).values_list(
                "load_id", "load__agent_id", "load__public_id", "record_id", "revision"
            )
        )
    )
    if loaded:
        notices = [
            Invalidation(
                tenant_id=tenant_id,
                agent_id=agent_id,
                load_id=load_id,
                record_id=record_id,
                memory_id=by_pk[record_id].memory_id,
                revision=revision,
                reason=reason,
                successor_id=by_pk[record_id].superseded_by_id,
                created_at=now,
            )
            for load_id, agent_id, _, record_id, revision in loaded
        ]
        for notice in notices:
            notice.public_id = notice.public_id or new_public_id(Invalidation.public_prefix)
        created = Invalidation.objects.bulk_create(notices, ignore_conflicts=True)
        result.notices = len(created)
        for _, _, load_public_id, record_id, _ in loaded:
            note(record_id, Kind.CONTEXT, load_public_id, "notice_sent")

    # 4. Cache keys.
    cached = [] if "caches" not in present else list(
        CacheEntry.records.through.objects.filter(memoryrecord_id__in=pks, cacheentry__evicted_at__isnull=True)
        .values_list("cacheentry_id", "cacheentry__key", "memoryrecord_id")
    )  # fmt: skip
    if cached:
        CacheEntry.objects.filter(id__in={entry_id for entry_id, _, _ in cached}).update(evicted_at=now)
        result.cache_keys = sorted({key for _, key, _ in cached})
        for _, key, record_id in cached:
            note(record_id, Kind.CACHE, key, "evicted")
        keys = result.cache_keys
        # Now, so this transaction's own reads miss them; and again after commit, in case a concurrent
        # reader refilled a key from the old committed value in between.
        cache.delete_many(keys)
        transaction.on_commit(lambda: cache.delete_many(keys))

    # 5. Vector entries.
    result.vector_records = [r.memory_id for r in records]
    for record in records:
        note(record.pk, Kind.VECTOR, f"record:{record.memory_id}", "marked_unusable")
    enqueue_batched_after_commit(refresh_record_vectors, result.vector_records)

    Propagation.objects.bulk_create(log)
    return result


def _dependant_kinds(pks: list[int], now: datetime) -> set[str]:
    """Which kinds of dependant the records have: one EXISTS per kind, in one statement.

    Written as SQL because it runs on every write that supersedes a record; composing four ORM subqueries
    cost more than the database did.
    """
    t = {
        name: model._meta.db_table
        for name, model in (
            ("summary_base", SummaryBase), ("summary", Summary), ("action_base", ActionBase),
            ("action", ScheduledAction), ("item", ContextItem), ("load", ContextLoad),
            ("cache_link", CacheEntry.records.through), ("cache", CacheEntry),
        )
    }  # fmt: skip
    ids = ", ".join(["%s"] * len(pks))
    sql = f"""
        SELECT
          EXISTS (SELECT 1 FROM {t["summary_base"]} b JOIN {t["summary"]} s ON s.id = b.summary_id
                  WHERE b.record_id IN ({ids}) AND s.status = %s),
          EXISTS (SELECT 1 FROM {t["action_base"]} b JOIN {t["action"]} a ON a.id = b.action_id
                  WHERE b.record_id IN ({ids}) AND a.status = %s),
          EXISTS (SELECT 1 FROM {t["item"]} i JOIN {t["load"]} l ON l.id = i.load_id
                  WHERE i.record_id IN ({ids}) AND l.expires_at > %s),
          EXISTS (SELECT 1 FROM {t["cache_link"]} r JOIN {t["cache"]} e ON e.id = r.cacheentry_id
                  WHERE r.memoryrecord_id IN ({ids}) AND e.evicted_at IS NULL)
    """
    params: list[Any] = [*pks, Summary.Status.CURRENT, *pks, ScheduledAction.Status.SCHEDULED, *pks, now, *pks]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return {kind for kind, found in zip(("summaries", "actions", "contexts", "caches"), row, strict=True) if found}
