"""Dashboard pages and actions: each role, the outsider, bad input, and constant query counts."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord
from tests.support import at

FACT_URL = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"
PRICE: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


@pytest.fixture
def price_dispute(agent, other_agent) -> Dispute:
    assert_fact(
        agent,
        Assertion(**PRICE, value=1200, valid_from=at(10, 26), source_canonical_ref="vendor:x", source_revision="a"),
    )
    result = assert_fact(
        other_agent,
        Assertion(**PRICE, value=1350, valid_from=at(10, 26), source_canonical_ref="partner:x", source_revision="b"),
    )
    assert result.dispute is not None
    return result.dispute


@pytest.fixture
def many_records(agent):
    for i in range(60):
        assert_fact(
            agent,
            Assertion(
                project_id="project-b",
                subject_id=f"item-{i:03d}",
                predicate="status",
                value=f"v{i}",
                valid_from=at(10, 1),
                source_canonical_ref="crm",
                source_revision="1",
            ),
        )


def test_pages_need_a_signed_in_user(db):
    for url in ("/", "/records/", FACT_URL, "/disputes/", "/audit/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_every_role_reads_every_page(owner, compliance, admin, moved_deadline, price_dispute):
    for principal in (owner, compliance, admin):
        client = signed_in(principal)
        for url in ("/", "/records/", "/records/?status=all", FACT_URL, "/disputes/", "/audit/"):
            assert client.get(url).status_code == 200, (principal.name, url)


def test_the_overview_counts_records_by_status(owner, moved_deadline, price_dispute):
    page = signed_in(owner).get("/").content.decode()
    assert "open dispute: agents get no value until a person chooses" in page
    assert "overdue recheck" in page
    assert "<svg" in page  # the freshness bar is drawn server-side


def test_an_outsider_gets_404_for_another_tenants_pages(outsider, moved_deadline, price_dispute):
    client = signed_in(outsider)
    memory_id = moved_deadline[1].record.memory_id
    assert client.get(FACT_URL).status_code == 404
    assert client.get(f"/records/{memory_id}/").status_code == 404
    assert client.post(f"/records/{memory_id}/exclude/", {"reason": "x"}).status_code == 404
    assert client.post(f"/records/{memory_id}/expire/", {"reason": "x"}).status_code == 404
    assert (
        client.post(f"/disputes/{price_dispute.public_id}/resolve/", {"winner": memory_id, "reason": "x"}).status_code
        == 404
    )
    assert client.post(f"/disputes/{price_dispute.public_id}/reopen/").status_code == 404
    # Another tenant's record is, to the bulk form, a record that does not exist: a message, nothing changed.
    bulk = client.post(
        "/records/bulk/", {"ids": [memory_id], "operation": "exclude", "reason": "x", "confirm": "on"}, follow=True
    )
    assert "1 record of the selection no longer exists. Nothing was changed" in bulk.content.decode()
    assert memory_id not in client.get("/records/?status=all").content.decode()
    assert price_dispute.public_id not in client.get("/disputes/").content.decode()
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"


def test_the_records_table_shows_current_values_by_default_and_history_one_click_away(owner, moved_deadline):
    client = signed_in(owner)
    old, new = (r.record.memory_id for r in moved_deadline)
    current = client.get("/records/").content.decode()
    assert new in current and old not in current
    history = client.get("/records/?status=superseded").content.decode()
    assert old in history and new not in history


def test_the_records_table_filters_and_searches(owner, moved_deadline, many_records):
    client = signed_in(owner)
    page = client.get("/records/?q=2026-11-02").content.decode()
    assert moved_deadline[1].record.memory_id in page
    assert "item-001" not in page
    assert "item-059" in client.get("/records/?project=project-b&predicate=status").content.decode()
    assert "No records match" in client.get("/records/?subject=nobody").content.decode()
    assert "never verified" in client.get("/records/?freshness=never_verified").content.decode()


def test_an_htmx_request_gets_only_the_table_fragment(owner, moved_deadline):
    response = signed_in(owner).get("/records/", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="table">')
    assert "<html" not in html


def test_the_records_table_pages_with_a_cursor(owner, many_records):
    client = signed_in(owner)
    first = client.get("/records/?size=20")
    next_after = first.context["next_after"]
    second = client.get(f"/records/?size=20&after={next_after}")
    first_ids = {r.pk for r in first.context["rows"]}
    second_ids = {r.pk for r in second.context["rows"]}
    assert len(first_ids) == len(second_ids) == 20 and not first_ids & second_ids


def test_the_records_page_runs_the_same_number_of_queries_whatever_the_page_size(
    owner, many_records, django_assert_num_queries
):
    client = signed_in(owner)
    client.get("/records/?size=5")  # warm the session
    # Session, user, the page of rows, and the total counted up to a cap (views.TOTAL_CAP).
    with django_assert_num_queries(5) as small:
        client.get("/records/?size=5")
    with django_assert_num_queries(len(small.captured_queries)):
        client.get("/records/?size=60&status=all")


def test_the_audit_page_runs_the_same_number_of_queries_whatever_the_rows(
    owner, many_records, django_assert_num_queries
):
    client = signed_in(owner)
    client.get("/audit/?action=dispute.opened")
    with django_assert_num_queries(4) as few:
        client.get("/audit/?action=dispute.opened")
    with django_assert_num_queries(len(few.captured_queries)):
        client.get("/audit/")


def test_the_fact_page_answers_as_of_both_axes(owner, moved_deadline):
    client = signed_in(owner)
    on_21 = client.get(FACT_URL + "&valid_at=2026-10-21T12:00").context
    assert on_21["as_of_record"].value == "2026-10-30T17:00+09:00"
    believed_21 = client.get(FACT_URL + "&known_at=2026-10-21T12:00").context
    assert believed_21["as_of_record"].value == "2026-10-30T17:00+09:00"
    believed_23 = client.get(FACT_URL + "&known_at=2026-10-23T12:00").context
    assert believed_23["as_of_record"].value == "2026-11-02T17:00+09:00"


def test_the_as_of_control_interprets_local_times_in_the_tenant_time_zone(owner, moved_deadline):
    owner.tenant.time_zone = "Asia/Tokyo"
    owner.tenant.save()
    client = signed_in(owner)
    # 08:59 Tokyo on Oct 22 is before the new deadline became valid (09:00 +09:00).
    before = client.get(FACT_URL + "&valid_at=2026-10-22T08:59").context["as_of_record"]
    after = client.get(FACT_URL + "&valid_at=2026-10-22T09:01").context["as_of_record"]
    assert before.value == "2026-10-30T17:00+09:00"
    assert after.value == "2026-11-02T17:00+09:00"


def test_a_malformed_as_of_date_gets_a_message_not_a_500(owner, moved_deadline):
    response = signed_in(owner).get(FACT_URL + "&valid_at=the-day-after-tomorrow")
    assert response.status_code == 200
    assert "Enter a date and time" in response.content.decode()


def test_the_fact_page_shows_the_four_operations_and_who_may_use_them(owner, moved_deadline):
    page = signed_in(owner).get(FACT_URL).content.decode()
    for label in ("Exclude from context", "Expire, keep as history", "Recheck now", "Request deletion"):
        assert label in page
    # The field has no policy: nothing the server could fetch, so "Recheck now" is shown but not offered.
    assert 'data-testid="recheck-submit"' not in page and "no canonical source to fetch" in page
    assert 'title="Compliance staff file deletion requests"' in page  # an owner cannot file one


def test_an_owner_excludes_a_record_from_the_fact_page(owner, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    client = signed_in(owner)
    review = client.post(f"/records/{memory_id}/exclude/", {"reason": "Wrong task", "next": FACT_URL})
    assert review.status_code == 200 and "Confirm: exclude from context" in review.content.decode()
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"
    form = {"reason": "Wrong task", "next": FACT_URL, "confirm": "yes"}
    response = client.post(f"/records/{memory_id}/exclude/", form)
    assert response.status_code == 302 and response["Location"] == FACT_URL
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "excluded"
    assert [e.reason for e in AuditEvent.objects.filter(action="record.excluded", actor=owner)] == ["Wrong task"]


def test_a_missing_reason_leaves_the_record_unchanged_with_a_message(owner, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    response = signed_in(owner).post(f"/records/{memory_id}/expire/", {"reason": "  ", "next": FACT_URL}, follow=True)
    assert "Give a reason" in response.content.decode()
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"


def test_compliance_staff_may_look_but_not_change(compliance, moved_deadline, price_dispute):
    client = signed_in(compliance)
    memory_id = moved_deadline[1].record.memory_id
    assert client.post(f"/records/{memory_id}/exclude/", {"reason": "x"}).status_code == 403
    assert client.post(f"/records/{memory_id}/expire/", {"reason": "x"}).status_code == 403
    winner = price_dispute.candidates.first().memory_id
    assert (
        client.post(f"/disputes/{price_dispute.public_id}/resolve/", {"winner": winner, "reason": "x"}).status_code
        == 403
    )
    bulk = client.post("/records/bulk/", {"ids": [memory_id], "operation": "exclude", "reason": "x", "confirm": "on"})
    assert bulk.status_code == 403
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"
    assert "Read-only" in client.get(FACT_URL).content.decode()


def test_actions_are_post_only(owner, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    client = signed_in(owner)
    assert client.get(f"/records/{memory_id}/exclude/").status_code == 405
    assert client.get("/records/bulk/").status_code == 405


def test_actions_need_the_csrf_token(owner, moved_deadline):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    memory_id = moved_deadline[1].record.memory_id
    assert client.post(f"/records/{memory_id}/exclude/", {"reason": "x"}).status_code == 403
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"


def test_bulk_exclude_asks_for_confirmation_then_applies_to_all(owner, many_records):
    client = signed_in(owner)
    ids = list(MemoryRecord.objects.filter(project__key="project-b").values_list("memory_id", flat=True)[:3])
    review = client.post("/records/bulk/", {"ids": ids, "operation": "exclude", "reason": "Stale import"})
    assert review.status_code == 200
    assert "Exclude 3 records" in review.content.decode()
    assert MemoryRecord.objects.filter(memory_id__in=ids, status="excluded").count() == 0
    done = client.post(
        "/records/bulk/", {"ids": ids, "operation": "exclude", "reason": "Stale import", "confirm": "on"}
    )
    assert done.status_code == 302
    assert MemoryRecord.objects.filter(memory_id__in=ids, status="excluded").count() == 3


def test_bulk_confirmation_without_a_reason_is_400_and_changes_nothing(owner, many_records):
    ids = list(MemoryRecord.objects.filter(project__key="project-b").values_list("memory_id", flat=True)[:2])
    response = signed_in(owner).post(
        "/records/bulk/", {"ids": ids, "operation": "expire", "reason": "", "confirm": "on"}
    )
    assert response.status_code == 400
    assert MemoryRecord.objects.filter(memory_id__in=ids, status="accepted").count() == 2


def test_bulk_expire_applies_all_or_nothing(owner, moved_deadline, many_records):
    client = signed_in(owner)
    fresh = list(MemoryRecord.objects.filter(project__key="project-b").values_list("memory_id", flat=True)[:2])
    superseded = moved_deadline[0].record.memory_id  # cannot expire: it is history already
    response = client.post(
        "/records/bulk/",
        {"ids": [*fresh, superseded], "operation": "expire", "reason": "closing", "confirm": "on"},
        follow=True,
    )
    assert "Nothing was changed" in response.content.decode()
    assert MemoryRecord.objects.filter(memory_id__in=fresh, status="accepted").count() == 2


def test_an_owner_resolves_the_dispute_from_the_queue(owner, agent, price_dispute):
    client = signed_in(owner)
    winner = next(c for c in price_dispute.candidates.all() if c.value == 1350).memory_id
    missing = client.post(
        f"/disputes/{price_dispute.public_id}/resolve/", {"winner": winner, "reason": ""}, follow=True
    )
    assert "Give a reason" in missing.content.decode()
    assert Dispute.objects.get(pk=price_dispute.pk).status == "open"
    done = client.post(
        f"/disputes/{price_dispute.public_id}/resolve/", {"winner": winner, "reason": "binding"}, follow=True
    )
    assert "resolved" in done.content.decode()
    chosen = Dispute.objects.get(pk=price_dispute.pk).winner
    assert chosen is not None and chosen.memory_id == winner
    assert MemoryRecord.objects.get(memory_id=winner).status == "accepted"


def test_excluding_both_sides_from_the_queue(owner, price_dispute):
    response = signed_in(owner).post(
        f"/disputes/{price_dispute.public_id}/resolve/", {"winner": "__exclude_all__", "reason": "both wrong"}
    )
    assert response.status_code == 302
    assert set(price_dispute.candidates.values_list("status", flat=True)) == {"excluded"}


def test_resolving_without_choosing_a_side_gets_a_message(owner, price_dispute):
    response = signed_in(owner).post(
        f"/disputes/{price_dispute.public_id}/resolve/", {"winner": "", "reason": "undecided"}, follow=True
    )
    assert "still open" in response.content.decode()
    assert Dispute.objects.get(pk=price_dispute.pk).status == "open"


def test_the_audit_log_filters_by_actor_action_object_and_time(owner, agent, moved_deadline):
    client = signed_in(owner)
    memory_id = moved_deadline[1].record.memory_id
    by_object = client.get(f"/audit/?object={memory_id}").context["events"]
    assert {e.object_id for e in by_object} == {memory_id}
    by_action = client.get("/audit/?action=record.superseded").context["events"]
    assert [e.action for e in by_action] == ["record.superseded"]
    assert client.get("/audit/?actor=nobody").context["events"] == []
    assert client.get("/audit/?since=2999-01-01T00:00").context["events"] == []
    bad = client.get("/audit/?since=yesterday-ish")
    assert bad.status_code == 200 and "Enter a date and time" in bad.content.decode()


def test_an_unknown_fact_is_404(owner, db):
    assert signed_in(owner).get("/facts/?project=p&subject=s&predicate=x").status_code == 404
    assert signed_in(owner).get("/facts/").status_code == 404


def test_dates_show_the_exact_iso_time_on_hover(owner, moved_deadline):
    page = signed_in(owner).get(FACT_URL).content.decode()
    assert 'title="2026-10-22T' in page and "<time datetime=" in page


def test_login_page_signs_a_human_in(owner):
    client = Client()
    response = client.post("/login/", {"username": "olivia@acme", "password": "pw-olivia"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
