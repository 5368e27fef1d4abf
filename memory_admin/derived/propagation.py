"""Stale propagation (PRODUCT.md rule 10): fixing the record does not fix the answers.

`propagate` is the one function called whenever records stop being the current belief (superseded,
expired, excluded, disputed, or a dispute resolved against them). It runs inside the caller's
transaction; what lies outside the database (cache keys, vector entries) is changed after commit.

Each kind of dependant is one `Step`, and `STEPS` is their registry: the built-ins are listed in `_builtins`
at the end of this module, one line each, in the order they are visited. A step of a higher layer is
registered with `STEPS.register(Step(...))` in its app's `AppConfig.ready()`, and runs after these.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from memory_admin.derived import caches, task_refs
from memory_admin.derived.models import (
    ActionBase,
    CacheEntry,
    ContextItem,
    ContextLoad,
    Invalidation,
    PendingVector,
    Propagation,
    ScheduledAction,
    Summary,
    SummaryBase,
)
from memory_admin.lib import rows
from memory_admin.lib.registry import Registry, describe
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


@dataclass
class Run:
    """One propagation: the records whose belief ended, and what was done to their dependants."""

    records: Sequence[MemoryRecord]
    reason: str
    now: datetime
    result: PropagationResult = field(default_factory=PropagationResult)
    log: list[Propagation] = field(default_factory=list)

    @property
    def tenant_id(self) -> int:
        return self.records[0].tenant_id

    @property
    def pks(self) -> list[int]:
        return [r.pk for r in self.records]

    def note(self, record_id: int, kind: str, dependant: str, action: str) -> None:
        self.log.append(
            Propagation(
                tenant_id=self.tenant_id,
                record_id=record_id,
                dependant_kind=kind,
                dependant_id=dependant,
                action=action,
                reason=self.reason,
                at=self.now,
            )
        )


@dataclass
class SetRun:
    """One `propagate_set`: the records one condition names, and what was done to their dependants."""

    records: QuerySet[MemoryRecord]
    tenant_id: int
    reason: str
    now: datetime
    result: PropagationResult = field(default_factory=PropagationResult)


# An SQL condition on a record id column ("= ANY(%s::bigint[])" or "IN (%s, ...)") and its parameters.
IdMatch = tuple[str, list[Any]]


@dataclass(frozen=True)
class Step:
    """One kind of dependant propagation visits.

    `kind` is its key (and what `propagate_set(kinds=...)` names). `handle` does to the dependants of a `Run`'s
    records what their belief ending means for them, noting each one it touches with `run.note`. `present`, if
    given, returns an SQL boolean (an EXISTS) and its parameters saying whether the records have such a
    dependant at all, given `IdMatch` for the record id column and the time: every step's is asked in one
    statement, and `handle` runs only when it is true (without `present` it runs every time). `handle_set`,
    if given, does the same for a `SetRun` (records named by one condition), set-based.
    """

    kind: str
    handle: Callable[[Run], None]
    present: Callable[[IdMatch, datetime], tuple[str, list[Any]]] | None = None
    handle_set: Callable[[SetRun], None] | None = None


def propagate(records: Sequence[MemoryRecord], *, reason: str, now: datetime | None = None) -> PropagationResult:
    """Tell every dependant of `records` that they are no longer the current belief.

    1. summaries built on them → stale (a registered regenerator rebuilds them, after commit, from the
       current bases only);
    2. scheduled actions built on them → suspended until re-confirmed against the current value;
    3. loaded contexts that have not expired → one invalidation notice per loaded copy, open until the
       agent acknowledges it;
    4. cache keys whose manifest names them → evicted after commit;
    5. their vector entries → marked unusable after commit (a Celery task).
    Each dependant touched gets a Propagation row, so a person can see what was done. One step per kind
    of dependant (`STEPS`, in their order); memory calls this through its `belief_ended` hook.
    """
    if not records:
        return PropagationResult()
    run = Run(records=records, reason=reason, now=now or timezone.now())
    # Most changes have no dependant but their vector entry: one round trip says which kinds to visit.
    present = _dependant_kinds(run.pks, run.now)
    for step in STEPS.values():
        if step.present is None or step.kind in present:
            step.handle(run)
    # One INSERT of the log rows (a batch ends a thousand beliefs at once; bulk_create's per-field preparation
    # cost more than the rows).
    rows.insert_new(run.log)
    return run.result


def _stale_summaries(run: Run) -> None:
    """1. Summaries built on the records → stale, and regenerated after commit."""
    uses = list(
        SummaryBase.objects.filter(record_id__in=run.pks, summary__status=Summary.Status.CURRENT).values_list(
            "summary_id", "summary__public_id", "record_id"
        )
    )
    run.result.summaries = sorted({summary_id for summary_id, _, _ in uses})
    if not run.result.summaries:
        return
    Summary.objects.filter(id__in=run.result.summaries, status=Summary.Status.CURRENT).update(
        status=Summary.Status.STALE, status_reason=run.reason, status_changed_at=run.now
    )
    for _, public_id, record_id in uses:
        run.note(record_id, Kind.SUMMARY, public_id, "marked_stale")
    enqueue_after_commit(task_refs.regenerate_summaries(), run.result.summaries)


def _suspend_actions(run: Run) -> None:
    """2. Scheduled actions built on the records → suspended until re-confirmed."""
    planned = list(
        ActionBase.objects.filter(record_id__in=run.pks, action__status=ScheduledAction.Status.SCHEDULED).values_list(
            "action_id", "action__public_id", "record_id"
        )
    )
    run.result.actions = sorted({action_id for action_id, _, _ in planned})
    if not run.result.actions:
        return
    ScheduledAction.objects.filter(id__in=run.result.actions, status=ScheduledAction.Status.SCHEDULED).update(
        status=ScheduledAction.Status.SUSPENDED, status_reason=run.reason, status_changed_at=run.now
    )
    for _, public_id, record_id in planned:
        run.note(record_id, Kind.ACTION, public_id, "suspended")


def _notify_contexts(run: Run) -> None:
    """3. Loaded contexts that have not expired → one invalidation notice per loaded copy."""
    loaded = list(
        ContextItem.objects.filter(record_id__in=run.pks, load__expires_at__gt=run.now).values_list(
            "load_id", "load__agent_id", "load__public_id", "record_id", "revision"
        )
    )
    if not loaded:
        return
    by_pk = {r.pk: r for r in run.records}
    notices = [
        Invalidation(
            tenant_id=run.tenant_id,
            agent_id=agent_id,
            load_id=load_id,
            record_id=record_id,
            memory_id=by_pk[record_id].memory_id,
            revision=revision,
            reason=run.reason,
            successor_id=by_pk[record_id].superseded_by_id,
            created_at=run.now,
        )
        for load_id, agent_id, _, record_id, revision in loaded
    ]
    for notice in notices:
        notice.public_id = notice.public_id or new_public_id(Invalidation.public_prefix)
    created = Invalidation.objects.bulk_create(notices, ignore_conflicts=True)
    run.result.notices = len(created)
    for _, _, load_public_id, record_id, _ in loaded:
        run.note(record_id, Kind.CONTEXT, load_public_id, "notice_sent")


def _evict_caches(run: Run) -> None:
    """4. Cache keys whose manifest names the records → evicted now and again after commit."""
    cached = list(
        CacheEntry.records.through.objects.filter(
            memoryrecord_id__in=run.pks, cacheentry__evicted_at__isnull=True
        ).values_list("cacheentry_id", "cacheentry__key", "memoryrecord_id")
    )
    if not cached:
        return
    CacheEntry.objects.filter(id__in={entry_id for entry_id, _, _ in cached}).update(evicted_at=run.now)
    run.result.cache_keys = sorted({key for _, key, _ in cached})
    for _, key, record_id in cached:
        run.note(record_id, Kind.CACHE, key, "evicted")
    # Now, so this transaction's own reads miss them, and again after commit (caches.evict).
    caches.evict(run.result.cache_keys)


def _mark_vectors_unusable(run: Run) -> None:
    """5. The records' vector entries → re-marked (unusable) after commit; every record has one."""
    run.result.vector_records = [r.memory_id for r in run.records]
    for record in run.records:
        run.note(record.pk, Kind.VECTOR, f"record:{record.memory_id}", "marked_unusable")
    enqueue_batched_after_commit(task_refs.refresh_record_vectors(), run.result.vector_records)


# The notices alone (to agents holding copies in their contexts): what a deletion's acceptance asks of
# `propagate_set` (its stores do the rest).
NOTICES = ("contexts",)


def propagate_set(
    records: QuerySet[MemoryRecord],
    *,
    tenant_id: int,
    reason: str,
    now: datetime,
    kinds: Collection[str] | None = None,
) -> PropagationResult:
    """`propagate` for records named by one condition (a deletion's scope, thousands of records): one or two
    statements per kind of dependant, each joined to `records` as a subquery, never one per record and
    never a list of record ids.

    `kinds` chooses among the steps that do a set (`set_kinds()`, all of them by default): summaries (→ stale,
    regenerated after commit), actions (→ suspended), contexts (→ one notice per loaded copy) and caches
    (→ evicted now and after commit), as `propagate` does them. Vector entries are left to the caller, and no
    Propagation row is written: what was done stays on each dependant (its status and reason, the notice,
    `evicted_at`). A deletion, the caller, purges the records and their propagation rows with them, and
    reports each store itself.
    """
    offered = set_kinds()
    chosen = offered if kinds is None else list(kinds)
    unknown = [kind for kind in chosen if kind not in offered]
    if unknown:
        raise ValueError(f"No propagation step does {unknown} for a set of records; choose among {offered}.")
    run = SetRun(records=records, tenant_id=tenant_id, reason=reason, now=now)
    for step in STEPS.values():
        if step.handle_set is not None and step.kind in chosen:
            step.handle_set(run)
    return run.result


def _stale_summaries_set(run: SetRun) -> None:
    uses = SummaryBase.objects.filter(record__in=run.records, summary__status=Summary.Status.CURRENT)
    run.result.summaries = sorted(set(uses.values_list("summary_id", flat=True)))
    if run.result.summaries:
        Summary.objects.filter(id__in=uses.values("summary_id"), status=Summary.Status.CURRENT).update(
            status=Summary.Status.STALE, status_reason=run.reason, status_changed_at=run.now
        )
        enqueue_after_commit(task_refs.regenerate_summaries(), run.result.summaries)


def _suspend_actions_set(run: SetRun) -> None:
    planned = ActionBase.objects.filter(record__in=run.records, action__status=ScheduledAction.Status.SCHEDULED)
    run.result.actions = sorted(set(planned.values_list("action_id", flat=True)))
    if run.result.actions:
        ScheduledAction.objects.filter(
            id__in=planned.values("action_id"), status=ScheduledAction.Status.SCHEDULED
        ).update(status=ScheduledAction.Status.SUSPENDED, status_reason=run.reason, status_changed_at=run.now)


def _notify_contexts_set(run: SetRun) -> None:
    run.result.notices = _notify_loaded_copies(run.records, run.tenant_id, run.reason, run.now)


def _evict_caches_set(run: SetRun) -> None:
    run.result.cache_keys = _evict_cached(run.records, run.now)


def _notify_loaded_copies(records: QuerySet[MemoryRecord], tenant_id: int, reason: str, now: datetime) -> int:
    """One notice per loaded copy of `records` in a context that has not expired and has none yet: one
    SELECT, one INSERT."""
    noticed = Invalidation.objects.filter(load_id=OuterRef("load_id"), record_id=OuterRef("record_id"))
    copies = ContextItem.objects.filter(record__in=records, load__expires_at__gt=now).exclude(Exists(noticed))
    loaded = copies.values_list(
        "load_id", "load__agent_id", "record_id", "record__memory_id", "record__superseded_by_id", "revision"
    )
    notices = [
        Invalidation(
            public_id=new_public_id(Invalidation.public_prefix),
            tenant_id=tenant_id,
            agent_id=agent_id,
            load_id=load_id,
            record_id=record_id,
            memory_id=memory_id,
            revision=revision,
            reason=reason,
            successor_id=successor_id,
            created_at=now,
        )
        for load_id, agent_id, record_id, memory_id, successor_id, revision in loaded
    ]
    # A concurrent propagation may have sent one of them since the SELECT: the constraint keeps it once.
    Invalidation.objects.bulk_create(notices, ignore_conflicts=True)
    return len(notices)


def _evict_cached(records: QuerySet[MemoryRecord], now: datetime) -> list[str]:
    """The cache keys whose manifest names one of `records`: marked evicted (one UPDATE) and deleted from
    the cache now and again after commit, as `_evict_caches` does."""
    links = CacheEntry.records.through.objects.filter(memoryrecord__in=records).values("cacheentry_id")
    entries = CacheEntry.objects.filter(id__in=links, evicted_at__isnull=True)
    keys = sorted(entries.values_list("key", flat=True))
    if not keys:
        return []
    entries.update(evicted_at=now)
    caches.evict(keys)
    return keys


def refresh_vectors_after_commit(records: Sequence[MemoryRecord]) -> None:
    """Memory's `records_changed` hook: the records are marked pending in the writing transaction (search finds
    them from the database at once: read-your-writes), and their vector entries are refreshed after commit (one
    message per transaction), which clears the marks."""
    mark_pending(records)
    enqueue_batched_after_commit(task_refs.refresh_record_vectors(), [r.memory_id for r in records])


def mark_pending(records: Sequence[MemoryRecord]) -> None:
    """A `PendingVector` row per record, in one INSERT (a record already marked keeps its row). A status change of
    an indexed record is marked too: the hook cannot tell it from a new record, and a mark too many costs a keyword
    match until the refresh queued with it clears it, never a wrong answer (search decides usability)."""
    marked = [(r.pk, r.tenant_id) for r in records if r.pk is not None]
    if not marked:
        return
    table = PendingVector._meta.db_table
    now = PendingVector._meta.get_field("queued_at").get_db_prep_value(timezone.now(), connection)
    # Plain SQL: on the compare-and-swap path the ORM's bulk_create cost more in Python (0.3 ms) than the row did.
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"INSERT INTO {table} (record_id, tenant_id, queued_at) "
                "SELECT r, t, %s::timestamptz FROM unnest(%s::bigint[], %s::bigint[]) AS m(r, t) ON CONFLICT DO NOTHING",
                [now, [pk for pk, _ in marked], [tenant for _, tenant in marked]],
            )
        else:
            rows = ", ".join(["(%s, %s, %s)"] * len(marked))
            cursor.execute(
                f"INSERT INTO {table} (record_id, tenant_id, queued_at) VALUES {rows} ON CONFLICT DO NOTHING",
                [value for pk, tenant in marked for value in (pk, tenant, now)],
            )


def _dependant_kinds(pks: list[int], now: datetime) -> set[str]:
    """Which kinds of dependant the records have: each step's `present` (an EXISTS), all in one statement.

    Written as SQL because it runs on every write that supersedes a record; composing the ORM subqueries
    cost more than the database did.
    """
    probed = [(step.kind, step.present) for step in STEPS.values() if step.present is not None]
    if not probed:
        return set()
    ids: IdMatch
    if connection.vendor == "postgresql":
        # One array parameter: an IN list of 1,000 ids (a batch of supersessions) is planned anew each time
        # and cost 0.2-0.6 s per statement; `= ANY(array)` costs about 10 ms.
        ids = ("= ANY(%s::bigint[])", [list(pks)])
    else:
        ids = (f"IN ({', '.join(['%s'] * len(pks))})", list(pks))
    columns: list[str] = []
    params: list[Any] = []
    for _, present in probed:
        sql, step_params = present(ids, now)
        columns.append(sql)
        params += step_params
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(columns)}", params)
        row = cursor.fetchone()
    return {kind for (kind, _), found in zip(probed, row, strict=True) if found}


def _summaries_present(ids: IdMatch, now: datetime) -> tuple[str, list[Any]]:
    match, params = ids
    sql = (
        f"EXISTS (SELECT 1 FROM {SummaryBase._meta.db_table} b JOIN {Summary._meta.db_table} s ON s.id = b.summary_id"
        f" WHERE b.record_id {match} AND s.status = %s)"
    )
    return sql, [*params, Summary.Status.CURRENT]


def _actions_present(ids: IdMatch, now: datetime) -> tuple[str, list[Any]]:
    match, params = ids
    sql = (
        f"EXISTS (SELECT 1 FROM {ActionBase._meta.db_table} b JOIN {ScheduledAction._meta.db_table} a"
        f" ON a.id = b.action_id WHERE b.record_id {match} AND a.status = %s)"
    )
    return sql, [*params, ScheduledAction.Status.SCHEDULED]


def _contexts_present(ids: IdMatch, now: datetime) -> tuple[str, list[Any]]:
    match, params = ids
    sql = (
        f"EXISTS (SELECT 1 FROM {ContextItem._meta.db_table} i JOIN {ContextLoad._meta.db_table} l ON l.id = i.load_id"
        f" WHERE i.record_id {match} AND l.expires_at > %s)"
    )
    return sql, [*params, now]


def _caches_present(ids: IdMatch, now: datetime) -> tuple[str, list[Any]]:
    match, params = ids
    sql = (
        f"EXISTS (SELECT 1 FROM {CacheEntry.records.through._meta.db_table} r JOIN {CacheEntry._meta.db_table} e"
        f" ON e.id = r.cacheentry_id WHERE r.memoryrecord_id {match} AND e.evicted_at IS NULL)"
    )
    return sql, list(params)


def set_kinds() -> list[str]:
    """The kinds of dependant `propagate_set` can visit (the steps with `handle_set`), in their order."""
    return [step.kind for step in STEPS.values() if step.handle_set is not None]


def _builtins(steps: Registry[Step]) -> None:
    """The built-in steps, in the order `propagate` visits them (its docstring's numbers)."""
    steps.register(Step("summaries", _stale_summaries, _summaries_present, _stale_summaries_set))
    steps.register(Step("actions", _suspend_actions, _actions_present, _suspend_actions_set))
    steps.register(Step("contexts", _notify_contexts, _contexts_present, _notify_contexts_set))
    steps.register(Step("caches", _evict_caches, _caches_present, _evict_caches_set))
    steps.register(Step("vectors", _mark_vectors_unusable))  # every record has one: always, and not for a set


STEPS: Registry[Step] = Registry(
    "propagation step", key=lambda step: step.kind, builtins=_builtins, describe=lambda step: describe(step.handle)
)
