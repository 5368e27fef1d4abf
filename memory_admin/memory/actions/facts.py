"""Asserting a fact (PRODUCT.md rule 3): `assert_fact` and the decision order it follows, step by step.

Step 1 is `validate_assertion`; step 2 the issuer check (`policies.authorize_issuer`), made with the fact key
locked (`lock_fact`); steps 3-6 are `decide`, which reads and never writes. Each decision is written by one apply
function of `fact_writes`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from memory_admin.accounts.models import Principal, Tenant
from memory_admin.lib import rows
from memory_admin.memory import hooks, validation
from memory_admin.memory.actions.assertion import Assertion, AssertResult, Decision, Step, _Write
from memory_admin.memory.actions.fact_writes import _APPLY
from memory_admin.memory.errors import DisputeOpen, ExpectedRevisionRequired, InvalidInput, RevisionConflict
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, Project
from memory_admin.memory.policies import authorize_issuer, locked_policy_for, policy_for
from memory_admin.memory.ranking import compare_source_revisions, record_rank, source_rank

Status = MemoryRecord.Status


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
        # FOR NO KEY UPDATE: writers of the fact still wait for each other, but a foreign-key check of another
        # transaction (a cache manifest, a receipt or a derived item naming the record, checked FOR KEY SHARE at
        # its COMMIT) does not wait for this one: with FOR UPDATE, a read filling the cache held its manifest row
        # and waited here while this write waited to evict that manifest row, a deadlock (found by `make soak`).
        return (
            f"SELECT {rows.select_list(MemoryRecord, 'r')}, m.max_revision FROM {highest} LEFT JOIN LATERAL"
            f" (SELECT {rows.select_list(MemoryRecord, 'r')} FROM {table} r WHERE {live}"
            " ORDER BY r.revision FOR NO KEY UPDATE OF r) r ON TRUE ORDER BY r.revision"
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


def _same_assertion(record: MemoryRecord, a: Assertion) -> bool:
    return (
        record.value == a.value
        and record.source_canonical_ref == a.source_canonical_ref
        and record.source_revision == a.source_revision
    )
