"""Every change to memory records goes through these functions.

The API, the dashboard, management commands and Celery tasks call them; none of PRODUCT.md's rules is
implemented anywhere else. Each runs in one transaction and writes its audit events in it.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Protocol

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from memory_admin.accounts.models import Principal, Tenant
from memory_admin.lib import rows
from memory_admin.memory import audit, hooks, task_failures, validation
from memory_admin.memory.errors import (
    DisputeOpen,
    ExpectedRevisionRequired,
    Forbidden,
    InvalidInput,
    InvalidState,
    NotFound,
    RevisionConflict,
)
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, Project, new_public_id
from memory_admin.memory.policies import authorize_issuer, locked_policy_for, policy_for
from memory_admin.memory.ranking import compare_source_revisions, record_rank, source_rank

Status = MemoryRecord.Status
logger = logging.getLogger(__name__)


class Outcome(enum.StrEnum):
    """What an assertion did; the API maps each to its status code."""

    CREATED = "created"  # the new current belief (201)
    HISTORY = "history"  # stored as history, never current (200)
    UNCHANGED = "unchanged"  # idempotent repeat, nothing stored (200)
    DISPUTED = "disputed"  # both kept, a dispute opened (202)


@dataclass(frozen=True)
class AssertResult:
    outcome: Outcome
    record: MemoryRecord
    dispute: Dispute | None = None


@dataclass(frozen=True)
class Assertion:
    project_id: str
    subject_id: str
    predicate: str
    value: Any
    valid_from: datetime
    source_canonical_ref: str
    source_revision: str
    valid_to: datetime | None = None
    expected_revision: int | None = None
    derived_from: list[dict[str, Any]] | None = None
    event_ids: list[str] | None = None


# Free text (not identifiers): kept as given, within these lengths and without control characters.
_TEXT_LIMITS = {
    "source_canonical_ref": 500,
    "source_revision": 100,
}


def validate_assertion(a: Assertion) -> None:
    """Step 1 of the decision order: refuse malformed input with a reason per field."""
    errors: dict[str, list[str]] = {}
    for name, max_length in validation.IDENTIFIER_MAX_LENGTH.items():
        if problems := validation.identifier_problems(getattr(a, name), max_length):
            errors[name] = problems
    for name, max_length in _TEXT_LIMITS.items():
        text = getattr(a, name)
        if not isinstance(text, str) or not text.strip():
            errors.setdefault(name, []).append("This field is required and may not be blank.")
        elif len(text) > max_length:
            errors.setdefault(name, []).append(f"At most {max_length} characters.")
        elif problems := validation.text_problems(text):
            errors.setdefault(name, []).extend(problems)
    if a.valid_from is None:
        errors["valid_from"] = ["This field is required."]
    for name in ("valid_from", "valid_to"):
        moment = getattr(a, name)
        if moment is not None and (problems := validation.datetime_problems(moment)):
            errors.setdefault(name, []).extend(problems)
    if isinstance(a.valid_from, datetime) and isinstance(a.valid_to, datetime) and "valid_from" not in errors:
        if "valid_to" not in errors and a.valid_to <= a.valid_from:
            errors.setdefault("valid_to", []).append("Must be later than valid_from.")
    if a.value is None:
        errors.setdefault("value", []).append("A fact needs a value; use expire or exclude to retract one.")
    elif len(json.dumps(a.value)) > settings.MEMORY_VALUE_MAX_BYTES:
        errors.setdefault("value", []).append(f"Larger than {settings.MEMORY_VALUE_MAX_BYTES} bytes.")
    if a.expected_revision is not None and (not isinstance(a.expected_revision, int) or a.expected_revision < 0):
        errors.setdefault("expected_revision", []).append("Must be a non-negative integer.")
    if errors:
        raise InvalidInput(errors)


def lock_fact(tenant_id: int, project_key: str, subject_id: str, predicate: str) -> None:
    """Serialize writers of one fact key for the rest of the transaction.

    On PostgreSQL a transaction-level advisory lock on a hash of the key; SQLite already serializes
    writers (transactions begin IMMEDIATE). The database constraints still catch anything that slips.
    """
    if connection.vendor != "postgresql":
        return
    key = fact_lock_key(tenant_id, project_key, subject_id, predicate)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


def fact_lock_key(tenant_id: int, project_key: str, subject_id: str, predicate: str) -> int:
    """The advisory lock key of one fact key (lock_fact; memory.batch locks many at once)."""
    digest = hashlib.blake2b(
        f"{tenant_id}\x1f{project_key}\x1f{subject_id}\x1f{predicate}".encode(),
        digest_size=8,
    )
    return int.from_bytes(digest.digest(), "big", signed=True)


def _recheck_after(policy: FieldPolicy | None, verified_at: datetime | None, now: datetime) -> datetime | None:
    if policy is None or policy.recheck_interval is None:
        return None
    # A value never fetched from the canonical source is due for a recheck at once (rule 7).
    # Policies are bounded on input; the min() keeps a row saved before that bound from breaking every write.
    return (verified_at + min(policy.recheck_interval, validation.MAX_DURATION)) if verified_at else now


def _retain_until(policy: FieldPolicy | None, now: datetime) -> datetime | None:
    if policy is None or policy.retention_days is None:
        return None
    return now + timedelta(days=min(policy.retention_days, validation.MAX_RETENTION_DAYS))


def _cut_overlapping(
    new: MemoryRecord,
    now: datetime,
    accepted: Sequence[MemoryRecord] | None = None,
    deferred: DeferredWrites | None = None,
) -> list[MemoryRecord]:
    """End the validity of accepted records of the fact that overlap `new` from `new.valid_from` on.

    A record whose remaining validity ends by now is superseded (its belief ends now); one that still
    holds until a future `valid_from` stays accepted until then (a scheduled hand-over). `accepted`
    are the fact's accepted rows when the caller already holds them locked.
    """
    if accepted is None:
        accepted = list(
            MemoryRecord.objects.select_for_update()
            .for_fact(new.project, new.subject_id, new.predicate)
            .filter(status=Status.ACCEPTED)
        )
    changed = _cut(new, now, accepted)
    for old in changed:
        _update(deferred, old, list(_CUT_FIELDS))
    _beliefs_ended(new, now, changed, deferred)
    return changed


# What `_cut` may change on a record it cuts.
_CUT_FIELDS = ["valid_to", "valid_to_recorded_at", "superseded_by", "status", "recorded_to"]


def _cut(new: MemoryRecord, now: datetime, accepted: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """`_cut_overlapping`'s decision, in memory: the rows cut (changed, not saved)."""
    changed = []
    for old in accepted:
        if old.pk == new.pk or old.status != Status.ACCEPTED:
            continue
        if old.valid_to is not None and old.valid_to <= new.valid_from:
            continue
        cut = max(old.valid_from, new.valid_from)
        old.valid_to = cut if old.valid_to is None or old.valid_to > cut else old.valid_to
        old.valid_to_recorded_at = now
        old.superseded_by = new
        if old.valid_to <= now:
            old.status = Status.SUPERSEDED
            old.recorded_to = now
        changed.append(old)
    return changed


def _beliefs_ended(
    new: MemoryRecord, now: datetime, changed: list[MemoryRecord], deferred: DeferredWrites | None
) -> None:
    ended = [old for old in changed if old.status == Status.SUPERSEDED]
    if deferred is not None:
        deferred.belief_ended(ended)
    else:
        hooks.belief_ended(ended, reason=f"Superseded by {new.memory_id} (revision {new.revision}).", now=now)


_PROJECT_IDS: dict[tuple[int, str], int] = {}


def project_for(tenant: Tenant, key: str) -> Project:
    """The tenant's project `key`, created on first use. Projects are never deleted, so their ids
    are remembered per process (one query less on every write). A key that is not a valid identifier
    is refused (400) before anything is created."""
    validation.check_identifiers(project_id=key)
    pk = _PROJECT_IDS.get((tenant.pk, key))
    if pk is not None:
        return Project(pk=pk, tenant=tenant, key=key)
    project, _ = Project.objects.get_or_create(tenant=tenant, key=key)
    # Remembered only once committed: a rolled-back creation must not leave a dangling id behind.
    transaction.on_commit(lambda: _PROJECT_IDS.__setitem__((tenant.pk, key), project.pk))
    return project


def _records_changed(*records: MemoryRecord) -> None:
    # The derived stores refresh their copies (vector entries) after commit.
    hooks.records_changed(records)


class DeferredWrites(Protocol):
    """Where the apply functions put their writes when a batch applies many assertions (memory.batch): the
    rows, updates, audit events and ended beliefs are collected and written in a few statements per batch.
    Without one (assert_fact) each write is made at once. Either way the same apply functions decide them."""

    def insert(self, record: MemoryRecord) -> None: ...
    def update(self, record: MemoryRecord, fields: list[str]) -> None: ...
    def audit(self, events: list[audit.Event]) -> None: ...
    def belief_ended(self, records: list[MemoryRecord]) -> None: ...


def _update(deferred: DeferredWrites | None, record: MemoryRecord, fields: list[str]) -> None:
    if deferred is None:
        rows.update(record, fields)
    else:
        deferred.update(record, fields)


def _audit_events(w: _Write, events: list[audit.Event]) -> None:
    if w.deferred is None:
        audit.record_events(events, tenant=w.project.tenant_id, at=w.now)
    else:
        w.deferred.audit(events)


@dataclass(frozen=True)
class _Write:
    """One assertion being applied, with the locked state of its fact (replaces a bag of keyword arguments)."""

    principal: Principal
    assertion: Assertion
    project: Project
    policy: FieldPolicy | None
    now: datetime
    verified_at: datetime | None
    memory_id: str
    # The fact's head and every accepted row, locked (accepted rows may need cutting).
    locked: list[MemoryRecord]
    head: MemoryRecord | None
    next_revision: int
    # Set by memory.batch: the writes are collected and made in bulk (see DeferredWrites).
    deferred: DeferredWrites | None = None
    # The id the version this write inserts takes, drawn with the lock (PostgreSQL, one assertion); else None.
    new_pk: int | None = None


def _new_record(w: _Write, *, status: str, **fields: Any) -> MemoryRecord:
    record = build_record(w, status=status, **fields)
    if w.deferred is not None:
        w.deferred.insert(record)
        return record
    record.pk = w.new_pk
    rows.insert(record)
    _records_changed(record)
    return record


def build_record(w: _Write, *, status: str, **fields: Any) -> MemoryRecord:
    """The new version an assertion writes (unsaved): the one home of how its fields are filled."""
    a = w.assertion
    values = dict(
        tenant_id=w.project.tenant_id,
        project=w.project,
        memory_id=w.memory_id or new_public_id("mem"),
        subject_id=a.subject_id,
        predicate=a.predicate,
        value=a.value,
        status=status,
        valid_from=a.valid_from,
        valid_to=a.valid_to,
        asserted_valid_to=a.valid_to,
        recorded_from=w.now,
        last_verified_at=w.verified_at,
        recheck_after=_recheck_after(w.policy, w.verified_at, w.now),
        retain_until=_retain_until(w.policy, w.now),
        revision=w.next_revision,
        source_canonical_ref=a.source_canonical_ref,
        source_revision=a.source_revision,
        issuer=w.principal,
        derived_from=a.derived_from or [],
        source_event_ids=a.event_ids or [],
    )
    return rows.build(MemoryRecord, {**values, **fields})


def fact_write(tenant_id: int, a: Assertion) -> hooks.FactWrite:
    """What the write guards see of an assertion (one assertion or each item of a batch)."""
    return hooks.FactWrite(
        tenant_id=tenant_id,
        project_id=a.project_id,
        subject_id=a.subject_id,
        predicate=a.predicate,
        value=a.value,
        source_canonical_ref=a.source_canonical_ref,
        source_revision=a.source_revision,
        event_ids=a.event_ids or (),
        derived_from=a.derived_from or (),
        valid_from=a.valid_from,
    )


def derived_from_problems(tenant_id: int, assertions: Sequence[Assertion]) -> dict[int, InvalidInput]:
    """Which of `assertions` (by index) name in `derived_from` a record that is not in their tenant and project at
    that revision: one query for all of them. The same rule as a summary's, an action's or a context load's bases
    (derived.lineage.resolve_bases), so no door takes another tenant's memory id, or one that never existed, as a
    fact's lineage. Ids a deletion removed are left to the write guard, which refuses them with 410."""
    wanted = {d.get("memory_id") for a in assertions for d in (a.derived_from or [])}
    ids = {m for m in wanted if isinstance(m, str) and m}
    if not ids:
        return {}
    found = {
        memory_id: (project, revision)
        for memory_id, project, revision in MemoryRecord.objects.filter(
            tenant_id=tenant_id, memory_id__in=ids
        ).values_list("memory_id", "project__key", "revision")
    }
    deleted = hooks.hidden_memory_ids(tenant_id, ids - found.keys())
    refused: dict[int, InvalidInput] = {}
    for i, a in enumerate(assertions):
        problems = []
        for base in a.derived_from or []:
            memory_id, revision = base.get("memory_id"), base.get("revision")
            if memory_id in deleted:
                continue
            project, actual = found.get(memory_id, (None, None)) if isinstance(memory_id, str) else (None, None)
            if project != a.project_id:
                problems.append(f"{memory_id}: no such record in {a.project_id}.")
            elif revision is not None and actual != revision:
                problems.append(f"{memory_id}: is revision {actual}, not {revision}.")
        if problems:
            refused[i] = InvalidInput({"derived_from": problems})
    return refused


def assert_fact(
    principal: Principal,
    a: Assertion,
    *,
    now: datetime | None = None,
    verified_at: datetime | None = None,
    memory_id: str = "",
) -> AssertResult:
    """Assert a fact for the principal's tenant, following PRODUCT.md rule 3's decision order.

    1. invalid input → InvalidInput (400);
    2. issuer not authorized for the field → IssuerNotAuthorized (403), nothing stored;
    3. same source with an older revision than the current belief, or a source the field's
       canonical source outranks → stored as history (HISTORY) where a believed record covers its valid
       time; where nothing does (its valid_from before any of them), it answers there: its validity is cut
       where the first of them takes over (CREATED while that stretch has not ended, else HISTORY);
    4. same value, source and source revision as the current belief → nothing stored (UNCHANGED);
    5. an equal-rank source that disagrees and cannot be ordered → both kept as disputed (DISPUTED);
    6. otherwise the new value becomes the current belief, by compare-and-swap on
       `expected_revision` (missing → 428, stale → 409); the old version keeps its history.

    Steps 3-6 are `decide()`; each of its outcomes has one apply function. The layers above check the
    assertion (`hooks.check_assertion`, e.g. unknown event ids → 400, part of step 1) before the transaction,
    and guard it (`hooks.guard_assertion`, e.g. a tombstone → 410) inside it, before anything is written.

    Steps 2-6 run in the write's transaction, with the fact key locked: on PostgreSQL the lock, the field's
    policy and the id of the version to write come in one round trip (`policies.locked_policy_for`), and a
    supersession writes the old head once, before the new one (see `_apply_supersede`).

    `now` fixes the clock (demo data, conformance cases); `verified_at` is set only by callers that
    fetched the value from the field's canonical source.
    """
    validate_assertion(a)
    tenant: Tenant = principal.require_tenant
    write = fact_write(tenant.pk, a)
    hooks.check_assertion(write)
    if refused := derived_from_problems(tenant.pk, [a]):
        raise refused[0]
    now = now or timezone.now()
    try:
        with hooks.write_scope("assert_fact", principal.name), transaction.atomic():
            return _assert_locked(principal, tenant, a, write, now, verified_at, memory_id)
    except IntegrityError as exc:
        # A constraint caught a race the lock did not (e.g. another process without the lock).
        raise RevisionConflict(f"The fact changed while this write was applied ({exc.__class__.__name__}).") from None


def _assert_locked(
    principal: Principal,
    tenant: Tenant,
    a: Assertion,
    write: hooks.FactWrite,
    now: datetime,
    verified_at: datetime | None,
    memory_id: str,
) -> AssertResult:
    project = project_for(tenant, a.project_id)
    policy, new_pk = _lock_fact_and_read_policy(tenant.pk, a)
    authorize_issuer(principal, policy)
    hooks.guard_assertion(write)
    w = _read_fact(principal, a, project, policy, now, verified_at, memory_id, new_pk)
    decision = decide(w)
    return _APPLY[decision.step](w, decision)


def _lock_fact_and_read_policy(tenant_id: int, a: Assertion) -> tuple[FieldPolicy | None, int | None]:
    """`lock_fact` and the field's policy; on PostgreSQL in one round trip, with the id the version this write
    may insert will take (None elsewhere: the insert gets its id from the database)."""
    if connection.vendor != "postgresql":
        lock_fact(tenant_id, a.project_id, a.subject_id, a.predicate)
        return policy_for(tenant_id, a.project_id, a.predicate), None
    key = fact_lock_key(tenant_id, a.project_id, a.subject_id, a.predicate)
    return locked_policy_for(tenant_id, a.project_id, a.predicate, key)


@cache
def _fact_rows_sql(vendor: str) -> str:
    """`_read_fact`'s statement, spelled out once per backend: the fact's live head and accepted rows, locked, each
    with the fact's highest revision; one row of NULLs with that revision when there are none (a new fact). Building
    it with the ORM on every write cost more Python time than its round trip."""
    table = MemoryRecord._meta.db_table
    key = "{t}.tenant_id = %s AND {t}.project_id = %s AND {t}.subject_id = %s AND {t}.predicate = %s"
    live = f"{key.format(t='r')} AND r.tombstoned_at IS NULL AND (r.is_head OR r.status = %s)"
    # Revisions are unique over every row of the fact, tombstoned ones awaiting purge included. Ordered by
    # revision, which the fact's unique index (`record_unique_fact_revision`) gives without a sort: when the
    # tenant's statistics lag its growth (an import into a large table), the planner estimates its rows at none,
    # the indexes tie, and without the order it read the fact through the predicate's index, every record of the
    # predicate (160-890 ms per write at 370,000 records of the tenant; 0.1-0.5 ms with it). A tie-breaker, not a
    # guarantee: migration memory/0014 keeps the statistics close to the tenants' growth.
    # The highest revision is the one row every answer has, and the rows join it: a new fact needs no second
    # statement. That second statement, a MAX() of its own, was planned through the field's index on an importing
    # tenant, reading every record of the predicate in the project (17-27 ms a statement at 16,000 of them):
    # bench/onboarding.py's `assert_fact` of a new fact took 29.6 ms (median), and 11.0 ms in this form.
    highest = f"(SELECT MAX(v.revision) AS max_revision FROM {table} v WHERE {key.format(t='v')}) m"
    if connection.features.has_select_for_update_of:
        # The lock is taken in the LATERAL subquery: FOR UPDATE may not reach the nullable side of an outer join.
        return (
            f"SELECT {rows.select_list(MemoryRecord, 'r')}, m.max_revision FROM {highest} LEFT JOIN LATERAL"
            f" (SELECT {rows.select_list(MemoryRecord, 'r')} FROM {table} r WHERE {live}"
            " ORDER BY r.revision FOR UPDATE OF r) r ON TRUE ORDER BY r.revision"
        )
    return (
        f"SELECT {rows.select_list(MemoryRecord, 'r')}, m.max_revision FROM {highest}"
        f" LEFT JOIN {table} r ON {live} ORDER BY r.revision"
    )


def _read_fact(
    principal: Principal,
    a: Assertion,
    project: Project,
    policy: FieldPolicy | None,
    now: datetime,
    verified_at: datetime | None,
    memory_id: str,
    new_pk: int | None = None,
) -> _Write:
    """The fact's head, its accepted rows (locked) and its next revision, in one round trip."""
    key: list[Any] = [project.tenant_id, project.pk, a.subject_id, a.predicate]
    with connection.cursor() as cursor:
        cursor.execute(_fact_rows_sql(connection.vendor), [*key, *key, Status.ACCEPTED.value])
        found = cursor.fetchall()
    # No live row (a new fact, or one whose rows are all tombstoned and awaiting purge): one row of NULLs.
    locked = [rows.load(MemoryRecord, row) for row in found if row[0] is not None]
    next_revision = (found[0][-1] or 0) + 1
    return _Write(
        principal=principal,
        assertion=a,
        project=project,
        policy=policy,
        now=now,
        verified_at=verified_at,
        memory_id=memory_id,
        locked=locked,
        head=next((r for r in locked if r.is_head), None),
        next_revision=next_revision,
        new_pk=new_pk,
    )


class Step(enum.StrEnum):
    """Where the decision order lands an assertion that passed validation and the issuer check."""

    FIRST = "first"  # the fact has no current record: the value becomes its belief (CREATED)
    HISTORY = "history"  # step 3: stored as history (HISTORY)
    UNCOVERED = "uncovered"  # step 3, but nothing believed covers its start: it answers there (see _apply_uncovered)
    UNCHANGED = "unchanged"  # step 4, or a repeat of a disputed candidate (UNCHANGED)
    DISPUTE = "dispute"  # step 5: both kept, a dispute opened (DISPUTED)
    SUPERSEDE = "supersede"  # step 6: compare-and-swap succeeded, the value becomes the belief (CREATED)


@dataclass(frozen=True)
class Decision:
    step: Step
    reason: str = ""  # HISTORY: why it is not current
    record: MemoryRecord | None = None  # UNCHANGED: the record it repeats; UNCOVERED: the one taking over (if any)
    dispute: Dispute | None = None  # UNCHANGED: the open dispute whose candidate it repeats


def decide(w: _Write) -> Decision:
    """Steps 3-6 of the decision order on the locked fact. Reads, never writes; a refusal raises
    (RevisionConflict 409, ExpectedRevisionRequired 428, DisputeOpen 409)."""
    a, head = w.assertion, w.head
    if head is None:
        if a.expected_revision not in (None, 0):
            raise RevisionConflict(
                f"expected_revision {a.expected_revision} given, but this fact has no current record.",
                current=None,
            )
        return Decision(Step.FIRST)

    dispute = None
    if head.status == Status.DISPUTED:
        dispute = Dispute.objects.filter(
            tenant_id=w.project.tenant_id,
            project=w.project,
            subject_id=a.subject_id,
            predicate=a.predicate,
            status=Dispute.Status.OPEN,
        ).first()
    if dispute is not None:
        for candidate in dispute.candidates.all():
            if _same_assertion(candidate, a):
                return Decision(Step.UNCHANGED, record=candidate, dispute=dispute)
        raise DisputeOpen(
            "This fact is disputed; resolve the dispute before asserting a new value.",
            dispute_id=dispute.public_id,
        )

    same_source = head.source_canonical_ref == a.source_canonical_ref
    order = compare_source_revisions(a.source_revision, head.source_revision) if same_source else None
    # A canonical-prefix ref ranks only when backed (the issuer is the named source, or a server fetch);
    # the head's rank is computed by the same rule from what it keeps.
    new_rank = source_rank(w.policy, a.source_canonical_ref, w.principal, fetched=w.verified_at is not None)
    head_rank = record_rank(w.policy, head)
    outranked = new_rank < head_rank

    # Step 3: a late import of an older revision, or a lesser source against the canonical one.
    if (same_source and order is not None and order < 0) or outranked:
        reason = (
            f"Source revision {a.source_revision} is older than the current {head.source_revision}."
            if not outranked
            else f"The current value comes from the field's canonical source ({head.source_canonical_ref})."
        )
        return _history_or_uncovered(w, reason)

    # Step 4: an idempotent repeat.
    if _same_assertion(head, a):
        return Decision(Step.UNCHANGED, record=head)

    # Step 5: equal-rank sources that disagree and cannot be ordered.
    orderable = (same_source and order is not None and order > 0) or a.valid_from > head.valid_from
    if new_rank == head_rank and head.status == Status.ACCEPTED and a.value != head.value and not orderable:
        return Decision(Step.DISPUTE)

    # Step 6: compare-and-swap on the revision the writer read.
    if a.expected_revision is None:
        raise ExpectedRevisionRequired(
            f"This fact has a current record (revision {head.revision}); send expected_revision.",
            current=head,
        )
    if a.expected_revision != head.revision:
        raise RevisionConflict(
            f"expected_revision {a.expected_revision} is stale; the current revision is {head.revision}.",
            current=head,
        )
    return Decision(Step.SUPERSEDE)


def _history_or_uncovered(w: _Write, reason: str) -> Decision:
    """Step 3's outcome: revisions are compared only where their valid times overlap (rule 3). The assertion ranks
    below the head, so every record the fact already answers with (believed once: `entered_current`, live, a
    non-empty validity as stored now) covers its valid time before it. If one covers the assertion's valid_from,
    it is history (HISTORY, as ever); else it answers from its valid_from until the first of them takes over
    (UNCOVERED, `record` the one taking over, none when its own validity ends first). One interval per record:
    valid time after that record's, which nothing covers again, is not claimed (as a supersession's cut). Nor is
    valid time a believed record of a lower revision covers: a late import never takes valid time from a record
    already believed (one it would have to rank against first)."""
    a = w.assertion
    first = (
        MemoryRecord.objects.for_fact(w.project, a.subject_id, a.predicate)
        .filter(entered_current=True)
        .filter(Q(valid_to__isnull=True) | (Q(valid_to__gt=a.valid_from) & Q(valid_to__gt=F("valid_from"))))
        .order_by("valid_from", "-revision")
        .only("pk", "memory_id", "revision", "valid_from", "valid_to", "tenant_id", "project_id")
        .first()
    )
    if first is not None and first.valid_from <= a.valid_from:
        return Decision(Step.HISTORY, reason=reason)
    if first is not None and a.valid_to is not None and a.valid_to <= first.valid_from:
        first = None  # its own validity ends before the next one's starts: nothing to cut
    # It changes an answer, so a revision the writer says it read is checked (none needed: it replaces nothing).
    if a.expected_revision is not None and w.head is not None and a.expected_revision != w.head.revision:
        raise RevisionConflict(
            f"expected_revision {a.expected_revision} is stale; the current revision is {w.head.revision}.",
            current=w.head,
        )
    return Decision(Step.UNCOVERED, reason=reason, record=first)


def _apply_uncovered(w: _Write, decision: Decision) -> AssertResult:
    """A late assertion that answers for the valid time nothing believed covers: believed from now
    (`entered_current`), its validity cut where `decision.record` takes over (`valid_to_recorded_at` now, so an
    as-of before now never sees it, and one after sees the cut; `asserted_valid_to` keeps what was asserted).
    Stored as a supersession's cut leaves today's record before a scheduled successor, so every read, the cache's
    lifetime, search and the hand-over (settle_valid_time_transitions) treat it alike. The head stays the head: a
    writer still compares against the highest revision, which it may not have seen."""
    successor, now = decision.record, w.now
    fields: dict[str, Any] = {"entered_current": True, "status": Status.ACCEPTED}
    valid_to = w.assertion.valid_to
    if successor is not None:
        valid_to = successor.valid_from
        fields.update(valid_to=valid_to, valid_to_recorded_at=now, superseded_by=successor)
    # Reasons name the record taking over, not an instant: they are shown as they are (dates are the page's).
    until = f"before {successor.memory_id} (revision {successor.revision}) takes over" if successor else ""
    if valid_to is not None and valid_to <= now:
        # Its whole stretch is past: it answers as of then, and is history now.
        if successor is not None:
            fields.update(status=Status.SUPERSEDED, recorded_to=now)
            fields["status_reason"] = f"{decision.reason} It answers only for the valid time {until}."
        else:
            fields["status"] = Status.EXPIRED
            fields["status_reason"] = f"{decision.reason} Nothing newer covers its validity, ended when it arrived."
    record = _new_record(w, **fields)
    outcome = Outcome.CREATED if record.status == Status.ACCEPTED else Outcome.HISTORY
    reason = decision.reason + (
        f" Nothing newer covers its valid time {until}; it answers until then."
        if successor
        else " Nothing newer covers its valid time; it answers for all of it."
    )
    _audit_events(w, [_assert_event(w.principal, record, outcome, reason)])
    return AssertResult(outcome, record)


def _apply_first(w: _Write, decision: Decision) -> AssertResult:
    record = _new_record(w, status=Status.ACCEPTED, entered_current=True, is_head=True)
    _audit_events(w, [_assert_event(w.principal, record, Outcome.CREATED)])
    return AssertResult(Outcome.CREATED, record)


def _apply_history(w: _Write, decision: Decision) -> AssertResult:
    record = _new_record(
        w, status=Status.SUPERSEDED, superseded_by=w.head, recorded_to=w.now, status_reason=decision.reason
    )
    _audit_events(w, [_assert_event(w.principal, record, Outcome.HISTORY, decision.reason)])
    return AssertResult(Outcome.HISTORY, record)


def _apply_unchanged(w: _Write, decision: Decision) -> AssertResult:
    assert decision.record is not None
    return AssertResult(Outcome.UNCHANGED, decision.record, decision.dispute)


def _apply_dispute(w: _Write, decision: Decision) -> AssertResult:
    head, now = w.head, w.now
    assert head is not None
    before = audit.snapshot(head)
    head.status = Status.DISPUTED
    head.save(update_fields=["status"])
    hooks.belief_ended([head], reason="Disputed: an equal-rank source disagrees.", now=now)
    _records_changed(head)
    record = _new_record(w, status=Status.DISPUTED)
    dispute = Dispute.objects.create(
        tenant_id=head.tenant_id,
        project=head.project,
        subject_id=head.subject_id,
        predicate=head.predicate,
        opened_at=now,
    )
    dispute.candidates.add(head, record)
    audit.record_event(
        tenant=head.tenant_id,
        actor=w.principal,
        action=audit.Action.RECORD_DISPUTED,
        object_type="record",
        object_id=head.memory_id,
        before=before,
        after=audit.snapshot(head),
        at=now,
    )
    _audit_assert(w.principal, record, Outcome.DISPUTED, now)
    audit.record_event(
        tenant=head.tenant_id,
        actor=w.principal,
        action=audit.Action.DISPUTE_OPENED,
        object_type="dispute",
        object_id=dispute.public_id,
        after={"candidates": [head.memory_id, record.memory_id]},
        at=now,
    )
    return AssertResult(Outcome.DISPUTED, record, dispute)


def _apply_supersede(w: _Write, decision: Decision) -> AssertResult:
    head, now = w.head, w.now
    assert head is not None
    before = audit.snapshot(head)
    if w.new_pk is not None and w.deferred is None:
        record = _supersede_in_one_update(w, head)
    else:
        head.is_head = False
        _update(w.deferred, head, ["is_head"])
        record = _new_record(w, status=Status.ACCEPTED, entered_current=True, is_head=True)
        _succeed_inactive_head(head, record)
        if head.status != Status.ACCEPTED:
            _update(w.deferred, head, ["superseded_by", "status"])
        _cut_overlapping(record, now, accepted=w.locked, deferred=w.deferred)
    _audit_events(
        w,
        [
            audit.Event(
                actor=w.principal,
                action=audit.Action.RECORD_SUPERSEDED,
                object_type="record",
                object_id=head.memory_id,
                before=before,
                after=audit.snapshot(head),
            ),
            _assert_event(w.principal, record, Outcome.CREATED),
        ],
    )
    return AssertResult(Outcome.CREATED, record)


def _succeed_inactive_head(head: MemoryRecord, record: MemoryRecord) -> None:
    if head.status != Status.ACCEPTED:
        # An excluded or expired head: it stays as it is, now with a successor.
        head.superseded_by = record
        if head.status == Status.EXPIRED:
            head.status = Status.SUPERSEDED


def _supersede_in_one_update(w: _Write, head: MemoryRecord) -> MemoryRecord:
    """`_apply_supersede` when the new version's id is known before it is inserted (`_Write.new_pk`): every change
    to the old head (no longer the head, its successor, the cut of its validity) is one UPDATE, made before the
    INSERT (one head per fact key is a unique index, checked at once; the successor foreign key and the one
    belief per valid instant are checked at commit). The same decisions as the three-statement path."""
    record = build_record(w, status=Status.ACCEPTED, entered_current=True, is_head=True)
    record.pk = w.new_pk
    fields = {head.pk: {"is_head"} | ({"superseded_by", "status"} if head.status != Status.ACCEPTED else set())}
    head.is_head = False
    _succeed_inactive_head(head, record)
    changed = _cut(record, w.now, w.locked)
    for old in changed:
        fields.setdefault(old.pk, set()).update(_CUT_FIELDS)
    rows.update(head, sorted(fields.pop(head.pk)))
    for old in changed:
        if old.pk in fields:
            rows.update(old, sorted(fields.pop(old.pk)))
    rows.insert(record)
    _records_changed(record)
    _beliefs_ended(record, w.now, changed, None)
    return record


_APPLY: dict[Step, Callable[[_Write, Decision], AssertResult]] = {
    Step.FIRST: _apply_first,
    Step.HISTORY: _apply_history,
    Step.UNCOVERED: _apply_uncovered,
    Step.UNCHANGED: _apply_unchanged,
    Step.DISPUTE: _apply_dispute,
    Step.SUPERSEDE: _apply_supersede,
}


def _same_assertion(record: MemoryRecord, a: Assertion) -> bool:
    return (
        record.value == a.value
        and record.source_canonical_ref == a.source_canonical_ref
        and record.source_revision == a.source_revision
    )


def _assert_event(principal: Principal, record: MemoryRecord, outcome: Outcome, reason: str = "") -> audit.Event:
    return audit.Event(
        actor=principal,
        action=audit.asserted(outcome),
        object_type="record",
        object_id=record.memory_id,
        after=audit.snapshot(record),
        reason=reason,
    )


def _audit_assert(
    principal: Principal,
    record: MemoryRecord,
    outcome: Outcome,
    now: datetime,
    reason: str = "",
) -> None:
    audit.record_events([_assert_event(principal, record, outcome, reason)], tenant=record.tenant_id, at=now)


# --- Curation: exclude, expire, resolve --------------------------------------------------------


def _require_curator(principal: Principal) -> None:
    if not principal.can_curate:
        raise Forbidden("Only owners and admins may exclude, expire or resolve records.")


def may_expire(principal: Principal, record: MemoryRecord) -> bool:
    """Whether the principal may expire the record itself: an owner or admin always; an agent when it asserted the
    record and the field's policy lets agents expire their own facts, on a field that is not high-risk."""
    if principal.can_curate:
        return True
    if not principal.has_role("agent") or record.issuer_id != principal.pk:
        return False
    policy = policy_for(record.tenant_id, record.project.key, record.predicate)
    return policy is not None and policy.agents_expire_own and policy.risk != FieldPolicy.Risk.HIGH


def _require_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput({"reason": ["Say why; the reason is kept in the audit log."]})
    return reason


def get_record(principal: Principal, memory_id: str, *, for_update: bool = False) -> MemoryRecord:
    """The principal's tenant's record, or NotFound (another tenant's record is not revealed)."""
    qs = MemoryRecord.objects.for_tenant(principal.tenant_pk)
    if for_update:
        qs = qs.select_for_update()
    record = qs.select_related("project").filter(memory_id=memory_id).first()
    if record is None:
        raise NotFound(f"No record {memory_id!r}.")
    return record


def exclude_record(principal: Principal, memory_id: str, reason: str, *, now: datetime | None = None) -> MemoryRecord:
    """Keep the record, but never hand it to an agent again (rule 2a)."""
    _require_curator(principal)
    reason = _require_reason(reason)
    now = now or timezone.now()
    with transaction.atomic():
        record = get_record(principal, memory_id, for_update=True)
        if record.status == Status.EXCLUDED:
            return record
        if not record.excludable:
            raise DisputeOpen("This record is part of an open dispute; resolve the dispute instead.")
        before = audit.snapshot(record)
        was_current = record.status == Status.ACCEPTED
        record.status = Status.EXCLUDED
        record.status_reason = reason
        record.save(update_fields=["status", "status_reason"])
        if was_current:
            hooks.belief_ended([record], reason=f"Excluded: {reason}", now=now)
        _records_changed(record)
        audit.record_event(
            tenant=record.tenant_id,
            actor=principal,
            action=audit.Action.RECORD_EXCLUDED,
            object_type="record",
            object_id=record.memory_id,
            before=before,
            after=audit.snapshot(record),
            reason=reason,
            at=now,
        )
    return record


def expire_record(
    principal: Principal,
    memory_id: str,
    reason: str,
    *,
    valid_to: datetime | None = None,
    now: datetime | None = None,
) -> MemoryRecord:
    """End the record's validity (now, or at `valid_to`) and keep it as history (rule 2b). Owners and admins may;
    an agent only where the field's policy lets agents expire their own facts (`may_expire`)."""
    if not principal.can_curate and not principal.has_role("agent"):
        _require_curator(principal)
    reason = _require_reason(reason)
    validation.check_datetimes(valid_to=valid_to)
    now = now or timezone.now()
    with transaction.atomic():
        record = get_record(principal, memory_id, for_update=True)
        if not may_expire(principal, record):
            raise Forbidden(
                "Only owners and admins may expire this record, or an agent that asserted it where the field's "
                f"policy lets agents expire their own facts. File POST /api/v1/records/{memory_id}/expiry-requests/ "
                "for an owner to decide."
            )
        if not record.expirable:
            raise InvalidState(f"Only an accepted record can expire; this one is {record.status}.")
        end = max(record.valid_from, valid_to or now)
        if record.valid_to is not None and record.valid_to < end:
            raise InvalidInput({"valid_to": ["The record's validity already ends earlier."]})
        before = audit.snapshot(record)
        record.valid_to = end
        record.valid_to_recorded_at = now
        record.status_reason = reason
        # Validity that ends later stays accepted until then, like a scheduled hand-over.
        if end <= now:
            record.status = Status.EXPIRED
        record.save(update_fields=["valid_to", "valid_to_recorded_at", "status", "status_reason"])
        if record.status == Status.EXPIRED:
            hooks.belief_ended([record], reason=f"Expired: {reason}", now=now)
            _records_changed(record)
        audit.record_event(
            tenant=record.tenant_id,
            actor=principal,
            action=audit.Action.RECORD_EXPIRED,
            object_type="record",
            object_id=record.memory_id,
            before=before,
            after=audit.snapshot(record),
            reason=reason,
            at=now,
        )
    return record


def get_dispute(principal: Principal, public_id: str, *, for_update: bool = False) -> Dispute:
    qs = Dispute.objects.filter(tenant_id=principal.tenant_id)
    if for_update:
        qs = qs.select_for_update()
    dispute = qs.select_related("project").filter(public_id=public_id).first()
    if dispute is None:
        raise NotFound(f"No dispute {public_id!r}.")
    return dispute


def resolve_dispute(
    principal: Principal,
    public_id: str,
    *,
    winner: str | None,
    reason: str,
    exclude_all: bool = False,
    now: datetime | None = None,
) -> Dispute:
    """Settle a dispute: the winner becomes the current belief, the others stay as history.

    With `exclude_all`, every candidate is excluded instead (neither may be handed to an agent).
    """
    _require_curator(principal)
    reason = _require_reason(reason)
    if bool(winner) == bool(exclude_all):
        raise InvalidInput({"winner": ["Name the winning memory_id, or set exclude_all (not both)."]})
    now = now or timezone.now()
    with transaction.atomic():
        dispute = _lock_open_dispute(principal, public_id)
        candidates = list(dispute.candidates.select_for_update().order_by("revision"))
        chosen = _chosen_candidate(candidates, winner)
        _settle_candidates(principal, dispute, candidates, chosen, reason=reason, exclude_all=exclude_all, now=now)
        if chosen is not None:
            _cut_overlapping(chosen, now)
        _records_changed(*candidates)
        _close_dispute(principal, dispute, chosen, reason=reason, exclude_all=exclude_all, now=now)
    return dispute


def _lock_open_dispute(principal: Principal, public_id: str) -> Dispute:
    """The open dispute, locked, with its fact locked too (no write to the fact slips in meanwhile)."""
    dispute = get_dispute(principal, public_id, for_update=True)
    if dispute.status != Dispute.Status.OPEN:
        raise InvalidState("This dispute is already resolved.")
    lock_fact(dispute.tenant_id, dispute.project.key, dispute.subject_id, dispute.predicate)
    return dispute


def _chosen_candidate(candidates: list[MemoryRecord], winner: str | None) -> MemoryRecord | None:
    chosen = next((c for c in candidates if c.memory_id == winner), None)
    if winner and chosen is None:
        raise InvalidInput({"winner": [f"{winner!r} is not a candidate of this dispute."]})
    return chosen


def _settle_candidates(
    principal: Principal,
    dispute: Dispute,
    candidates: list[MemoryRecord],
    chosen: MemoryRecord | None,
    *,
    reason: str,
    exclude_all: bool,
    now: datetime,
) -> None:
    """Give each candidate its final status (excluded, the winner accepted, the others superseded)."""
    facts = MemoryRecord.objects.for_fact(dispute.project, dispute.subject_id, dispute.predicate)
    facts.filter(is_head=True).update(is_head=False)
    # The winner is saved last, after every other head flag is cleared.
    candidates.sort(key=lambda record: record is chosen)
    for record in candidates:
        before = audit.snapshot(record)
        if exclude_all:
            record.status = Status.EXCLUDED
            record.is_head = record.entered_current
        elif record is chosen:
            record.status = Status.ACCEPTED
            record.entered_current = record.is_head = True
        else:
            assert chosen is not None
            _supersede_candidate(record, chosen, now)
        record.status_reason = reason
        record.save()
        audit.record_event(
            tenant=record.tenant_id,
            actor=principal,
            action=audit.Action.RECORD_DISPUTE_RESOLVED,
            object_type="record",
            object_id=record.memory_id,
            before=before,
            after=audit.snapshot(record),
            reason=reason,
            at=now,
        )


def _supersede_candidate(record: MemoryRecord, chosen: MemoryRecord, now: datetime) -> None:
    """A losing candidate: history, superseded by the winner; if it was ever believed, its belief ends now."""
    record.status = Status.SUPERSEDED
    record.is_head = False
    record.superseded_by = chosen
    if record.entered_current:
        record.recorded_to = now
        record.valid_to_recorded_at = now
        cut = max(record.valid_from, chosen.valid_from)
        record.valid_to = min(record.valid_to or cut, cut)


def _close_dispute(
    principal: Principal,
    dispute: Dispute,
    chosen: MemoryRecord | None,
    *,
    reason: str,
    exclude_all: bool,
    now: datetime,
) -> None:
    dispute.status = Dispute.Status.RESOLVED
    dispute.resolved_at = now
    dispute.resolved_by = principal
    dispute.winner = chosen
    dispute.resolution_reason = reason
    dispute.save()
    audit.record_event(
        tenant=dispute.tenant_id,
        actor=principal,
        action=audit.Action.DISPUTE_RESOLVED,
        object_type="dispute",
        object_id=dispute.public_id,
        reason=reason,
        at=now,
        after={"winner": chosen.memory_id if chosen else None, "exclude_all": exclude_all},
    )


def settle_valid_time_transitions(now: datetime | None = None) -> int:
    """Move accepted records whose validity has ended to `superseded` (a successor took over) or
    `expired` (none did). The belief did not change, so record time is left as it is.

    1. Only the ids of the rows due are read first: loading a whole row is what fails on a corrupt one.
    2. Each tenant's rows settle in their own transaction, so one tenant never holds back another.
    3. If a tenant's batch fails, its rows are retried one by one; a row that still fails is logged,
       recorded as a `task.failed` audit event (shown on the overview page) and skipped.
    """
    now = now or timezone.now()
    due = MemoryRecord.objects.filter(status=Status.ACCEPTED, valid_to__lte=now).order_by("tenant_id", "pk")
    by_tenant: dict[int, list[tuple[int, str]]] = {}
    for pk, tenant_id, memory_id in due.values_list("pk", "tenant_id", "memory_id"):
        by_tenant.setdefault(tenant_id, []).append((pk, memory_id))
    count = 0
    for tenant_id, due_rows in by_tenant.items():
        try:
            count += _settle_rows([pk for pk, _ in due_rows], now)
            continue
        except Exception:
            logger.warning("Valid-time transitions of tenant %s failed as a batch; settling row by row.", tenant_id)
        for pk, memory_id in due_rows:
            try:
                count += _settle_rows([pk], now)
            except Exception as exc:
                task_failures.record_failure(
                    tenant_id=tenant_id,
                    task="settle_valid_time_transitions",
                    object_type="record",
                    object_id=memory_id,
                    error=exc,
                    now=now,
                )
    # The other half of the hand-over: records whose valid_from has passed get usable index entries.
    # Search already decides at query time; this keeps the index's stored flag true. The derived stores do
    # it from their hook; a failing hook is logged, never fatal here.
    hooks.valid_time_settled(now)
    return count


def _settle_rows(pks: list[int], now: datetime) -> int:
    """Settle the rows `pks` (of one tenant) that are still accepted and past their validity, in one
    transaction."""
    with transaction.atomic():
        ended = list(
            MemoryRecord.objects.select_for_update().filter(pk__in=pks, status=Status.ACCEPTED, valid_to__lte=now)
        )
        if not ended:
            return 0
        successors = [r.pk for r in ended if r.superseded_by_id]
        count = MemoryRecord.objects.filter(pk__in=successors).update(status=Status.SUPERSEDED)
        count += MemoryRecord.objects.filter(pk__in=[r.pk for r in ended if not r.superseded_by_id]).update(
            status=Status.EXPIRED
        )
        hooks.belief_ended(ended, reason="Its validity ended.", now=now)
        _records_changed(*ended)
    return count
