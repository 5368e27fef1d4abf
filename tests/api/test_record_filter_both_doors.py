"""One record filter for the API's record list and the dashboard's records page (issue 33, item 3): the
same parameters find the same records through both doors, the page also takes the API's names, and a bad
value is a 400 with its reason in the API (the messages the API always gave) and a message on the page."""

from __future__ import annotations

import html

import pytest
from django.http import QueryDict
from django.test import Client
from django.utils.http import urlencode

from memory_admin.api.serializers import RecordListQuerySerializer
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.filters import API_PARAMETERS, Door, RecordFilter
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.validation import identifier_charset_problems
from tests.support import DEADLINE, at

SAME = [
    {"project_id": "project-a", "status": "accepted"},
    {"project_id": "project-a", "status": "superseded"},
    {"project_id": "project-b", "status": "accepted"},
    {"predicate": "submission_deadline", "status": "accepted"},
    {"subject_id": DEADLINE["subject_id"], "predicate": DEADLINE["predicate"], "status": "superseded"},
    {"project_id": "project-a", "subject_id": "nobody", "status": "accepted"},
    # As of a time: what answered then (the page shows every status for an as-of question, as the API does).
    {"project_id": "project-a", "valid_at": "2026-10-21T12:00:00+09:00"},
    {"project_id": "project-a", "valid_at": "2026-10-25T12:00:00+09:00", "known_at": "2026-10-21T12:00:00+09:00"},
    {"project_id": "project-a", "known_at": "2026-10-23T00:00:00Z"},
]


@pytest.fixture
def records(agent, moved_deadline) -> None:
    for i in range(3):
        assert_fact(
            agent,
            Assertion(
                project_id="project-b",
                subject_id=f"item-{i}",
                predicate="status",
                value=f"open {i}",
                valid_from=at(10, 20),
                source_canonical_ref=f"tracker://item-{i}",
                source_revision="1",
            ),
            now=at(10, 20, 10),
        )


def _api_ids(client, params: dict[str, str]) -> list[str]:
    response = client.get("/api/v1/records/?" + urlencode(params))
    assert response.status_code == 200, response.json()
    return sorted(r["memory_id"] for r in response.json()["results"])


def _page_ids(client: Client, params: dict[str, str]) -> list[str]:
    response = client.get("/records/?" + urlencode({**params, "size": "200"}))
    assert response.status_code == 200
    assert not response.context["form"].errors
    return sorted(r.memory_id for r in response.context["rows"])


@pytest.mark.parametrize("params", SAME, ids=[urlencode(p) for p in SAME])
def test_the_same_parameters_find_the_same_records_through_both_doors(params, api, agent, owner, records):
    page = Client()
    page.force_login(owner)
    through_api = _api_ids(api(agent), params)
    assert through_api == _page_ids(page, params)
    # The page's own short names mean the same.
    short = {{"project_id": "project", "subject_id": "subject"}.get(k, k): v for k, v in params.items()}
    assert _page_ids(page, short) == through_api
    # And the filter object alone, applied as each door does, to the tenant's records.
    wanted = RecordFilter.from_params(params, Door.API)
    mine = wanted.apply(MemoryRecord.objects.for_tenant(agent.tenant_pk), agent.tenant_pk)
    assert sorted(mine.values_list("memory_id", flat=True)) == through_api


def test_the_filter_finds_something_in_most_cases(api, agent, records):
    """The comparison above is not between two empty lists."""
    client = api(agent)
    assert sum(1 for params in SAME if _api_ids(client, params)) >= 7


BAD = [
    {"status": "bogus"},
    {"status": " accepted"},
    {"project_id": "has space at end "},
    {"subject_id": "x" * 201},
    {"predicate": "bad\u200bzero-width"},
    {"valid_at": "the-day-after-tomorrow"},
    {"valid_at": "2026-10-21T12:00"},  # no offset: the API refuses it (the page reads it as a local time)
    {"known_at": "0999-12-31T00:00:00Z"},
    {"project_id": "ok", "status": "nope", "known_at": "soon"},
]


@pytest.mark.parametrize("params", BAD, ids=[urlencode(p)[:40] for p in BAD])
def test_a_bad_parameter_is_a_400_with_the_reason_the_api_always_gave(params, api, agent):
    response = api(agent).get("/api/v1/records/?" + urlencode(params))
    assert response.status_code == 400
    body = response.json()
    # The same shape, fields and messages as the API's declared parameters (its serializer) produce.
    declared = RecordListQuerySerializer(data=QueryDict(urlencode(params)))
    assert not declared.is_valid()
    assert body["code"] == "invalid"
    assert body["errors"] == {name: [str(m) for m in problems] for name, problems in declared.errors.items()}
    assert body["detail"] == f"Invalid input: {', '.join(sorted(declared.errors))}."


def test_the_api_ignores_blank_and_unknown_parameters_as_before(api, agent, records):
    client = api(agent)
    everything = _api_ids(client, {})
    assert _api_ids(client, {"project_id": "", "status": "", "q": "open", "freshness": "bogus"}) == everything


def test_the_api_parameters_are_the_ones_its_schema_declares():
    assert set(RecordListQuerySerializer().fields) == set(API_PARAMETERS)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=bogus", '"bogus" is not a valid choice.'),
        ("status=deleted", '"deleted" is not a valid choice.'),  # the page never lists deleted records
        ("project_id=bad!id", "project: " + identifier_charset_problems("bad!id")[0]),
        ("valid_at=the-day-after-tomorrow", "Enter a date and time such as 2026-10-21 12:00"),
        ("known_at=0999-12-31T00:00:00Z", "Give a datetime from 1000-01-01T00:00:00Z"),
        ("freshness=stale", '"stale" is not a valid choice.'),
        ("q=" + "x" * 201, "Ensure this field has no more than 200 characters."),
        ("project=project-a&project_id=project-b", "Give project or project_id, not both with different values."),
    ],
)
def test_a_bad_parameter_on_the_page_is_a_message_not_a_500(query, message, owner, records):
    client = Client()
    client.force_login(owner)
    response = client.get(f"/records/?{query}")
    assert response.status_code == 200
    assert html.escape(message) in response.content.decode()
    assert response.context["rows"] == []


def test_the_page_reads_a_time_without_offset_in_the_tenant_zone(api, agent, owner, records):
    owner.tenant.time_zone = "Asia/Tokyo"
    owner.tenant.save()
    client = Client()
    client.force_login(owner)
    # 08:59 Tokyo on Oct 22 is before the new deadline became valid (09:00 +09:00).
    before = client.get("/records/?project_id=project-a&valid_at=2026-10-22T08:59").context["rows"]
    after = client.get("/records/?project_id=project-a&valid_at=2026-10-22T09:01").context["rows"]
    assert [r.value for r in before] == ["2026-10-30T17:00+09:00"]
    assert [r.value for r in after] == ["2026-11-02T17:00+09:00"]
    # The API, asked the same with the offset, answers the same.
    for moment, rows in (("2026-10-22T08:59:00+09:00", before), ("2026-10-22T09:01:00+09:00", after)):
        answer = api(agent).get("/api/v1/records/?" + urlencode({"project_id": "project-a", "valid_at": moment}))
        assert [r["memory_id"] for r in answer.json()["results"]] == [r.memory_id for r in rows]
