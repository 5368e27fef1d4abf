"""Undoing a dispute's resolution (reopen_dispute): within the window the dispute is open again and every record
is as it was before the resolution, audited; after the window, or once the fact changed, it is refused and nothing
changes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from memory_admin.memory import reads
from memory_admin.memory.actions import (
    Assertion,
    assert_fact,
    expire_record,
    reopen_dispute,
    resolve_dispute,
)
from memory_admin.memory.actions.disputes import undo_state
from memory_admin.memory.audit import snapshot
from memory_admin.memory.errors import Forbidden, InvalidState
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord
from tests.support import at

PRICE: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}
RESOLVED_AT = at(10, 27, 9)
FACT = (PRICE["project_id"], PRICE["subject_id"], PRICE["predicate"])


@pytest.fixture
def price_dispute(agent, other_agent) -> Dispute:
    assert_fact(
        agent,
        Assertion(**PRICE, value=1200, valid_from=at(10, 26), source_canonical_ref="vendor:x", source_revision="a"),
        now=at(10, 26, 8),
    )
    result = assert_fact(
        other_agent,
        Assertion(**PRICE, value=1350, valid_from=at(10, 26), source_canonical_ref="partner:x", source_revision="b"),
        now=at(10, 26, 9),
    )
    assert result.dispute is not None
    return result.dispute


def _states(dispute: Dispute) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each candidate as the audit log and undo see it, by value."""
    return {
        str(r.value): (snapshot(r), undo_state(r))
        for r in MemoryRecord.objects.filter(disputes=dispute).select_related("superseded_by")
    }


def _winner(dispute: Dispute, value: int) -> str:
    return next(r for r in dispute.candidates.all() if r.value == value).memory_id


def test_undo_within_the_window_restores_the_dispute_and_the_answer_before_it(owner, price_dispute):
    before = _states(price_dispute)
    assert reads.current(owner, *FACT) is None  # disputed: agents get no value
    resolve_dispute(
        owner, price_dispute.public_id, winner=_winner(price_dispute, 1350), reason="binding", now=RESOLVED_AT
    )
    assert reads.current(owner, *FACT) is not None

    reopened = reopen_dispute(
        owner, price_dispute.public_id, reason="Wrong side", now=RESOLVED_AT + timedelta(minutes=9)
    )

    assert reopened.status == Dispute.Status.OPEN
    fresh = Dispute.objects.get(pk=price_dispute.pk)
    assert (fresh.status, fresh.winner, fresh.resolved_at, fresh.resolved_by) == ("open", None, None, None)
    assert _states(price_dispute) == before
    assert reads.current(owner, *FACT) is None
    # Audited: the dispute, and each record with its state before and after.
    event = AuditEvent.objects.get(action="dispute.reopened", object_id=price_dispute.public_id)
    assert (event.actor_name, event.reason) == ("olivia", "Wrong side")
    assert AuditEvent.objects.filter(action="record.dispute_reopened").count() == 2
    # And it can be resolved again, the other way.
    resolve_dispute(owner, price_dispute.public_id, winner=_winner(price_dispute, 1200), reason="vendor wins")
    assert MemoryRecord.objects.get(memory_id=_winner(price_dispute, 1200)).status == "accepted"


def test_undo_of_excluding_every_side_brings_the_dispute_back(owner, price_dispute):
    before = _states(price_dispute)
    resolve_dispute(owner, price_dispute.public_id, winner=None, exclude_all=True, reason="both wrong", now=RESOLVED_AT)
    reopen_dispute(owner, price_dispute.public_id, now=RESOLVED_AT + timedelta(minutes=1))
    assert _states(price_dispute) == before
    assert AuditEvent.objects.get(action="dispute.reopened").reason == "The resolution was undone."


def test_undo_after_the_window_is_refused_and_changes_nothing(owner, price_dispute):
    resolve_dispute(owner, price_dispute.public_id, winner=_winner(price_dispute, 1350), reason="x", now=RESOLVED_AT)
    after = _states(price_dispute)
    with pytest.raises(InvalidState, match="undone for 10 minutes after it"):
        reopen_dispute(owner, price_dispute.public_id, now=RESOLVED_AT + timedelta(minutes=10, seconds=1))
    assert Dispute.objects.get(pk=price_dispute.pk).status == "resolved"
    assert _states(price_dispute) == after
    assert not AuditEvent.objects.filter(action__in=["dispute.reopened", "record.dispute_reopened"]).exists()


def test_the_window_is_a_setting(owner, price_dispute, settings):
    settings.DISPUTE_UNDO_MINUTES = 30
    resolve_dispute(owner, price_dispute.public_id, winner=_winner(price_dispute, 1350), reason="x", now=RESOLVED_AT)
    reopen_dispute(owner, price_dispute.public_id, now=RESOLVED_AT + timedelta(minutes=25))
    assert Dispute.objects.get(pk=price_dispute.pk).status == "open"


def test_undo_is_refused_once_the_winner_changed(owner, price_dispute):
    winner = _winner(price_dispute, 1350)
    resolve_dispute(owner, price_dispute.public_id, winner=winner, reason="x", now=RESOLVED_AT)
    expire_record(owner, winner, "It ended", now=RESOLVED_AT + timedelta(minutes=2))
    with pytest.raises(InvalidState, match="The fact changed after the resolution"):
        reopen_dispute(owner, price_dispute.public_id, now=RESOLVED_AT + timedelta(minutes=3))
    assert Dispute.objects.get(pk=price_dispute.pk).status == "resolved"
    assert MemoryRecord.objects.get(memory_id=winner).status == "expired"


def test_undo_is_refused_once_a_new_value_was_written(owner, agent, price_dispute):
    resolve_dispute(owner, price_dispute.public_id, winner=_winner(price_dispute, 1350), reason="x", now=RESOLVED_AT)
    assert_fact(
        agent,
        Assertion(
            **PRICE,
            value=1400,
            valid_from=at(10, 27),
            source_canonical_ref="vendor:x",
            source_revision="c",
            expected_revision=2,
        ),
        now=RESOLVED_AT + timedelta(minutes=1),
    )
    with pytest.raises(InvalidState, match="The fact changed after the resolution"):
        reopen_dispute(owner, price_dispute.public_id, now=RESOLVED_AT + timedelta(minutes=2))
    assert Dispute.objects.get(pk=price_dispute.pk).status == "resolved"


def test_only_curators_undo_and_only_a_resolved_dispute(owner, compliance, agent, price_dispute):
    with pytest.raises(InvalidState, match="there is no resolution to undo"):
        reopen_dispute(owner, price_dispute.public_id)
    resolve_dispute(owner, price_dispute.public_id, winner=_winner(price_dispute, 1350), reason="x")
    for someone in (compliance, agent):
        with pytest.raises(Forbidden):
            reopen_dispute(someone, price_dispute.public_id)
    assert Dispute.objects.get(pk=price_dispute.pk).status == "resolved"
