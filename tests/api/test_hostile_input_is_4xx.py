"""Hostile input of every shape is a 4xx with a reason, never a 500, and the API always answers in JSON.

NUL characters and lone surrogates cannot be stored in PostgreSQL text or jsonb, very deep JSON blows
Python's stack, numbers past a column's range overflow it, and a bogus cursor used to reach the query:
each used to surface as a 500 (issue 10, item 7).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from memory_admin.api import views as api_views
from memory_admin.derived.models import ContextLoad, ScheduledAction, Summary
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.validation import MAX_DURATION, MAX_RETENTION_DAYS
from tests.support import DEADLINE, at, body, deadline

INT_MAX = 2**31 - 1


def assert_json_error(response: Any, status: int | tuple[int, ...] = 400) -> dict[str, Any]:
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    data = json.loads(response.content)
    assert isinstance(data.get("code"), str) and data["code"], data
    assert isinstance(data.get("detail"), str) and data["detail"], data
    return data


def raw_post(client: APIClient, url: str, text: str) -> Any:
    return client.post(url, data=text.encode("utf-8"), content_type="application/json")


def record_body(**overrides: Any) -> dict[str, Any]:
    data = body(deadline("2026-10-30T17:00+09:00", "r1", at(10, 20)))
    data.update(overrides)
    return data


# --- JSON bodies: NUL, lone surrogates, NaN, depth ---------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # A NUL in a value, in a nested value, in a key, in an identifier.
        json.dumps(record_body(value="a\u0000b")),
        json.dumps(record_body(value={"k": ["x", "\u0000"]})),
        json.dumps(record_body(value={"a\u0000": 1})),
        json.dumps(record_body(subject_id="s\u0000")),
        # A lone surrogate is valid JSON text but not Unicode: it cannot be encoded to store.
        json.dumps(record_body()).replace('"r1"', '"\\ud800"'),
        json.dumps(record_body()).replace('"2026-10-30T17:00+09:00"', '"x\\udfff"'),
        # NaN and Infinity are not JSON.
        json.dumps(record_body()).replace('"2026-10-30T17:00+09:00"', "NaN"),
        json.dumps(record_body()).replace('"2026-10-30T17:00+09:00"', "-Infinity"),
        json.dumps(record_body()).replace('"2026-10-30T17:00+09:00"', "1e400"),
    ],
    ids=[
        "nul-value",
        "nul-nested",
        "nul-key",
        "nul-subject",
        "surrogate-revision",
        "surrogate-value",
        "nan",
        "inf",
        "float-overflow",
    ],
)
def test_strings_the_database_cannot_hold_are_400(api, agent, text):
    data = assert_json_error(raw_post(api(agent), "/api/v1/records/", text))
    assert data["code"] == "parse_error"
    assert MemoryRecord.objects.count() == 0


def test_a_paired_surrogate_escape_is_an_ordinary_character(api, agent):
    text = json.dumps(record_body()).replace('"2026-10-30T17:00+09:00"', '"clef \\ud834\\udd1e"')
    response = raw_post(api(agent), "/api/v1/records/", text)
    assert response.status_code == 201, response.content
    assert MemoryRecord.objects.get().value == "clef \U0001d11e"


def test_json_nested_5000_deep_is_400(api, agent):
    text = json.dumps(record_body(value="PLACEHOLDER")).replace('"PLACEHOLDER"', "[" * 5000 + "]" * 5000)
    data = assert_json_error(raw_post(api(agent), "/api/v1/records/", text))
    assert data["code"] == "parse_error"
    assert MemoryRecord.objects.count() == 0


def test_json_nested_past_the_limit_is_400_but_moderate_nesting_is_fine(api, agent):
    def nested(depth: int) -> Any:
        value: Any = "leaf"
        for _ in range(depth):
            value = {"k": value}
        return value

    deep = assert_json_error(api(agent).post("/api/v1/records/", record_body(value=nested(100)), format="json"))
    assert deep["code"] == "parse_error"
    ok = api(agent).post("/api/v1/records/", record_body(value=nested(20)), format="json")
    assert ok.status_code == 201, ok.content


def test_a_nul_in_an_observed_value_is_400(api, agent, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    response = api(agent).post(
        f"/api/v1/records/{memory_id}/rechecks/", {"outcome": "confirmed", "observed_value": "x\u0000"}, format="json"
    )
    assert_json_error(response)
    assert RecheckAttempt.objects.count() == 0


def test_a_nul_in_an_action_payload_is_400(api, agent, moved_deadline):
    base = moved_deadline[1].record
    response = api(agent).post(
        "/api/v1/scheduled-actions/",
        {
            "project_id": "project-a",
            "kind": "reminder",
            "payload": {"text": "\u0000"},
            "due_at": at(11, 1).isoformat(),
            "derived_from": [{"memory_id": base.memory_id, "revision": base.revision}],
        },
        format="json",
    )
    assert_json_error(response)
    assert ScheduledAction.objects.count() == 0


def test_a_nul_in_a_summary_or_an_event_is_400(api, agent, moved_deadline):
    base = moved_deadline[1].record
    refs = [{"memory_id": base.memory_id, "revision": base.revision}]
    summary = api(agent).post(
        "/api/v1/summaries/", {"project_id": "project-a", "text": "a\u0000", "derived_from": refs}, format="json"
    )
    assert_json_error(summary)
    assert Summary.objects.count() == 0
    event = api(agent).post(
        "/api/v1/events/",
        {"project_id": "project-a", "session_id": "s", "actor": "u", "text": "\u0000", "occurred_at": at(10, 20)},
        format="json",
    )
    assert_json_error(event)


def test_a_nul_in_a_deletion_scope_is_400(api, compliance):
    response = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": "project-a", "scope": {"subject_id": "sato\u0000"}, "reason": "gdpr", "dry_run": True},
        format="json",
    )
    assert_json_error(response)


# --- NUL and control characters in URLs --------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/records/mem-x%00/",
        "/api/v1/records/mem-x%00/history/",
        "/api/v1/disputes/d%00/",
        "/api/v1/summaries/s%00/",
        "/api/v1/scheduled-actions/a%00/",
        "/api/v1/deletion-requests/r%00/",
        "/api/v1/agents/agent-7/invalidations/n%00/ack/",
        "/api/v1/records/mem%01x/",
        "/api/v1/records/?project_id=%00",
        "/api/v1/records/?subject_id=a%00b",
        "/api/v1/records/?pred%00icate=x",
        "/api/v1/events/?session_id=%00",
        "/api/v1/search/?q=%00&project_id=project-a",
        "/api/v1/facts/current/?project_id=p&subject_id=s%00&predicate=x",
        "/api/v1/disputes/?status=%00",
    ],
)
def test_a_nul_in_an_api_url_is_a_json_400(api, agent, url):
    method = "post" if url.endswith("/ack/") else "get"
    data = assert_json_error(getattr(api(agent), method)(url))
    assert data["code"] == "invalid_characters"


def test_a_nul_in_a_dashboard_url_is_a_400_page(owner):
    client = Client()
    client.force_login(owner)
    for url in (
        "/facts/?project=project-a%00&subject=s&predicate=p",
        "/retrieval/?q=%00&project=project-a",
        "/records/?subject=%00",
        "/records/mem%00/",
    ):
        response = client.get(url)
        assert response.status_code == 400, url
        assert response["Content-Type"].startswith("text/html"), url
        assert b"<html" in response.content.lower()


def test_ordinary_whitespace_in_a_query_is_allowed(api, agent):
    response = api(agent).get("/api/v1/search/", {"q": "deadline\tmoved\nagain", "project_id": "project-a"})
    assert response.status_code == 200, response.content


# --- Numbers past a column's range -------------------------------------------------------------


@pytest.mark.parametrize("revision", [INT_MAX + 1, 2**63, 10**30])
def test_a_context_load_revision_past_the_column_is_400(api, agent, moved_deadline, revision):
    base = moved_deadline[1].record
    response = api(agent).post(
        "/api/v1/context-loads/",
        {
            "session_id": "s-1",
            "memories": [{"memory_id": base.memory_id, "revision": revision}],
            "expires_at": at(11, 1).isoformat(),
        },
        format="json",
    )
    data = assert_json_error(response)
    assert "memories" in data["errors"]
    assert ContextLoad.objects.count() == 0


def test_an_expected_revision_past_the_column_is_400(api, agent):
    response = api(agent).post("/api/v1/records/", record_body(expected_revision=2**40), format="json")
    data = assert_json_error(response)
    assert "expected_revision" in data["errors"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retention_days", INT_MAX),
        ("retention_days", MAX_RETENTION_DAYS + 1),
        ("retention_days", 0),
        ("retention_days", -1),
        ("recheck_interval", "P99999999999D"),
        ("recheck_interval", f"P{MAX_DURATION.days + 1}D"),
        ("recheck_interval", "PT0S"),
    ],
)
def test_a_field_policy_number_out_of_range_is_400(api, admin, field, value):
    response = api(admin).post(
        "/api/v1/field-policies/", {"project_id": "project-a", "predicate": "p", field: value}, format="json"
    )
    data = assert_json_error(response)
    assert field in data["errors"]
    assert FieldPolicy.objects.count() == 0


def test_the_domain_refuses_an_out_of_range_policy_whatever_the_door(admin):
    from datetime import timedelta

    from memory_admin.memory import policies
    from memory_admin.memory.errors import InvalidInput

    for data in (
        {"predicate": "p", "retention_days": INT_MAX},
        {"predicate": "p", "recheck_interval": timedelta(days=999_999)},
        {"predicate": "p", "recheck_interval": timedelta(seconds=-5)},
    ):
        with pytest.raises(InvalidInput):
            policies.save_field_policy(admin, dict(data))
    assert FieldPolicy.objects.count() == 0


def test_the_longest_allowed_retention_still_accepts_writes(api, admin, agent):
    response = api(admin).post(
        "/api/v1/field-policies/",
        {
            "project_id": DEADLINE["project_id"],
            "predicate": DEADLINE["predicate"],
            "retention_days": MAX_RETENTION_DAYS,
            "recheck_interval": f"P{MAX_DURATION.days}D",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    write = api(agent).post("/api/v1/records/", record_body(), format="json")
    assert write.status_code == 201, write.content
    assert MemoryRecord.objects.get().retain_until is not None


def test_a_policy_stored_before_the_bounds_does_not_break_writes_or_rechecks(api, agent, owner):
    """Rows saved before retention and intervals were bounded (straight into the table here) used to make every
    write to the field, and every recheck of it, overflow a datetime: a 500."""
    from datetime import timedelta

    from memory_admin.memory.models import Project

    project = Project.objects.create(tenant=agent.tenant, key=DEADLINE["project_id"])
    FieldPolicy.objects.create(
        tenant=agent.tenant,
        project=project,
        predicate=DEADLINE["predicate"],
        retention_days=INT_MAX,
        # 100M days: far past year 9999, yet storable on SQLite too (a 64-bit count of microseconds there).
        recheck_interval=timedelta(days=100_000_000),
        canonical_source={"connector": "manual"},
    )
    write = api(agent).post("/api/v1/records/", record_body(), format="json")
    assert write.status_code == 201, write.content
    record = MemoryRecord.objects.get()
    assert record.retain_until is not None and record.retain_until.year < 9999
    recheck = api(owner).post(
        f"/api/v1/records/{record.memory_id}/rechecks/",
        {"outcome": "verified_unchanged", "observed_value": record.value},
        format="json",
    )
    assert recheck.status_code == 201, recheck.content
    assert recheck.json()["outcome"] == "verified_unchanged"
    record.refresh_from_db()
    assert record.recheck_after is not None and record.recheck_after.year < 9999


def test_the_dashboard_policy_form_refuses_an_endless_retention(admin):
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/policies/new/",
        {"predicate": "p", "on_failure": "answer_with_caveat", "risk": "low", "retention_days": INT_MAX},
    )
    assert response.status_code in (200, 400)
    assert FieldPolicy.objects.count() == 0


# --- Cursors -----------------------------------------------------------------------------------


def cursor(query: str) -> str:
    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize(
    "raw",
    [
        cursor("o=1&p=abc"),
        cursor("p=abc"),
        cursor(f"p={10**30}"),
        cursor("p=-5"),
        cursor("p=%00"),
        cursor("o=1&r=1&p=1e9"),
        "not-base64!!",
    ],
)
def test_a_bogus_cursor_is_a_json_4xx(api, agent, owner, compliance, raw):
    for client, url in (
        (api(agent), "/api/v1/records/"),
        (api(agent), "/api/v1/disputes/"),
        (api(agent), "/api/v1/events/"),
        (api(owner), "/api/v1/deletion-requests/"),
    ):
        response = client.get(url, {"cursor": raw})
        assert_json_error(response, (400, 404))


def test_a_good_cursor_still_pages(api, agent):
    client = api(agent)
    for i in range(3):
        client.post("/api/v1/records/", record_body(subject_id=f"s-{i}"), format="json")
    first = client.get("/api/v1/records/", {"page_size": 2}).json()
    assert len(first["results"]) == 2 and first["next"]
    second = client.get(first["next"]).json()
    assert len(second["results"]) == 1


# --- The API answers JSON even when Django itself handles the error (DEBUG off) -----------------


@pytest.fixture
def production(settings):
    settings.DEBUG = False


def test_an_unknown_api_path_is_a_json_404(production, api, agent):
    data = assert_json_error(api(agent).get("/api/v1/no-such-thing/"), 404)
    assert data["code"] == "not_found"
    assert_json_error(APIClient().get("/api/v1/records/mem-x/history/nope/"), 404)


def test_an_unknown_page_is_an_html_404(production, owner):
    client = Client()
    client.force_login(owner)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert b"Not found" in response.content


def test_a_crash_in_the_api_is_a_json_500(production, api, agent, monkeypatch):
    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(api_views.RecordViewSet, "retrieve", boom)
    client = api(agent)
    client.raise_request_exception = False
    data = assert_json_error(client.get("/api/v1/records/mem-x/"), 500)
    assert data["code"] == "server_error"
    assert "simulated" not in data["detail"]  # no internals leak


def test_a_crash_in_the_dashboard_is_an_html_500(production, owner, monkeypatch):
    from memory_admin.dashboard.pages import audit as dashboard_views

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(dashboard_views, "render", boom)
    client = Client(raise_request_exception=False)
    client.force_login(owner)
    response = client.get("/audit/")  # a page pages/audit.py renders itself
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert b"simulated" not in response.content
