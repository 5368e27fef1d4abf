"""The read side: what is believed now, what was believed as of two instants, and a fact's history.

Every read for an agent carries freshness (PRODUCT.md rule 1); a read for acting refuses when the
field's policy demands a fresh verified value and there is none (rule 8).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from django.db.models import Max, Q
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.lib.prepared import PreparedRead
from memory_admin.memory.errors import FactDisputed, NotFound, RecheckRequired
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, Project, RecheckAttempt, RecordQuerySet
from memory_admin.memory.policies import policies_for, policy_for

Status = MemoryRecord.Status
Freshness = Literal["fresh", "recheck_due", "never_verified"]
FRESHNESS: tuple[Freshness, ...] = get_args(Freshness)
FRESHNESS_LABELS: dict[Freshness, str] = {
    "fresh": "fresh",
    "recheck_due": "recheck due",
    "never_verified": "never verified",
}
Purpose = Literal["answer", "action"]


def fact_records(principal: Principal, project_id: str, subject_id: str, predicate: str) -> Any:
    return _fact_rows(principal.tenant_pk, project_id, subject_id, predicate)


def _fact_rows(tenant_id: int, project_id: str, subject_id: str, predicate: str) -> RecordQuerySet:
    rows: RecordQuerySet = MemoryRecord.objects.in_project(tenant_id, project_id).filter(
        tenant_id=tenant_id, subject_id=subject_id, predicate=predicate
    )
    return rows


def _answering(
    tenant: int, project: str, subject: str, predicate: str, valid_at: datetime, known_at: datetime
) -> RecordQuerySet:
    """The records that answered for `valid_at` as believed at `known_at`, the answer first."""
    return (
        _fact_rows(tenant, project, subject, predicate)
        .as_of(valid_at, known_at)
        .select_related("project", "issuer")
        .order_by("-recorded_from", "-revision")
    )


# `as_of` is the read agents make most: compiled once per database, then run with each call's values.
_AS_OF = PreparedRead(
    MemoryRecord,
    _answering,
    sentinels={
        "tenant": -7_391_004_217,
        "project": "<as_of project>",
        "subject": "<as_of subject>",
        "predicate": "<as_of predicate>",
        "valid_at": datetime(1901, 2, 3, 4, 5, 6, 789012, tzinfo=UTC),
        "known_at": datetime(1902, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
    },
    fields={
        "tenant": MemoryRecord._meta.get_field("tenant"),
        "project": Project._meta.get_field("key"),
        "subject": MemoryRecord._meta.get_field("subject_id"),
        "predicate": MemoryRecord._meta.get_field("predicate"),
        "valid_at": MemoryRecord._meta.get_field("valid_from"),
        "known_at": MemoryRecord._meta.get_field("recorded_from"),
    },
)


def as_of(
    principal: Principal,
    project_id: str,
    subject_id: str,
    predicate: str,
    *,
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
) -> MemoryRecord | None:
    """The record that answered for `valid_at` in what was believed at `known_at` (both default now).

    One query, compiled once (`PreparedRead`): the record with its project and issuer (what a fact answer
    renders). Its supersession links are not joined: no reader of one answer renders them, and a caller that
    does loads them on access.
    """
    now = timezone.now()
    record: MemoryRecord | None = _AS_OF.get(
        tenant=principal.tenant_pk,
        project=project_id,
        subject=subject_id,
        predicate=predicate,
        valid_at=valid_at or now,
        known_at=known_at or now,
    )
    return record


def current(principal: Principal, project_id: str, subject_id: str, predicate: str) -> MemoryRecord | None:
    return as_of(principal, project_id, subject_id, predicate)


def history(principal: Principal, project_id: str, subject_id: str, predicate: str) -> list[MemoryRecord]:
    """Every version of the fact, oldest revision first (the whole supersession chain)."""
    return list(fact_records(principal, project_id, subject_id, predicate).with_public_relations().order_by("revision"))


def freshness_of(record: MemoryRecord, now: datetime) -> Freshness:
    """The one freshness rule (PRODUCT.md rule 1); `freshness_filter` is the same rule as a query."""
    if record.last_verified_at is None:
        return "never_verified"
    if record.recheck_after is not None and record.recheck_after <= now:
        return "recheck_due"
    return "fresh"


def freshness_filter(freshness: Freshness, now: datetime) -> Q:
    """The records whose `freshness_of(record, now)` is `freshness` (a list filtered by freshness)."""
    match freshness:
        case "never_verified":
            return Q(last_verified_at__isnull=True)
        case "recheck_due":
            return Q(last_verified_at__isnull=False, recheck_after__lte=now)
        case "fresh":
            return Q(last_verified_at__isnull=False) & (Q(recheck_after__isnull=True) | Q(recheck_after__gt=now))
    raise ValueError(f"Unknown freshness {freshness!r}")


def _when(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "never"


@dataclass
class FactView:
    """The answer to `GET /facts/current/`: a value with everything needed to judge whether to use it."""

    record: MemoryRecord | None
    status: str
    freshness: Freshness | None
    last_verified_at: datetime | None
    last_verified_value: Any
    caveat: str | None
    action_allowed: bool
    candidates: list[MemoryRecord] = field(default_factory=list)
    dispute: Dispute | None = None


def _last_verified(record: MemoryRecord) -> tuple[datetime | None, Any]:
    """The record's own verification, else the latest earlier verified revision of its fact, leaving out one
    whose validity starts only where this record's has ended: its successor in valid time, even when recorded
    before it (a late older revision, rule 3), is never its last verified value."""
    if record.last_verified_at is not None:
        return record.last_verified_at, record.value
    earlier = MemoryRecord.objects.filter(
        tenant_id=record.tenant_id,
        project_id=record.project_id,
        subject_id=record.subject_id,
        predicate=record.predicate,
        last_verified_at__isnull=False,
        revision__lt=record.revision,
    )
    if record.valid_to is not None:
        earlier = earlier.exclude(valid_from__gte=record.valid_to)
    found = earlier.order_by("-revision").values_list("last_verified_at", "value").first()
    return found if found else (None, None)


def must_be_fresh_for_action(policy: FieldPolicy | None) -> bool:
    """Whether acting on this field needs a value verified and within its recheck interval."""
    return policy is not None and policy.on_failure == FieldPolicy.OnFailure.BLOCK_ACTION


@dataclass(frozen=True)
class ActionCheck:
    """What the step before a read for acting (`rechecks.recheck_before_action`) read and did, handed to
    `fact_view` so nothing is read twice: the record that answered now (None: none did), its field's policy,
    and the recheck attempt made (None: none, so nothing was written since `record` was read)."""

    record: MemoryRecord | None
    policy: FieldPolicy | None
    attempt: RecheckAttempt | None = None


def fact_view(
    principal: Principal,
    project_id: str,
    subject_id: str,
    predicate: str,
    *,
    purpose: Purpose = "answer",
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
    checked: ActionCheck | None = None,
) -> FactView:
    """What an agent may use for one fact, now or as of (valid_at, known_at). Reads only.

    1. The answering record (as of the two instants); none → a disputed fact shows its candidates
       and no value, anything else is NotFound.
    2. Freshness from `last_verified_at`/`recheck_after`; a caveat a person can read when not fresh.
    3. For acting: never on a disputed fact; when the field's policy blocks actions on unverified
       values and this one is not fresh → RecheckRequired, carrying the last verified value.

    Verifying before acting is not done here: a door reading for action first calls
    `rechecks.recheck_before_action` and passes what it returns as `checked`: its record answers unless a
    recheck was made (which may have superseded it: then the fact is read again), and its policy is the field's.
    """
    recheck = checked.attempt if checked is not None else None
    if checked is not None and recheck is None:
        record = checked.record
    else:
        record = as_of(principal, project_id, subject_id, predicate, valid_at=valid_at, known_at=known_at)
    if record is None and recheck is not None:
        record = recheck.record  # as before the split: the rechecked record answers if nothing else does
    if record is None:
        return _disputed_view(principal, project_id, subject_id, predicate, purpose=purpose, valid_at=valid_at)
    policy = checked.policy if checked is not None else policy_for(principal.tenant_pk, project_id, predicate)
    fresh_required = must_be_fresh_for_action(policy)
    view, attempt = _record_view(record, recheck, fresh_required=fresh_required)
    if purpose == "action" and not view.action_allowed and fresh_required:
        raise _recheck_required(view, record, predicate, attempt)
    return view


def _no_usable_value(head: MemoryRecord | None, where: str, moment: datetime) -> NotFound:
    """Why nothing answers for `where` at `moment`, true to the case, with the head record as data when there is
    one when it is usable at another time: not in effect yet (its `valid_from` after the moment) or ended (its
    `valid_to` at or before it); otherwise its status (excluded, expired), without the record."""
    if head is None:
        return NotFound(f"No usable value for {where}: nothing is recorded.")
    accepted = head.status == MemoryRecord.Status.ACCEPTED
    if accepted and head.valid_from > moment:
        return NotFound(
            f"No value in effect for {where} yet: its current record is not in effect until "
            f"{head.valid_from.isoformat()}.",
            record=head,
            not_in_effect_until=head.valid_from.isoformat(),
        )
    if accepted and head.valid_to is not None and head.valid_to <= moment:
        return NotFound(
            f"No value in effect for {where}: its current record ended at {head.valid_to.isoformat()}.",
            record=head,
            ended_at=head.valid_to.isoformat(),
        )
    # No record as data here: an excluded or expired value must not reach the reader this way.
    return NotFound(f"No usable value for {where}: its current record is {head.status}.")


def _disputed_view(
    principal: Principal,
    project_id: str,
    subject_id: str,
    predicate: str,
    *,
    purpose: Purpose,
    valid_at: datetime | None = None,
) -> FactView:
    """No record answers: an open dispute shows its candidates (and refuses acting); else NotFound."""
    dispute = (
        Dispute.objects.filter(
            tenant_id=principal.tenant_pk,
            project__key=project_id,
            subject_id=subject_id,
            predicate=predicate,
            status=Dispute.Status.OPEN,
        )
        .prefetch_related("candidates__issuer")
        .first()
    )
    if dispute is None:
        head = fact_records(principal, project_id, subject_id, predicate).filter(is_head=True).first()
        raise _no_usable_value(head, f"{subject_id}.{predicate} in {project_id}", valid_at or timezone.now())
    if purpose == "action":
        raise FactDisputed(
            "This fact is disputed; no value may be acted on until the dispute is resolved.",
            dispute_id=dispute.public_id,
        )
    return FactView(
        record=None,
        status=Status.DISPUTED,
        freshness=None,
        last_verified_at=None,
        last_verified_value=None,
        caveat="Sources disagree and no rule orders them; an owner must resolve the dispute.",
        action_allowed=False,
        candidates=list(dispute.candidates.all()),
        dispute=dispute,
    )


def record_views(records: list[MemoryRecord], now: datetime | None = None) -> dict[int, FactView]:
    """`fact_view(purpose="answer")` of many answering records at once (a search's k hits), by record pk:
    the same rule (`_record_view`), with its lookups (policies, last verified values, latest recheck
    attempts) made once for all the records instead of once per record."""
    if not records:
        return {}
    now = now or timezone.now()
    tenant_id = records[0].tenant_id
    policies = policies_for(tenant_id, {(r.project.key, r.predicate) for r in records})
    earlier = _last_verified_of([r for r in records if r.last_verified_at is None])
    stale = [r.pk for r in records if freshness_of(r, now) != "fresh"]
    latest: dict[int, RecheckAttempt] = {}
    if stale:
        newest = RecheckAttempt.objects.filter(record_id__in=stale).values("record_id").annotate(last=Max("id"))
        latest = {a.record_id: a for a in RecheckAttempt.objects.filter(id__in=newest.values("last"))}
    views: dict[int, FactView] = {}
    for record in records:
        attempt = latest.get(record.pk)
        view, _ = _record_view(
            record,
            None,
            fresh_required=must_be_fresh_for_action(policies[(record.project.key, record.predicate)]),
            now=now,
            last_verified=_LOOKUP if record.last_verified_at is not None else earlier.get(record.pk, (None, None)),
            latest_failed=attempt if attempt is not None and not attempt.verified else None,
        )
        views[record.pk] = view
    return views


def _last_verified_of(records: list[MemoryRecord]) -> dict[int, tuple[datetime | None, Any]]:
    """`_last_verified` of records never verified themselves, in one query: the latest earlier verified
    revision of each one's fact."""
    if not records:
        return {}
    facts = Q()
    for r in records:
        facts |= Q(project_id=r.project_id, subject_id=r.subject_id, predicate=r.predicate, revision__lt=r.revision)
    verified = (
        MemoryRecord.objects.filter(tenant_id=records[0].tenant_id, last_verified_at__isnull=False)
        .filter(facts)
        .order_by("-revision")
        .values_list("project_id", "subject_id", "predicate", "revision", "last_verified_at", "value", "valid_from")
    )
    found: dict[int, tuple[datetime | None, Any]] = {}
    rows = list(verified)
    for r in records:
        fact = (r.project_id, r.subject_id, r.predicate)
        # As `_last_verified`: a successor in valid time is left out.
        best = next(
            (
                row
                for row in rows
                if row[:3] == fact and row[3] < r.revision and (r.valid_to is None or row[6] < r.valid_to)
            ),
            None,
        )
        if best is not None:
            found[r.pk] = (best[4], best[5])
    return found


_LOOKUP: Any = object()  # "not looked up yet": `_record_view` makes the query itself


def _record_view(
    record: MemoryRecord,
    recheck: RecheckAttempt | None,
    *,
    fresh_required: bool,
    now: datetime | None = None,
    last_verified: Any = _LOOKUP,
    latest_failed: Any = _LOOKUP,
) -> tuple[FactView, RecheckAttempt | None]:
    """The view of an answering record, and the attempt that explains it: the recheck just made, else the
    latest failed one when the value is not fresh. Acting is allowed on an accepted value that is verified
    now, or on any accepted value when the field's policy does not demand freshness. `last_verified` and
    `latest_failed` may be passed already looked up (`record_views`)."""
    freshness = freshness_of(record, now or timezone.now())
    verified_at, verified_value = _last_verified(record) if last_verified is _LOOKUP else last_verified
    attempt = recheck
    if attempt is not None:
        verified_now = attempt.verified
    else:
        verified_now = freshness == "fresh"
        if freshness == "fresh":
            attempt = None
        else:
            attempt = _latest_failed_attempt(record) if latest_failed is _LOOKUP else latest_failed
    caveat = _caveat(record, freshness, verified_at, verified_value, attempt, made_by_this_read=recheck is not None)
    action_allowed = record.status == Status.ACCEPTED and (verified_now or not fresh_required)
    if action_allowed and attempt is not None and attempt.verified:
        caveat = None
    view = FactView(
        record=record,
        status=record.status,
        freshness=freshness,
        last_verified_at=verified_at,
        last_verified_value=verified_value,
        caveat=caveat,
        action_allowed=action_allowed,
    )
    return view, attempt


def _recheck_required(
    view: FactView, record: MemoryRecord, predicate: str, attempt: RecheckAttempt | None
) -> RecheckRequired:
    """The 409 for acting on a value the policy demands verified: it carries the last verified value."""
    return RecheckRequired(
        f"{view.caveat} Actions that depend on {predicate} are on hold until it is verified.",
        memory_id=record.memory_id,
        last_verified_value=view.last_verified_value,
        last_verified_at=_when(view.last_verified_at) if view.last_verified_at else None,
        recheck_after=record.recheck_after.isoformat() if record.recheck_after else None,
        caveat=view.caveat,
        recheck_outcome=attempt.outcome if attempt is not None else None,
    )


def _latest_failed_attempt(record: MemoryRecord) -> RecheckAttempt | None:
    latest = record.rechecks.order_by("-id").first()
    return latest if latest is not None and not latest.verified else None


def _caveat(
    record: MemoryRecord,
    freshness: Freshness,
    verified_at: datetime | None,
    verified_value: Any,
    attempt: RecheckAttempt | None,
    *,
    made_by_this_read: bool = False,
) -> str | None:
    """A sentence a person can read: what was last verified, when, and why it is not confirmed now. The attempt
    is told as this read's own ("could not be confirmed just now") only when this read made it; an earlier one is
    told as the last attempt, with its time, so a reader never takes an old failure for the call it just made."""
    if freshness == "fresh" and (attempt is None or attempt.verified):
        return None
    if verified_at is None:
        base = (
            f"Not verified against the canonical source (source {record.source_canonical_ref} "
            f"{record.source_revision}, recorded {_when(record.recorded_from)})."
        )
    else:
        base = f"Last verified {_when(verified_at)} (value then: {json.dumps(verified_value, ensure_ascii=False)})."
    if attempt is not None and not attempt.verified:
        why = {
            RecheckAttempt.Result.SOURCE_UNAVAILABLE: "the canonical source could not be reached",
            RecheckAttempt.Result.SOURCE_AMBIGUOUS: "the canonical source's answer was ambiguous",
            RecheckAttempt.Result.NOT_CHECKED: "it was not checked",
        }[RecheckAttempt.Result(attempt.outcome)]
        if made_by_this_read:
            return (
                f"{base} It could not be confirmed just now ({_when(attempt.attempted_at)}): {why} ({attempt.error})."
            )
        return (
            f"{base} It has not been confirmed since: the last attempt, at {_when(attempt.attempted_at)}, failed: "
            f"{why} ({attempt.error})."
        )
    if freshness == "recheck_due":
        return f"{base} A recheck was due {_when(record.recheck_after)}; it has not been confirmed since."
    return base
