"""A deletion of a subject or a predicate hides its records by one rule (memory.models.RecordHide) at acceptance,
not by an UPDATE of each record; every read honours the rule until the purge marks the rows, deletes the rule and
then the records. These tests stop between acceptance and purge (no worker runs here), where only the rule hides
the records, and check each read that does not go through the API's record views (test_deletion covers those)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from deletion.models import DeletionRequest, RefusedWrite, Tombstone
from deletion.service import approve, request_deletion
from memory_admin.accounts.services import ensure_principal
from memory_admin.derived import caches
from memory_admin.derived.models import CacheEntry
from memory_admin.memory import hooks, reads, rechecks, stats
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import Dispute, MemoryRecord, Project, RecordHide
from tests.support import at, body, run_purge

PROJECT = "project-a"


def fact(agent, subject: str, predicate: str, value: str, revision: str = "1", *, project: str = PROJECT, **kw):
    return assert_fact(
        agent,
        Assertion(
            project_id=project,
            subject_id=subject,
            predicate=predicate,
            value=value,
            valid_from=at(10, 1),
            source_canonical_ref=f"crm:{subject}",
            source_revision=revision,
            **kw,
        ),
    ).record


@pytest.fixture
def facts(agent):
    """Two subjects interleaved (so the other one's records fall inside the deleted one's id range), each with a
    superseded and a current value of two predicates, and the deleted subject again in another project."""
    Project.objects.get_or_create(tenant_id=agent.tenant_id, key="project-b")
    made: dict[str, list[MemoryRecord]] = {"p-1": [], "p-2": [], "elsewhere": []}
    for predicate in ("phone", "email"):
        for subject in ("p-1", "p-2"):
            made[subject].append(fact(agent, subject, predicate, f"first {predicate} of {subject}"))
            made[subject].append(
                fact(agent, subject, predicate, f"second {predicate} of {subject}", "2", expected_revision=1)
            )
    made["elsewhere"].append(fact(agent, "p-1", "phone", "kept elsewhere", project="project-b"))
    return made


def delete(compliance, scope: dict) -> DeletionRequest:
    request = request_deletion(compliance, project_id=PROJECT, scope=scope, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    if "predicate" in scope:  # a whole predicate waits for a second compliance person
        request = approve(ensure_principal("acme", "cora", ["compliance"]), request.public_id)
    assert request.removed_from_reads_at is not None
    return request


def live_ids() -> set[int]:
    return set(MemoryRecord.objects.values_list("pk", flat=True))


def test_a_subjects_rule_hides_exactly_its_records_until_the_purge(agent, compliance, facts):
    request = delete(compliance, {"subject_id": "p-1"})
    rule = RecordHide.objects.get()
    doomed = {r.pk for r in facts["p-1"]}
    assert (rule.subject_id, rule.predicate, rule.hidden_by) == ("p-1", "", request.public_id)
    assert (rule.first_id, rule.last_id) == (min(doomed), max(doomed))
    # The other subject's records lie inside the rule's id range and stay; so does the subject in another project.
    assert any(rule.first_id < r.pk < rule.last_id for r in facts["p-2"])
    kept = {r.pk for r in facts["p-2"] + facts["elsewhere"]}
    assert live_ids() == kept
    assert set(MemoryRecord.all_objects.removed().values_list("pk", flat=True)) == doomed
    assert set(rule.covered().values_list("pk", flat=True)) == doomed
    # No record row was written: the rows keep their state until the purge.
    assert not MemoryRecord.all_objects.filter(tombstoned_at__isnull=False).exists()
    assert MemoryRecord.all_objects.filter(pk__in=doomed, is_head=True).count() == 2

    run_purge(request)
    assert not RecordHide.objects.exists()
    assert not MemoryRecord.all_objects.filter(pk__in=doomed).exists()
    assert live_ids() == kept


def test_a_predicates_rule_hides_that_predicate_of_every_subject(agent, compliance, facts):
    delete(compliance, {"predicate": "phone"})
    rule = RecordHide.objects.get()
    assert (rule.subject_id, rule.predicate) == ("", "phone")
    phones = {r.pk for r in facts["p-1"] + facts["p-2"] if r.predicate == "phone"}
    assert set(MemoryRecord.all_objects.removed().values_list("pk", flat=True)) == phones
    assert live_ids() == {r.pk for r in facts["p-1"] + facts["p-2"] + facts["elsewhere"]} - phones


def test_as_of_reads_no_longer_answer_from_hidden_records(agent, compliance, facts):
    assert reads.as_of(agent, PROJECT, "p-1", "phone", valid_at=at(10, 2)) is not None
    delete(compliance, {"subject_id": "p-1"})
    assert reads.as_of(agent, PROJECT, "p-1", "phone", valid_at=at(10, 2)) is None
    assert reads.as_of(agent, PROJECT, "p-2", "phone", valid_at=at(10, 2)) is not None


def test_the_dashboard_total_leaves_hidden_records_out(agent, owner, compliance, facts):
    client = Client()
    client.force_login(owner)

    def total(query: str) -> int:
        page = client.get(f"/records/?{query}")
        assert page.status_code == 200
        return page.context["total"]

    # A filter other than the status counts rows (`countable`); the status alone reads the counters.
    assert total("subject=p-1") == 3 and total("predicate=phone") == 3 and total("") == 5
    delete(compliance, {"subject_id": "p-1"})
    assert total("subject=p-1") == 1 and total("predicate=phone") == 2 and total("") == 3  # project-b's stays
    assert total("status=superseded&subject=p-1") == 0 and total("status=superseded&subject=p-2") == 2
    assert "p-1" not in client.get("/records/?status=all&project=project-a").content.decode()


def test_the_recheck_sweep_claims_no_hidden_record(agent, compliance, facts):
    due = timezone.now() - timedelta(hours=1)
    MemoryRecord.objects.filter(status="accepted").update(last_verified_at=due, recheck_after=due)
    delete(compliance, {"subject_id": "p-1"})
    claimed = set(rechecks.claim_due(limit=100))
    kept = [r.pk for r in facts["p-2"] + facts["elsewhere"]]
    assert claimed == set(MemoryRecord.objects.filter(pk__in=kept, status="accepted").values_list("pk", flat=True))
    assert len(claimed) == 3


def test_no_cache_entry_is_filled_from_a_hidden_record(agent, compliance, facts):
    head = next(r for r in facts["p-1"] if r.is_head)
    key = caches.fact_key(agent.tenant_id, PROJECT, "p-1", head.predicate)
    delete(compliance, {"subject_id": "p-1"})
    caches.store(agent.tenant_id, key, "an answer", [head], ttl=60)
    assert cache.get(key) is None and not CacheEntry.objects.filter(key=key).exists()


def test_the_overview_counts_hidden_records_as_deleted_and_the_purge_moves_nothing_twice(agent, compliance, facts):
    before = stats.record_stats(agent.tenant_id)
    request = delete(compliance, {"subject_id": "p-1"})
    hidden = stats.record_stats(agent.tenant_id)
    assert hidden.by_status["deleted"] == before.by_status["deleted"] + 4
    assert hidden.by_status["accepted"] == before.by_status["accepted"] - 2
    assert hidden.by_status["superseded"] == before.by_status["superseded"] - 2
    exact = stats.exact_record_stats(agent.tenant_id, timezone.now())
    assert exact.by_status == hidden.by_status
    run_purge(request)
    purged = stats.record_stats(agent.tenant_id)
    assert purged.by_status["deleted"] == before.by_status["deleted"]
    assert purged.by_status == stats.exact_record_stats(agent.tenant_id, timezone.now()).by_status


def assertion(subject: str, predicate: str, value: str, source_ref: str, revision: str, **kw) -> dict:
    return body(
        Assertion(
            project_id=kw.pop("project", PROJECT),
            subject_id=subject,
            predicate=predicate,
            value=value,
            # Now, so a write after a deletion is a new fact, not one backdated before it (refused on its own).
            valid_from=kw.pop("valid_from", None) or timezone.now(),
            source_canonical_ref=source_ref,
            source_revision=revision,
            **kw,
        )
    )


def test_before_the_purge_the_hidden_records_refuse_their_content_as_their_tombstones_will(
    api, agent, compliance, facts
):
    """The records' own tombstones are written when the purge starts; until then the rule's hidden rows stand for
    them: a write of a deleted value, from a deleted source revision, or derived from a deleted record is refused
    (410) and logged against the request's subject tombstone, exactly as after the purge."""
    request = delete(compliance, {"subject_id": "p-1"})
    subject_stone = Tombstone.objects.get(request=request)
    assert subject_stone.kind == "subject" and not Tombstone.objects.filter(kind="record").exists()
    # What the cached answers' check asks (a hit whose record is deleted is a miss).
    kept = next(r for r in facts["p-2"] if r.is_head)
    hidden = [r.memory_id for r in facts["p-1"]]
    assert hooks.hidden_memory_ids(agent.tenant_id, [*hidden, kept.memory_id]) == set(hidden)
    client = api(agent)
    refused = {
        "a deleted value, from a new source": assertion("p-1", "phone", "first phone of p-1", "crm:new", "1"),
        "a new value, from a deleted source revision": assertion("p-1", "email", "new@example.org", "crm:p-1", "2"),
    }
    for why, data in refused.items():
        response = client.post("/api/v1/records/", data, format="json")
        assert response.status_code == 410 and response.json()["code"] == "tombstoned", (why, response.json())
        assert request.public_id in response.json()["detail"]
    assert RefusedWrite.objects.filter(tombstone=subject_stone).count() == 2
    head = next(r for r in facts["p-1"] if r.is_head)
    summary = client.post(
        "/api/v1/summaries/",
        {"project_id": PROJECT, "text": "p-1's phone", "derived_from": [{"memory_id": head.memory_id, "revision": 2}]},
        format="json",
    )
    assert summary.status_code == 410 and head.memory_id in summary.json()["detail"], summary.json()
    # A write to a hidden fact finds it without its deleted records, as after the purge: no deleted record answers
    # as its current one (a 409's `current`), and a new value starts the fact again.
    stale = client.post(
        "/api/v1/records/",
        assertion("p-1", "phone", "+81 3 0000", "crm:new", "2", expected_revision=2),
        format="json",
    )
    assert stale.status_code == 409 and stale.json()["current"] is None, stale.json()
    assert "of p-1" not in stale.content.decode()
    fresh = client.post("/api/v1/records/", assertion("p-1", "phone", "+81 3 0000", "crm:new", "2"), format="json")
    assert fresh.status_code == 201 and fresh.json()["revision"] == 3, fresh.json()
    # The batch door too (one item of it refused, the other accepted).
    batch = client.post(
        "/api/v1/records/batch/",
        {
            "items": [
                assertion("p-1", "email", "second email of p-1", "crm:new", "3"),
                assertion("p-1", "email", "p1@example.org", "crm:new", "3"),
            ]
        },
        format="json",
    )
    assert [r["status"] for r in batch.json()["results"]] == [410, 201], batch.json()
    assert MemoryRecord.objects.get(subject_id="p-1", predicate="email", project__key=PROJECT).revision == 3
    # The other content is accepted: the deleted value in another project.
    other_project = assertion(
        "p-1", "phone", "first phone of p-1", "crm:b", "1", project="project-b", expected_revision=1
    )
    assert client.post("/api/v1/records/", other_project, format="json").status_code == 201
    # The purge writes the records' tombstones (its first step), and they refuse the same writes.
    run_purge(request)
    assert Tombstone.objects.filter(request=request, kind="record").count() == 4
    for why, data in refused.items():
        response = client.post("/api/v1/records/", data, format="json")
        assert response.status_code == 410, (why, response.json())
    kept = MemoryRecord.objects.filter(subject_id="p-1", project__key=PROJECT)
    assert sorted(kept.values_list("value", flat=True)) == ["+81 3 0000", "p1@example.org"]
    assert (
        stats.record_stats(agent.tenant_id).by_status
        == stats.exact_record_stats(agent.tenant_id, timezone.now()).by_status
    )


def test_the_dashboard_says_a_hidden_record_is_deleted_before_its_tombstone_is_written(owner, compliance, facts):
    client = Client()
    client.force_login(owner)
    assert client.get("/").context["deleted"] == 0
    request = delete(compliance, {"subject_id": "p-1"})
    assert client.get("/").context["deleted"] == 4  # the overview's "deleted" tile: pending tombstones included
    head = next(r for r in facts["p-1"] if r.is_head)
    for url in (f"/records/{head.memory_id}/", f"/facts/?project={PROJECT}&subject=p-1&predicate={head.predicate}"):
        page = client.get(url)
        text = page.content.decode()
        assert page.status_code == 410 and request.public_id in text, url
        assert "its own tombstone is written when the purge starts" in text
        assert "/lift/" not in text  # nothing to lift yet: the tombstone shown is not written
    run_purge(request)
    assert client.get("/").context["deleted"] == 4
    page = client.get(f"/records/{head.memory_id}/")
    assert page.status_code == 410 and "/lift/" in page.content.decode()


@pytest.mark.parametrize("scope", ["subject", "memory_ids"])
def test_a_dispute_whose_every_candidate_is_deleted_is_closed_at_acceptance(api, agent, compliance, scope):
    """One open dispute per fact: a dispute between deleted records, left open until the purge deleted it, made the
    fact's next disagreement fail (409 from the constraint) in between. It is closed at acceptance; a dispute with a
    candidate outside the scope stays open."""
    client = api(agent)
    when = {"valid_from": timezone.now()}  # two equal sources disagree about the same valid time: a dispute

    def write(subject: str, value: str, source: str) -> dict:
        data = assertion(subject, "phone", value, source, "1", valid_from=when["valid_from"])
        response = client.post("/api/v1/records/", data, format="json")
        assert response.status_code in (201, 202), response.json()
        return response.json()

    write("p-9", "A", "crm:one")
    assert write("p-9", "B", "crm:two")["outcome"] == "disputed"
    disputed = Dispute.objects.get(subject_id="p-9", status="open")
    named = (
        {"subject_id": "p-9"}
        if scope == "subject"
        else {"memory_ids": [r.memory_id for r in disputed.candidates.all()]}
    )
    request = delete(compliance, named)
    disputed.refresh_from_db()
    assert disputed.status == "resolved" and disputed.resolution_reason == f"[redacted by deletion {request.public_id}]"
    when["valid_from"] = timezone.now()  # after the deletion
    assert write("p-9", "C", "crm:three")["outcome"] == "created"
    again = write("p-9", "D", "crm:four")
    assert again["outcome"] == "disputed", again
    assert Dispute.objects.filter(subject_id="p-9", status="open").count() == 1
    run_purge(request)
    assert not Dispute.objects.filter(pk=disputed.pk).exists()
    assert Dispute.objects.filter(subject_id="p-9", status="open").count() == 1
    assert request.stores.get(store="disputes").state == "verified"
