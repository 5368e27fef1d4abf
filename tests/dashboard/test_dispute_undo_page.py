"""The disputes page: each side named by its source, agent and session; after resolving, what agents now get, a
link back to the fact and an undo (reopen) while the window lasts; undo refused after it or once the fact changed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from memory_admin.derived.models import Event
from memory_admin.memory.actions import Assertion, assert_fact, resolve_dispute
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord
from tests.support import at
from tests.support.ux_checks import assert_reads_as_people

PRICE: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}
FACT_LINK = "/facts/?project=project-a&amp;subject=product-x&amp;predicate=unit_price"


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


@pytest.fixture
def price_dispute(agent, other_agent) -> Dispute:
    chat = Event.objects.create(
        tenant_id=agent.tenant_pk,
        project=assert_fact(
            agent,
            Assertion(**PRICE, value=1200, valid_from=at(10, 26), source_canonical_ref="vendor:x", source_revision="a"),
        ).record.project,
        session_id="call-0417",
        actor="agent-9",
        text="The partner catalogue says 1,350.",
        occurred_at=at(10, 26, 8),
    )
    result = assert_fact(
        other_agent,
        Assertion(
            **PRICE,
            value=1350,
            valid_from=at(10, 26),
            source_canonical_ref="partner:x",
            source_revision="b",
            event_ids=[chat.public_id],
        ),
    )
    assert result.dispute is not None
    return result.dispute


def _resolve(client: Client, dispute: Dispute, value: int) -> Any:
    winner = next(r for r in dispute.candidates.all() if r.value == value).memory_id
    return client.post(f"/disputes/{dispute.public_id}/resolve/", {"winner": winner, "reason": "binding"}, follow=True)


def test_each_side_is_named_by_its_source_agent_and_session(owner, price_dispute):
    page = signed_in(owner).get("/disputes/").content.decode()
    assert '<span class="side-source">From <strong><mark class="diff">vendor:x</mark></strong></span>' in page
    assert '<span class="side-who">reported by agent-7</span>' in page
    assert '<span class="side-who">reported by agent-9, in session call-0417</span>' in page
    assert_reads_as_people(page, page="/disputes/")


def test_after_resolving_the_page_says_what_agents_get_links_the_fact_and_offers_undo(owner, price_dispute):
    response = _resolve(signed_in(owner), price_dispute, 1350)
    page = response.content.decode()
    assert response.redirect_chain[-1][0] == f"/disputes/?status=resolved#{price_dispute.public_id}"
    assert "Resolved product-x · unit_price: agents now get 1,350, from partner:x." in page
    assert '<span class="number">1,350</span>, from partner:x, won. Reason: binding' in page
    assert f'<a href="{FACT_LINK}" data-testid="back-to-fact">Open the fact →</a>' in page
    assert f'action="/disputes/{price_dispute.public_id}/reopen/"' in page
    assert "Undo: reopen the dispute" in page
    assert_reads_as_people(page, page="the resolved dispute")


def test_undo_within_the_window_reopens_the_dispute(owner, price_dispute):
    client = signed_in(owner)
    _resolve(client, price_dispute, 1350)
    response = client.post(f"/disputes/{price_dispute.public_id}/reopen/", follow=True)
    page = response.content.decode()
    assert "Undone: the dispute over product-x · unit_price is open again" in page
    assert Dispute.objects.get(pk=price_dispute.pk).status == "open"
    assert set(price_dispute.candidates.values_list("status", flat=True)) == {"disputed"}
    event = AuditEvent.objects.get(action="dispute.reopened", object_id=price_dispute.public_id)
    assert event.actor_name == "olivia"
    assert "Keep this value" in page  # open again: the choice is offered


def test_undo_after_the_window_is_refused_with_a_message(owner, price_dispute):
    winner = next(r for r in price_dispute.candidates.all() if r.value == 1350).memory_id
    resolve_dispute(
        owner, price_dispute.public_id, winner=winner, reason="x", now=timezone.now() - timedelta(minutes=11)
    )
    client = signed_in(owner)
    listing = client.get("/disputes/?status=resolved").content.decode()
    assert "Undo: reopen the dispute" not in listing
    response = client.post(f"/disputes/{price_dispute.public_id}/reopen/", follow=True)
    page = response.content.decode()
    assert "the resolution was not undone. A resolution can be undone for 10 minutes after it" in page
    assert Dispute.objects.get(pk=price_dispute.pk).status == "resolved"
    assert not AuditEvent.objects.filter(action="dispute.reopened").exists()


def test_undo_after_the_fact_changed_is_refused_with_a_message(owner, price_dispute):
    client = signed_in(owner)
    _resolve(client, price_dispute, 1350)
    winner = next(r for r in price_dispute.candidates.all() if r.value == 1350).memory_id
    expired = client.post(f"/records/{winner}/expire/", {"reason": "Ended", "confirm": "yes"})
    assert expired.status_code == 302
    response = client.post(f"/disputes/{price_dispute.public_id}/reopen/", follow=True)
    assert "The fact changed after the resolution" in response.content.decode()
    assert Dispute.objects.get(pk=price_dispute.pk).status == "resolved"
    assert MemoryRecord.objects.get(memory_id=winner).status == "expired"


def test_only_curators_may_undo(compliance, owner, price_dispute):
    _resolve(signed_in(owner), price_dispute, 1350)
    assert signed_in(compliance).post(f"/disputes/{price_dispute.public_id}/reopen/").status_code == 403
    assert "Undo: reopen" not in signed_in(compliance).get("/disputes/?status=resolved").content.decode()
    assert signed_in(owner).get(f"/disputes/{price_dispute.public_id}/reopen/").status_code == 405
    assert Dispute.objects.get(pk=price_dispute.pk).status == "resolved"
