"""The read paths as tuned for 10M records (issue 16, part 1): same answers, fewer queries.

- a project is resolved in a subquery (`RecordQuerySet.in_project`), by key within the tenant: an unknown key or
  another tenant's project matches nothing, on the API list and on the dashboard's records page;
- `reads.as_of` is one query, and the record it returns still renders every field of the record format;
- `with_public_relations` reads only the successor's `memory_id`, and renders the same payload as loading it whole.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from memory_admin.accounts.tenancy import tenant_context
from memory_admin.memory import reads
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import MemoryRecord
from memory_admin.memory.shapes import record_payload
from tests.conftest import DEADLINE, at


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
