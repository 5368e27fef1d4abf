"""An agent's governed delete (issue 31): the rule stays (an agent does not expire facts on its own), and the way
that fits LangGraph's and LangMem's "delete" is an expiry request an owner decides — or, where the field's policy
lets agents expire their own facts, the expiry itself. Through the API, the client, the LangGraph store and
LangMem's manage tool; and a deletion of the record takes its request with it.
"""

from __future__ import annotations

from typing import Any

import pytest
from memory_governance import Client, Forbidden
from memory_governance.langgraph_store import GovernedStore, manage_memory_tool

from deletion.models import StoreProgress
from deletion.tasks import purge_store
from memory_admin.accounts.services import ensure_principal, issue_token
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.audit import Action
from memory_admin.memory.models import AuditEvent, ExpiryRequest, FieldPolicy, MemoryRecord
from tests.support import DEADLINE, at, deadline

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def recorded(agent) -> MemoryRecord:
    return assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1)).record


def _file(api, agent, memory_id: str, reason: str = "the user says it is wrong") -> Any:
    return api(agent).post(f"/api/v1/records/{memory_id}/expiry-requests/", {"reason": reason}, format="json")


def test_an_agents_expire_is_refused_with_the_way_it_may_ask(api, agent, recorded):
    refused = api(agent).post(f"/api/v1/records/{recorded.memory_id}/expire/", {"reason": "x"}, format="json")
    assert refused.status_code == 403
    assert f"/records/{recorded.memory_id}/expiry-requests/" in refused.json()["detail"]
    recorded.refresh_from_db()
    assert recorded.status == MemoryRecord.Status.ACCEPTED


def test_a_request_changes_nothing_until_an_owner_approves_it(api, agent, owner, recorded):
    filed = _file(api, agent, recorded.memory_id)
    assert filed.status_code == 201, filed.content
    request = filed.json()
    assert request["status"] == "pending" and request["created"] is True
    assert (request["subject_id"], request["predicate"]) == (DEADLINE["subject_id"], DEADLINE["predicate"])
    again = _file(api, agent, recorded.memory_id, "asked twice")
    assert again.status_code == 200 and again.json()["id"] == request["id"] and again.json()["created"] is False
    # Still the current value for every reader while it waits.
    current = api(agent).get("/api/v1/facts/current/", DEADLINE)
    assert current.status_code == 200 and current.json()["memory_id"] == recorded.memory_id

    assert api(agent).get("/api/v1/expiry-requests/").status_code == 403  # the queue is the curators'
    queue = api(owner).get("/api/v1/expiry-requests/")
    assert [r["id"] for r in queue.json()["results"]] == [request["id"]]

    approved = api(owner).post(f"/api/v1/expiry-requests/{request['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "approved" and approved.json()["decided_by"] in {owner.name, owner.username}
    recorded.refresh_from_db()
    assert recorded.status == MemoryRecord.Status.EXPIRED and recorded.status_reason == "the user says it is wrong"
    assert api(agent).get("/api/v1/facts/current/", DEADLINE).status_code == 404
    actions = list(
        AuditEvent.objects.filter(object_id=recorded.memory_id).order_by("id").values_list("action", flat=True)
    )
    assert actions[-3:] == [Action.RECORD_EXPIRY_REQUESTED, Action.RECORD_EXPIRED, Action.RECORD_EXPIRY_APPROVED]
    twice = api(owner).post(f"/api/v1/expiry-requests/{request['id']}/approve/", {}, format="json")
    assert twice.status_code == 409 and twice.json()["code"] == "invalid_state"


def test_declining_needs_a_reason_and_leaves_the_record(api, agent, owner, recorded):
    request = _file(api, agent, recorded.memory_id).json()
    bare = api(owner).post(f"/api/v1/expiry-requests/{request['id']}/decline/", {}, format="json")
    assert bare.status_code == 400 and "reason" in bare.json()["errors"]
    declined = api(owner).post(
        f"/api/v1/expiry-requests/{request['id']}/decline/", {"reason": "still the deadline"}, format="json"
    )
    assert declined.status_code == 200 and declined.json()["status"] == "declined"
    assert declined.json()["decision_reason"] == "still the deadline"
    recorded.refresh_from_db()
    assert recorded.status == MemoryRecord.Status.ACCEPTED
    # A new request may be filed after a decision.
    assert _file(api, agent, recorded.memory_id).status_code == 201


def test_another_tenant_sees_and_decides_nothing(api, agent, outsider, recorded):
    request = _file(api, agent, recorded.memory_id).json()
    assert api(outsider).get("/api/v1/expiry-requests/").json()["results"] == []
    refused = api(outsider).post(f"/api/v1/expiry-requests/{request['id']}/approve/", {}, format="json")
    assert refused.status_code == 404
    assert _file(api, outsider, recorded.memory_id).status_code == 404
    assert ExpiryRequest.objects.get(public_id=request["id"]).status == "pending"


@pytest.mark.parametrize("bad", ["", "   ", None])
def test_a_request_without_a_reason_is_refused(api, agent, recorded, bad):
    response = api(agent).post(f"/api/v1/records/{recorded.memory_id}/expiry-requests/", {"reason": bad}, format="json")
    assert response.status_code == 400 and "reason" in response.json()["errors"]
    assert not ExpiryRequest.objects.exists()


def test_a_policy_lets_agents_expire_their_own_facts_on_fields_that_are_not_high_risk(api, agent, other_agent, admin):
    FieldPolicy.objects.create(tenant_id=agent.tenant_id, predicate=DEADLINE["predicate"], agents_expire_own=True)
    own = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1)).record
    theirs = assert_fact(other_agent, _other()).record
    refused = api(agent).post(f"/api/v1/records/{theirs.memory_id}/expire/", {"reason": "x"}, format="json")
    assert refused.status_code == 403  # another agent's fact
    done = api(agent).post(f"/api/v1/records/{own.memory_id}/expire/", {"reason": "moved"}, format="json")
    assert done.status_code == 200 and done.json()["status"] == "expired"

    FieldPolicy.objects.filter(predicate=DEADLINE["predicate"]).update(risk=FieldPolicy.Risk.HIGH)
    again = assert_fact(
        agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1), now=at(10, 22, 9, 1)
    ).record
    high = api(agent).post(f"/api/v1/records/{again.memory_id}/expire/", {"reason": "x"}, format="json")
    assert high.status_code == 403  # a high-risk field is an owner's to expire


def _other() -> Assertion:
    return Assertion(
        project_id=DEADLINE["project_id"],
        subject_id="task-proposal-018",
        predicate=DEADLINE["predicate"],
        value="2026-11-01T17:00+09:00",
        valid_from=at(10, 20),
        source_canonical_ref="task-system:project-a/task-proposal-018",
        source_revision="r1",
    )


def test_the_client_files_lists_and_decides(live_server, agent, owner, recorded):
    with Client(live_server.url, issue_token(agent)) as client:
        with pytest.raises(Forbidden):
            client.expire(recorded.memory_id, "x")
        filed = client.request_expiry(recorded.memory_id, "the user says it is wrong")
        assert filed["status"] == "pending" and filed["created"]
    with Client(live_server.url, issue_token(owner)) as client:
        [waiting] = client.expiry_requests()
        assert waiting["id"] == filed["id"]
        assert client.decline_expiry(filed["id"], "still right")["status"] == "declined"
        assert client.expiry_requests("declined")[0]["decision_reason"] == "still right"


def _store(live_server, principal, project: str = "project-a") -> GovernedStore:
    return GovernedStore(live_server.url, issue_token(principal), project_id=project)


def test_the_stores_delete_by_an_agent_files_a_request_and_raises_nothing(live_server, agent, owner):
    store = _store(live_server, agent)
    store.put(("memories", "task-proposal-017"), "submission_deadline", {"at": "2026-10-30T17:00+09:00"})
    store.delete(("memories", "task-proposal-017"), "submission_deadline")
    outcome = store.outcomes[-1]
    assert outcome.outcome == "expiry_requested" and outcome.request_id
    assert store.get(("memories", "task-proposal-017"), "submission_deadline") is not None  # unchanged until approved
    request = ExpiryRequest.objects.get(public_id=outcome.request_id)
    assert request.requested_by == agent and request.status == "pending"
    # An owner's delete through the same store expires at once.
    owners = _store(live_server, owner)
    owners.delete(("memories", "task-proposal-017"), "submission_deadline")
    assert owners.outcomes[-1].outcome == "expired"
    assert store.get(("memories", "task-proposal-017"), "submission_deadline") is None


def test_langmems_delete_answers_what_happened(live_server, agent):
    """LangMem's own tool would answer "Deleted memory <id>" whatever the store did; the wrapped one says that an
    owner was asked, with the request, and says "Deleted" only where the policy let the agent expire it."""
    store = _store(live_server, agent)
    tool = manage_memory_tool(("memories", "u3"), store=store)
    created = tool.invoke({"content": "prefers Japanese", "action": "create"})
    memory_id = created.split()[-1]
    answer = tool.invoke({"action": "delete", "id": memory_id})
    assert answer.startswith("Not deleted yet") and "expiry request exq-" in answer
    assert store.get(("memories", "u3"), memory_id) is not None  # still there until an owner approves

    FieldPolicy.objects.create(tenant_id=agent.tenant_id, predicate=memory_id, agents_expire_own=True)
    answer = tool.invoke({"action": "delete", "id": memory_id})
    assert answer == f"Deleted memory {memory_id}"
    assert store.get(("memories", "u3"), memory_id) is None


def test_a_deletion_of_the_record_takes_its_request_with_it(api, agent, compliance, recorded):
    request = _file(api, agent, recorded.memory_id).json()
    response = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": "project-a", "scope": {"subject_id": DEADLINE["subject_id"]}, "reason": "Data subject request"},
        format="json",
    )
    assert response.status_code == 202, response.content
    # Hidden from the queue from acceptance on (its record is out of reads), gone with the purge.
    owner = ensure_principal("acme", "olivia", ["owner"], password="pw-olivia", validate=False)
    assert api(owner).get("/api/v1/expiry-requests/").json()["results"] == []
    for progress in StoreProgress.objects.filter(request__public_id=response.json()["id"]):
        purge_store.apply(args=[progress.pk])
    assert not ExpiryRequest.objects.filter(public_id=request["id"]).exists()
    assert AuditEvent.objects.filter(object_id=recorded.memory_id, redacted_at__isnull=True).count() == 0
