"""A request body framed by Transfer-Encoding instead of Content-Length is refused with 411 (issue 30, item 8), at
every door, before any view reads it: it used to be read as an empty body. The same check under gunicorn, whose
workers pass chunked bodies on with no length, is in test_deploy_profile."""

from __future__ import annotations

import json

import pytest

from memory_admin.accounts.services import issue_token
from memory_admin.memory.models import MemoryRecord
from tests.support import DEADLINE, at, body, deadline

RECORD = body(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))


@pytest.mark.parametrize("encoding", ["chunked", "gzip, chunked"])
def test_the_api_answers_411_and_writes_nothing(client, agent, encoding):
    response = client.post(
        "/api/v1/records/",
        json.dumps(RECORD),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {issue_token(agent)}",
        HTTP_TRANSFER_ENCODING=encoding,
    )
    assert response.status_code == 411
    answer = response.json()
    assert answer["code"] == "length_required" and "Content-Length" in answer["detail"] and answer["next_step"]
    assert not MemoryRecord.objects.filter(subject_id=DEADLINE["subject_id"]).exists()


def test_mcp_answers_411_in_json(client, agent):
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = client.post(
        "/mcp/",
        json.dumps(call),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {issue_token(agent)}",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert response.status_code == 411 and response.json()["code"] == "length_required"


def test_the_dashboard_answers_a_page(client, owner):
    response = client.post("/login/", {"username": "olivia"}, HTTP_TRANSFER_ENCODING="chunked")
    assert response.status_code == 411
    assert b"Content-Length" in response.content and response["Content-Type"].startswith("text/html")


def test_a_body_with_its_length_is_read_as_before(client, agent):
    """The control: the same request without Transfer-Encoding is written."""
    response = client.post(
        "/api/v1/records/",
        json.dumps(RECORD),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {issue_token(agent)}",
    )
    assert response.status_code == 201, response.content
