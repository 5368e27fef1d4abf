"""Deletion requests: four stages, every store, no resurrection, roles."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from deletion.backups import take_backup
from deletion.models import DeletionRequest, RefusedWrite, StoreProgress, Tombstone
from deletion.service import lift_tombstone
from deletion.tasks import purge_store
from memory_admin.derived import lineage
from memory_admin.derived.caches import fact_key
from memory_admin.derived.exports import export_project
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import Event, ExportFile, Summary
from memory_admin.derived.tasks import refresh_record_vectors
from memory_admin.derived.vectors import get_index, where_objects
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import AuditEvent, MemoryRecord
from tests.support import DEADLINE, at, body, deadline

SUBJECT = DEADLINE["subject_id"]
URL = "/api/v1/deletion-requests/"


@pytest.fixture
def subject_everywhere(agent, other_agent, owner):
    """The deadline subject, with a copy in every store."""
    event = lineage.log_event(
        agent,
        project_id="project-a",
        session_id="s-1",
        actor="owner",
        text=f"{SUBJECT}: due Oct 30",
        occurred_at=at(10, 20),
        subject_ids=[SUBJECT],
    )
    first = assert_fact(
        agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20), event_ids=[event.public_id])
    ).record
    second = assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1)).record
    other = assert_fact(
        agent,
        deadline("2026-12-01", "1", at(10, 22)).__class__(
            project_id="project-a",
            subject_id="task-other",
            predicate="submission_deadline",
            value="2026-12-01",
            valid_from=at(10, 22),
            source_canonical_ref="task-system:other",
            source_revision="1",
        ),
    ).record
    summary = lineage.create_summary(
        agent, project_id="project-a", text="Proposal due Nov 2", bases=[BaseRef(second.memory_id, 2)]
    )
    lineage.register_context_load(
        other_agent,
        session_id="sess-9",
        bases=[BaseRef(second.memory_id, 2)],
        expires_at=timezone.now() + timedelta(hours=2),
    )
    refresh_record_vectors([first.memory_id, second.memory_id, other.memory_id])
    export = export_project(owner, "project-a")
    return {"event": event, "first": first, "second": second, "other": other, "summary": summary, "export": export}


def file(api, who, **extra):
    payload = {"project_id": "project-a", "scope": {"subject_id": SUBJECT}, "reason": "Data subject request", **extra}
    return api(who).post(URL, payload, format="json")


def run_all(request_id: str) -> None:
    """What the worker does: each store's task, in turn (the worker tests run them for real)."""
    for progress in StoreProgress.objects.filter(request__public_id=request_id):
        purge_store.apply(args=[progress.pk])


def test_a_dry_run_says_what_each_store_holds_and_changes_nothing(api, compliance, subject_everywhere):
    response = file(api, compliance, dry_run=True)
    assert response.status_code == 200
    stores = {s["store"]: s for s in response.json()["stores"]}
    assert stores["records"]["found"] == 2 and stores["logs"]["found"] == 1
    assert stores["summaries"]["found"] == 1 and stores["contexts"]["found"] == 1
    assert stores["exports"]["found"] == 1 and stores["embeddings"]["found"] >= 2
    assert DeletionRequest.objects.count() == 0 and Tombstone.objects.count() == 0
    assert MemoryRecord.objects.filter(subject_id=SUBJECT).count() == 2


def test_acceptance_removes_the_subject_from_every_read_path_at_once(api, compliance, agent, owner, subject_everywhere):
    client = api(agent)
    assert client.get("/api/v1/facts/current/", DEADLINE).status_code == 200  # fills the answer cache
    response = file(api, compliance)
    assert response.status_code == 202
    stages = response.json()["stages"]
    assert stages["accepted_at"] and stages["removed_from_reads_at"]
    assert stages["purge_confirmed_at"] is None and stages["backups_expire_at"] is None
    second = subject_everywhere["second"]
    # Every read path, before any store is purged:
    assert client.get("/api/v1/facts/current/", DEADLINE).status_code == 404  # cache hit refused too
    assert client.get(f"/api/v1/records/{second.memory_id}/").status_code == 404
    assert client.get(f"/api/v1/records/{subject_everywhere['first'].memory_id}/history/").status_code == 404
    assert client.get("/api/v1/records/", {"subject_id": SUBJECT}).json()["results"] == []
    hits = client.get("/api/v1/search/", {"q": "submission deadline", "include": "all"}).json()["results"]
    assert SUBJECT not in {h["subject_id"] for h in hits}
    assert client.get(f"/api/v1/summaries/{subject_everywhere['summary'].public_id}/").status_code == 410
    assert client.get("/api/v1/events/", {"session_id": "s-1"}).json()["results"] == []
    dashboard = Client()
    dashboard.force_login(owner)
    # The fact's page answers with its tombstone (410): what was deleted and when, never the content.
    gone = dashboard.get(f"/facts/?project=project-a&subject={SUBJECT}&predicate=submission_deadline")
    assert gone.status_code == 410 and "2026-11-02" not in gone.content.decode()
    assert SUBJECT not in dashboard.get("/records/?status=all").content.decode()
    notices = api(subject_everywhere["summary"].created_by).get("/api/v1/agents/agent-9/invalidations/")
    assert notices.status_code in (200, 404)
    assert MemoryRecord.objects.filter(subject_id="task-other").exists()  # other facts untouched


def test_the_purge_reaches_every_store_and_sets_the_stages_in_order(api, compliance, other_agent, subject_everywhere):
    backup = take_backup(retention_days=30)
    request_id = file(api, compliance).json()["id"]
    run_all(request_id)
    report = api(compliance).get(f"{URL}{request_id}/").json()
    states = {s["store"]: s["state"] for s in report["stores"]}
    assert states["contexts"] == "waiting"  # agent-9 has not acknowledged yet
    assert report["stages"]["purge_confirmed_at"] is None  # never early
    notice = api(other_agent).get("/api/v1/agents/agent-9/invalidations/").json()["results"][0]
    api(other_agent).post(f"/api/v1/agents/agent-9/invalidations/{notice['id']}/ack/")
    run_all(request_id)
    report = api(compliance).get(f"{URL}{request_id}/").json()
    assert {s["store"]: s["state"] for s in report["stores"]} == dict.fromkeys(
        [
            "records",
            "logs",
            "embeddings",
            "summaries",
            "scheduled_actions",
            "caches",
            "exports",
            "contexts",
            "disputes",
            "receipts",
            "keys",
            "backups",
        ],
        "verified",
    )
    assert report["stages"]["purge_confirmed_at"]
    assert report["stages"]["backups_expire_at"] == backup.expires_at.isoformat()
    # Read each store directly.
    first, second = subject_everywhere["first"], subject_everywhere["second"]
    assert not MemoryRecord.all_objects.filter(memory_id__in=[first.memory_id, second.memory_id]).exists()
    assert Tombstone.objects.filter(memory_id=second.memory_id).exists()
    event = Event.objects.get(pk=subject_everywhere["event"].pk)
    assert event.redacted_at and "redacted" in event.text and SUBJECT not in event.text
    assert not Summary.objects.filter(pk=subject_everywhere["summary"].pk).exists()
    index = get_index()
    assert index.rows_in_any_version(where_objects(first.tenant_id, [first.memory_id, second.memory_id])) == 0
    assert index.find(tenant_id=first.tenant_id, object_ids=[subject_everywhere["other"].memory_id])
    lines = Path(ExportFile.objects.get(pk=subject_everywhere["export"].pk).path).read_text().splitlines()
    assert [json.loads(line)["subject_id"] for line in lines] == ["task-other"]
    snapshots = AuditEvent.objects.filter(object_id=second.memory_id)
    assert snapshots.exists() and all(e.redacted_at and "value" not in json.dumps(e.after) for e in snapshots)
    assert cache.get(fact_key(first.tenant_id, "project-a", SUBJECT, "submission_deadline")) is None


def test_no_resurrection(api, compliance, agent, subject_everywhere):
    second = subject_everywhere["second"]
    request_id = file(api, compliance).json()["id"]
    run_all(request_id)
    client = api(agent)
    # A summary job that read the subject before the deletion and saves after it.
    late = client.post(
        "/api/v1/summaries/",
        {
            "project_id": "project-a",
            "text": "Due Nov 2",
            "derived_from": [{"memory_id": second.memory_id, "revision": 2}],
        },
        format="json",
    )
    assert late.status_code == 410 and late.json()["code"] == "tombstoned"
    # A re-assertion of the deleted value, and of the deleted source revision.
    # (Valid from now: a fact backdated before the deletion is refused on that ground alone.)
    again = client.post(
        "/api/v1/records/", body(deadline("2026-11-02T17:00+09:00", "r99", timezone.now())), format="json"
    )
    assert again.status_code == 410 and "this value of the fact was deleted" in again.json()["detail"]
    same_source = client.post("/api/v1/records/", body(deadline("2026-11-03", "r18", timezone.now())), format="json")
    assert same_source.status_code == 410 and "source revision" in same_source.json()["detail"]
    backdated = client.post("/api/v1/records/", body(deadline("2026-11-04", "r98", at(10, 23))), format="json")
    assert backdated.status_code == 410 and "before the subject's deletion" in backdated.json()["detail"]
    # A rebuild from old logs.
    old_line = client.post(
        "/api/v1/events/",
        {
            "project_id": "project-a",
            "session_id": "s-1",
            "actor": "x",
            "text": "replayed",
            "occurred_at": at(10, 21).isoformat(),
            "subject_ids": [SUBJECT],
        },
        format="json",
    )
    assert old_line.status_code == 410
    assert RefusedWrite.objects.filter(path__in=["summary", "assert_fact", "event"]).count() == 5
    # A new fact from a new source after the deletion is accepted.
    fresh = client.post(
        "/api/v1/records/", body(deadline("2027-01-15", "1", timezone.now(), ref="task-system:v2")), format="json"
    )
    assert fresh.status_code == 201


def test_an_owner_lifts_a_tombstone_with_a_reason(api, compliance, owner, agent, subject_everywhere):
    request_id = file(api, compliance).json()["id"]
    run_all(request_id)
    stone = Tombstone.objects.get(memory_id=subject_everywhere["second"].memory_id)
    with pytest.raises(Exception, match="reason"):
        lift_tombstone(owner, stone.pk, "")
    lift_tombstone(owner, stone.pk, "The subject withdrew the request")
    again = api(agent).post(
        "/api/v1/records/", body(deadline("2026-11-02T17:00+09:00", "r99", timezone.now())), format="json"
    )
    assert again.status_code == 201, again.json()
    assert AuditEvent.objects.filter(action="tombstone.lifted").exists()


def test_roles_only_compliance_files_owners_see_outsiders_get_404(
    api, compliance, owner, agent, outsider, subject_everywhere
):
    assert file(api, owner).status_code == 403
    assert file(api, agent).status_code == 403
    request_id = file(api, compliance).json()["id"]
    assert api(owner).get(f"{URL}{request_id}/").status_code == 200
    assert api(agent).get(f"{URL}{request_id}/").status_code == 404
    assert api(outsider).get(f"{URL}{request_id}/").status_code == 404
    assert api(outsider).post(f"{URL}{request_id}/retry/").status_code == 404


def test_a_whole_predicate_needs_a_second_compliance_person(api, compliance, subject_everywhere, db):
    from memory_admin.accounts.services import ensure_principal

    second_officer = ensure_principal("acme", "cora", ["compliance"])
    response = file(api, compliance, scope={"predicate": "submission_deadline"})
    assert response.status_code == 202
    request_id = response.json()["id"]
    assert response.json()["state"] == "awaiting_approval"
    assert response.json()["stages"]["removed_from_reads_at"] is None
    assert MemoryRecord.objects.filter(predicate="submission_deadline").count() == 3  # nothing hidden yet
    assert api(compliance).post(f"{URL}{request_id}/approve/").status_code == 403  # not the requester
    approved = api(second_officer).post(f"{URL}{request_id}/approve/")
    assert approved.status_code == 202 and approved.json()["stages"]["removed_from_reads_at"]
    assert MemoryRecord.objects.filter(predicate="submission_deadline").count() == 0


def test_a_request_awaiting_approval_can_be_cancelled(api, compliance, subject_everywhere):
    request_id = file(api, compliance, scope={"predicate": "submission_deadline"}).json()["id"]
    cancelled = api(compliance).post(f"{URL}{request_id}/cancel/", {"reason": "filed by mistake"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    accepted = file(api, compliance).json()["id"]
    assert api(compliance).post(f"{URL}{accepted}/cancel/", {"reason": "x"}, format="json").status_code == 409


@pytest.mark.parametrize(
    "payload",
    [
        {"scope": {"subject_id": ""}},
        {"scope": {"subject_id": SUBJECT, "predicate": "x"}},
        {"scope": {"person": "sato"}},
        {"scope": {"memory_ids": ["mem-nope"]}},
        {"reason": ""},
        {"project_id": "no-such-project"},
    ],
)
def test_bad_requests_are_refused_with_a_reason(api, compliance, subject_everywhere, payload):
    response = file(api, compliance, **payload)
    assert response.status_code in (400, 404), response.json()
    assert DeletionRequest.objects.count() == 0


def test_a_recheck_after_the_purge_reopens_a_store_that_holds_the_data_again(
    api, compliance, other_agent, subject_everywhere
):
    from deletion.tasks import recheck_confirmed
    from memory_admin.derived.vectors import VectorEntry

    request_id = file(api, compliance).json()["id"]
    run_all(request_id)
    notice = api(other_agent).get("/api/v1/agents/agent-9/invalidations/").json()["results"][0]
    api(other_agent).post(f"/api/v1/agents/agent-9/invalidations/{notice['id']}/ack/")
    run_all(request_id)
    assert DeletionRequest.objects.get(public_id=request_id).purge_confirmed_at is not None
    # A job that embedded the record before the deletion writes its entry after the purge.
    second = subject_everywhere["second"]
    get_index().upsert(
        [
            VectorEntry(
                entry_id=f"record:{second.memory_id}",
                tenant_id=second.tenant_id,
                project_id="project-a",
                kind="record",
                object_id=second.memory_id,
                revision=2,
                text="task-proposal-017 submission_deadline: 2026-11-02",
            )
        ]
    )
    assert recheck_confirmed(timezone.now() + timedelta(hours=1)) == 1
    request = DeletionRequest.objects.get(public_id=request_id)
    assert request.purge_confirmed_at is None and request.state == "purging"
    row = StoreProgress.objects.get(request=request, store="embeddings")
    assert row.state == "pending" and "found 1 again" in row.last_error
    assert AuditEvent.objects.filter(action="deletion.reopened", object_id=request_id).exists()
    purge_store.apply(args=[row.pk])  # the reconciler's requeue
    assert DeletionRequest.objects.get(public_id=request_id).purge_confirmed_at is not None
    assert get_index().find(tenant_id=second.tenant_id, object_ids=[second.memory_id]) == []
