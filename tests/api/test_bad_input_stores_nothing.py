"""Bad input gets a 4xx with a reason, and nothing is stored."""

from __future__ import annotations

import json

from memory_admin.memory.models import MemoryRecord
from tests.support import at, body, deadline


def post(client, payload):
    return client.post("/api/v1/records/", payload, format="json")


def test_a_naive_datetime_is_400(api, agent):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload["valid_from"] = "2026-10-20T09:00:00"
    response = post(api(agent), payload)
    assert response.status_code == 400
    assert "valid_from" in response.json()["errors"]
    assert MemoryRecord.objects.count() == 0


def test_a_malformed_datetime_is_400(api, agent):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload["valid_to"] = "next tuesday"
    response = post(api(agent), payload)
    assert response.status_code == 400
    assert "valid_to" in response.json()["errors"]


def test_valid_to_before_valid_from_is_400(api, agent):
    response = post(api(agent), body(deadline("x", "r1", at(10, 20), valid_to=at(10, 19))))
    assert response.status_code == 400
    assert "valid_to" in response.json()["errors"]


def test_a_null_value_is_400(api, agent):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload["value"] = None
    response = post(api(agent), payload)
    assert response.status_code == 400
    assert "value" in response.json()["errors"]


def test_an_oversized_value_is_400(api, agent):
    payload = body(deadline("x" * 20_000, "r1", at(10, 20)))
    response = post(api(agent), payload)
    assert response.status_code == 400
    assert "value" in response.json()["errors"]
    assert MemoryRecord.objects.count() == 0


def test_an_oversized_body_is_413(api, agent):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload["padding"] = "y" * 400_000
    response = post(api(agent), payload)
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"


def test_malformed_json_is_400(api, agent):
    response = api(agent).post("/api/v1/records/", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


def test_a_negative_expected_revision_is_400(api, agent):
    response = post(api(agent), body(deadline("x", "r1", at(10, 20), expected_revision=-1)))
    assert response.status_code == 400
    assert "expected_revision" in response.json()["errors"]


def test_a_too_long_subject_is_400(api, agent):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload["subject_id"] = "s" * 300
    response = post(api(agent), payload)
    assert response.status_code == 400
    assert "subject_id" in response.json()["errors"]


def test_an_unknown_status_filter_is_400(api, agent):
    response = api(agent).get("/api/v1/records/", {"status": "forgotten"})
    assert response.status_code == 400
    assert "status" in response.json()["errors"]


def test_a_naive_as_of_instant_is_400(api, agent):
    response = api(agent).get(
        "/api/v1/facts/current/", {"project_id": "p", "subject_id": "s", "predicate": "x", "valid_at": "2026-10-21"}
    )
    assert response.status_code == 400
    assert "valid_at" in response.json()["errors"]


def test_facts_current_needs_its_key(api, agent):
    response = api(agent).get("/api/v1/facts/current/", {"project_id": "p"})
    assert response.status_code == 400
    assert {"subject_id", "predicate"} <= set(response.json()["errors"])


def test_an_unknown_purpose_is_400(api, agent):
    response = api(agent).get(
        "/api/v1/facts/current/", {"project_id": "p", "subject_id": "s", "predicate": "x", "purpose": "vibes"}
    )
    assert response.status_code == 400


def test_an_unknown_record_is_404(api, agent):
    response = api(agent).get("/api/v1/records/mem-nope/")
    assert response.status_code == 404
    assert json.loads(response.content)["code"] == "not_found"
