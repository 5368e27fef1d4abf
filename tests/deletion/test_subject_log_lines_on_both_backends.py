"""Issue 9: a subject deletion was a 500 on the embedded default (SQLite has no JSON `contains` lookup).

These run on both backends; under `make test-sqlite` they reproduce the original bug. A subject's log lines
are found through EventSubject rows (an index on both backends), which follow `subject_ids` wherever events
are written, are filled for existing events by a data migration, and go with the text when a line is redacted.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from deletion.models import DeletionRequest, StoreProgress
from deletion.tasks import purge_store
from memory_admin.accounts.services import ensure_principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.derived import lineage
from memory_admin.derived.models import Event, EventHide, EventSubject
from memory_admin.memory.actions import assert_fact, project_for
from tests.support import DEADLINE, at, deadline

SUBJECT = DEADLINE["subject_id"]
URL = "/api/v1/deletion-requests/"


def log(principal, text: str, subject_ids: list[str], session: str = "s-1", project: str = "project-a") -> Event:
    return lineage.log_event(
        principal,
        project_id=project,
        session_id=session,
        actor="owner",
        text=text,
        occurred_at=at(10, 20),
        subject_ids=subject_ids,
    )


@pytest.fixture
def subject_logs(agent):
    """The subject in three log lines: tagged only, named in the text only, and both; plus two other lines."""
    tagged = log(agent, "she asked to move it", [SUBJECT, "task-other"])
    named = log(agent, f"about {SUBJECT}: due Oct 30", [])
    both = log(agent, f"{SUBJECT} moved to Nov 2", [SUBJECT, SUBJECT])  # a repeated tag is one tag
    others = [log(agent, "lunch at noon", ["task-other"]), log(agent, "nothing to see", [])]
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), event_ids=[both.public_id]))
    return {"subject": [tagged, named, both], "others": others}


def file(api, compliance, **extra):
    payload = {"project_id": "project-a", "scope": {"subject_id": SUBJECT}, "reason": "Data subject request", **extra}
    return api(compliance).post(URL, payload, format="json")


def test_a_subject_deletion_dry_run_through_the_api_lists_the_subjects_log_lines(api, compliance, subject_logs):
    response = file(api, compliance, dry_run=True)
    assert response.status_code == 200, response.content
    stores = {s["store"]: s for s in response.json()["stores"]}
    assert stores["logs"]["found"] == 3 and stores["records"]["found"] == 1
    assert DeletionRequest.objects.count() == 0
    assert Event.objects.filter(hidden_at__isnull=False).count() == 0


def test_a_subject_deletion_through_the_api_redacts_its_lines_and_their_subject_tags(api, compliance, subject_logs):
    response = file(api, compliance)
    assert response.status_code == 202, response.content
    request_id = response.json()["id"]
    subject_ids = {e.pk for e in subject_logs["subject"]}
    # Hidden from reads at acceptance (the subject's lines by one rule, the source line row by row too).
    assert set(Event.objects.removed().values_list("pk", flat=True)) == subject_ids
    assert not Event.objects.visible().filter(pk__in=subject_ids).exists()
    for progress in StoreProgress.objects.filter(request__public_id=request_id):
        purge_store.apply(args=[progress.pk])
    logs = StoreProgress.objects.get(request__public_id=request_id, store="logs")
    assert logs.state == "verified" and logs.evidence["target_subject_tags"] == 0
    for event in Event.objects.filter(pk__in=subject_ids):
        assert event.redacted_at is not None and SUBJECT not in event.text and event.subject_ids == []
        assert event.hidden_at is not None  # row by row now: the rule went with the subject id
    assert not EventHide.objects.exists() and logs.evidence["hiding_rules_left"] == 0
    # The tags went with the text (the other subject's tag on the tagged line too: the whole line is redacted).
    assert not EventSubject.objects.filter(event_id__in=subject_ids).exists()
    assert not EventSubject.objects.filter(subject_id=SUBJECT).exists()
    # Lines about someone else keep their text and tags.
    kept = subject_logs["others"][0]
    assert Event.objects.get(pk=kept.pk).redacted_at is None
    assert list(EventSubject.objects.filter(event=kept).values_list("subject_id", flat=True)) == ["task-other"]
    assert DeletionRequest.objects.get(public_id=request_id).purge_confirmed_at is not None


def test_the_deletion_page_previews_a_subject_deletion(compliance, subject_logs):
    client = Client()
    client.force_login(compliance)
    form = {"project_id": "project-a", "scope_kind": "subject_id", "scope_value": SUBJECT, "reason": "Request"}
    preview = client.post("/deletions/new/", form)
    assert preview.status_code == 200
    assert preview.context["preview"]["logs"]["found"] == 3


def test_the_events_list_filters_by_subject_id(api, agent, outsider, subject_logs):
    with tenant_context(outsider.tenant_id):  # another tenant's line about the same subject id
        log(outsider, f"{SUBJECT} elsewhere", [SUBJECT])
    client = api(agent)
    listed = client.get("/api/v1/events/", {"subject_id": SUBJECT})
    assert listed.status_code == 200
    tagged = [e for e in subject_logs["subject"] if e.subject_ids]
    assert [e["id"] for e in listed.json()["results"]] == [e.public_id for e in reversed(tagged)]  # newest first
    assert listed.json()["results"][0]["subject_ids"] == [SUBJECT, SUBJECT]  # the API shape is unchanged
    other = client.get("/api/v1/events/", {"subject_id": "task-other", "project_id": "project-a"}).json()["results"]
    assert {e["id"] for e in other} == {subject_logs["subject"][0].public_id, subject_logs["others"][0].public_id}
    assert client.get("/api/v1/events/", {"subject_id": "nobody"}).json()["results"] == []
    assert len(api(outsider).get("/api/v1/events/", {"subject_id": SUBJECT}).json()["results"]) == 1


def test_subject_rows_follow_subject_ids_on_create_save_and_bulk_create(agent):
    project = project_for(agent.tenant, "project-a")
    now = timezone.now()
    event = Event.objects.create(
        tenant_id=agent.tenant_id,
        project=project,
        session_id="s",
        actor="a",
        text="x",
        occurred_at=now,
        subject_ids=["a", "b", "a", "", 7, "z" * 201],
    )
    assert sorted(event.subjects.values_list("subject_id", flat=True)) == ["a", "b"]  # distinct strings that fit
    event.subject_ids = ["b", "c"]
    event.save()
    assert sorted(event.subjects.values_list("subject_id", flat=True)) == ["b", "c"]
    event.text = "y"
    event.save(update_fields=["text"])  # subject_ids untouched: rows untouched
    assert sorted(event.subjects.values_list("subject_id", flat=True)) == ["b", "c"]
    made = Event.objects.bulk_create(
        [
            Event(
                public_id=f"evt-bulk-{i}",
                tenant_id=agent.tenant_id,
                project=project,
                session_id="s",
                actor="a",
                text="t",
                occurred_at=now - timedelta(minutes=i),
                subject_ids=[f"bulk-{i}"],
            )
            for i in range(3)
        ]
    )
    rows = EventSubject.objects.filter(event__in=made).values_list("subject_id", "tenant_id", "project_id")
    assert sorted(rows) == [(f"bulk-{i}", agent.tenant_id, project.pk) for i in range(3)]


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_subject_rows_for_existing_events(as_db_owner):
    """Events written before EventSubject existed get one row per distinct tag when it is created."""
    executor = MigrationExecutor(connection)
    before = [("derived", "0003_deletion_support")]
    after = [("derived", "0004_event_subjects")]
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        tenant = old.get_model("accounts", "Tenant").objects.create(slug="legacy", name="Legacy")
        project = old.get_model("memory", "Project").objects.create(tenant=tenant, key="project-a")
        OldEvent = old.get_model("derived", "Event")
        common = {"tenant": tenant, "project": project, "session_id": "s", "actor": "a", "occurred_at": timezone.now()}
        tagged = OldEvent.objects.create(public_id="evt-old-1", text="t", subject_ids=["p-1", "p-2", "p-1"], **common)
        OldEvent.objects.create(public_id="evt-old-2", text="t", subject_ids=[], **common)
        odd = OldEvent.objects.create(public_id="evt-old-3", text="t", subject_ids={"not": "a list"}, **common)
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        rows = new.get_model("derived", "EventSubject").objects.values_list("event_id", "subject_id", "project_id")
        assert sorted(rows) == [(tagged.pk, "p-1", project.pk), (tagged.pk, "p-2", project.pk)]
        assert odd.pk not in {r[0] for r in rows}
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_a_tenant_is_never_confused_with_another_through_its_subject_rows(api, agent, compliance):
    """Subject ids repeat across tenants; a deletion in one tenant finds and redacts only its own lines."""
    other_tenant = ensure_principal("globex", "writer", ["agent"])
    mine = log(agent, "tagged only", [SUBJECT])
    with tenant_context(other_tenant.tenant_id):
        theirs = log(other_tenant, "tagged only", [SUBJECT])
    response = file(api, compliance, dry_run=True)
    assert {s["store"]: s for s in response.json()["stores"]}["logs"]["found"] == 1
    response = file(api, compliance)
    assert response.status_code == 202
    for progress in StoreProgress.objects.filter(request__public_id=response.json()["id"], store="logs"):
        purge_store.apply(args=[progress.pk])
    assert Event.objects.get(pk=mine.pk).redacted_at is not None
    with tenant_context(other_tenant.tenant_id):
        assert Event.objects.get(pk=theirs.pk).redacted_at is None
        assert EventSubject.objects.filter(event=theirs, subject_id=SUBJECT).exists()
