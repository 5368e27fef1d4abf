"""The read paths as tuned for 10M records (issue 16, part 1): same answers, fewer queries.

- a project is resolved in a subquery (`RecordQuerySet.in_project`), by key within the tenant: an unknown key or
  another tenant's project matches nothing, on the API list and on the dashboard's records page;
- `reads.as_of` is one query, and the record it returns still renders every field of the record format;
- `with_public_relations` reads only the successor's `memory_id`, and renders the same payload as loading it whole;
- the API list reads the record format's columns in one query (`shapes.payload_columns`): the same payload, no
  second query for the superseded records, and a tombstoned one is not listed among them;
- `reads.as_of` runs SQL compiled once (`lib.prepared.PreparedRead`), answering as the queryset would on every
  instant, and a read that cannot be prepared answers through its queryset.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import Field
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.lib.prepared import PreparedRead
from memory_admin.memory import reads
from memory_admin.memory.actions import Assertion, assert_fact, expire_record
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.shapes import payload_columns, record_payload
from tests.support import DEADLINE, at


@pytest.fixture
def two_projects(agent, moved_deadline):
    """The deadline in project-a (two revisions) and one value of the same field in project-b."""
    assert_fact(
        agent,
        Assertion(
            project_id="project-b",
            subject_id=DEADLINE["subject_id"],
            predicate=DEADLINE["predicate"],
            value="2026-12-01T17:00+09:00",
            valid_from=at(10, 21),
            source_canonical_ref="task-system:project-b/task-proposal-017",
            source_revision="r1",
        ),
        now=at(10, 21, 9, 1),
    )


def ids(response):
    assert response.status_code == 200, response.content
    return [(r["project_id"], r["revision"]) for r in response.json()["results"]]


def test_the_api_list_filters_by_project_key(api, agent, two_projects):
    client = api(agent)
    assert ids(client.get("/api/v1/records/?project_id=project-a")) == [("project-a", 2), ("project-a", 1)]
    assert ids(client.get("/api/v1/records/?project_id=project-b")) == [("project-b", 1)]
    assert ids(
        client.get(f"/api/v1/records/?project_id=project-a&predicate={DEADLINE['predicate']}&status=accepted")
    ) == [("project-a", 2)]


def test_an_unknown_project_lists_nothing(api, agent, two_projects):
    assert ids(api(agent).get("/api/v1/records/?project_id=project-z")) == []


def test_another_tenants_project_key_lists_nothing(api, outsider, two_projects):
    assert ids(api(outsider).get("/api/v1/records/?project_id=project-a")) == []
    with tenant_context(outsider.tenant_id):
        assert reads.as_of(outsider, **DEADLINE) is None


def page_rows(principal, query):
    client = Client()
    client.force_login(principal)
    response = client.get(f"/records/?{query}")
    assert response.status_code == 200
    return response.content.decode().count('<tr id="mem-'), response


def test_the_records_page_filters_by_project_and_predicate(owner, two_projects):
    predicate = DEADLINE["predicate"]
    count, response = page_rows(owner, f"project=project-a&predicate={predicate}")
    assert count == 1  # the accepted value only, by default
    assert "2026-11-02" in response.content.decode()
    count, _ = page_rows(owner, f"project=project-a&predicate={predicate}&status=all")
    assert count == 2
    count, response = page_rows(owner, f"project=project-b&predicate={predicate}")
    assert count == 1
    assert "2026-12-01" in response.content.decode()
    count, _ = page_rows(owner, f"project=project-z&predicate={predicate}")
    assert count == 0


def test_the_records_page_of_another_tenant_shows_none_of_acme(outsider, two_projects):
    count, _ = page_rows(outsider, "project=project-a&status=all")
    assert count == 0


def test_as_of_is_one_query_and_renders_the_record_format(agent, moved_deadline):
    first, _ = moved_deadline
    with CaptureQueriesContext(connection) as queries:
        record = reads.as_of(agent, **DEADLINE, valid_at=at(10, 21, 12), known_at=at(10, 21, 12))
    assert len(queries.captured_queries) == 1
    assert record is not None and record.pk == first.record.pk
    # Supersession links are loaded on access, and the payload is the one the history renders.
    [older, newer] = reads.history(agent, **DEADLINE)
    assert record_payload(record) == record_payload(older)
    assert record_payload(record)["superseded_by"] == newer.memory_id
    current = reads.as_of(agent, **DEADLINE)
    assert current is not None and record_payload(current)["supersedes"] == [older.memory_id]


def test_public_relations_render_the_same_payload_as_whole_rows(agent, moved_deadline):
    chain = list(MemoryRecord.objects.filter(tenant_id=agent.tenant_id).with_public_relations().order_by("id"))
    whole = list(
        MemoryRecord.objects.filter(tenant_id=agent.tenant_id)
        .select_related("project", "issuer", "superseded_by")
        .prefetch_related("supersedes")
        .order_by("id")
    )
    assert [record_payload(r) for r in chain] == [record_payload(r) for r in whole]
    assert chain[0].superseded_by is not None and chain[0].superseded_by.memory_id == chain[1].memory_id


def test_the_api_list_runs_the_same_queries_whatever_the_page_holds(api, agent, two_projects):
    client = api(agent)
    client.get("/api/v1/records/?page_size=1")  # the token's first use writes last_used_at
    with CaptureQueriesContext(connection) as one:
        assert len(ids(client.get("/api/v1/records/?page_size=1&project_id=project-a"))) == 1
    with CaptureQueriesContext(connection) as many:
        assert len(ids(client.get("/api/v1/records/?page_size=50&project_id=project-a"))) == 2
    assert len(one.captured_queries) == len(many.captured_queries)


def _other_task(agent, number: str, value: str, now):
    """The current record of another task's deadline, asserted at `now`."""
    return assert_fact(
        agent,
        Assertion(
            project_id="project-a",
            subject_id=f"task-proposal-{number}",
            predicate=DEADLINE["predicate"],
            value=value,
            valid_from=at(10, 20),
            source_canonical_ref=f"task-system:project-a/task-proposal-{number}",
            source_revision="r1",
        ),
        now=now,
    ).record


@pytest.fixture
def three_revisions(agent, moved_deadline):
    """The deadline at revision 3, its revision 2 also marked as superseding a tombstoned record and an extra
    live one (what a resolved dispute leaves), to check every supersession link the list renders."""
    from tests.support import deadline

    third = assert_fact(
        agent, deadline("2026-11-09T17:00+09:00", "r19", at(10, 24), expected_revision=2), now=at(10, 24, 9, 1)
    )
    middle = moved_deadline[1].record
    extra = _other_task(agent, "099", "x", at(10, 20, 10))
    gone = _other_task(agent, "098", "y", at(10, 20, 11))
    MemoryRecord.all_objects.filter(pk__in=[extra.pk, gone.pk]).update(superseded_by=middle)
    MemoryRecord.all_objects.filter(pk=gone.pk).update(tombstoned_at=at(10, 25))
    return third, middle, extra


def test_the_list_columns_render_the_same_payload_as_the_relations(agent, three_revisions):
    _, middle, extra = three_revisions
    records = MemoryRecord.objects.filter(tenant_id=agent.tenant_id).order_by("-id")
    with CaptureQueriesContext(connection) as queries:
        listed = [record_payload(r) for r in payload_columns(records)]
    assert len(queries.captured_queries) == 1

    def unordered(payload):  # the relations' prefetch reads the superseded records in no set order
        return {**payload, "supersedes": sorted(payload["supersedes"])}

    assert [unordered(p) for p in listed] == [unordered(record_payload(r)) for r in records.with_public_relations()]
    by_id = {p["memory_id"]: p for p in listed}
    first = by_id[middle.memory_id]["supersedes"][0]
    assert by_id[first]["revision"] == 1
    assert by_id[middle.memory_id]["supersedes"] == [
        first,
        extra.memory_id,
    ]  # oldest first, the tombstoned one left out
    assert by_id[first]["superseded_by"] == middle.memory_id
    assert all(
        p["supersedes"] == [] for p in listed if p["memory_id"] not in (middle.memory_id,) and p["revision"] == 1
    )


def test_the_api_list_is_one_records_query_and_renders_every_link(api, agent, three_revisions):
    third, middle, extra = three_revisions
    client = api(agent)
    client.get("/api/v1/records/?page_size=1")  # the token's first use writes last_used_at
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/api/v1/records/?project_id=project-a&subject_id={DEADLINE['subject_id']}")
    assert response.status_code == 200
    assert sum("memory_memoryrecord" in q["sql"] for q in queries.captured_queries) == 1
    results = response.json()["results"]
    assert [r["revision"] for r in results] == [3, 2, 1]
    assert results[0]["supersedes"] == [middle.memory_id] and results[0]["superseded_by"] is None
    assert results[1]["supersedes"] == [results[2]["memory_id"], extra.memory_id]
    assert results[1]["superseded_by"] == third.record.memory_id
    assert results[0]["project_id"] == "project-a"
    assert results[0]["source"]["issuer_principal_id"] == (agent.name or agent.username)
    single = client.get(f"/api/v1/records/{middle.memory_id}/").json()
    assert single == results[1]  # the retrieve (relations loaded) renders the same


def test_as_of_is_compiled_once_and_runs_the_same_sql(agent, moved_deadline):
    reads._AS_OF.template(connection.alias)  # raises if this backend's SQL cannot be prepared
    sent = []

    def record(execute, sql, params, many, context):
        sent.append((sql, list(params)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        older = reads.as_of(agent, **DEADLINE, valid_at=at(10, 21), known_at=at(10, 21))
        newer = reads.as_of(agent, **DEADLINE)
    assert older is not None and newer is not None and (older.revision, newer.revision) == (1, 2)
    [(one, one_params), (two, two_params)] = sent
    assert one == two and one_params != two_params  # one statement text, the values apart


@pytest.mark.parametrize("expired", [False, True])
def test_prepared_as_of_answers_as_the_queryset_on_every_instant(agent, owner, moved_deadline, expired):
    if expired:
        expire_record(owner, moved_deadline[1].record.memory_id, "Task cancelled", now=at(10, 28))
    instants = [at(10, 19), at(10, 20), at(10, 20, 9, 1), at(10, 21, 12), at(10, 22), at(10, 22, 9, 1)]
    instants += [at(10, 23), at(10, 27), at(10, 28), at(10, 28) + timedelta(microseconds=1), at(10, 29), timezone.now()]
    answers = set()
    for valid_at in instants:
        for known_at in instants:
            prepared = reads.as_of(agent, **DEADLINE, valid_at=valid_at, known_at=known_at)
            expected = reads._answering(
                agent.tenant_pk,
                DEADLINE["project_id"],
                DEADLINE["subject_id"],
                DEADLINE["predicate"],
                valid_at,
                known_at,
            ).first()
            assert (prepared and prepared.pk) == (expected and expected.pk), (valid_at, known_at)
            if prepared is not None:
                assert prepared.project.key == "project-a" and prepared.issuer == agent
                assert {f.attname: getattr(prepared, f.attname) for f in MemoryRecord._meta.concrete_fields} == {
                    f.attname: getattr(expected, f.attname) for f in MemoryRecord._meta.concrete_fields
                }
            answers.add(prepared and prepared.revision)
    assert answers == {None, 1, 2}  # every kind of answer was compared
    assert reads.as_of(agent, "project-z", DEADLINE["subject_id"], DEADLINE["predicate"]) is None
    assert reads.as_of(agent, DEADLINE["project_id"], "nobody", DEADLINE["predicate"]) is None


def test_a_read_that_cannot_be_prepared_answers_through_its_queryset(agent, moved_deadline):
    def build(tenant, subject):
        return MemoryRecord.objects.filter(tenant_id=tenant, subject_id=DEADLINE["subject_id"]).order_by("-revision")

    fields: dict[str, Field[Any, Any]] = {"tenant": MemoryRecord.tenant.field, "subject": MemoryRecord.subject_id.field}
    unprepared = PreparedRead(MemoryRecord, build, {"tenant": -5, "subject": "<unused>"}, fields)
    with pytest.raises(ValueError, match="subject"):
        unprepared.template(connection.alias)
    record = unprepared.get(tenant=agent.tenant_pk, subject="ignored")
    assert record is not None and record.pk == moved_deadline[1].record.pk


def _settings_with(**env: str) -> subprocess.CompletedProcess[str]:
    code = "import django; django.setup(); from django.conf import settings; print(settings.DATABASES['default']['OPTIONS'])"
    # Only what the test names: not the options of the run it is part of (`make test-prepared` sets both).
    inherited = {k: v for k, v in os.environ.items() if k not in ("DB_SERVER_SIDE_BINDING", "DB_PREPARE_THRESHOLD")}
    environ = {**inherited, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", **env}
    environ["DJANGO_SETTINGS_MODULE"] = "memory_admin.settings"
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "env",
    [{"DB_PREPARE_THRESHOLD": "5"}, {"DB_SERVER_SIDE_BINDING": "1", "DB_PREPARE_THRESHOLD": "0"}],
)
def test_a_prepare_threshold_without_binding_or_below_one_stops_the_settings(env):
    done = _settings_with(**{"DB_SERVER_SIDE_BINDING": "0", **env})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "DB_PREPARE_THRESHOLD" in done.stderr


def test_prepared_statements_are_off_unless_asked():
    assert _settings_with().stdout.strip() == "{'server_side_binding': False}"
    assert _settings_with(DB_SERVER_SIDE_BINDING="0").stdout.strip() == "{'server_side_binding': False}"
    asked = _settings_with(DB_SERVER_SIDE_BINDING="1", DB_PREPARE_THRESHOLD="5")
    assert asked.stdout.strip() == "{'server_side_binding': True, 'prepare_threshold': 5}", asked.stderr


def test_constants_written_into_the_prepared_sql_keep_their_meaning(agent, moved_deadline):
    """On PostgreSQL the constants of a prepared read are written into its SQL once (lib.prepared `_inlined`): a
    constant holding a quote and a percent sign still means itself, and the values that change stay parameters."""

    def build(tenant, subject, ref):
        return (
            MemoryRecord.objects.filter(tenant_id=tenant, subject_id=subject)
            .exclude(source_revision__startswith="50% 'off' %s")
            .filter(source_revision=ref)
            .order_by("-revision")
        )

    fields: dict[str, Field[Any, Any]] = {
        "tenant": MemoryRecord.tenant.field,
        "subject": MemoryRecord.subject_id.field,
        "ref": MemoryRecord.source_revision.field,
    }
    read = PreparedRead(MemoryRecord, build, {"tenant": -5, "subject": "<subject>", "ref": "<ref>"}, fields)
    template = read.template(connection.alias)
    assert len(template.slots) == 3
    if connection.vendor == "postgresql":
        assert "''off''" in template.sql and len(template.params) == 3
    for subject, ref in [(DEADLINE["subject_id"], "r18"), (DEADLINE["subject_id"], "50%"), ("nobody", "r18")]:
        found = read.get(tenant=agent.tenant_pk, subject=subject, ref=ref)
        expected = build(agent.tenant_pk, subject, ref).first()
        assert (found and found.pk) == (expected and expected.pk)
    assert read.get(tenant=agent.tenant_pk, subject=DEADLINE["subject_id"], ref="r18") is not None
