"""Identifiers in Japanese through every door (issue 31): `POST /records/`, the batch, `manage.py import`, MCP's tools,
the Python client and the dashboard accept `佐藤 花子`-style ids, normalise them to NFKC as they parse (a fullwidth
`project` is the key `project`), answer with the normalised form unescaped (UTF-8 JSON, plain text in pages),
and refuse the forbidden classes (tests/memory/test_identifier_rule.py) with the field named."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.test import Client as PageClient
from memory_governance import Client
from memory_governance.errors import InvalidInput as ClientInvalidInput
from rest_framework.exceptions import ValidationError

from memory_admin.accounts.services import issue_token
from memory_admin.mcp import tools
from memory_admin.memory.models import MemoryRecord, Project
from tests.support import at

FULLWIDTH = "\uff50\uff52\uff4f\uff4a\uff45\uff43\uff54\uff0d\uff41"  # fullwidth "project-a"; NFKC: project-a
# One of each forbidden class, as a subject id.
REFUSED = {
    "control": "佐藤\x07花子",
    "zero-width": "佐藤\u200b花子",
    "bom": "\ufeff佐藤花子",
    "bidi override": "佐藤\u202e花子",
    "double space": "佐藤  花子",
    "leading space": " 佐藤 花子",
    "trailing space": "佐藤 花子 ",
    "too long": "佐" * 201,
    "mark first": "\u3099佐藤",
}


def fact(
    subject: str = "佐藤 花子", predicate: str = "提出期限", project: str = "案件-A", **extra: Any
) -> dict[str, Any]:
    return {
        "project_id": project,
        "subject_id": subject,
        "predicate": predicate,
        "value": "2026-11-02T17:00+09:00",
        "valid_from": at(10, 22).isoformat(),
        "source": {"canonical_ref": "task-system:案件-017", "revision": "r18"},
        **extra,
    }


def current(api, agent, project: str, subject: str, predicate: str):
    query = {"project_id": project, "subject_id": subject, "predicate": predicate}
    return api(agent).get("/api/v1/facts/current/", query)


# --- POST /records/ and the reads --------------------------------------------------------------------


def test_the_api_stores_japanese_ids_and_answers_them_unescaped(api, agent):
    response = api(agent).post("/api/v1/records/", fact(), format="json")
    assert response.status_code == 201, response.content
    assert "佐藤 花子".encode() in response.content  # UTF-8 JSON, not \\u4f50
    answer = current(api, agent, "案件-A", "佐藤 花子", "提出期限")
    assert answer.status_code == 200
    assert (answer.json()["subject_id"], answer.json()["predicate"]) == ("佐藤 花子", "提出期限")
    assert "提出期限".encode() in answer.content and b"\\u" not in answer.content
    listed = api(agent).get("/api/v1/records/", {"subject_id": "佐藤 花子"}).json()["results"]
    assert [r["predicate"] for r in listed] == ["提出期限"]


def test_the_api_normalises_ids_to_nfkc_so_fullwidth_and_ascii_are_one_key(api, agent):
    first = api(agent).post("/api/v1/records/", fact(project=FULLWIDTH, subject="佐藤\u3000花子"), format="json")
    assert first.status_code == 201, first.content
    assert (first.json()["project_id"], first.json()["subject_id"]) == ("project-a", "佐藤 花子")  # the stored form
    assert list(Project.objects.values_list("key", flat=True)) == ["project-a"]
    # The same fact written again in ASCII is the same key: unchanged, not a second fact.
    again = api(agent).post("/api/v1/records/", fact(project="project-a", subject="佐藤 花子"), format="json")
    assert again.status_code == 200 and again.json()["outcome"] == "unchanged"
    assert current(api, agent, FULLWIDTH, "佐藤 花子", "提出期限").json()["project_id"] == "project-a"


@pytest.mark.parametrize("kind", REFUSED)
def test_the_api_refuses_each_forbidden_class_naming_the_field(api, agent, kind):
    response = api(agent).post("/api/v1/records/", fact(subject=REFUSED[kind]), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid" and "subject_id" in response.json()["errors"]
    assert not MemoryRecord.objects.exists()
    query = current(api, agent, "案件-A", REFUSED[kind], "提出期限")
    assert query.status_code == 400
    # A control character in a query string is refused before any field is read (the request guard).
    assert query.json()["code"] == "invalid_characters" if kind == "control" else "subject_id" in query.json()["errors"]


# --- The batch and manage.py import ----------------------------------------------------------------------


def test_the_batch_takes_japanese_and_fullwidth_ids_and_refuses_forbidden_ones_item_by_item(api, agent):
    items = [fact(), fact(project=FULLWIDTH, subject="株式会社あおば出版", predicate="契約プラン")]
    items += [fact(subject=bad) for bad in REFUSED.values()]
    response = api(agent).post("/api/v1/records/batch/", {"items": items}, format="json")
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["outcome"] for r in results[:2]] == ["created", "created"]
    assert results[1]["record"]["project_id"] == "project-a"
    for result in results[2:]:
        assert result["outcome"] == "invalid" and "subject_id" in result["error"]["errors"], result
    assert set(MemoryRecord.objects.values_list("project__key", "subject_id")) == {
        ("案件-A", "佐藤 花子"),
        ("project-a", "株式会社あおば出版"),
    }


def test_the_import_command_takes_japanese_and_fullwidth_ids_and_reports_forbidden_lines(agent, tmp_path: Path):
    lines = [fact(), fact(project=FULLWIDTH, predicate="契約プラン"), fact(subject=REFUSED["bidi override"])]
    path = tmp_path / "facts.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), "utf-8")
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="1 line"):
        call_command(
            "import", str(path), "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=out, stderr=err
        )
    assert "line 3" in err.getvalue() and "subject_id" in err.getvalue()
    assert "\u202e" not in err.getvalue()  # the reason names the character, never prints it
    assert set(MemoryRecord.objects.values_list("project__key", "subject_id", "predicate")) == {
        ("案件-A", "佐藤 花子", "提出期限"),
        ("project-a", "佐藤 花子", "契約プラン"),
    }


# --- MCP's tools ----------------------------------------------------------------------------------------


def test_mcp_remember_and_recall_take_japanese_ids_normalised_to_nfkc(agent):
    line = {**fact(project=FULLWIDTH), "source": {"canonical_ref": "crm:佐藤", "revision": "1"}}
    remembered = tools.remember(agent, **line)
    assert remembered.payload["project_id"] == "project-a" and remembered.payload["subject_id"] == "佐藤 花子"
    assert "in project-a:" in remembered.summary and FULLWIDTH not in remembered.summary  # the key as stored
    recalled = tools.recall(agent, project_id="project-a", subject_id="佐藤 花子", predicate="提出期限")
    assert recalled.payload["value"] == "2026-11-02T17:00+09:00"
    assert "佐藤 花子" in recalled.summary
    with pytest.raises(ValidationError) as refused:
        tools.recall(agent, project_id="project-a", subject_id=REFUSED["zero-width"], predicate="提出期限")
    assert "subject_id" in refused.value.detail


# --- The Python client ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_client_writes_and_reads_japanese_ids_and_hears_refusals_as_invalid_input(live_server, agent):
    with Client(live_server.url, issue_token(agent)) as client:
        result = client.assert_fact(
            FULLWIDTH, "佐藤 花子", "提出期限", "2026-11-02T17:00+09:00", source_ref="crm:佐藤", source_revision="1"
        )
        assert result["outcome"] == "created" and result["project_id"] == "project-a"
        answer = client.current("project-a", "佐藤 花子", "提出期限")
        assert (answer["subject_id"], answer["predicate"]) == ("佐藤 花子", "提出期限")
        assert answer["memory_id"] is not None
        history = client.history(answer["memory_id"])
        assert history
        with pytest.raises(ClientInvalidInput) as refused:
            client.current("project-a", REFUSED["bidi override"], "提出期限")
        assert "subject_id" in refused.value.errors


# --- The dashboard ----------------------------------------------------------------------------------------


def test_the_dashboard_fact_page_shows_japanese_ids_unchanged_and_finds_them_typed_fullwidth(api, agent, owner):
    assert api(agent).post("/api/v1/records/", fact(project=FULLWIDTH), format="json").status_code == 201
    page = PageClient()
    page.force_login(owner)
    for project in ("project-a", FULLWIDTH):
        query = urlencode({"project": project, "subject": "佐藤 花子", "predicate": "提出期限"})
        response = page.get(f"/facts/?{query}")
        assert response.status_code == 200
        html = response.content.decode()
        assert "佐藤 花子" in html and "提出期限" in html  # as written: no entity, no escape
    listed = page.get("/records/", {"subject": "佐藤\u3000花子"}).content.decode()
    assert "佐藤 花子" in listed and "提出期限" in listed
    refused = page.get("/records/", {"subject": "佐藤\u202e花子"}).content.decode()
    assert "Bidirectional control characters are not allowed" in refused
