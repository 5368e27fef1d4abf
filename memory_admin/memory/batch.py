"""Many assertions at once (bulk onboarding): the same rules as one `actions.assert_fact`, set-based.

Every door that writes many facts (`POST /api/v1/records/batch/`, `manage.py import`) calls `assert_facts`.
Each item goes through the decision order of assert_fact — validation, the issuer check, the assertion
checks and guards (tombstones: 410), `actions.decide` (history, idempotent repeat, dispute, compare-and-swap)
and the same apply functions — and gets its own result, in order. What changes is how often the database
is asked: one query for the fields' policies, per round one statement locking every fact key, the guards in
their set form (`hooks.guard_assertions`: the tombstone checks, one query per kind), one read of the facts'
heads and accepted rows, one of their revisions, and the writes collected (`actions.DeferredWrites`) into a
few bulk statements: updates, inserts, audit events, one propagation of the beliefs that ended and one
`records_changed` notification. On PostgreSQL those statements are set-based SQL (`lib.rows`: each column
one array, `INSERT ... SELECT FROM unnest(...)`, `UPDATE ... FROM unnest(...)`), as is the read of the facts
(the keys joined as arrays); elsewhere the ORM's bulk_create and bulk_update.

1. Items that fail validation, the issuer check or the assertion checks get their error and write nothing.
2. The rest run in one transaction, in rounds: a round holds at most one item per fact key, so an item sees
   what an earlier item of the same fact wrote (a batch may create a fact and then supersede it).
3. An item refused inside the transaction (a tombstone, a stale `expected_revision`, an open dispute) writes
   nothing and does not stop the others — unless `atomic`: then any failure rolls everything back, and the
   answer names the failing items (the others are reported `not_applied`).
4. If a database constraint catches a race the locks did not (a writer without them), the batch is rolled
   back and, unless atomic, its items are applied one by one through `assert_fact` instead.

Python's cyclic garbage collector is paused while a batch runs (`_CollectorPause`: it found nothing to free).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import reduce
from operator import or_
from typing import Any, cast

from celery import signature
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Field, Max, Q
from django.utils import timezone

from memory_admin.accounts.models import Principal, Tenant
from memory_admin.lib import rows, sealing
from memory_admin.memory import audit, audit_chain, hooks, stats
from memory_admin.memory.actions import (
    Assertion,
    AssertResult,
    Outcome,
    Step,
    assert_fact,
    decide,
    derived_from_problems,
    fact_lock_key,
    fact_write,
    project_for,
    validate_assertion,
)
from memory_admin.memory.actions.assertion import _Write
from memory_admin.memory.actions.fact_writes import _APPLY
from memory_admin.memory.errors import DomainError, RevisionConflict
from memory_admin.memory.models import AuditEvent, FieldPolicy, MemoryRecord, Project
from memory_admin.memory.policies import authorize_issuer, policies_for
from memory_admin.queueing import enqueue_after_commit

Status = MemoryRecord.Status

# The most assertions one call takes (the API's limit; the import command sends batches of at most this).
MAX_BATCH_ITEMS = 1000

# The reason the dependants of beliefs a batch ended are given (each record's `superseded_by` names its successor).
BATCH_SUPERSEDED_REASON = "Superseded by a newer value asserted in a batch."

# The HTTP status of each outcome of an assertion (POST /records/ and each item of a batch answer with it).
OUTCOME_STATUS = {Outcome.CREATED: 201, Outcome.HISTORY: 200, Outcome.UNCHANGED: 200, Outcome.DISPUTED: 202}


class BatchTooLarge(DomainError):
    code = "batch_too_large"
    status = 413


class NotApplied(DomainError):
    """An item of an atomic batch that did not fail itself, but was rolled back with the batch."""

    code = "not_applied"
    status = 424


@dataclass(frozen=True)
class ItemResult:
    """One item's result: an outcome and its record (and dispute), or the error that refused it."""

    index: int
    result: AssertResult | None = None
    error: DomainError | None = None

    @property
    def status(self) -> int:
        """The HTTP status a single `POST /records/` would have answered."""
        if self.result is not None:
            return OUTCOME_STATUS[self.result.outcome]
        assert self.error is not None
        return self.error.status

    @property
    def outcome(self) -> str:
        """`created`, `history`, `unchanged`, `disputed`, or the error's code."""
        if self.result is not None:
            return self.result.outcome.value
        assert self.error is not None
        return self.error.code


@dataclass(frozen=True)
class BatchResult:
    items: list[ItemResult]
    atomic: bool
    # False when an atomic batch was rolled back: nothing of it was written.
    applied: bool

    @property
    def failed(self) -> list[int]:
        """Indexes of the items refused on their own (not those an atomic rollback took with them)."""
        return [r.index for r in self.items if r.error is not None and not isinstance(r.error, NotApplied)]

    def counts(self) -> dict[str, int]:
        """How many items ended each way (outcome or error code)."""
        counts: dict[str, int] = {}
        for r in self.items:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        return counts


def assert_facts(
    principal: Principal,
    items: Sequence[Assertion | DomainError],
    *,
    atomic: bool = False,
    now: datetime | None = None,
) -> BatchResult:
    """Assert each of `items` for the principal's tenant, as `assert_fact` would one by one (see the module's
    docstring for the steps). An item given as a DomainError (the door could not parse it) is reported as such.
    """
    if len(items) > MAX_BATCH_ITEMS:
        raise BatchTooLarge(f"At most {MAX_BATCH_ITEMS} assertions per batch; this one has {len(items)}.")
    with _collector_paused():
        return _assert_facts(principal, items, atomic=atomic, now=now)


def _assert_facts(
    principal: Principal, items: Sequence[Assertion | DomainError], *, atomic: bool, now: datetime | None
) -> BatchResult:
    tenant: Tenant = principal.require_tenant
    now = now or timezone.now()
    errors: dict[int, DomainError] = {}
    pending = _checked(principal, tenant, items, errors)
    if atomic and errors:
        return _not_applied(items, errors)
    results: dict[int, AssertResult] = {}
    refused: list[DomainError] = []  # refusals made inside the transaction (the write scopes see them)
    try:
        with hooks.write_scope("assert_facts", principal.name):
            with transaction.atomic():
                _apply_rounds(principal, tenant, pending, now, results, errors, refused)
                if atomic and errors:
                    raise _RolledBack
                if len(results) >= settings.STATS_REFRESH_BATCH_MIN and connection.vendor == "postgresql":
                    # A large import: the planner's statistics are brought up to date (memory/planner_stats.py).
                    enqueue_after_commit(signature(REFRESH_PLANNER_STATISTICS))
    except _RolledBack:
        _report_refusals(principal, refused)
        return _not_applied(items, errors)
    except IntegrityError:
        # A constraint caught a race the locks did not: nothing of the batch was written.
        if atomic:
            conflict = RevisionConflict("A fact of this batch changed while it was applied; nothing was written.")
            return _not_applied(items, {i: conflict for i in range(len(items))})
        return _one_by_one(principal, items, now)
    _report_refusals(principal, refused)
    out = [ItemResult(i, result=results.get(i), error=None if i in results else errors[i]) for i in range(len(items))]
    return BatchResult(out, atomic=atomic, applied=True)


REFRESH_PLANNER_STATISTICS = "memory_admin.memory.tasks.refresh_planner_statistics"


class _RolledBack(Exception):
    pass


class _CollectorPause:
    """Python's cyclic garbage collector held off while batches run (`gc.disable`), resumed when the last one
    ends, if it was running when the first began.

    A batch builds tens of thousands of container objects (records, snapshots, events, results) that live until
    it ends, when reference counting frees them. Meanwhile the collector's allocation count sets it off some fifty
    times per batch of a thousand supersessions, each pass walking those live objects and freeing next to nothing
    (a few objects per batch, measured), and every few batches a full pass over the process's heap (~150 ms on
    the bench machine): a tenth or more of a batch's Python time (bench/onboarding.py). No result depends on the
    collector; a reference cycle a batch leaves is collected after. The switch is process-wide, so it is counted:
    concurrent batches (threads) resume the collector once, when the last ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._resume = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._running == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0 and self._resume:
                    gc.enable()


_collector_paused = _CollectorPause()


@dataclass
class _Pending:
    """An item that passed the checks made before the transaction."""

    index: int
    assertion: Assertion
    write: hooks.FactWrite
    policy: FieldPolicy | None

    @property
    def key(self) -> tuple[str, str, str]:
        a = self.assertion
        return (a.project_id, a.subject_id, a.predicate)


def _checked(
    principal: Principal, tenant: Tenant, items: Sequence[Assertion | DomainError], errors: dict[int, DomainError]
) -> list[_Pending]:
    """Step 1: validation, the issuer check (one query for every field's policy) and the assertion checks."""
    valid: dict[int, Assertion] = {}
    for i, item in enumerate(items):
        if isinstance(item, DomainError):
            errors[i] = item
            continue
        try:
            validate_assertion(item)
        except DomainError as exc:
            errors[i] = exc
            continue
        valid[i] = item
    policies = policies_for(tenant, {(a.project_id, a.predicate) for a in valid.values()})
    pending = []
    for i, a in valid.items():
        policy = policies[(a.project_id, a.predicate)]
        write = fact_write(tenant.pk, a)
        try:
            authorize_issuer(principal, policy)
            hooks.check_assertion(write)
        except DomainError as exc:
            errors[i] = exc
            continue
        pending.append(_Pending(i, a, write, policy))
    lineage = derived_from_problems(tenant.pk, [p.assertion for p in pending])
    for n, error in lineage.items():
        errors[pending[n].index] = error
    return [p for n, p in enumerate(pending) if n not in lineage]


def _rounds(pending: list[_Pending]) -> Iterator[list[_Pending]]:
    """The items in rounds with at most one item per fact key, each key's items in their order."""
    seen: dict[tuple[str, str, str], int] = {}
    rounds: list[list[_Pending]] = []
    for item in pending:
        n = seen.get(item.key, 0)
        seen[item.key] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(item)
    yield from rounds


def _apply_rounds(
    principal: Principal,
    tenant: Tenant,
    pending: list[_Pending],
    now: datetime,
    results: dict[int, AssertResult],
    errors: dict[int, DomainError],
    refused: list[DomainError],
) -> None:
    projects = {key: project_for(tenant, key) for key in sorted({p.assertion.project_id for p in pending})}
    for round_items in _rounds(pending):
        _lock_facts(tenant.pk, [p.key for p in round_items])
        refusals = hooks.guard_assertions([item.write for item in round_items])
        guarded = []
        for n, item in enumerate(round_items):
            if n in refusals:
                errors[item.index] = refusals[n]
                refused.append(refusals[n])
                continue
            guarded.append(item)
        facts = _read_facts(tenant.pk, projects, [p.key for p in guarded])
        sealing.prepare_keys(sealing.Fact(tenant.pk, projects[p.key[0]].pk, p.key[1], p.key[2]) for p in guarded)
        deferred = _Deferred(tenant.pk, now)
        deferred.reserve(len(guarded))
        for item in guarded:
            locked, next_revision = facts.get(item.key, ([], 1))
            w = _Write(
                principal=principal,
                assertion=item.assertion,
                project=projects[item.assertion.project_id],
                policy=item.policy,
                now=now,
                verified_at=None,
                memory_id="",
                locked=locked,
                head=next((r for r in locked if r.is_head), None),
                next_revision=next_revision,
                deferred=deferred,
            )
            try:
                decision = decide(w)
            except DomainError as exc:
                errors[item.index] = exc
                refused.append(exc)
                continue
            if decision.step == Step.DISPUTE:
                w = replace(w, deferred=None)  # rare: written at once (a dispute row links the new record)
            results[item.index] = _APPLY[decision.step](w, decision)
        deferred.flush()


def _lock_facts(tenant_id: int, keys: list[tuple[str, str, str]]) -> None:
    """`actions.lock_fact` for many fact keys in one statement, in key order (two batches never deadlock)."""
    if connection.vendor != "postgresql" or not keys:
        return
    lock_keys = sorted({fact_lock_key(tenant_id, *key) for key in keys})
    with connection.cursor() as cursor:
        # unnest yields the array in order, and each row takes its lock before the next is read.
        cursor.execute("SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS k", [lock_keys])


def _read_facts(
    tenant_id: int, projects: dict[str, Project], keys: list[tuple[str, str, str]]
) -> dict[tuple[str, str, str], tuple[list[MemoryRecord], int]]:
    """`actions.facts._read_fact` for many fact keys: each key's head and accepted rows (locked) and its next
    revision (over every version, tombstoned ones awaiting purge included), in two queries."""
    if not keys:
        return {}
    if connection.vendor == "postgresql":
        return _read_facts_joined(tenant_id, projects, keys)
    by_field: dict[tuple[str, str], set[str]] = {}
    for project_key, subject_id, predicate in keys:
        by_field.setdefault((project_key, predicate), set()).add(subject_id)
    where = reduce(
        or_,
        (
            Q(project_id=projects[project_key].pk, predicate=predicate, subject_id__in=sorted(subjects))
            for (project_key, predicate), subjects in by_field.items()
        ),
    )
    key_of = {p.pk: k for k, p in projects.items()}
    maxima = {
        (key_of[row["project_id"]], row["subject_id"], row["predicate"]): row["m"]
        for row in MemoryRecord.all_objects.filter(where, tenant_id=tenant_id)
        .values("project_id", "subject_id", "predicate")
        .annotate(m=Max("revision"))
        .order_by()
    }
    locked: dict[tuple[str, str, str], list[MemoryRecord]] = {}
    found = (
        MemoryRecord.objects.select_for_update(no_key=True)  # as assert_fact's lock (actions/facts.py)
        .filter(where, tenant_id=tenant_id)
        .filter(Q(is_head=True) | Q(status=Status.ACCEPTED))
        .order_by("pk")
    )
    for record in found:
        record.project = projects[key_of[record.project_id]]
        locked.setdefault((record.project.key, record.subject_id, record.predicate), []).append(record)
    return {key: (locked.get(key, []), (maxima.get(key) or 0) + 1) for key in keys}


def _key_arrays(projects: dict[str, Project], keys: list[tuple[str, str, str]]) -> list[str]:
    """Fact keys as the three arrays `_read_facts_joined`'s `unnest` takes: project ids, subjects, predicates."""
    return [
        rows.array_literal([str(projects[p].pk) for p, _, _ in keys]),
        rows.array_literal([s for _, s, _ in keys]),
        rows.array_literal([pr for _, _, pr in keys]),
    ]


def _read_facts_joined(
    tenant_id: int, projects: dict[str, Project], keys: list[tuple[str, str, str]]
) -> dict[tuple[str, str, str], tuple[list[MemoryRecord], int]]:
    """`_read_facts` on PostgreSQL: the keys sent as three arrays, and each key looked up on its own in the
    fact's unique index (`record_unique_fact_revision`), instead of an OR of one condition per field built by
    the ORM.

    Per key, not joined: the planner must not choose a plan by the tenant's row count. A tenant that is
    importing grows faster than autovacuum analyzes a large table, so its statistics say "no rows", and a
    join of the keys to the records was planned as a hash of every record of the tenant (1.2-1.7 s per batch
    of 1,000 keys at 370,000 records, growing with the tenant). The highest revision is a correlated MAX
    (a backward scan of that index); the rows to lock are a LATERAL subquery kept apart by `OFFSET 0` (so it
    stays a nested loop) and ordered by revision, which only that index gives without a sort (with the
    tenant's rows estimated at none, an index on fewer of the key's columns ties with it otherwise). The
    locked rows' conditions are repeated outside, where `FOR UPDATE` checks them again on a row another
    transaction changed meanwhile."""
    key_of = {p.pk: k for k, p in projects.items()}
    table = connection.ops.quote_name(MemoryRecord._meta.db_table)
    given = "unnest(%s::bigint[], %s::text[], %s::text[]) AS k (project_id, subject_id, predicate)"
    of_key = (
        "v.tenant_id = %s AND v.project_id = k.project_id AND v.subject_id = k.subject_id AND v.predicate = k.predicate"
    )
    lockable = "{t}.tombstoned_at IS NULL AND ({t}.is_head OR {t}.status = %s)"
    maxima: dict[tuple[str, str, str], int] = {}
    with connection.cursor() as cursor:
        # Revisions count every version, tombstoned ones awaiting purge included.
        cursor.execute(
            f"SELECT k.project_id, k.subject_id, k.predicate, (SELECT max(v.revision) FROM {table} v WHERE {of_key}) "
            f"FROM {given}",
            [tenant_id, *_key_arrays(projects, keys)],
        )
        for project_pk, subject_id, predicate, m in cursor.fetchall():
            if m is not None:
                maxima[(key_of[project_pk], subject_id, predicate)] = m
    locked: dict[tuple[str, str, str], list[MemoryRecord]] = {}
    if maxima:  # a fact with no version at all has nothing to lock
        accepted = Status.ACCEPTED.value
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {rows.select_list(MemoryRecord, 'r')} FROM {table} r WHERE r.id = ANY(ARRAY("
                f"SELECT x.id FROM {given} CROSS JOIN LATERAL (SELECT v.id FROM {table} v WHERE {of_key} "
                f"AND {lockable.format(t='v')} ORDER BY v.revision OFFSET 0) x)) AND {lockable.format(t='r')} "
                "ORDER BY r.id FOR UPDATE OF r",
                # Only the keys with a version: a new fact has no row to lock.
                [*_key_arrays(projects, list(maxima)), tenant_id, accepted, accepted],
            )
            found = cursor.fetchall()
        for row in found:
            record = rows.load(MemoryRecord, row)
            record.project = projects[key_of[record.project_id]]
            locked.setdefault((record.project.key, record.subject_id, record.predicate), []).append(record)
    return {key: (locked.get(key, []), maxima.get(key, 0) + 1) for key in keys}


@dataclass
class _Deferred:
    """The writes of one round, collected by the apply functions (actions.DeferredWrites) and made in bulk.

    Order matters as in assert_fact: the old heads lose their flag before the new heads are inserted (one head
    per fact key), and rows that point to a new record (`superseded_by`) are updated after it exists. On
    PostgreSQL the new records' ids are reserved from the table's sequence first (`reserve`), so every change
    of an old row is one UPDATE before the inserts (the `superseded_by` key is checked at commit).
    """

    tenant_id: int
    now: datetime
    reserved: list[int] = field(default_factory=list)
    ids_reserved: bool = False
    inserts: list[MemoryRecord] = field(default_factory=list)
    unheaded: list[MemoryRecord] = field(default_factory=list)
    updates: dict[int, tuple[MemoryRecord, set[str]]] = field(default_factory=dict)
    events: list[audit.Event] = field(default_factory=list)
    ended: list[MemoryRecord] = field(default_factory=list)

    def reserve(self, count: int) -> None:
        """Reserve ids for up to `count` new records (PostgreSQL: one query; elsewhere nothing)."""
        if connection.vendor != "postgresql" or count == 0:
            return
        table = MemoryRecord._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)", [table, count]
            )
            self.reserved = [row[0] for row in cursor.fetchall()]
        self.reserved.reverse()
        self.ids_reserved = True

    def insert(self, record: MemoryRecord) -> None:
        if self.reserved:
            record.pk = self.reserved.pop()
        self.inserts.append(record)

    def update(self, record: MemoryRecord, fields: list[str]) -> None:
        if fields == ["is_head"] and not record.is_head and not self.ids_reserved:
            self.unheaded.append(record)
            return
        _, known = self.updates.setdefault(id(record), (record, set()))
        known.update(fields)

    def audit(self, events: list[audit.Event]) -> None:
        self.events.extend(events)

    def belief_ended(self, records: list[MemoryRecord]) -> None:
        self.ended.extend(records)

    def flush(self) -> None:
        by_fields: dict[tuple[str, ...], list[MemoryRecord]] = {}
        for record, changed in self.updates.values():
            by_fields.setdefault(tuple(sorted(changed)), []).append(record)
        ids_known = all(record.pk is not None for record in self.inserts)
        if self.unheaded:
            _update_rows(self.unheaded, ["is_head"])
        if ids_known:  # every update names existing ids: all of them before the inserts
            for names, records in by_fields.items():
                _update_rows(records, list(names))
        if self.inserts:
            _insert_rows(self.inserts, ids_known)
        if not ids_known:
            for names, records in by_fields.items():
                _update_rows(records, list(names))
        hooks.belief_ended(self.ended, reason=BATCH_SUPERSEDED_REASON, now=self.now)
        if self.inserts:
            hooks.records_changed(self.inserts)
        if self.events:
            _record_events(self.events, self.tenant_id, self.now)


def _insert_rows(records: list[MemoryRecord], ids_known: bool) -> None:
    """Insert the new records: on PostgreSQL (ids reserved) one `INSERT ... SELECT FROM unnest(...)`
    (lib.rows; bulk_create's per-field preparation cost more in Python than the rows cost the database),
    elsewhere bulk_create."""
    if connection.vendor == "postgresql" and ids_known:
        for record in records:
            # A predecessor assigned as an object (history rows name the head): write its id.
            if MemoryRecord.superseded_by.is_cached(record) and record.superseded_by is not None:
                record.superseded_by_id = record.superseded_by.pk
        rows.insert_objects(records)
        for record in records:
            record._state.adding = False
            record._state.db = connection.alias
        return
    MemoryRecord.objects.bulk_create(records)


def _update_rows(records: list[MemoryRecord], names: list[str]) -> None:
    """Write the fields `names` of `records` (each its own values) in one statement.

    On PostgreSQL an `UPDATE ... FROM unnest(...)` (lib.rows): Django's bulk_update builds a CASE WHEN
    per row and field, which costs more in Python than the database spends on the rows. Elsewhere bulk_update.
    """
    for record in records:
        # A successor assigned before it was inserted: its id is known now.
        if MemoryRecord.superseded_by.is_cached(record) and record.superseded_by is not None:
            record.superseded_by_id = record.superseded_by.pk
    if connection.vendor != "postgresql":
        with sealing.stored_values(records, names):  # bulk_update writes attributes as they are: sealed first
            MemoryRecord.objects.bulk_update(records, names)
        return
    attnames = [cast("Field[Any, Any]", MemoryRecord._meta.get_field(name)).attname for name in names]
    stats.update_objects_counted(records, attnames)


def _record_events(events: list[audit.Event], tenant_id: int, at: datetime) -> None:
    """`audit.record_events` for a batch's events: on PostgreSQL one `INSERT ... SELECT FROM unnest(...)` of the
    same columns (actor name as record_events gives it, each event chained in order: memory.audit_chain), then
    the chain head's UPDATE; elsewhere record_events itself."""
    if connection.vendor != "postgresql" or not events:
        audit.record_events(events, tenant=tenant_id, at=at)
        return
    stored = [e.stored() for e in events]  # sealed under each event's fact (memory.audit)
    actor_names = {}
    for e in events:
        if e.actor is not None and e.actor.pk not in actor_names:
            actor_names[e.actor.pk] = e.actor.name or e.actor.username
    head = audit_chain.lock_head(tenant_id)
    sealed = []
    for e, (before, after, reason) in zip(events, stored, strict=True):
        values = {
            "at": at,
            "actor_id": e.actor.pk if e.actor is not None else None,
            "actor_name": actor_names[e.actor.pk] if e.actor is not None else "system",
            "action": str(e.action),
            "object_type": e.object_type,
            "object_id": e.object_id,
            "before": before,
            "after": after,
            "reason": reason,
        }
        audit_chain.seal(head, values)
        sealed.append(values)
    columns: dict[str, list[Any]] = {"tenant_id": [tenant_id] * len(events)}
    for name in sealed[0]:
        columns[name] = [values[name] for values in sealed]
    # The rows get their ids in the arrays' order (ROWS FROM unnest), which is the chain's order.
    rows.insert_columns(AuditEvent, columns)
    audit_chain.store_head(head)
    if audit_chain.checkpoint_due(head, timezone.now()):
        last = AuditEvent.objects.filter(tenant_id=tenant_id).order_by("-id").values_list("id", flat=True).first()
        assert last is not None
        audit_chain.after_append(head, last)


def _report_refusals(principal: Principal, refused: list[DomainError]) -> None:
    """An item refused inside the transaction passes through the write scopes as a refused write of its own
    would (a tombstone's refusal is logged there), after the batch's transaction ended."""
    for exc in refused:
        try:
            with hooks.write_scope("assert_facts", principal.name):
                raise exc
        except DomainError:
            pass


def _not_applied(items: Sequence[object], errors: dict[int, DomainError]) -> BatchResult:
    failed = ", ".join(str(i) for i in sorted(errors)[:20]) + (", ..." if len(errors) > 20 else "")
    skipped = NotApplied(f"Not applied: the batch is atomic and item(s) {failed} failed.")
    out = [ItemResult(i, error=errors.get(i, skipped)) for i in range(len(items))]
    return BatchResult(out, atomic=True, applied=False)


def _one_by_one(principal: Principal, items: Sequence[Assertion | DomainError], now: datetime) -> BatchResult:
    out = []
    for i, item in enumerate(items):
        if isinstance(item, DomainError):
            out.append(ItemResult(i, error=item))
            continue
        try:
            out.append(ItemResult(i, result=assert_fact(principal, item, now=now)))
        except DomainError as exc:
            out.append(ItemResult(i, error=exc))
    return BatchResult(out, atomic=False, applied=True)
