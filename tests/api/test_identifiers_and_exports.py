"""Identifiers (`project_id`, `subject_id`, `predicate`) have one documented rule (Unicode letters, marks and
digits, a little punctuation, single inner spaces; tests/memory/test_identifier_rule.py), refused with a 400 elsewhere; export paths are built from generated ids only and stay inside the export root."""

from __future__ import annotations

from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from memory_admin.derived.exports import downloadable, export_project, export_root
from memory_admin.derived.models import Event, ExportFile
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.errors import InvalidInput, NotFound
from memory_admin.memory.models import FieldPolicy, MemoryRecord, Project
from memory_admin.memory.policies import save_field_policy
from memory_admin.memory.validation import IDENTIFIER_PATTERN
from tests.support import at, body, deadline

TRAVERSAL = "../../../../../../tmp/x"
BAD_IDS = [
    TRAVERSAL,
    "../2/x",
    "a/b",
    "a\\b",
    "two  spaces",
    " leading",
    "trailing ",
    "tab\there",
    "line\nbreak",
    ".hidden",
    "..",
    "-rf",
    "zero\u200bwidth",
    "\ufeffbom",
    "bidi\u202eevil",
    "\u0301mark-first",
    "semi;colon",
    "quote'd",
]
GOOD_IDS = [
    "project-a",
    "task-proposal-017",
    "submission_deadline",
    "sato",
    "user:alice@example.com",
    "alice+tag@example.com",
    "ns.sub_key",
    "_private",
    "550e8400-e29b-41d4-a716-446655440000",
    "caf\u00e9",
    "with space",
    "佐藤 花子",
    "株式会社あおば出版",
    "提出期限",
    "契約プラン",
]


def post_record(client, payload):
    return client.post("/api/v1/records/", payload, format="json")


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("field", ["project_id", "subject_id", "predicate"])
def test_an_identifier_outside_the_character_set_is_400_and_nothing_is_stored(api, agent, field, bad):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload[field] = bad
    response = post_record(api(agent), payload)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert field in response.json()["errors"]
    assert not MemoryRecord.objects.exists()
    assert not Project.objects.exists()


@pytest.mark.parametrize("good", GOOD_IDS)
def test_identifiers_that_agent_frameworks_use_are_accepted(api, agent, good):
    payload = body(deadline("x", "r1", at(10, 20)))
    payload.update(project_id=good, subject_id=good, predicate=good)
    assert post_record(api(agent), payload).status_code == 201
    query = {"project_id": good, "subject_id": good, "predicate": good}
    assert api(agent).get("/api/v1/facts/current/", query).json()["value"] == "x"


def test_the_domain_refuses_a_bad_identifier_for_every_door(agent, admin):
    with pytest.raises(InvalidInput) as refused:
        assert_fact(agent, replace(deadline("x", "r1", at(10, 20)), project_id=TRAVERSAL))
    assert "project_id" in refused.value.extra["errors"]
    with pytest.raises(InvalidInput) as refused:
        save_field_policy(admin, {"project_id": "../2/x", "predicate": "p"})
    assert "project_id" in refused.value.extra["errors"]
    assert not Project.objects.exists() and not FieldPolicy.objects.exists()


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("/api/v1/records/", {"project_id": TRAVERSAL}, "project_id"),
        ("/api/v1/records/", {"subject_id": "a  b"}, "subject_id"),
        ("/api/v1/facts/current/", {"project_id": "p", "subject_id": "s", "predicate": "a/b"}, "predicate"),
        ("/api/v1/events/", {"subject_id": "../x"}, "subject_id"),
        ("/api/v1/search/", {"project_id": "a\u202eb", "q": "deadline"}, "project_id"),
    ],
)
def test_bad_identifiers_in_the_query_string_are_400(api, agent, path, query, field):
    response = api(agent).get(path, query)
    assert response.status_code == 400
    assert field in response.json()["errors"]


def test_events_summaries_and_policies_refuse_bad_identifiers(api, agent, admin):
    event = {
        "project_id": "project-a",
        "session_id": "s",
        "actor": "u",
        "text": "t",
        "occurred_at": "2026-10-20T09:00:00+09:00",
        "subject_ids": ["ok", "../x"],
    }
    response = api(agent).post("/api/v1/events/", event, format="json")
    assert response.status_code == 400 and "subject_ids" in response.json()["errors"]
    response = api(agent).post("/api/v1/events/", {**event, "project_id": TRAVERSAL, "subject_ids": []}, format="json")
    assert response.status_code == 400 and "project_id" in response.json()["errors"]
    assert not Event.objects.exists()
    summary = {"project_id": "../2", "text": "t", "derived_from": [{"memory_id": "m", "revision": 1}]}
    response = api(agent).post("/api/v1/summaries/", summary, format="json")
    assert response.status_code == 400 and "project_id" in response.json()["errors"]
    policy = {"project_id": None, "predicate": "send/permission"}
    response = api(admin).post("/api/v1/field-policies/", policy, format="json")
    assert response.status_code == 400 and "predicate" in response.json()["errors"]


def test_the_openapi_schema_documents_the_character_set(api, agent):
    schema = api(agent).get("/api/v1/schema/", {"format": "json"}).json()
    fields = schema["components"]["schemas"]["AssertFact"]["properties"]
    for name, max_length in (("project_id", 100), ("subject_id", 200), ("predicate", 200)):
        assert fields[name]["pattern"] == IDENTIFIER_PATTERN
        assert fields[name]["maxLength"] == max_length
        assert "Unicode letters" in fields[name]["description"]


# --- Exports ----------------------------------------------------------------------------------


def _legacy_project(agent, key: str) -> Project:
    """A project stored before identifiers were checked (the API refuses such keys now)."""
    record = assert_fact(agent, deadline("x", "r1", at(10, 20))).record
    Project.objects.filter(pk=record.project_id).update(key=key)
    return Project.objects.get(pk=record.project_id)


@pytest.mark.parametrize("key", [TRAVERSAL, "../2/x"])
def test_an_export_path_comes_from_generated_ids_and_stays_inside_the_root(agent, owner, key):
    project = _legacy_project(agent, key)
    export = export_project(owner, key)
    root = export_root().resolve()
    path = Path(export.path)
    assert path.resolve().is_relative_to(root)
    assert path.parent == root / str(owner.tenant_id) / str(project.pk)
    assert ".." not in path.parts and "x" not in path.parts
    assert export.rows == 1 and path.read_text().count("\n") == 1
    assert not Path("/tmp/x").exists() or not any(Path("/tmp/x").glob("*.jsonl"))


def test_two_exports_of_one_project_never_share_a_file(agent, owner):
    assert_fact(agent, deadline("x", "r1", at(10, 20)))
    first, second = export_project(owner, "project-a"), export_project(owner, "project-a")
    assert first.path != second.path


def test_an_export_row_pointing_outside_the_root_is_not_downloadable(agent, owner, tmp_path):
    assert_fact(agent, deadline("x", "r1", at(10, 20)))
    export = export_project(owner, "project-a")
    outside = tmp_path / "secret.jsonl"
    outside.write_text("{}\n")
    ExportFile.objects.filter(pk=export.pk).update(path=str(outside))
    with pytest.raises(NotFound):
        downloadable(owner, export.pk)
    ExportFile.objects.filter(pk=export.pk).update(path=str(export_root() / ".." / "escape.jsonl"))
    client = Client()
    client.force_login(owner)
    assert client.get(f"/exports/{export.pk}/download/").status_code == 404


def test_the_export_command_writes_inside_the_root(agent, owner):
    _legacy_project(agent, "../2/x")
    out = StringIO()
    call_command("export", "--tenant", "acme", "--project", "../2/x", "--as", owner.name, stdout=out)
    written = Path(out.getvalue().strip().rsplit(" to ", 1)[1])
    assert written.resolve().is_relative_to(export_root().resolve())
    with pytest.raises(CommandError):
        call_command("export", "--tenant", "acme", "--project", "../nope", "--as", owner.name, stdout=StringIO())


def test_the_dashboard_filter_refuses_a_bad_identifier_with_a_message(agent, owner):
    assert_fact(agent, deadline("x", "r1", at(10, 20)))
    client = Client()
    client.force_login(owner)
    page = client.get("/records/", {"project": "../x"})
    assert page.status_code == 200
    assert "Start with a letter, a digit or _" in page.content.decode()


# --- Data stored before the rule stays deletable ------------------------------------------------


def test_a_legacy_subject_outside_the_character_set_can_still_be_deleted(api, agent, compliance):
    record = assert_fact(agent, deadline("x", "r1", at(10, 20))).record
    MemoryRecord.objects.filter(pk=record.pk).update(subject_id="John/Smith")
    payload = {"project_id": "project-a", "scope": {"subject_id": "John/Smith"}, "reason": "erasure", "dry_run": True}
    response = api(compliance).post("/api/v1/deletion-requests/", payload, format="json")
    assert response.status_code == 200
    assert {s["store"]: s["found"] for s in response.json()["stores"]}["records"] == 1
    # A malformed id that names nothing is refused like anywhere else.
    payload["scope"] = {"subject_id": "Jane/Doe"}
    response = api(compliance).post("/api/v1/deletion-requests/", payload, format="json")
    assert response.status_code == 400 and "subject_id" in response.json()["errors"]
    payload.update(project_id="../2", scope={"subject_id": "x"})
    response = api(compliance).post("/api/v1/deletion-requests/", payload, format="json")
    assert response.status_code == 400 and "project_id" in response.json()["errors"]
