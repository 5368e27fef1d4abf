"""Every datetime input is range-checked after conversion to UTC: out of range is a 400 naming the field,
and nothing is stored. Year 0 or 10000 in UTC was stored by PostgreSQL but could not be read back, so one
request used to break every read of the tenant and the valid-time task of every tenant."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from deletion.models import DeletionRequest
from memory_admin.derived.models import ContextLoad, Event, ScheduledAction
from memory_admin.memory.actions import assert_fact, expire_record
from memory_admin.memory.errors import InvalidInput
from memory_admin.memory.models import FieldPolicy, MemoryRecord, Project
from memory_admin.memory.policies import save_field_policy
from tests.support import DEADLINE, at, body, deadline

# Year 1 at +05:00 is year 0 in UTC; 9999-12-31 23:00 at -05:00 is year 10000 in UTC.
TOO_EARLY = "0001-01-01T00:00:00+05:00"
TOO_LATE = "9999-12-31T23:00:00-05:00"
OUT_OF_RANGE = [TOO_EARLY, TOO_LATE, "0999-12-31T23:59:59Z", "9000-01-01T00:00:00Z"]


def post_record(client, payload):
    return client.post("/api/v1/records/", payload, format="json")


@pytest.mark.parametrize("moment", OUT_OF_RANGE)
@pytest.mark.parametrize("field", ["valid_from", "valid_to"])
def test_an_out_of_range_validity_is_400_and_nothing_is_stored(api, agent, field, moment):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload[field] = moment
    if field == "valid_to":
        payload["valid_from"] = "0001-01-01T00:00:00Z" if moment == TOO_EARLY else payload["valid_from"]
    response = post_record(api(agent), payload)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert field in response.json()["errors"]
    assert MemoryRecord.objects.count() == 0
    assert not Project.objects.exists()
    # The tenant's reads keep working.
    assert api(agent).get("/api/v1/records/").status_code == 200


def test_the_edges_of_the_range_are_accepted(api, agent):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload["valid_from"] = "1000-01-01T00:00:00Z"
    payload["valid_to"] = "8999-12-31T23:59:59Z"
    response = post_record(api(agent), payload)
    assert response.status_code == 201
    listed = api(agent).get("/api/v1/records/").json()["results"]
    assert listed[0]["valid_from"].startswith("1000-01-01")


def test_the_domain_refuses_out_of_range_datetimes_for_every_door(agent, owner):
    """Commands and tasks call assert_fact and expire_record without a serializer."""
    from datetime import datetime

    early = datetime.fromisoformat(TOO_EARLY)
    with pytest.raises(InvalidInput) as refused:
        assert_fact(agent, deadline("x", "r1", early))
    assert "valid_from" in refused.value.extra["errors"]
    record = assert_fact(agent, deadline("x", "r1", at(10, 20))).record
    with pytest.raises(InvalidInput) as refused:
        expire_record(owner, record.memory_id, "moved", valid_to=datetime.fromisoformat(TOO_LATE))
    assert "valid_to" in refused.value.extra["errors"]
    record.refresh_from_db()
    assert record.valid_to is None and record.status == MemoryRecord.Status.ACCEPTED


def test_expire_through_the_api_with_an_out_of_range_end_is_400(api, agent, owner):
    record = assert_fact(agent, deadline("x", "r1", at(10, 20))).record
    response = api(owner).post(
        f"/api/v1/records/{record.memory_id}/expire/", {"reason": "r", "valid_to": TOO_LATE}, format="json"
    )
    assert response.status_code == 400
    assert "valid_to" in response.json()["errors"]
    record.refresh_from_db()
    assert record.valid_to is None


@pytest.mark.parametrize("moment", [TOO_EARLY, TOO_LATE])
def test_an_event_out_of_range_is_400_and_not_logged(api, agent, moment):
    payload = {"project_id": "project-a", "session_id": "s1", "actor": "user", "text": "hi", "occurred_at": moment}
    response = api(agent).post("/api/v1/events/", payload, format="json")
    assert response.status_code == 400
    assert "occurred_at" in response.json()["errors"]
    assert not Event.objects.exists()
    assert api(agent).get("/api/v1/events/").status_code == 200


def test_scheduled_actions_and_context_loads_refuse_out_of_range_dates(api, agent):
    now = timezone.now()
    record = assert_fact(agent, deadline("x", "r1", now - timedelta(days=1))).record
    bases = [{"memory_id": record.memory_id, "revision": record.revision}]
    action = {"project_id": "project-a", "kind": "remind", "payload": {}, "due_at": TOO_LATE, "derived_from": bases}
    response = api(agent).post("/api/v1/scheduled-actions/", action, format="json")
    assert response.status_code == 400 and "due_at" in response.json()["errors"]
    load = {"session_id": "s1", "memories": bases, "expires_at": TOO_EARLY}
    response = api(agent).post("/api/v1/context-loads/", load, format="json")
    assert response.status_code == 400 and "expires_at" in response.json()["errors"]
    assert not ScheduledAction.objects.exists() and not ContextLoad.objects.exists()


@pytest.mark.parametrize("param", ["valid_at", "known_at"])
def test_as_of_query_parameters_out_of_range_are_400(api, agent, param):
    assert_fact(agent, deadline("x", "r1", at(10, 20)))
    response = api(agent).get("/api/v1/records/", {param: TOO_EARLY})
    assert response.status_code == 400 and param in response.json()["errors"]
    query = {"project_id": "project-a", "subject_id": "task-proposal-017", "predicate": "submission_deadline"}
    response = api(agent).get("/api/v1/facts/current/", {**query, param: TOO_LATE})
    assert response.status_code == 400 and param in response.json()["errors"]


@pytest.mark.parametrize(
    "change",
    [
        {"recheck_interval": "P99999999999D"},  # Django's parser overflowed: a 500
        {"recheck_interval": "P40000D"},  # added to a date on every write
        {"retention_days": 1_000_000_000},
    ],
)
def test_a_policy_interval_too_long_for_date_arithmetic_is_400(api, admin, change):
    payload = {"project_id": None, "predicate": "submission_deadline", **change}
    response = api(admin).post("/api/v1/field-policies/", payload, format="json")
    assert response.status_code == 400
    assert set(change) <= set(response.json()["errors"])
    assert not FieldPolicy.objects.exists()


def test_the_policy_domain_refuses_a_duration_too_long(admin):
    with pytest.raises(InvalidInput) as refused:
        save_field_policy(admin, {"project_id": None, "predicate": "p", "recheck_interval": timedelta(days=40_000)})
    assert "recheck_interval" in refused.value.extra["errors"]
    assert not FieldPolicy.objects.exists()


def test_a_deletion_due_date_out_of_range_is_400(api, agent, compliance):
    assert_fact(agent, deadline("x", "r1", at(10, 20)))
    payload = {
        "project_id": "project-a",
        "scope": {"subject_id": "task-proposal-017"},
        "reason": "erasure request",
        "due_by": "0001-01-01",
    }
    response = api(compliance).post("/api/v1/deletion-requests/", payload, format="json")
    assert response.status_code == 400
    assert "due_by" in response.json()["errors"]
    assert not DeletionRequest.objects.exists()


def test_dashboard_as_of_and_audit_dates_out_of_range_are_a_message_not_a_500(agent, owner):
    assert_fact(agent, deadline("x", "r1", at(10, 20)))
    client = Client()
    client.force_login(owner)
    page = client.get(
        "/facts/",
        {
            "project": "project-a",
            "subject": "task-proposal-017",
            "predicate": "submission_deadline",
            "valid_at": "0001-01-01T00:00+05:00",
        },
    )
    assert page.status_code == 200
    assert "from the year 1000 up to the year 8999" in page.content.decode()  # the form's error names the range
    audit = client.get("/audit/", {"since": "9999-12-31T23:00-05:00"})
    assert audit.status_code == 200
    assert "from the year 1000 up to the year 8999" in audit.content.decode()


@pytest.mark.parametrize("moment", ["2026-10-20T00:00:00+20:00", "2026-10-20T00:00:00-16:00"])
def test_an_offset_the_database_cannot_hold_is_400_for_queries_and_writes(api, agent, moment):
    """Python reads offsets up to ±23:59, PostgreSQL only up to ±15:59: the fuzzer found a 500 there."""
    query = {"project_id": "project-a", "subject_id": "task-proposal-017", "predicate": "submission_deadline"}
    response = api(agent).get("/api/v1/facts/current/", {**query, "valid_at": moment})
    assert response.status_code == 400 and "valid_at" in response.json()["errors"]
    response = api(agent).post("/api/v1/records/", {**DEADLINE, "valid_from": moment}, format="json")
    assert response.status_code == 400 and "valid_from" in response.json()["errors"]
    assert not MemoryRecord.objects.exists()
    # A real zone's offset is still accepted.
    ok = api(agent).get("/api/v1/facts/current/", {**query, "valid_at": "2026-10-20T00:00:00+14:00"})
    assert ok.status_code == 404
