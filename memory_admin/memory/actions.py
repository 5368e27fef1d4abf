"""Every change to memory records goes through these functions.

The API, the dashboard, management commands and Celery tasks call them; none of PRODUCT.md's rules is
implemented anywhere else. Each runs in one transaction and writes its audit events in it.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Q, Subquery
from django.utils import timezone

from deletion import tombstones
from memory_admin.accounts.models import Principal, Tenant
from memory_admin.derived.models import Event
from memory_admin.derived.propagation import propagate
from memory_admin.derived.tasks import mark_records_in_effect, refresh_record_vectors
from memory_admin.memory import audit, task_failures, validation
from memory_admin.memory.errors import (
    DisputeOpen,
    ExpectedRevisionRequired,
    Forbidden,
    InvalidInput,
    InvalidState,
    NotFound,
    RevisionConflict,
)
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, Project
from memory_admin.memory.policies import authorize_issuer, policy_for
from memory_admin.memory.ranking import compare_source_revisions, source_rank
from memory_admin.queueing import enqueue_batched_after_commit

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
    digest = hashlib.blake2b(
        f"{tenant_id}\x1f{project_key}\x1f{subject_id}\x1f{predicate}".encode(),
        digest_size=8,
    )
    key = int.from_bytes(digest.digest(), "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


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
    new: MemoryRecord, now: datetime, accepted: Sequence[MemoryRecord] | None = None
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
        old.save(update_fields=["valid_to", "valid_to_recorded_at", "superseded_by", "status", "recorded_to"])
        changed.append(old)
    ended = [old for old in changed if old.status == Status.SUPERSEDED]
    propagate(ended, reason=f"Superseded by {new.memory_id} (revision {new.revision}).", now=now)
    return changed


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


def _embed_after_commit(*records: MemoryRecord) -> None:
    enqueue_batched_after_commit(refresh_record_vectors, [r.memory_id for r in records])


def _new_record(
    a: Assertion,
    *,
    principal: Principal,
    project: Project,
    policy: FieldPolicy | None,
    now: datetime,
    revision: int,
    status: str,
    verified_at: datetime | None,
    memory_id: str,
    **fields: Any,
) -> MemoryRecord:
    record = MemoryRecord.objects.create(
        tenant_id=project.tenant_id,
        project=project,
        memory_id=memory_id,
        subject_id=a.subject_id,
        predicate=a.predicate,
        value=a.value,
        status=status,
        valid_from=a.valid_from,
        valid_to=a.valid_to,
        asserted_valid_to=a.valid_to,
        recorded_from=now,
        last_verified_at=verified_at,
        recheck_after=_recheck_after(policy, verified_at, now),
        retain_until=_retain_until(policy, now),
        revision=revision,
        source_canonical_ref=a.source_canonical_ref,
        source_revision=a.source_revision,
        issuer=principal,
        derived_from=a.derived_from or [],
        source_event_ids=a.event_ids or [],
        **fields,
    )
    _embed_after_commit(record)
    return record


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
       canonical source outranks → stored as history, never current (HISTORY);
    4. same value, source and source revision as the current belief → nothing stored (UNCHANGED);
    5. an equal-rank source that disagrees and cannot be ordered → both kept as disputed (DISPUTED);
    6. otherwise the new value becomes the current belief, by compare-and-swap on
       `expected_revision` (missing → 428, stale → 409); the old version keeps its history.

    `now` fixes the clock (demo data, conformance cases); `verified_at` is set only by callers that
    fetched the value from the field's canonical source.
    """
    validate_assertion(a)
    tenant: Tenant = principal.tenant  # type: ignore[assignment]
    policy = policy_for(tenant, a.project_id, a.predicate)
    authorize_issuer(principal, policy)
    if a.event_ids:
        known = set(
            Event.objects.filter(tenant=tenant, project__key=a.project_id, public_id__in=a.event_ids).values_list(
                "public_id", flat=True
            )
        )
        if unknown := sorted(set(a.event_ids) - known):
            raise InvalidInput({"source": [f"Unknown event ids in {a.project_id}: {', '.join(unknown)}."]})
    now = now or timezone.now()
    try:
        with tombstones.refusals_logged("assert_fact", principal.name), transaction.atomic():
            return _assert_locked(principal, tenant, a, policy, now, verified_at, memory_id)
    except IntegrityError as exc:
        # A constraint caught a race the lock did not (e.g. another process without the lock).
        raise RevisionConflict(f"The fact changed while this write was applied ({exc.__class__.__name__}).") from None


def _assert_locked(
    principal: Principal,
    tenant: Tenant,
    a: Assertion,
    policy: FieldPolicy | None,
    now: datetime,
    verified_at: datetime | None,
    memory_id: str,
) -> AssertResult:
    project = project_for(tenant, a.project_id)
    lock_fact(tenant.pk, a.project_id, a.subject_id, a.predicate)
    tombstones.refuse_assertion(
        tenant.pk, a.project_id, a.subject_id, a.predicate, value=a.value, source_ref=a.source_canonical_ref,
        source_revision=a.source_revision, event_ids=a.event_ids or (),
        derived_from=[d.get("memory_id", "") for d in a.derived_from or []],
    )  # fmt: skip
    facts = MemoryRecord.objects.for_fact(project, a.subject_id, a.predicate)
    # Revisions are unique over every row of the fact, tombstoned ones awaiting purge included.
    every_version = MemoryRecord.all_objects.for_fact(project, a.subject_id, a.predicate)
    # One round trip: the head, every accepted row (they may need cutting), and the highest revision.
    live = list(
        facts.select_for_update()
        .filter(Q(is_head=True) | Q(status=Status.ACCEPTED))
        .annotate(max_revision=Subquery(every_version.order_by("-revision").values("revision")[:1]))
    )
    head = next((r for r in live if r.is_head), None)
    if live:
        next_revision = live[0].max_revision + 1  # type: ignore[attr-defined]
    else:  # a new fact, or one whose rows are all tombstoned and awaiting purge
        next_revision = (every_version.aggregate(m=Max("revision"))["m"] or 0) + 1
    common: dict[str, Any] = dict(
        principal=principal,
        project=project,
        policy=policy,
        now=now,
        memory_id=memory_id,
    )

    if head is None:
        if a.expected_revision not in (None, 0):
            raise RevisionConflict(
                f"expected_revision {a.expected_revision} given, but this fact has no current record.",
                current=None,
            )
        record = _new_record(
            a, revision=next_revision, status=Status.ACCEPTED, verified_at=verified_at,
            entered_current=True, is_head=True, **common,
        )  # fmt: skip
        _audit_assert(principal, record, Outcome.CREATED, now)
        return AssertResult(Outcome.CREATED, record)

    dispute = None
    if head.status == Status.DISPUTED:
        dispute = Dispute.objects.filter(
            tenant=tenant,
            project=project,
            subject_id=a.subject_id,
            predicate=a.predicate,
            status=Dispute.Status.OPEN,
        ).first()
    if dispute is not None:
        for candidate in dispute.candidates.all():
            if _same_assertion(candidate, a):
                return AssertResult(Outcome.UNCHANGED, candidate, dispute)
        raise DisputeOpen(
            "This fact is disputed; resolve the dispute before asserting a new value.",
            dispute_id=dispute.public_id,
        )

    same_source = head.source_canonical_ref == a.source_canonical_ref
    order = compare_source_revisions(a.source_revision, head.source_revision) if same_source else None
    new_rank = source_rank(policy, a.source_canonical_ref)
    head_rank = source_rank(policy, head.source_canonical_ref)
    outranked = new_rank < head_rank

    # Step 3: a late import of an older revision, or a lesser source against the canonical one.
    if (same_source and order is not None and order < 0) or outranked:
        reason = (
            f"Source revision {a.source_revision} is older than the current {head.source_revision}."
            if not outranked
            else f"The current value comes from the field's canonical source ({head.source_canonical_ref})."
        )
        record = _new_record(
            a, revision=next_revision, status=Status.SUPERSEDED, verified_at=verified_at,
            superseded_by=head, recorded_to=now, status_reason=reason, **common,
        )  # fmt: skip
        _audit_assert(principal, record, Outcome.HISTORY, now, reason)
        return AssertResult(Outcome.HISTORY, record)

    # Step 4: an idempotent repeat.
    if _same_assertion(head, a):
        return AssertResult(Outcome.UNCHANGED, head)

    # Step 5: equal-rank sources that disagree and cannot be ordered.
    orderable = (same_source and order is not None and order > 0) or a.valid_from > head.valid_from
    if new_rank == head_rank and head.status == Status.ACCEPTED and a.value != head.value and not orderable:
        return _open_dispute(principal, head, a, next_revision, verified_at, common, now)

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
    before = audit.snapshot(head)
    head.is_head = False
    head.save(update_fields=["is_head"])
    record = _new_record(
        a, revision=next_revision, status=Status.ACCEPTED, verified_at=verified_at,
        entered_current=True, is_head=True, **common,
    )  # fmt: skip
    if head.status != Status.ACCEPTED:
        # An excluded or expired head: it stays as it is, now with a successor.
        head.superseded_by = record
        if head.status == Status.EXPIRED:
            head.status = Status.SUPERSEDED
        head.save(update_fields=["superseded_by", "status"])
    _cut_overlapping(record, now, accepted=live)
    audit.record_events(
        [
            audit.Event(actor=principal, action="record.superseded", object_type="record", object_id=head.memory_id,
                        before=before, after=audit.snapshot(head)),
            _assert_event(principal, record, Outcome.CREATED),
        ],
        tenant=record.tenant_id, at=now,
    )  # fmt: skip
    return AssertResult(Outcome.CREATED, record)


def _same_assertion(record: MemoryRecord, a: Assertion) -> bool:
    return (
        record.value == a.value
        and record.source_canonical_ref == a.source_canonical_ref
        and record.source_revision == a.source_revision
    )


def _open_dispute(
    principal: Principal,
    head: MemoryRecord,
    a: Assertion,
    revision: int,
    verified_at: datetime | None,
    common: dict[str, Any],
    now: datetime,
) -> AssertResult:
    before = audit.snapshot(head)
    head.status = Status.DISPUTED
    head.save(update_fields=["status"])
    propagate([head], reason="Disputed: an equal-rank source disagrees.", now=now)
    _embed_after_commit(head)
    record = _new_record(a, revision=revision, status=Status.DISPUTED, verified_at=verified_at, **common)
    dispute = Dispute.objects.create(
        tenant_id=head.tenant_id, project=head.project, subject_id=head.subject_id, predicate=head.predicate,
        opened_at=now,
    )  # fmt: skip
    dispute.candidates.add(head, record)
    audit.record_event(
        tenant=head.tenant_id, actor=principal, action="record.disputed", object_type="record",
        object_id=head.memory_id, before=before, after=audit.snapshot(head), at=now,
    )  # fmt: skip
    _audit_assert(principal, record, Outcome.DISPUTED, now)
    audit.record_event(
        tenant=head.tenant_id, actor=principal, action="dispute.opened", object_type="dispute",
        object_id=dispute.public_id, after={"candidates": [head.memory_id, record.memory_id]}, at=now,
    )  # fmt: skip
    return AssertResult(Outcome.DISPUTED, record, dispute)


def _assert_event(principal: Principal, record: MemoryRecord, outcome: Outcome, reason: str = "") -> audit.Event:
    return audit.Event(
        actor=principal, action=f"record.asserted.{outcome.value}", object_type="record",
        object_id=record.memory_id, after=audit.snapshot(record), reason=reason,
    )  # fmt: skip


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


def _require_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput({"reason": ["Say why; the reason is kept in the audit log."]})
    return reason


def get_record(principal: Principal, memory_id: str, *, for_update: bool = False) -> MemoryRecord:
    """The principal's tenant's record, or NotFound (another tenant's record is not revealed)."""
    qs = MemoryRecord.objects.for_tenant(principal.tenant_id)  # type: ignore[arg-type]
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
        if record.status == Status.DISPUTED:
            raise DisputeOpen("This record is part of an open dispute; resolve the dispute instead.")
        before = audit.snapshot(record)
        was_current = record.status == Status.ACCEPTED
        record.status = Status.EXCLUDED
        record.status_reason = reason
        record.save(update_fields=["status", "status_reason"])
        if was_current:
            propagate([record], reason=f"Excluded: {reason}", now=now)
        _embed_after_commit(record)
        audit.record_event(
            tenant=record.tenant_id, actor=principal, action="record.excluded", object_type="record",
            object_id=record.memory_id, before=before, after=audit.snapshot(record), reason=reason, at=now,
        )  # fmt: skip
    return record


def expire_record(
    principal: Principal,
    memory_id: str,
    reason: str,
    *,
    valid_to: datetime | None = None,
    now: datetime | None = None,
) -> MemoryRecord:
    """End the record's validity (now, or at `valid_to`) and keep it as history (rule 2b)."""
    _require_curator(principal)
    reason = _require_reason(reason)
    validation.check_datetimes(valid_to=valid_to)
    now = now or timezone.now()
    with transaction.atomic():
        record = get_record(principal, memory_id, for_update=True)
        if record.status != Status.ACCEPTED:
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
            propagate([record], reason=f"Expired: {reason}", now=now)
            _embed_after_commit(record)
        audit.record_event(
            tenant=record.tenant_id, actor=principal, action="record.expired", object_type="record",
            object_id=record.memory_id, before=before, after=audit.snapshot(record), reason=reason, at=now,
        )  # fmt: skip
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
        dispute = get_dispute(principal, public_id, for_update=True)
        if dispute.status != Dispute.Status.OPEN:
            raise InvalidState("This dispute is already resolved.")
        lock_fact(
            dispute.tenant_id,
            dispute.project.key,
            dispute.subject_id,
            dispute.predicate,
        )
        candidates = list(dispute.candidates.select_for_update().order_by("revision"))
        chosen = next((c for c in candidates if c.memory_id == winner), None)
        if winner and chosen is None:
            raise InvalidInput({"winner": [f"{winner!r} is not a candidate of this dispute."]})
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
                record.status = Status.SUPERSEDED
                record.is_head = False
                record.superseded_by = chosen
                if record.entered_current:
                    record.recorded_to = now
                    record.valid_to_recorded_at = now
                    cut = max(record.valid_from, chosen.valid_from)  # type: ignore[union-attr]
                    record.valid_to = min(record.valid_to or cut, cut)
            record.status_reason = reason
            record.save()
            audit.record_event(
                tenant=record.tenant_id, actor=principal, action="record.dispute_resolved", object_type="record",
                object_id=record.memory_id, before=before, after=audit.snapshot(record), reason=reason, at=now,
            )  # fmt: skip
        if chosen is not None:
            _cut_overlapping(chosen, now)
        _embed_after_commit(*candidates)
        dispute.status = Dispute.Status.RESOLVED
        dispute.resolved_at = now
        dispute.resolved_by = principal
        dispute.winner = chosen
        dispute.resolution_reason = reason
        dispute.save()
        audit.record_event(
            tenant=dispute.tenant_id, actor=principal, action="dispute.resolved", object_type="dispute",
            object_id=dispute.public_id, reason=reason, at=now,
            after={"winner": chosen.memory_id if chosen else None, "exclude_all": exclude_all},
        )  # fmt: skip
    return dispute


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
    for tenant_id, rows in by_tenant.items():
        try:
            count += _settle_rows([pk for pk, _ in rows], now)
            continue
        except Exception:
            logger.warning("Valid-time transitions of tenant %s failed as a batch; settling row by row.", tenant_id)
        for pk, memory_id in rows:
            try:
                count += _settle_rows([pk], now)
            except Exception as exc:
                task_failures.record_failure(
                    tenant_id=tenant_id, task="settle_valid_time_transitions", object_type="record",
                    object_id=memory_id, error=exc, now=now,
                )  # fmt: skip
    # The other half of the hand-over: records whose valid_from has passed get usable index entries.
    # Search already decides at query time; this keeps the index's stored flag true. Never fatal here.
    try:
        mark_records_in_effect(now)
    except Exception:
        logger.exception("Re-marking records that came into effect failed; the next run retries.")
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
        propagate(ended, reason="Its validity ended.", now=now)
        _embed_after_commit(*ended)
    return count
