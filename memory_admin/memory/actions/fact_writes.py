"""How each decision of `facts.decide` is written: one apply function per `Step` (`_APPLY`), the new version's fields
(`build_record`), the cut of the fact's overlapping accepted rows, and the assertion's audit events.

Writes are made at once (`assert_fact`) or collected by a `DeferredWrites` (`memory.batch`); the same functions
decide them either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from memory_admin.accounts.models import Principal
from memory_admin.lib import rows
from memory_admin.memory import audit, hooks, validation
from memory_admin.memory.actions.assertion import AssertResult, Decision, DeferredWrites, Outcome, Step, _Write
from memory_admin.memory.models import Dispute, FieldPolicy, MemoryRecord, new_public_id

Status = MemoryRecord.Status


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


def _apply_unchanged(w: _Write, decision: Decision) -> AssertResult:
    assert decision.record is not None
    return AssertResult(Outcome.UNCHANGED, decision.record, decision.dispute)


def _apply_dispute(w: _Write, decision: Decision) -> AssertResult:
    head, now = w.head, w.now
    assert head is not None
    with audit.changing(head, actor=w.principal, action=audit.Action.RECORD_DISPUTED, at=now):
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
    # The old head's event and the new version's are written together (one INSERT, or the batch's).
    events: list[audit.Event] = []
    with audit.changing(head, actor=w.principal, action=audit.Action.RECORD_SUPERSEDED, into=events):
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
    _audit_events(w, [*events, _assert_event(w.principal, record, Outcome.CREATED)])
    return AssertResult(Outcome.CREATED, record)


_APPLY: dict[Step, Callable[[_Write, Decision], AssertResult]] = {
    Step.FIRST: _apply_first,
    Step.HISTORY: _apply_history,
    Step.UNCOVERED: _apply_uncovered,
    Step.UNCHANGED: _apply_unchanged,
    Step.DISPUTE: _apply_dispute,
    Step.SUPERSEDE: _apply_supersede,
}


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
            MemoryRecord.objects.select_for_update(no_key=True)  # as facts._fact_rows_sql: FK checks not blocked
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


def _assert_event(principal: Principal, record: MemoryRecord, outcome: Outcome, reason: str = "") -> audit.Event:
    return audit.Event(
        actor=principal,
        action=audit.asserted(outcome),
        object_type="record",
        object_id=record.memory_id,
        after=audit.snapshot(record),
        reason=reason,
        fact=record.sealing_fact(),
    )


def _audit_assert(
    principal: Principal,
    record: MemoryRecord,
    outcome: Outcome,
    now: datetime,
    reason: str = "",
) -> None:
    audit.record_events([_assert_event(principal, record, outcome, reason)], tenant=record.tenant_id, at=now)


def _records_changed(*records: MemoryRecord) -> None:
    # The derived stores refresh their copies (vector entries) after commit.
    hooks.records_changed(records)
