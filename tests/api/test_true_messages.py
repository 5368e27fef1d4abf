"""Messages true to their case (issue 31): a fact whose only record takes effect later answers 404 saying it is
not in effect until its `valid_from`, with that record as data; an ended one says when it ended; an excluded one
says so and does not hand the excluded value out in the answer."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from memory_admin.memory.actions import Assertion, assert_fact, exclude_record

URL = "/api/v1/facts/current/"
KEY: dict[str, Any] = {"project_id": "project-a", "subject_id": "acct-1", "predicate": "plan"}


def fact(value: str, valid_from, valid_to=None) -> Assertion:
    return Assertion(
        **KEY,
        value=value,
        valid_from=valid_from,
        valid_to=valid_to,
        source_canonical_ref="crm:acct-1",
        source_revision="1",
    )


def test_a_fact_not_yet_in_effect_says_until_when_with_its_record(api, agent):
    starts = timezone.now() + timedelta(days=2)
    written = assert_fact(agent, fact("Enterprise", starts)).record
    response = api(agent).get(URL, KEY)
    assert response.status_code == 404
    answer = response.json()
    assert answer["code"] == "not_found"
    assert "not in effect until" in answer["detail"] and starts.isoformat() in answer["detail"]
    assert "accepted" not in answer["detail"]
    assert answer["not_in_effect_until"] == starts.isoformat()
    assert answer["record"]["memory_id"] == written.memory_id and answer["record"]["value"] == "Enterprise"


def test_a_fact_whose_validity_ended_says_when(api, agent):
    ended = timezone.now() - timedelta(hours=1)
    assert_fact(agent, fact("Basic", ended - timedelta(days=3), valid_to=ended))
    answer = api(agent).get(URL, KEY).json()
    assert "ended at" in answer["detail"] and answer["ended_at"] == ended.isoformat()


def test_an_excluded_fact_says_so_without_its_value(api, agent, owner):
    record = assert_fact(agent, fact("Secret plan", timezone.now() - timedelta(days=1))).record
    exclude_record(owner, record.memory_id, "wrong customer")
    response = api(agent).get(URL, KEY)
    assert response.status_code == 404
    assert "excluded" in response.json()["detail"]
    assert "Secret plan" not in response.content.decode() and "record" not in response.json()
