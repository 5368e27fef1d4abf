"""Every endpoint's real answers match the OpenAPI schema served at /api/v1/schema/ (issue 11).

One test walks every operation of the schema with real seeded data, as the persona allowed to use it,
and validates each answer's body against the schema of its path, method and status. The validation is
strict: an answer may not carry a field its schema does not name (`additionalProperties: false` is added
to every object with properties, except the error shape, whose extra fields PRODUCT.md names per code),
and must carry every field the schema marks required. So a serializer and the real answer cannot drift:
a field rendered but not declared, or declared but not rendered, fails here. The test also fails if an
operation of the schema was not exercised.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

import jsonschema
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from deletion.models import DeletionRequest
from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import ensure_principal
from memory_admin.memory.actions import Assertion, assert_fact
from tests.support import DEADLINE, at, deadline, run_purge

PREFIX = "/api/v1"
ERROR_COMPONENT = "#/components/schemas/Error"


def _openapi_30_to_json_schema(node: Any, *, strict: bool) -> Any:
    """OpenAPI 3.0's `nullable` as JSON Schema, and objects closed to undeclared fields when `strict`."""
    if isinstance(node, list):
        return [_openapi_30_to_json_schema(item, strict=strict) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _openapi_30_to_json_schema(value, strict=strict) for key, value in node.items()}
    if strict and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if out.pop("nullable", False):
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        out = {"anyOf": [out, {"type": "null"}]}
    return out


class Conformance:
    """Validates answers against the served schema and remembers which operations were exercised."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        components = copy.deepcopy(document["components"]["schemas"])
        self.components = {
            name: _openapi_30_to_json_schema(schema, strict=name != "Error") for name, schema in components.items()
        }
        self.exercised: set[tuple[str, str]] = set()
        self.statuses: set[tuple[str, str, int]] = set()

    def operations(self) -> set[tuple[str, str]]:
        return {
            (path, method)
            for path, item in self.document["paths"].items()
            if path.startswith(f"{PREFIX}/") and "/schema/" not in path and "/docs/" not in path
            for method in item
            if method in ("get", "post", "put", "patch", "delete")
        }

    def check(self, method: str, template: str, response: Any) -> Any:
        path = f"{PREFIX}{template}"
        operation = self.document["paths"][path][method]
        documented = operation["responses"].get(str(response.status_code))
        assert documented is not None, f"{method.upper()} {path} answered {response.status_code}, undocumented"
        self.exercised.add((path, method))
        self.statuses.add((path, method, response.status_code))
        if response.status_code == 204:
            assert not response.content
            return None
        schema = documented["content"]["application/json"]["schema"]
        schema = {**_openapi_30_to_json_schema(schema, strict=True), "components": {"schemas": self.components}}
        body = response.json()
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(body), key=lambda e: list(e.path))
        assert not errors, f"{method.upper()} {path} {response.status_code}: " + "; ".join(
            f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5]
        )
        return body


class Caller:
    def __init__(self, conformance: Conformance, clients: dict[str, APIClient]) -> None:
        self.conformance = conformance
        self.clients = clients

    def __call__(
        self, who: str, method: str, template: str, expect: int, body: Any = None, query: str = "", **ids: Any
    ) -> Any:
        url = f"{PREFIX}{template.format(**ids)}{query}"
        client = self.clients[who]
        response = (
            getattr(client, method)(url, body, format="json") if body is not None else getattr(client, method)(url)
        )
        assert response.status_code == expect, (
            f"{method.upper()} {url}: {response.status_code} {response.content[:400]!r}"
        )
        return self.conformance.check(method, template, response)


@pytest.fixture
def call(db: None) -> Caller:
    personas = {
        "agent": ensure_principal("acme", "agent-7", ["agent"]),
        "other_agent": ensure_principal("acme", "agent-9", ["agent"]),
        "owner": ensure_principal("acme", "olivia", ["owner", "admin"]),
        "compliance": ensure_principal("acme", "carl", ["compliance"]),
        "second_officer": ensure_principal("acme", "cora", ["compliance"]),
    }
    from memory_admin.accounts.services import issue_token

    clients = {}
    for name, principal in personas.items():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(principal)}")
        clients[name] = client
    document = APIClient().get(f"{PREFIX}/schema/?format=json").json()
    return Caller(Conformance(document), clients)


def _seed(agent: Principal, other_agent: Principal) -> dict[str, Any]:
    key = dict(DEADLINE)
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20), ref="task:017"))
    current = assert_fact(
        agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), ref="task:017", expected_revision=1)
    ).record
    price: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}
    assert_fact(
        agent,
        Assertion(**price, value=1200, valid_from=at(10, 26), source_canonical_ref="vendor:x", source_revision="a"),
    )
    disputed = assert_fact(
        other_agent,
        Assertion(**price, value=1350, valid_from=at(10, 26), source_canonical_ref="partner:x", source_revision="b"),
    )
    assert disputed.dispute is not None
    return {"key": key, "first": first.record, "current": current, "price": price, "dispute": disputed.dispute}


def test_every_endpoint_answers_in_the_shape_its_schema_describes(
    call: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    agent = ensure_principal("acme", "agent-7", ["agent"])
    seeded = _seed(agent, ensure_principal("acme", "agent-9", ["agent"]))
    key, current = seeded["key"], seeded["current"]
    base = [{"memory_id": current.memory_id, "revision": current.revision}]

    # Records: list, detail, history, writes of every outcome, rechecks, curation.
    call("agent", "get", "/records/", 200)
    call("agent", "get", "/records/", 200, query="?subject_id=task-proposal-017&valid_at=2026-10-21T00:00:00Z")
    call("agent", "get", "/records/{memory_id}/", 200, memory_id=current.memory_id)
    history = call("agent", "get", "/records/{memory_id}/history/", 200, memory_id=current.memory_id)
    assert [r["revision"] for r in history["results"]] == [1, 2]
    event = {
        "project_id": "project-a",
        "session_id": "s-1",
        "actor": "user",
        "text": "moved to Nov 2",
        "occurred_at": at(10, 22).isoformat(),
        "subject_ids": ["task-proposal-017"],
    }
    event_id = call("agent", "post", "/events/", 201, event)["id"]
    note = {
        "project_id": "project-a",
        "subject_id": "client-1",
        "predicate": "note",
        "value": {"text": "hi"},
        "valid_from": at(10, 1).isoformat(),
        "source": {"canonical_ref": "crm:1", "revision": "1", "event_ids": [event_id]},
    }
    created = call("agent", "post", "/records/", 201, note)
    assert created["outcome"] == "created" and created["source"]["event_ids"] == [event_id]
    assert call("agent", "post", "/records/", 200, {**note, "expected_revision": 1})["outcome"] == "unchanged"
    rival = {**note, "value": {"text": "bye"}, "source": {"canonical_ref": "other:1", "revision": "9"}}
    assert call("other_agent", "post", "/records/", 202, rival)["outcome"] == "disputed"
    conflict = call("agent", "post", "/records/", 409, {**body_for(key, "x", "r19"), "expected_revision": 1})
    assert conflict["code"] == "revision_conflict" and conflict["current"]["memory_id"] == current.memory_id
    # Bulk onboarding: a result per item (here created, then a 409), and an atomic batch refused whole (422).
    stale = {**body_for(key, "x", "r19"), "expected_revision": 1}
    batch = call("agent", "post", "/records/batch/", 200, {"items": [{**note, "subject_id": "client-2"}, stale]})
    assert [r["status"] for r in batch["results"]] == [201, 409]
    invalid = {"project_id": "project-a"}
    call("agent", "post", "/records/batch/", 422, {"atomic": True, "items": [{**note, "subject_id": "c-3"}, invalid]})
    call("agent", "get", "/records/{memory_id}/rechecks/", 200, memory_id=current.memory_id)
    report = {"outcome": "source_unavailable", "error": "timeout"}
    call("agent", "post", "/records/{memory_id}/rechecks/", 201, report, memory_id=current.memory_id)
    attempts = call("agent", "get", "/records/{memory_id}/rechecks/", 200, memory_id=current.memory_id)
    assert attempts["results"][0]["outcome"] == "source_unavailable"

    # Current facts: an answer (with valid time), a read for acting, a disputed fact with its candidates.
    query = "?project_id=project-a&subject_id=task-proposal-017&predicate=submission_deadline"
    fact = call("agent", "get", "/facts/current/", 200, query=query)
    assert datetime.fromisoformat(fact["valid_from"]) == current.valid_from and fact["source"]["event_ids"] == []
    call("agent", "get", "/facts/current/", 200, query=query)  # the cached answer has the same shape
    acted = call("agent", "get", "/facts/current/", 200, query=f"{query}&purpose=action")
    call("agent", "get", "/receipts/{receipt_id}/", 200, receipt_id=acted["receipt_id"])
    call("other_agent", "get", "/receipts/{receipt_id}/", 404, receipt_id=acted["receipt_id"])
    call("agent", "get", "/facts/current/", 200, query=f"{query}&valid_at={at(10, 21).isoformat().replace('+', '%2B')}")
    price = "?project_id=project-a&subject_id=product-x&predicate=unit_price"
    disputed_fact = call("agent", "get", "/facts/current/", 200, query=price)
    assert len(disputed_fact["candidates"]) == 2 and disputed_fact["value"] is None
    refused = call("agent", "get", "/facts/current/", 409, query=f"{price}&purpose=action")
    assert refused["code"] == "fact_disputed"
    call("owner", "get", "/receipts/{receipt_id}/", 200, receipt_id=refused["receipt_id"])
    call("agent", "get", "/facts/current/", 404, query="?project_id=project-a&subject_id=nobody&predicate=x")

    # Disputes.
    dispute_id = seeded["dispute"].public_id
    call("agent", "get", "/disputes/", 200)
    call("agent", "get", "/disputes/", 200, query="?status=all")
    call("agent", "get", "/disputes/{dispute_id}/", 200, dispute_id=dispute_id)
    winner = seeded["dispute"].candidates.order_by("id").first().memory_id
    resolved = call(
        "owner",
        "post",
        "/disputes/{dispute_id}/resolve/",
        200,
        {"winner": winner, "reason": "vendor"},
        dispute_id=dispute_id,
    )
    assert resolved["status"] == "resolved"

    # Field policies: the whole resource, and the source test.
    policy = {
        "project_id": "project-a",
        "predicate": "submission_deadline",
        "canonical_source": {"connector": "manual"},
        "recheck_interval": "P1D",
        "retention_days": 365,
        "on_failure": "block_action",
    }
    made = call("owner", "post", "/field-policies/", 201, policy)
    call("owner", "get", "/field-policies/", 200)
    call("owner", "get", "/field-policies/{id}/", 200, id=made["id"])
    call("owner", "put", "/field-policies/{id}/", 200, {**policy, "risk": "high"}, id=made["id"])
    call("owner", "patch", "/field-policies/{id}/", 200, {"retention_days": 30}, id=made["id"])
    tested = call(
        "owner", "post", "/field-policies/{id}/test/", 200, {"subject_id": "task-proposal-017"}, id=made["id"]
    )
    assert tested["outcome"] == "not_checked"
    # Now the manual policy blocks acting on the never-verified value: the 409 carries what was verified.
    held = call("agent", "get", "/facts/current/", 409, query=f"{query}&purpose=action")
    assert held["code"] == "recheck_required"
    other = call("owner", "post", "/field-policies/", 201, {"predicate": "note"})
    call("owner", "delete", "/field-policies/{id}/", 204, id=other["id"])

    # Events, summaries, scheduled actions, loaded contexts and their invalidations, search.
    call("agent", "get", "/events/", 200, query="?subject_id=task-proposal-017")
    summary = call(
        "agent", "post", "/summaries/", 201, {"project_id": "project-a", "text": "due Nov 2", "derived_from": base}
    )
    call("agent", "get", "/summaries/{summary_id}/", 200, summary_id=summary["id"])
    plan = {
        "project_id": "project-a",
        "kind": "reminder",
        "payload": {"t": 1},
        "due_at": at(11, 1).isoformat(),
        "derived_from": base,
    }
    action = call("agent", "post", "/scheduled-actions/", 201, plan)
    call("agent", "get", "/scheduled-actions/{action_id}/", 200, action_id=action["id"])
    call(
        "agent", "post", "/scheduled-actions/{action_id}/confirm/", 200, {"derived_from": base}, action_id=action["id"]
    )
    call(
        "agent",
        "post",
        "/context-loads/",
        201,
        {"session_id": "s-1", "memories": base, "expires_at": (timezone.now() + timedelta(hours=4)).isoformat()},
    )
    # The loaded value moves on: the load gets a notice to apply.
    with django_capture_on_commit_callbacks(execute=True):  # propagation may run after the commit
        moved = call(
            "agent",
            "post",
            "/records/",
            201,
            {**body_for(key, "2026-11-03T17:00+09:00", "r19"), "expected_revision": 2},
        )
    notices = call("agent", "get", "/agents/{agent_id}/invalidations/", 200, agent_id="agent-7")
    assert notices["results"]
    call(
        "agent",
        "post",
        "/agents/{agent_id}/invalidations/{invalidation_id}/ack/",
        200,
        agent_id="agent-7",
        invalidation_id=notices["results"][0]["id"],
    )
    call("agent", "get", "/agents/{agent_id}/invalidations/", 200, query="?status=all", agent_id="agent-7")
    hits = call("agent", "get", "/search/", 200, query="?q=submission+deadline&include=all")
    assert hits["results"]

    # Expiry requests: an agent asks, an owner reads the queue, declines one and approves the next.
    path = "/records/{memory_id}/expiry-requests/"
    asked = call("agent", "post", path, 201, {"reason": "the user says it moved"}, memory_id=moved["memory_id"])
    assert call("agent", "post", path, 200, {"reason": "again"}, memory_id=moved["memory_id"])["created"] is False
    assert [r["id"] for r in call("owner", "get", "/expiry-requests/", 200)["results"]] == [asked["id"]]
    call("owner", "get", "/expiry-requests/{request_id}/", 200, request_id=asked["id"])
    decline = "/expiry-requests/{request_id}/decline/"
    call("owner", "post", decline, 200, {"reason": "still right"}, request_id=asked["id"])
    again = call("agent", "post", path, 201, {"reason": "asked again"}, memory_id=moved["memory_id"])
    approved = call("owner", "post", "/expiry-requests/{request_id}/approve/", 200, {}, request_id=again["id"])
    assert approved["status"] == "approved"

    # Curation (it ends a belief; before deletion hides the records): exclude and expire.
    call("owner", "post", "/records/{memory_id}/expire/", 200, {"reason": "over"}, memory_id=winner)
    call("owner", "post", "/records/{memory_id}/exclude/", 200, {"reason": "wrong"}, memory_id=moved["memory_id"])

    # Deletion requests: a dry run, filing from it, filing without one, approval, retry, cancel.
    scope = {"project_id": "project-a", "scope": {"subject_id": "client-1"}, "reason": "asked"}
    preview = call("compliance", "post", "/deletion-requests/", 200, {**scope, "dry_run": True})
    filed = call("compliance", "post", "/deletion-requests/", 202, {**scope, "preview_id": preview["preview_id"]})
    assert "preview" in filed
    call("compliance", "get", "/deletion-requests/", 200)
    call("compliance", "get", "/deletion-requests/{request_id}/", 200, request_id=filed["id"])
    call("compliance", "post", "/deletion-requests/{request_id}/retry/", 202, request_id=filed["id"])
    # The signed certificate: refused until the purge is confirmed, then issued.
    certificate = "/deletion-requests/{request_id}/certificate/"
    call("compliance", "get", certificate, 409, request_id=filed["id"])
    run_purge(DeletionRequest.objects.get(public_id=filed["id"]))
    assert call("compliance", "get", certificate, 200, request_id=filed["id"])["signature"]
    # A whole predicate waits for a second compliance person.
    wide = call("compliance", "post", "/deletion-requests/", 202, {**scope, "scope": {"predicate": "note"}})
    assert wide["state"] == "awaiting_approval"
    call("second_officer", "post", "/deletion-requests/{request_id}/approve/", 202, request_id=wide["id"])
    stones = call("compliance", "get", "/tombstones/", 200)["results"]
    assert stones, "an accepted deletion leaves tombstones"
    call(
        "owner",
        "post",
        "/tombstones/{tombstone_id}/lift/",
        200,
        {"reason": "restored by contract"},
        tombstone_id=stones[0]["id"],
    )
    other_request = call(
        "compliance", "post", "/deletion-requests/", 202, {**scope, "scope": {"predicate": "unit_price"}}
    )
    call(
        "compliance",
        "post",
        "/deletion-requests/{request_id}/cancel/",
        200,
        {"reason": "filed twice"},
        request_id=other_request["id"],
    )

    # API tokens (admins): issue one to an agent (the secret shown once), list them, revoke it.
    expiry = (timezone.now() + timedelta(days=1)).isoformat()
    issued = call("owner", "post", "/tokens/", 201, {"principal": "agent-9", "name": "ci", "expires_at": expiry})
    call("owner", "get", "/tokens/", 200)
    call("owner", "post", "/tokens/{token_id}/revoke/", 200, {"reason": "rotated"}, token_id=issued["id"])

    # Trust (issue 35): the verifying keys (public) and the tenant's audit chain verified now.
    assert call("agent", "get", "/trust/keys/", 200)["keys"]
    assert call("compliance", "get", "/audit/verify/", 200)["intact"] is True

    missing = call.conformance.operations() - call.conformance.exercised
    assert not missing, f"operations never exercised: {sorted(missing)}"


def body_for(key: dict[str, str], value: str, revision: str) -> dict[str, Any]:
    return {
        **key,
        "value": value,
        "valid_from": at(10, 23).isoformat(),
        "source": {"canonical_ref": "task:017", "revision": revision},
    }


def test_a_field_rendered_but_not_declared_fails_the_check(call: Caller, db: None) -> None:
    """The check itself: an answer with a field its schema lacks (the drift this test exists to catch,
    e.g. `valid_from` rendered by the fact answer but missing from its serializer) is refused."""
    agent = ensure_principal("acme", "agent-7", ["agent"])
    seeded = _seed(agent, ensure_principal("acme", "agent-9", ["agent"]))

    class Drifted:
        status_code = 200
        content = b"{}"

        @staticmethod
        def json() -> dict[str, Any]:
            answer = call.clients["agent"].get(f"{PREFIX}/records/{seeded['current'].memory_id}/").json()
            return {**answer, "undeclared": 1}

    with pytest.raises(AssertionError, match="undeclared"):
        call.conformance.check("get", "/records/{memory_id}/", Drifted())

    class Missing(Drifted):
        @staticmethod
        def json() -> dict[str, Any]:
            answer = call.clients["agent"].get(f"{PREFIX}/records/{seeded['current'].memory_id}/").json()
            answer["source"].pop("event_ids")
            return answer

    with pytest.raises(AssertionError, match="event_ids"):
        call.conformance.check("get", "/records/{memory_id}/", Missing())
