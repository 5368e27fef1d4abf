"""The record list written from rows (memory.record_rows, shapes.row_json; issue 36, item 1) answers byte for byte
what the record format renders through DRF for the same records: every page of `GET /api/v1/records/`, forwards
and back, under each filter, equals DRF's JSONRenderer writing `record_payload` of those records (model instances
with their relations), with the links the answer carries. Values sealed and in clear, values the database prints
otherwise than Python (spaces, numbers such as 1.10, escapes, U+2028), supersession links, an excluded record's
reason, on both backends."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import override_settings
from rest_framework.renderers import JSONRenderer

from memory_admin.memory.actions import Assertion, assert_fact, exclude_record
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.shapes import RECORD_KEYS, json_text, record_payload
from tests.support import DEADLINE, at

pytestmark = pytest.mark.django_db

# Values whose stored text (jsonb's output, or Django's json.dumps on SQLite) is not what the API prints.
VALUES: list[Any] = [
    "2026-11-02T17:00+09:00",
    {"plan": "スタンダード", "seats": 12, "nested": {"a": [1, 2.5, None]}},
    1.10,
    12,
    -3,
    0,
    True,
    ["a", "b"],
    [],
    {},
    'quote " and back\\slash, tab\t, line\u2028sep',
    "café ✓",
    1e20,
    2**60,
]


def _fact(value: Any, revision: str, day: int, **names: Any) -> Assertion:
    return Assertion(
        **{**DEADLINE, **names},
        value=value,
        valid_from=at(10, day),
        source_canonical_ref="task-system:project-a/t",
        source_revision=revision,
    )


def _write(agent: Any, owner: Any) -> None:
    """Facts in two projects: the values above, a fact superseded twice, an excluded record."""
    for i, value in enumerate(VALUES):
        assert_fact(agent, _fact(value, f"r{i}", 1 + i, predicate=f"p{i}", subject_id=f"s{i % 3}"))
    for revision in range(3):
        assert_fact(
            agent,
            _fact(
                f"v{revision}",
                f"m{revision}",
                20 + revision,
                project_id="project-b",
                expected_revision=revision or None,
            ),
        )
    excluded = MemoryRecord.objects.filter(predicate="p3").get()
    exclude_record(owner, excluded.memory_id, "copied from the wrong ticket, “quoted”")


def _expected(response: Any) -> bytes:
    """What DRF writes for this page: the record format of each listed record, read as model instances."""
    answer = response.json()
    ids = [row["memory_id"] for row in answer["results"]]
    records = {r.memory_id: r for r in MemoryRecord.objects.filter(memory_id__in=ids)}
    data = {
        "next": answer["next"],
        "previous": answer["previous"],
        "results": [record_payload(records[memory_id]) for memory_id in ids],
    }
    return JSONRenderer().render(data, "application/json")


def _path(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def _walk(client: Any, url: str) -> list[str]:
    """Every page from `url` following `next`, then back following `previous`; each compared byte for byte."""
    seen: list[str] = []
    link: str | None = url
    last = url
    while link:
        response = client.get(link)
        assert response.status_code == 200, response.content
        assert response["Content-Type"] == "application/json"
        assert response.content == _expected(response)
        answer = response.json()
        seen += [row["memory_id"] for row in answer["results"]]
        last, link = link, answer["next"] and _path(answer["next"])
    link = client.get(last).json()["previous"]
    while link:
        response = client.get(_path(link))
        assert response.status_code == 200, response.content
        assert response.content == _expected(response)
        link = response.json()["previous"]
    return seen


@pytest.mark.parametrize(
    ("sealing", "prepared"),
    [(True, False), (False, False), (True, True)],
    ids=["sealed", "in-clear", "sealed-prepared-on-the-server"],
)
def test_every_page_is_what_drf_renders_for_the_same_records(api, agent, owner, settings, sealing, prepared):
    with override_settings(SEALING_ENABLED=sealing):
        _write(agent, owner)
    client = api(agent)
    settings.PREPARED_READS = prepared  # lib.prepared `run` prepares on the server; SQLite ignores it
    everything = list(MemoryRecord.objects.order_by("-id").values_list("memory_id", flat=True))
    assert _walk(client, "/api/v1/records/?page_size=4") == everything
    assert _walk(client, "/api/v1/records/") == everything
    # Each filter the API takes, alone and together (each is its own compiled statement).
    for query in [
        "project_id=project-b",
        "project_id=project-a&subject_id=s1",
        "predicate=p2",
        "status=excluded",
        "status=superseded&project_id=project-b",
        f"valid_at={at(10, 21).isoformat()}".replace("+", "%2B"),
        f"known_at={at(10, 21, 9, 30).isoformat()}&project_id=project-b".replace("+", "%2B"),
        "project_id=nowhere",
    ]:
        seen = _walk(client, f"/api/v1/records/?page_size=2&{query}")
        assert len(seen) == len(set(seen))
    assert _walk(client, "/api/v1/records/?page_size=2&status=excluded") == [
        MemoryRecord.objects.get(predicate="p3").memory_id
    ]
    superseded = _walk(client, "/api/v1/records/?project_id=project-b")
    assert len(superseded) == 3  # the links rendered on both sides (not empty lists)
    payloads = client.get("/api/v1/records/?project_id=project-b").json()["results"]
    assert payloads[0]["supersedes"] == [superseded[1]] and payloads[1]["superseded_by"] == superseded[0]


def test_the_keys_are_the_record_format_in_order(api, agent, owner):
    _write(agent, owner)
    row = api(agent).get("/api/v1/records/?page_size=1").json()["results"][0]
    assert tuple(row) == RECORD_KEYS
    assert tuple(record_payload(MemoryRecord.objects.get(memory_id=row["memory_id"]))) == RECORD_KEYS


def test_an_indented_or_browsable_answer_is_drf_s_own(api, agent, owner):
    _write(agent, owner)
    client = api(agent)
    plain = client.get("/api/v1/records/?page_size=3")
    indented = client.get("/api/v1/records/?page_size=3", HTTP_ACCEPT="application/json; indent=2")
    assert indented.status_code == 200
    assert indented.content == JSONRenderer().render(json.loads(plain.content), "application/json; indent=2")
    page = client.get("/api/v1/records/?page_size=3", HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    assert plain.json()["results"][0]["memory_id"] in page.content.decode()


def test_bad_parameters_and_forged_cursors_answer_as_before(api, agent, owner):
    _write(agent, owner)
    client = api(agent)
    assert client.get("/api/v1/records/?valid_at=yesterday").status_code == 400
    assert client.get("/api/v1/records/?cursor=cD1hYmM%3D").status_code == 404  # p=abc
    assert client.get("/api/v1/records/?cursor=not-base64!").status_code == 404


@pytest.mark.parametrize(
    "stored",
    ['"plain"', '"a\\"b"', '"\u2028"', "1.10", "1e2", "-0", "12", "-3", "0", "true", "null", "[]", "{}",
     '["a", "b"]', '["a","b"]', '["a", 1]', '{"a": 1}', '"café"', '"\\u00e9"', '[1.0]', "2e4"],
)  # fmt: skip
def test_stored_json_text_prints_as_the_api_prints_its_value(stored):
    value = json.loads(stored)
    assert json_text(stored) == json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
