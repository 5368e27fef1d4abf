"""Derived stores and stale propagation: a change to a record reaches every copy."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from memory_admin.derived import lineage
from memory_admin.derived.caches import fact_key
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import Invalidation, Propagation, ScheduledAction, Summary
from memory_admin.memory.actions import assert_fact, exclude_record
from tests.support import DEADLINE, at, deadline


@pytest.fixture
def oct30(agent):
    """Only the first half of the story: the deadline is Oct 30, and copies are made from it."""
    return assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record


def move_deadline(agent, old):
    return assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=old.revision))


def base(record) -> dict:
    return {"memory_id": record.memory_id, "revision": record.revision}


def test_events_are_logged_and_records_link_back_to_them(api, agent):
    client = api(agent)
    event = client.post(
        "/api/v1/events/",
        {
            "project_id": "project-a",
            "session_id": "s-1",
            "actor": "owner",
            "text": "Deadline moves to Nov 2",
            "occurred_at": at(10, 22).isoformat(),
            "subject_ids": ["task-proposal-017"],
        },
        format="json",
    )
    assert event.status_code == 201
    event_id = event.json()["id"]
    payload = {
        **DEADLINE,
        "value": "2026-11-02",
        "valid_from": at(10, 22).isoformat(),
        "source": {"canonical_ref": "chat:s-1", "revision": "1", "event_ids": [event_id]},
    }
    record = client.post("/api/v1/records/", payload, format="json")
    assert record.status_code == 201
    assert record.json()["source"]["event_ids"] == [event_id]
    listed = client.get("/api/v1/events/", {"session_id": "s-1", "subject_id": "task-proposal-017"}).json()
    assert [e["id"] for e in listed["results"]] == [event_id]


def test_unknown_event_ids_are_400(api, agent):
    payload = {
        **DEADLINE,
        "value": "x",
        "valid_from": at(10, 22).isoformat(),
        "source": {"canonical_ref": "chat:s-1", "revision": "1", "event_ids": ["evt-nope"]},
    }
    response = api(agent).post("/api/v1/records/", payload, format="json")
    assert response.status_code == 400
    assert "evt-nope" in str(response.json()["errors"])


def test_a_naive_event_time_is_400(api, agent):
    response = api(agent).post(
        "/api/v1/events/",
        {"project_id": "p", "session_id": "s", "actor": "a", "text": "t", "occurred_at": "2026-10-22T09:00:00"},
        format="json",
    )
    assert response.status_code == 400


def test_a_summary_on_a_current_base_is_201_and_on_a_superseded_one_409(api, agent, oct30):
    client = api(agent)
    ok = client.post(
        "/api/v1/summaries/",
        {"project_id": "project-a", "text": "Due Oct 30", "derived_from": [base(oct30)]},
        format="json",
    )
    assert ok.status_code == 201 and ok.json()["status"] == "current"
    move_deadline(agent, oct30)
    late = client.post(
        "/api/v1/summaries/",
        {"project_id": "project-a", "text": "Due Oct 30", "derived_from": [base(oct30)]},
        format="json",
    )
    assert late.status_code == 409
    assert late.json()["code"] == "base_not_current"
    assert client.get(f"/api/v1/summaries/{ok.json()['id']}/").json()["status"] == "stale"


def test_a_summary_naming_a_wrong_revision_or_unknown_record_is_400(api, agent, oct30, outsider):
    client = api(agent)
    wrong = client.post(
        "/api/v1/summaries/",
        {"project_id": "project-a", "text": "x", "derived_from": [{"memory_id": oct30.memory_id, "revision": 7}]},
        format="json",
    )
    assert wrong.status_code == 400
    theirs = api(outsider).post(
        "/api/v1/summaries/", {"project_id": "project-a", "text": "x", "derived_from": [base(oct30)]}, format="json"
    )
    assert theirs.status_code == 400  # another tenant's record does not exist for this principal


def test_superseding_the_deadline_reaches_every_copy(
    api, agent, other_agent, oct30, django_capture_on_commit_callbacks
):
    client = api(agent)
    summary = lineage.create_summary(
        agent, project_id="project-a", text="Proposal due Oct 30 17:00", bases=[BaseRef(oct30.memory_id, 1)]
    )
    plan = lineage.schedule_action(
        agent,
        project_id="project-a",
        kind="send_reminder",
        payload={"to": "team"},
        due_at=at(10, 29, 9),
        bases=[BaseRef(oct30.memory_id, 1)],
    )
    load = lineage.register_context_load(
        other_agent,
        session_id="sess-9",
        bases=[BaseRef(oct30.memory_id, 1)],
        expires_at=timezone.now() + timedelta(hours=4),
    )
    answer = client.get("/api/v1/facts/current/", DEADLINE).json()  # fills the answer cache
    assert answer["value"] == "2026-10-30T17:00+09:00"
    key = fact_key(agent.tenant_id, "project-a", DEADLINE["subject_id"], DEADLINE["predicate"])
    assert cache.get(key) is not None
    hits = client.get("/api/v1/search/", {"project_id": "project-a", "q": "submission deadline proposal"}).json()
    assert oct30.memory_id in [h["memory_id"] for h in hits["results"]]

    with django_capture_on_commit_callbacks(execute=True):
        new = move_deadline(agent, oct30).record

    assert Summary.objects.get(pk=summary.pk).status == "stale"
    assert ScheduledAction.objects.get(pk=plan.pk).status == "suspended"
    assert cache.get(key) is None
    notice = Invalidation.objects.get(load=load)
    assert notice.acknowledged_at is None and notice.successor_id == new.pk
    hits = client.get("/api/v1/search/", {"project_id": "project-a", "q": "submission deadline proposal"}).json()
    found = [h["memory_id"] for h in hits["results"]]
    assert oct30.memory_id not in found and new.memory_id in found
    everything = client.get(
        "/api/v1/search/", {"project_id": "project-a", "q": "submission deadline proposal", "include": "all"}
    ).json()["results"]
    old_hit = next(h for h in everything if h["memory_id"] == oct30.memory_id)
    assert old_hit["status"] == "superseded" and old_hit["current_memory_id"] == new.memory_id
    kinds = set(Propagation.objects.filter(record=oct30).values_list("dependant_kind", "action"))
    assert kinds == {
        ("summary", "marked_stale"),
        ("action", "suspended"),
        ("context", "notice_sent"),
        ("cache", "evicted"),
        ("vector", "marked_unusable"),
    }
    assert client.get("/api/v1/facts/current/", DEADLINE).json()["value"] == "2026-11-02T17:00+09:00"


def test_the_notice_stays_open_until_the_agent_acknowledges_it(api, agent, other_agent, owner, oct30):
    lineage.register_context_load(
        other_agent,
        session_id="sess-9",
        bases=[BaseRef(oct30.memory_id, 1)],
        expires_at=timezone.now() + timedelta(hours=4),
    )
    move_deadline(agent, oct30)
    url = "/api/v1/agents/agent-9/invalidations/"
    mine = api(other_agent).get(url).json()["results"]
    assert [n["memory_id"] for n in mine] == [oct30.memory_id]
    assert api(owner).get(url).json()["results"] == mine  # an owner looks on
    assert api(agent).get(url).status_code == 404  # another agent does not
    assert api(owner).post(f"{url}{mine[0]['id']}/ack/").status_code == 403  # only the holder applies it
    ack = api(other_agent).post(f"{url}{mine[0]['id']}/ack/")
    assert ack.status_code == 200 and ack.json()["acknowledged_at"]
    assert api(other_agent).get(url).json()["results"] == []
    assert len(api(other_agent).get(url, {"status": "all"}).json()["results"]) == 1


def test_an_expired_context_gets_no_notice(agent, other_agent, oct30):
    load = lineage.register_context_load(
        other_agent,
        session_id="old",
        bases=[BaseRef(oct30.memory_id, 1)],
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    move_deadline(agent, oct30)
    assert not Invalidation.objects.filter(load=load).exists()


def test_loading_a_stale_copy_is_recorded_with_a_notice_at_once(api, agent, other_agent, oct30):
    move_deadline(agent, oct30)
    response = api(other_agent).post(
        "/api/v1/context-loads/",
        {
            "session_id": "s-2",
            "memories": [base(oct30)],
            "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        },
        format="json",
    )
    assert response.status_code == 201
    assert len(response.json()["open_invalidations"]) == 1


def test_an_agent_registers_only_its_own_contexts(api, agent, oct30):
    response = api(agent).post(
        "/api/v1/context-loads/",
        {
            "agent_id": "agent-9",
            "session_id": "s",
            "memories": [base(oct30)],
            "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        },
        format="json",
    )
    assert response.status_code == 403


def test_a_suspended_plan_is_reconfirmed_against_the_current_value(api, agent, oct30):
    client = api(agent)
    plan = client.post(
        "/api/v1/scheduled-actions/",
        {
            "project_id": "project-a",
            "kind": "send_reminder",
            "payload": {},
            "due_at": at(10, 29).isoformat(),
            "derived_from": [base(oct30)],
        },
        format="json",
    ).json()
    new = move_deadline(agent, oct30).record
    assert client.get(f"/api/v1/scheduled-actions/{plan['id']}/").json()["status"] == "suspended"
    stale = client.post(
        f"/api/v1/scheduled-actions/{plan['id']}/confirm/", {"derived_from": [base(oct30)]}, format="json"
    )
    assert stale.status_code == 409
    ok = client.post(
        f"/api/v1/scheduled-actions/{plan['id']}/confirm/",
        {"derived_from": [base(new)], "due_at": at(11, 1).isoformat()},
        format="json",
    )
    assert ok.status_code == 200
    assert ok.json()["status"] == "scheduled" and ok.json()["derived_from"] == [base(new)]


def test_a_stale_digest_is_regenerated_from_current_bases_only(agent, oct30):
    summary = lineage.create_summary(
        agent, project_id="project-a", text="old text", kind="facts_digest", bases=[BaseRef(oct30.memory_id, 1)]
    )
    new = move_deadline(agent, oct30).record
    fresh = lineage.regenerate_summary(Summary.objects.get(pk=summary.pk))
    assert fresh is not None
    assert "2026-11-02T17:00+09:00" in fresh.text and "old text" not in fresh.text
    assert fresh.derived_from == [base(new)] and fresh.replaces_id == summary.pk
    assert Summary.objects.get(pk=summary.pk).status == "withdrawn"


def test_excluding_a_record_suspends_its_plans(owner, agent, oct30):
    plan = lineage.schedule_action(
        agent, project_id="project-a", kind="send", payload={}, due_at=at(10, 29), bases=[BaseRef(oct30.memory_id, 1)]
    )
    exclude_record(owner, oct30.memory_id, "wrong task")
    assert ScheduledAction.objects.get(pk=plan.pk).status == "suspended"


def test_search_refuses_bad_input_and_shows_an_outsider_nothing(api, agent, outsider, oct30):
    assert api(agent).get("/api/v1/search/", {"q": "deadline", "k": 0}).status_code == 400
    assert api(agent).get("/api/v1/search/", {"k": 3}).status_code == 400
    assert api(agent).get("/api/v1/search/", {"q": "x", "include": "stale"}).status_code == 400
    assert api(outsider).get("/api/v1/search/", {"q": "submission deadline"}).json()["results"] == []


def test_derived_items_of_another_tenant_are_404(api, agent, outsider, oct30):
    summary = lineage.create_summary(agent, project_id="project-a", text="t", bases=[BaseRef(oct30.memory_id, 1)])
    plan = lineage.schedule_action(
        agent, project_id="project-a", kind="k", payload={}, due_at=at(10, 29), bases=[BaseRef(oct30.memory_id, 1)]
    )
    client = api(outsider)
    assert client.get(f"/api/v1/summaries/{summary.public_id}/").status_code == 404
    assert client.get(f"/api/v1/scheduled-actions/{plan.public_id}/").status_code == 404
    assert client.get("/api/v1/agents/agent-7/invalidations/").status_code == 404
    assert client.get("/api/v1/events/").json()["results"] == []
