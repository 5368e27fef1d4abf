"""The recheck engine: confirm records against their field's canonical source (PRODUCT.md rules 6-8).

Five outcomes, one stored RecheckAttempt each. Only a value read from the field's canonical source
verifies; a failed recheck never moves `last_verified_at`. The sweep, the Celery tasks, the read for
acting, the dashboard's "recheck now", manual verification and agents' reports all end in
`record_recheck`.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from memory_admin.accounts.models import Principal, Role, Tenant
from memory_admin.memory import audit, reads, validation
from memory_admin.memory.actions import Assertion, Outcome, assert_fact
from memory_admin.memory.connectors import (
    CannotFetch,
    FactKey,
    SourceAmbiguous,
    SourceUnavailable,
)
from memory_admin.memory.errors import Forbidden, InvalidInput, InvalidState
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt, RecordQuerySet
from memory_admin.memory.policies import (
    CANONICAL_ISSUER,
    authorize_issuer,
    is_manual,
    not_the_source,
    policy_for,
    source_connector,
)

Result = RecheckAttempt.Result
Trigger = RecheckAttempt.Trigger
Status = MemoryRecord.Status

# A claimed record is not claimed again for this long (a failed source is retried after it).
CLAIM_LEASE = timedelta(minutes=15)


def canonical_issuer(tenant: Tenant | int) -> Principal:
    """The tenant's system principal that writes values fetched from canonical sources."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    principal, _ = Principal.objects.get_or_create(
        tenant_id=tenant_id,
        name=CANONICAL_ISSUER,
        defaults={
            "username": f"{CANONICAL_ISSUER}@{Tenant.objects.get(pk=tenant_id).slug}",
            "kind": Principal.Kind.AGENT,
            "roles": [Role.AGENT],
            "password": "!",  # no password login
        },
    )
    return principal


def _canonical_ref(record: MemoryRecord, policy: FieldPolicy | None, fetched_ref: str) -> str:
    prefix = policy.canonical_ref_prefix if policy else ""
    if prefix and record.source_canonical_ref.startswith(prefix):
        return record.source_canonical_ref
    if prefix:
        return f"{prefix}{record.project.key}/{record.subject_id}"
    return fetched_ref or record.source_canonical_ref


def record_recheck(
    record: MemoryRecord,
    *,
    outcome: str,
    trigger: str,
    observed_value: Any = None,
    source_revision: str = "",
    source_ref: str = "",
    reporter: Principal | None = None,
    issuer: Principal | None = None,
    duration_ms: int = 0,
    error: str = "",
    now: datetime | None = None,
) -> RecheckAttempt:
    """Store one attempt and apply what it means for the record.

    1. verified_unchanged → `last_verified_at` = now, `recheck_after` moves by the policy's interval;
    2. verified_changed → the observed value enters through assert_fact, issued by `issuer` (an agent
       reporting from the canonical source, a person verifying a manual field) or else the tenant's
       canonical-source principal, verified now, superseding the record;
    `reporter` is who asked for the recheck (kept on the attempt).
    3. source_unavailable, source_ambiguous, not_checked → stored; `last_verified_at` never moves;
       an ambiguous source (or a manual field waiting for a person) flags the record for an owner.
    A verified outcome for a record that is no longer the current belief is stored as not_checked.
    """
    now = now or timezone.now()
    with transaction.atomic():
        # The record's row only, not its project's (see curation.get_record).
        locked = MemoryRecord.objects.select_for_update(of=("self",)).select_related("project").get(pk=record.pk)
        policy = policy_for(locked.tenant_id, locked.project.key, locked.predicate)
        outcome, error = _effective_outcome(locked, outcome, observed_value, error, now)
        attempt = RecheckAttempt(
            tenant_id=locked.tenant_id,
            record=locked,
            outcome=outcome,
            trigger=trigger,
            observed_value=observed_value,
            source_revision=source_revision[:100],
            source_ref=source_ref[:500],
            reporter=reporter,
            duration_ms=duration_ms,
            error=error,
            attempted_at=now,
        )
        with audit.changing(locked, actor=reporter, action=audit.rechecked(outcome), at=now) as event:
            if outcome == Result.VERIFIED_UNCHANGED:
                _apply_verified(locked, policy, now)
            elif outcome == Result.VERIFIED_CHANGED:
                _apply_changed(locked, attempt, policy, source_revision, source_ref, issuer=issuer, now=now)
            elif outcome == Result.SOURCE_AMBIGUOUS or (outcome == Result.NOT_CHECKED and trigger != Trigger.ACTION):
                _flag_for_owner(locked, outcome, error)
            attempt.save()
            # A change the source reported that could not become current is audited as source_ambiguous.
            event.action, event.reason = audit.rechecked(attempt.outcome), attempt.error
    return attempt


def _effective_outcome(
    locked: MemoryRecord, outcome: str, observed_value: Any, error: str, now: datetime
) -> tuple[str, str]:
    """What a reported outcome counts as: a verified one for a record no longer kept fresh (neither in effect
    now nor a scheduled successor, `MemoryRecord.kept_fresh_at`) is not_checked (with why), and a "changed"
    value equal to the record's is unchanged."""
    if outcome in (Result.VERIFIED_UNCHANGED, Result.VERIFIED_CHANGED) and not locked.kept_fresh_at(now):
        error = f"Not applied: the record is no longer the current belief ({locked.status}). {error}".strip()
        return Result.NOT_CHECKED, error
    if outcome == Result.VERIFIED_CHANGED and observed_value == locked.value:
        return Result.VERIFIED_UNCHANGED, error
    return outcome, error


def _apply_verified(locked: MemoryRecord, policy: FieldPolicy | None, now: datetime) -> None:
    """verified_unchanged: the record is verified now; its next recheck is one policy interval away."""
    locked.last_verified_at = now
    interval = policy.recheck_interval if policy else None
    locked.recheck_after = now + min(interval, validation.MAX_DURATION) if interval else None
    release_claim(locked)
    locked.attention = ""
    locked.save(update_fields=["last_verified_at", "recheck_after", "recheck_claimed_at", "attention"])


def _apply_changed(
    locked: MemoryRecord,
    attempt: RecheckAttempt,
    policy: FieldPolicy | None,
    source_revision: str,
    source_ref: str,
    *,
    issuer: Principal | None,
    now: datetime,
) -> None:
    """verified_changed: the observed value supersedes the record (verified now); if it cannot become
    current, the attempt is source_ambiguous and the record is flagged for an owner. `source_revision` and
    `source_ref` are the reported strings in full (the attempt keeps them cut to its columns).

    Today's value while a successor is scheduled is not the fact's head, so no compare-and-swap can replace it
    alone: the difference is flagged for an owner (source_ambiguous), who decides between the source, today's
    value and the scheduled one."""
    if not locked.is_head:
        attempt.outcome = Result.SOURCE_AMBIGUOUS
        attempt.error = (
            "The source has a different value while a successor of this record is scheduled; an owner decides "
            f"which holds. {attempt.error}"
        ).strip()
        locked.attention = attempt.error
        release_claim(locked)
        locked.save(update_fields=["attention", "recheck_claimed_at"])
        return
    result = assert_fact(
        issuer or canonical_issuer(locked.tenant_id),
        Assertion(
            project_id=locked.project.key,
            subject_id=locked.subject_id,
            predicate=locked.predicate,
            value=attempt.observed_value,
            valid_from=now,
            source_canonical_ref=_canonical_ref(locked, policy, source_ref),
            source_revision=source_revision or now.isoformat(),
            expected_revision=locked.revision,
        ),
        now=now,
        verified_at=now,
    )
    if result.outcome == Outcome.CREATED:
        attempt.new_record = result.record
    else:
        attempt.outcome = Result.SOURCE_AMBIGUOUS
        attempt.error = (
            f"The source's value could not become current ({result.outcome.value}: source revision "
            f"{source_revision!r} does not order after {locked.source_revision!r}). {attempt.error}"
        ).strip()
    locked.refresh_from_db()
    release_claim(locked)
    locked.attention = attempt.error if attempt.outcome == Result.SOURCE_AMBIGUOUS else ""
    locked.save(update_fields=["recheck_claimed_at", "attention"])


def _flag_for_owner(locked: MemoryRecord, outcome: str, error: str) -> None:
    """An ambiguous source, or a not_checked with a reason (a manual field waiting for a person), needs an
    owner's attention; `last_verified_at` never moves."""
    if outcome == Result.SOURCE_AMBIGUOUS or error:
        locked.attention = error or "The canonical source's answer was ambiguous."
        locked.save(update_fields=["attention"])


def can_fetch(policy: FieldPolicy | None) -> bool:
    """Whether the field's canonical source can be read without a person: "recheck now" (dashboard), the
    read for acting fetch only then (a manual field waits for a person, policies.is_manual)."""
    connector = source_connector(policy)
    return connector is not None and connector.can_fetch


def recheck_now_refusal(record: MemoryRecord, policy: FieldPolicy | None) -> str:
    """Why a person cannot ask for "recheck now" on `record` ("" when they can, role apart)."""
    if not record.kept_fresh_at(timezone.now()):
        return f"Only the current record can be rechecked; this one is {record.status}."
    if not can_fetch(policy):
        return "This field has no canonical source the server can fetch; nothing was rechecked."
    return ""


def request_recheck_now(principal: Principal, record: MemoryRecord, *, trigger: str) -> RecheckAttempt:
    """A person's "recheck now": owners and admins (403), on the current record of a field whose source
    the server can fetch (409 `invalid_state` otherwise, nothing recorded)."""
    if not principal.can_curate:
        raise Forbidden("Only owners and admins start rechecks.")
    why_not = recheck_now_refusal(record, policy_for(record.tenant_id, record.project.key, record.predicate))
    if why_not:
        raise InvalidState(why_not)
    return recheck_now(record, trigger=trigger, reporter=principal)


_LOOKUP: Any = object()  # "not read yet": recheck_now reads the field's policy itself


def recheck_now(
    record: MemoryRecord, *, trigger: str, reporter: Principal | None = None, policy: Any = _LOOKUP
) -> RecheckAttempt:
    """Fetch the record's field from its canonical source now and record what that concludes.

    The fetch runs outside any transaction (no lock is held across the network); a connector that
    cannot fetch by itself (manual) or a field without a canonical source gives not_checked. `policy` is the
    field's policy when the caller has read it already.
    """
    if policy is _LOOKUP:
        policy = policy_for(record.tenant_id, record.project.key, record.predicate)
    connector = source_connector(policy)
    if connector is None:
        why = "no field policy" if policy is None else "the field's policy names no canonical source"
        return record_recheck(
            record, outcome=Result.NOT_CHECKED, trigger=trigger, reporter=reporter, error=f"Not checked: {why}."
        )
    key = FactKey(record.project.key, record.subject_id, record.predicate)
    started = time.monotonic()
    try:
        observation = connector.fetch(key)
    except CannotFetch:
        return record_recheck(
            record,
            outcome=Result.NOT_CHECKED,
            trigger=trigger,
            reporter=reporter,
            error="Awaiting manual verification by a person.",
        )
    except SourceUnavailable as exc:
        return record_recheck(
            record,
            outcome=Result.SOURCE_UNAVAILABLE,
            trigger=trigger,
            reporter=reporter,
            duration_ms=_ms(started),
            error=str(exc),
        )
    except SourceAmbiguous as exc:
        return record_recheck(
            record,
            outcome=Result.SOURCE_AMBIGUOUS,
            trigger=trigger,
            reporter=reporter,
            duration_ms=_ms(started),
            error=str(exc),
            observed_value=exc.candidates or None,
        )
    outcome = Result.VERIFIED_UNCHANGED if observation.value == record.value else Result.VERIFIED_CHANGED
    return record_recheck(
        record,
        outcome=outcome,
        trigger=trigger,
        observed_value=observation.value,
        reporter=reporter,
        source_revision=observation.revision,
        source_ref=observation.ref,
        duration_ms=_ms(started),
    )


def recheck_before_action(
    principal: Principal,
    project_id: str,
    subject_id: str,
    predicate: str,
    *,
    purpose: str,
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
) -> reads.ActionCheck | None:
    """Verify before acting (PRODUCT.md rule 8): the step a door takes before reading a fact for action.

    Only a read for acting on the current value (no `valid_at`/`known_at`; None otherwise: nothing to do) of an
    accepted record whose field policy asks for it (`recheck_before_action`, or the value is not fresh) and
    whose canonical source can be fetched without a person is rechecked now, bounded by the connector's
    timeout; a changed value supersedes. What was read (the record answering now and its field's policy, each
    read once) and the attempt made, if any, are handed to `reads.fact_view(checked=...)`.
    """
    if purpose != "action" or valid_at is not None or known_at is not None:
        return None
    record = reads.current(principal, project_id, subject_id, predicate)
    if record is None:
        return reads.ActionCheck(record=None, policy=None)
    policy = policy_for(principal.tenant_pk, project_id, predicate)
    checked = reads.ActionCheck(record=record, policy=policy)
    asked = policy is not None and (
        policy.recheck_before_action or reads.freshness_of(record, timezone.now()) != "fresh"
    )
    if record.status != Status.ACCEPTED or not asked or not can_fetch(policy):
        return checked
    return reads.ActionCheck(
        record=record, policy=policy, attempt=recheck_now(record, trigger=Trigger.ACTION, policy=policy)
    )


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def test_source(policy: FieldPolicy, subject_id: str, project_id: str | None = None) -> dict[str, Any]:
    """What a recheck of `subject_id` would conclude now, without storing anything ("test this source")."""
    connector = source_connector(policy)
    project = project_id or (policy.project.key if policy.project_id else "")  # type: ignore[union-attr]
    if connector is None:
        return {"outcome": Result.NOT_CHECKED, "detail": "This policy names no canonical source."}
    key = FactKey(project, subject_id, policy.predicate)
    started = time.monotonic()
    try:
        observation = connector.fetch(key)
    except CannotFetch:
        return {"outcome": Result.NOT_CHECKED, "detail": "Manual: a person verifies this field in the dashboard."}
    except SourceUnavailable as exc:
        return {"outcome": Result.SOURCE_UNAVAILABLE, "detail": str(exc), "duration_ms": _ms(started)}
    except SourceAmbiguous as exc:
        return {
            "outcome": Result.SOURCE_AMBIGUOUS,
            "detail": str(exc),
            "candidates": exc.candidates,
            "duration_ms": _ms(started),
        }
    # The value in effect now (today's, even while a successor is scheduled), as a recheck would compare.
    current = (
        MemoryRecord.objects.current()
        .filter(tenant_id=policy.tenant_id, project__key=project, subject_id=subject_id, predicate=policy.predicate)
        .first()
    )
    if current is None:
        conclusion, detail = "no_current_record", "The source answers, but we hold no current value to compare."
    elif current.value == observation.value:
        conclusion, detail = Result.VERIFIED_UNCHANGED, "The source confirms the current value."
    else:
        conclusion, detail = Result.VERIFIED_CHANGED, "The source has a different value; a recheck would supersede."
    return {
        "outcome": conclusion,
        "detail": detail,
        "observed_value": observation.value,
        "source_revision": observation.revision,
        "url": observation.ref,
        "duration_ms": _ms(started),
        "current_value": current.value if current else None,
    }


def report_recheck(
    reporter: Principal,
    record: MemoryRecord,
    *,
    outcome: str,
    observed_value: Any = None,
    source_revision: str = "",
    source_ref: str = "",
    error: str = "",
    trigger: str = Trigger.REPORT,
) -> RecheckAttempt:
    """An outcome reported by an agent (API) or a person (manual verification in the dashboard).

    1. The reporter must be allowed to write, and for a verified outcome allowed to issue the field
       (403 otherwise); a verified report must be consistent with itself (400).
    2. A verified outcome counts only from a principal the policy names as the field's canonical
       source (see `not_the_source`). Any other verified report is stored as not_checked, with the
       claim (outcome, source_ref, revision, value) kept on the attempt: a `source_ref` the client
       writes is a claim, never proof, whatever prefix it carries.
    Failures are recorded from any writer of the tenant.
    """
    if outcome not in Result.values:
        raise InvalidInput({"outcome": [f"Use one of {', '.join(Result.values)}."]})
    if not reporter.can_write:
        raise Forbidden("This principal may not report rechecks.")
    if outcome in (Result.VERIFIED_UNCHANGED, Result.VERIFIED_CHANGED):
        policy = policy_for(record.tenant_id, record.project.key, record.predicate)
        authorize_issuer(reporter, policy)
        if outcome == Result.VERIFIED_CHANGED and observed_value is None:
            raise InvalidInput({"observed_value": ["A changed value needs the value observed."]})
        if outcome == Result.VERIFIED_UNCHANGED and observed_value is not None and observed_value != record.value:
            raise InvalidInput({"observed_value": ["Differs from the record's value; report verified_changed."]})
        why_not = not_the_source(reporter, policy)
        if why_not:
            claim = f"The report claimed {outcome}" + (f" from source_ref {source_ref!r}" if source_ref else "")
            claim += f" at revision {source_revision!r}." if source_revision else "."
            error = f"Not verified: {why_not} {claim} {error}".strip()
            outcome = Result.NOT_CHECKED
    return record_recheck(
        record,
        outcome=outcome,
        trigger=trigger,
        observed_value=observed_value,
        source_revision=source_revision,
        source_ref=source_ref,
        reporter=reporter,
        issuer=reporter,
        error=error,
    )


def report_manual_verification(
    principal: Principal,
    record: MemoryRecord,
    *,
    outcome: str,
    observed_value: Any = None,
    source_revision: str = "",
    error: str = "",
) -> RecheckAttempt:
    """A person's verdict on a field verified manually (policies.is_manual): a field with a source the server
    fetches, or none, is refused (409 `invalid_state`, nothing recorded); then as report_recheck."""
    if not is_manual(policy_for(record.tenant_id, record.project.key, record.predicate)):
        raise InvalidState("This field is not verified manually; use Recheck now.")
    return report_recheck(
        principal,
        record,
        outcome=outcome,
        observed_value=observed_value,
        source_revision=source_revision,
        error=error,
        trigger=Trigger.MANUAL,
    )


def claim_due(now: datetime | None = None, *, limit: int = 500) -> list[int]:
    """Claim up to `limit` records past `recheck_after` for rechecking, oldest first: the record in effect now
    (today's value, even while a successor is scheduled and holds the head) and scheduled successors alike
    (`RecordQuerySet.due_for_recheck`). Returns their ids, oldest first.

    Two sweeps never take the same record in one round, and a claim expires after CLAIM_LEASE. On PostgreSQL
    a claim is a row of the unlogged table `memory_recheckclaim` (migration 0010, which says what a crash
    costs), never a write to the record: stamping 100k records scattered over the table dirtied ~100k heap
    pages (the row locks, then the stamps, non-HOT once pages fill). Claims are taken one statement at a time
    under a transaction-level advisory lock, so a concurrent sweep waits for this one's commit, then sees its
    claims and takes the next records; the claims table's primary key refuses a second claim of a record
    besides. The due records are read from the covering index `record_due_for_recheck` alone (an index-only
    scan). On SQLite the claim is the stamp `recheck_claimed_at` (one writer at a time: nothing to skip).
    """
    now = now or timezone.now()
    if limit <= 0:
        return []
    due = MemoryRecord.all_objects.live_for_scan().due_for_recheck(now).order_by("recheck_after", "id")
    with transaction.atomic():
        if connection.vendor == "postgresql":
            return _claim_on_postgres(due, now, limit)
        ids = list(
            due.filter(Q(recheck_claimed_at__isnull=True) | Q(recheck_claimed_at__lt=now - CLAIM_LEASE)).values_list(
                "id", flat=True
            )[:limit]
        )
        MemoryRecord.objects.filter(id__in=ids).update(recheck_claimed_at=now)
    return ids


# claim_due's transaction-level advisory lock on PostgreSQL (two-key form, second key 0; stats.FOLD_LOCK is
# another first key).
CLAIM_LOCK = 0x7263
CLAIMS_TABLE = "memory_recheckclaim"


def _claim_on_postgres(due: RecordQuerySet, now: datetime, limit: int) -> list[int]:
    """claim_due on PostgreSQL: expired claims are dropped, then one statement selects the unclaimed due
    records and appends their claims; the ids never travel to Python and back as parameters."""
    unclaimed = due.filter(
        RawSQL(
            f"NOT EXISTS (SELECT 1 FROM {CLAIMS_TABLE} c WHERE c.record_id = {MemoryRecord._meta.db_table}.id)",
            [],
            output_field=BooleanField(),
        )
    )
    select, params = unclaimed.values("id", "tenant_id")[:limit].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s::integer, 0)", [CLAIM_LOCK])
        cursor.execute(f"DELETE FROM {CLAIMS_TABLE} WHERE claimed_at < %s", [now - CLAIM_LEASE])
        # A data-modifying WITH runs to completion whether or not the outer query reads it; the outer query
        # reads the materialized due rows in the order the index gave them.
        cursor.execute(
            f"WITH due AS MATERIALIZED ({select}), "
            f"claimed AS (INSERT INTO {CLAIMS_TABLE} (record_id, tenant_id, claimed_at) "
            "SELECT id, tenant_id, %s FROM due) "
            "SELECT id FROM due",
            [*params, now],
        )
        return [pk for (pk,) in cursor.fetchall()]


def release_claim(record: MemoryRecord) -> None:
    """The sweep's claim on `record` ends: its stamp is cleared (saved by the caller) and, on PostgreSQL, its
    claim row is deleted, so the record can be claimed again as soon as it is due."""
    record.recheck_claimed_at = None
    _delete_claim_row(record.pk)


def release_claim_of(record_id: int) -> None:
    """`release_claim` of a record that is not rechecked (the sweep's task skips it: gone, ended or no longer
    accepted): the stamp is cleared here, and the claim row deleted, rather than left until the lease ends."""
    MemoryRecord.all_objects.filter(pk=record_id).update(recheck_claimed_at=None)
    _delete_claim_row(record_id)


def _delete_claim_row(record_id: int) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {CLAIMS_TABLE} WHERE record_id = %s", [record_id])
