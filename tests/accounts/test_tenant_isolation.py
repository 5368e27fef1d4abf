"""Another tenant's objects are a 404 on every endpoint: never data, never a 403 that reveals them."""

from __future__ import annotations

from typing import Any

import pytest

from memory_admin.memory.models import FieldPolicy, MemoryRecord
from tests.support import DEADLINE, at, body, deadline


@pytest.fixture
def acme_objects(admin, moved_deadline, other_agent):
    from memory_admin.memory.actions import Assertion, assert_fact

    price: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}
    assert_fact(
        moved_deadline[0].record.issuer,
        Assertion(**price, value=1, valid_from=at(10, 26), source_canonical_ref="a", source_revision="1"),
    )
    dispute = assert_fact(
        other_agent, Assertion(**price, value=2, valid_from=at(10, 26), source_canonical_ref="b", source_revision="1")
    ).dispute
    policy = FieldPolicy.objects.create(tenant=admin.tenant, predicate="submission_deadline")
    return {"record": moved_deadline[1].record, "dispute": dispute, "policy": policy}


def test_an_outsider_gets_404_for_every_object_of_another_tenant(api, outsider, acme_objects):
    client = api(outsider)
    memory_id = acme_objects["record"].memory_id
    dispute_id = acme_objects["dispute"].public_id
    policy_id = acme_objects["policy"].pk
    for method, url, data in [
        ("get", f"/api/v1/records/{memory_id}/", None),
        ("get", f"/api/v1/records/{memory_id}/history/", None),
        ("post", f"/api/v1/records/{memory_id}/exclude/", {"reason": "x"}),
        ("post", f"/api/v1/records/{memory_id}/expire/", {"reason": "x"}),
        ("get", f"/api/v1/disputes/{dispute_id}/", None),
        ("post", f"/api/v1/disputes/{dispute_id}/resolve/", {"winner": memory_id, "reason": "x"}),
        ("get", f"/api/v1/field-policies/{policy_id}/", None),
        ("patch", f"/api/v1/field-policies/{policy_id}/", {"risk": "high"}),
        ("delete", f"/api/v1/field-policies/{policy_id}/", None),
    ]:
        response = getattr(client, method)(url, data, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
        assert response.json()["code"] == "not_found"
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"
    assert FieldPolicy.objects.get(pk=policy_id).risk == "low"


def test_an_outsider_sees_none_of_another_tenants_records_in_lists_and_reads(api, outsider, acme_objects):
    client = api(outsider)
    assert client.get("/api/v1/records/").json()["results"] == []
    assert client.get("/api/v1/records/", DEADLINE).json()["results"] == []
    assert client.get("/api/v1/disputes/").json()["results"] == []
    assert client.get("/api/v1/field-policies/").json()["results"] == []
    assert client.get("/api/v1/facts/current/", DEADLINE).status_code == 404


def test_an_outsiders_write_lands_in_its_own_tenant_and_never_touches_another(api, outsider, acme_objects):
    client = api(outsider)
    guessing = client.post(
        "/api/v1/records/", body(deadline("2027-01-01", "r99", at(10, 23), expected_revision=2)), format="json"
    )
    assert guessing.status_code == 409
    assert guessing.json()["current"] is None  # acme's revision 2 is not visible from globex
    response = client.post("/api/v1/records/", body(deadline("2027-01-01", "r99", at(10, 23))), format="json")
    assert response.status_code == 201
    assert response.json()["revision"] == 1  # a fact of its own tenant, not acme's revision 3
    assert MemoryRecord.objects.filter(tenant=acme_objects["record"].tenant, revision=3).count() == 0


def test_requests_without_credentials_or_with_a_bad_token_are_401(client, db):
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/records/").status_code == 401
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer mga_not-a-token")
    response = bad.get("/api/v1/records/")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


def test_a_revoked_token_stops_working(db, agent):
    from rest_framework.test import APIClient

    from memory_admin.accounts.models import ApiToken
    from memory_admin.accounts.services import issue_token

    raw = issue_token(agent)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/records/").status_code == 200
    ApiToken.objects.get(principal=agent).revoke()
    assert client.get("/api/v1/records/").status_code == 401


def test_a_signed_in_human_uses_the_api_with_a_session(client, owner, moved_deadline):
    client.force_login(owner)
    response = client.get("/api/v1/records/")
    assert response.status_code == 200
    assert len(response.json()["results"]) == 2
