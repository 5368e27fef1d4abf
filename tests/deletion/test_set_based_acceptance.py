"""Deletion's acceptance is set-based: the scope is hidden by its condition (tenant, project, subject or
predicate), dependants are reached one statement per kind, and the stores that need no targets to hide
find them when the purge starts, all before any store purges."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from deletion import stores, tombstones
from deletion.models import DeletionRequest, StoreProgress, Tombstone
from deletion.service import _file, find_pending, request_deletion, resolve_scope
from deletion.stores import PENDING_TARGETS
from deletion.stores.records import mark_hidden
from deletion.tasks import purge_store
from memory_admin.accounts.services import ensure_principal
from memory_admin.derived import caches, lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import CacheEntry, Event, EventHide, Invalidation, ScheduledAction, Summary
from memory_admin.derived.propagation import propagate_set, set_kinds
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.errors import Tombstoned
from memory_admin.memory.models import MemoryRecord, Project, RecordHide
from tests.support import at, body

PROJECT = "project-a"


def assertion(
    subject: str,
    predicate: str,
    value: str,
    revision: str = "1",
    expected: int | None = None,
    event_ids: list[str] | None = None,
) -> Assertion:
    return Assertion(
        project_id=PROJECT,
        subject_id=subject,
        predicate=predicate,
        value=value,
        valid_from=at(10, 20 + int(revision)),
        source_canonical_ref=f"crm:{subject}",
        source_revision=revision,
        expected_revision=expected,
        event_ids=event_ids,
    )


def fact(agent, subject: str, predicate: str, value: Any, revision: str = "1", expected: int | None = None):
    return assert_fact(agent, assertion(subject, predicate, value, revision, expected)).record


def person(agent, subject: str, facts: int) -> list[MemoryRecord]:
    """`facts` fact keys of `subject`, each with two revisions (the first superseded)."""
    made = []
    for i in range(facts):
        made.append(fact(agent, subject, f"field_{i}", f"first value {i} of {subject}"))
        made.append(fact(agent, subject, f"field_{i}", f"second value {i} of {subject}", "2", expected=1))
    return made


def with_dependants(agent, other_agent, records: list[MemoryRecord]) -> dict[str, list[Any]]:
    """A summary, a scheduled action, a loaded context and a cache entry on each current record."""
    heads = list(MemoryRecord.objects.filter(pk__in=[r.pk for r in records], is_head=True).order_by("id"))
    made: dict[str, list[Any]] = {"summaries": [], "actions": [], "loads": [], "keys": []}
    for r in heads:
        base = [BaseRef(r.memory_id, r.revision)]
        made["summaries"].append(lineage.create_summary(agent, project_id=PROJECT, text="about it", bases=base))
        made["actions"].append(
            lineage.schedule_action(
                agent,
                project_id=PROJECT,
                kind="remind",
                payload={"note": "x"},
                due_at=timezone.now() + timedelta(days=1),
                bases=base,
            )
        )
        made["loads"].append(
            lineage.register_context_load(
                other_agent, session_id=f"s-{r.pk}", bases=base, expires_at=timezone.now() + timedelta(hours=1)
            )
        )
        key = caches.fact_key(r.tenant_id, PROJECT, r.subject_id, r.predicate)
        caches.store(r.tenant_id, key, {"v": 1}, [r], ttl=600)
        made["keys"].append(key)
    return made


def records_of(subject: str):
    return MemoryRecord.all_objects.filter(subject_id=subject)


# --- propagate_set ---------------------------------------------------------------------------------


def test_propagate_set_reaches_every_kind_of_dependant_of_the_records_the_condition_names(agent, other_agent):
    records = person(agent, "p-1", 2)
    other = person(agent, "p-2", 1)
    made = with_dependants(agent, other_agent, records + other)
    now = timezone.now()
    with transaction.atomic():
        result = propagate_set(
            records_of("p-1").filter(tombstoned_at__isnull=True),
            tenant_id=agent.tenant_id,
            reason="Gone.",
            now=now,
        )
    mine = {r.pk for r in records}
    assert len(result.summaries) == 2 and len(result.actions) == 2 and result.notices == 2
    assert len(result.cache_keys) == 2 and cache.get_many(result.cache_keys) == {}
    assert set(Summary.objects.filter(status="stale").values_list("id", flat=True)) == set(result.summaries)
    assert set(ScheduledAction.objects.filter(status="suspended").values_list("id", flat=True)) == set(result.actions)
    notices = Invalidation.objects.filter(reason="Gone.")
    assert {n.record_id for n in notices} <= mine and notices.count() == 2
    assert all(n.memory_id and n.agent_id == other_agent.pk for n in notices)
    assert CacheEntry.objects.filter(evicted_at=now).count() == 2
    # The other subject's dependants are untouched.
    other_key = made["keys"][-1]
    assert cache.get(other_key) is not None
    assert CacheEntry.objects.get(key=other_key).evicted_at is None
    assert Summary.objects.filter(status="current").count() == 1
    # Run again: nothing new (notices once per loaded copy, evicted keys stay evicted).
    with transaction.atomic():
        again = propagate_set(records_of("p-1"), tenant_id=agent.tenant_id, reason="Gone.", now=now)
    assert again.summaries == [] and again.actions == [] and again.notices == 0 and again.cache_keys == []


def test_propagate_set_visits_only_the_kinds_asked(agent, other_agent):
    records = person(agent, "p-1", 1)
    with_dependants(agent, other_agent, records)
    with transaction.atomic():
        result = propagate_set(
            records_of("p-1"), tenant_id=agent.tenant_id, reason="Gone.", now=timezone.now(), kinds=("caches",)
        )
    assert len(result.cache_keys) == 1 and result.notices == 0 and result.summaries == []
    assert Summary.objects.filter(status="current").count() == 1
    assert not Invalidation.objects.filter(reason="Gone.").exists()


def test_propagate_set_runs_as_many_statements_for_many_records_as_for_one(agent, other_agent):
    small = person(agent, "p-small", 1)
    large = person(agent, "p-large", 6)
    with_dependants(agent, other_agent, small + large)

    def statements(subject: str) -> int:
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            propagate_set(records_of(subject), tenant_id=agent.tenant_id, reason="Gone.", now=timezone.now())
            transaction.set_rollback(True)
        return len(queries)

    assert statements("p-large") == statements("p-small")
    assert set_kinds() == ["summaries", "actions", "contexts", "caches"]


# --- acceptance ------------------------------------------------------------------------------------


def test_acceptance_hides_by_the_scope_and_leaves_the_finds_to_the_purge(
    agent, other_agent, compliance, django_capture_on_commit_callbacks
):
    records = person(agent, "p-1", 3)
    kept = person(agent, "p-2", 1)
    made = with_dependants(agent, other_agent, records + kept)
    line = lineage.log_event(
        agent,
        project_id=PROJECT,
        session_id="s-1",
        actor="user",
        text="p-1 said hi",
        occurred_at=at(10, 20),
        subject_ids=[],
    )
    with django_capture_on_commit_callbacks(execute=False) as on_commit:
        request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p-1"}, reason="Erasure")
    assert isinstance(request, DeletionRequest) and request.removed_from_reads_at is not None
    # The cache keys are evicted once the acceptance commits: before, readers still see the records as they
    # were and could refill a key, so an eviction there would hide nothing.
    assert cache.get_many(made["keys"][:3]) != {}
    for callback in on_commit:
        callback()
    # Hidden at once, every revision, and nothing of the other subject.
    assert not MemoryRecord.objects.filter(subject_id="p-1").exists()
    # By one rule, not row by row: the rows keep their state until the purge marks and deletes them.
    assert list(RecordHide.objects.values_list("subject_id", "predicate", "hidden_by")) == [
        ("p-1", "", request.public_id)
    ]
    assert records_of("p-1").count() == 6 and not records_of("p-1").filter(tombstoned_at__isnull=False).exists()
    assert records_of("p-1").removed().count() == 6
    assert MemoryRecord.objects.filter(subject_id="p-2").count() == 2
    # The subject's lines are hidden by one rule, not row by row; every read of events goes through it.
    assert not Event.objects.visible().filter(pk=line.pk).exists() and Event.objects.removed().filter(pk=line.pk)
    assert list(EventHide.objects.values_list("subject_id", "hidden_by")) == [("p-1", request.public_id)]
    assert Summary.objects.filter(hidden_at__isnull=False, status="withdrawn").count() == 3
    assert ScheduledAction.objects.filter(status="cancelled").count() == 3
    assert Invalidation.objects.filter(agent=other_agent, reason__contains=request.public_id).count() == 3
    assert cache.get_many(made["keys"][:3]) == {} and cache.get(made["keys"][3]) is not None
    # The records' own tombstones wait for the purge; until then the rule stands for them (the refusals read the
    # hidden rows as the tombstones they will be).
    assert not Tombstone.objects.filter(request=request, kind="record").exists()
    assert Tombstone.objects.filter(request=request, kind="subject").count() == 1
    pending = tombstones.pending_record_stones(agent.tenant_id, memory_ids=[r.memory_id for r in records_of("p-1")])
    assert len(pending) == 6 and {s.request_public_id for s in pending} == {request.public_id}
    rows = {p.store: p for p in request.stores.all()}
    assert rows["records"].hidden == 6
    assert rows["logs"].hidden == 1 and rows["summaries"].hidden == 3 and rows["scheduled_actions"].hidden == 3
    # The stores whose targets are not needed to hide them wait for the purge to find them.
    waiting = {name for name, p in rows.items() if p.targets == PENDING_TARGETS}
    assert {"records", "logs", "embeddings", "summaries", "caches", "contexts"} <= waiting
    assert "exports" not in waiting  # files: found and withheld at acceptance
    assert all(rows[name].found == 0 for name in waiting)


def _line(agent, text: str, subjects: list[str], project: str = PROJECT) -> Event:
    return lineage.log_event(
        agent,
        project_id=project,
        session_id="s-9",
        actor="user",
        text=text,
        occurred_at=at(10, 20),
        subject_ids=subjects,
    )


def test_a_subjects_lines_are_hidden_by_one_rule_until_the_purge_redacts_them(agent, compliance, api):
    """The lines tagged with the subject or naming it are hidden by one EventHide row at acceptance: every read of
    events (the API, the refusal of facts citing them) sees them gone; other subjects', other projects' and later
    lines stay. The purge redacts them, marks them hidden row by row and deletes the rule with the subject id."""
    person(agent, "p_1", 1)
    tagged = _line(agent, "an untitled remark", ["p_1"])
    named = _line(agent, "p_1 said hi", [])
    lookalike = _line(agent, "px1 said hi", [])  # `_` is a character here, not LIKE's wildcard
    other = _line(agent, "p-2 said hi", ["p-2"])
    Project.objects.get_or_create(tenant_id=agent.tenant_id, key="project-b")
    elsewhere = _line(agent, "p_1 in another project", ["p_1"], project="project-b")
    request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p_1"}, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    later = _line(agent, "p_1 again, after the deletion", [])
    hidden = {tagged.pk, named.pk}
    events = Event.objects.filter(tenant_id=agent.tenant_id)
    assert set(events.removed().values_list("pk", flat=True)) == hidden
    assert hidden.isdisjoint(events.visible().values_list("pk", flat=True))
    assert {lookalike.pk, other.pk, elsewhere.pk, later.pk} <= set(events.visible().values_list("pk", flat=True))
    assert events.filter(pk__in=hidden, hidden_at__isnull=False).count() == 0  # no row written
    assert request.stores.get(store="logs").hidden == 2
    listed = api(agent).get("/api/v1/events/", {"session_id": "s-9"}).json()["results"]
    assert {e["id"] for e in listed} == {lookalike.public_id, other.public_id, elsewhere.public_id, later.public_id}
    # A fact extracted from a line the rule hides is refused, as from a line hidden row by row.
    cited = assertion("p-3", "said", "hi", event_ids=[named.public_id])
    with pytest.raises(Tombstoned, match="log lines a deletion removed"):
        assert_fact(agent, cited)
    through_api = body(cited)
    through_api["source"]["event_ids"] = [named.public_id]
    refused = api(agent).post("/api/v1/records/", through_api, format="json")
    assert refused.status_code == 410 and refused.json()["code"] == "tombstoned"
    for progress in request.stores.all():
        purge_store.apply(args=[progress.pk])
    logs = request.stores.get(store="logs")
    assert logs.state == "verified" and logs.evidence["hiding_rules_left"] == 0
    assert not EventHide.objects.exists()
    for line in Event.objects.filter(pk__in=hidden):
        assert line.redacted_at is not None and line.hidden_at is not None and "p_1" not in line.text
    assert hidden.isdisjoint(events.visible().values_list("pk", flat=True))


def test_the_first_purge_task_finds_every_waiting_store_before_any_purges(agent, other_agent, compliance):
    records = person(agent, "p-1", 2)
    with_dependants(agent, other_agent, records)
    request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p-1"}, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    records_row = request.stores.get(store="records")
    purge_store.apply(args=[records_row.pk])  # the records go first: the others' copies are found already
    assert not records_of("p-1").exists()
    rows = {p.store: p for p in request.stores.all()}
    assert all(p.targets != PENDING_TARGETS for p in rows.values())
    assert rows["records"].found == 4 and len(rows["records"].targets["ids"]) == 4
    assert rows["summaries"].found == 2 and len(rows["summaries"].targets["ids"]) == 2
    assert rows["scheduled_actions"].found == 2 and rows["contexts"].found == 2
    assert rows["caches"].found == 2 and rows["logs"].targets["subjects"] == ["p-1"]
    assert find_pending(request.pk) == 0  # found once
    for progress in request.stores.exclude(store="records"):
        purge_store.apply(args=[progress.pk])
    assert not Summary.objects.filter(pk__in=rows["summaries"].targets["ids"]).exists()
    assert StoreProgress.objects.filter(request=request, state="verified").count() >= len(stores.registered()) - 1


def test_a_failing_find_leaves_every_store_waiting_and_the_purge_retries(agent, compliance, monkeypatch):
    person(agent, "p-1", 1)
    request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p-1"}, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    summaries = stores.get("summaries")

    def broken(scope):
        raise RuntimeError("store unreachable")

    monkeypatch.setattr(summaries, "find", broken)
    row = request.stores.get(store="records")
    purge_store.apply(args=[row.pk])
    row.refresh_from_db()
    assert row.state == "failed" and "store unreachable" in row.last_error
    assert records_of("p-1").count() == 2  # nothing purged before every store is found
    assert request.stores.filter(targets=PENDING_TARGETS).count() >= 5  # the finds rolled back together
    monkeypatch.undo()
    purge_store.apply(args=[row.pk])
    assert not records_of("p-1").exists()
    assert not request.stores.filter(targets=PENDING_TARGETS).exists()


def test_a_record_written_after_the_scope_was_resolved_is_not_hidden_with_it(agent, compliance):
    person(agent, "p-1", 1)
    project = Project.objects.get(tenant_id=agent.tenant_id, key=PROJECT)
    resolved = resolve_scope(agent.tenant_pk, project, "subject_id", "p-1")
    late = fact(agent, "p-1", "field_late", "written after the preview")
    request = _file(compliance, project, "subject_id", "p-1", "Erasure", None, resolved)
    assert request.stores.get(store="records").hidden == 2
    assert MemoryRecord.objects.filter(pk=late.pk).exists()  # still readable: the request did not cover it
    assert not Tombstone.objects.filter(memory_id=late.memory_id).exists()


@pytest.mark.parametrize("kind", ["memory_ids", "predicate"])
def test_memory_ids_and_predicate_scopes_hide_only_what_they_name(agent, compliance, kind):
    one = person(agent, "p-1", 2)
    two = person(agent, "p-2", 2)
    if kind == "memory_ids":
        named = [one[0], one[1], two[2]]
        scope: dict[str, Any] = {"memory_ids": [r.memory_id for r in named]}
    else:
        named = [r for r in one + two if r.predicate == "field_1"]
        scope = {"predicate": "field_1"}
    request = request_deletion(compliance, project_id=PROJECT, scope=scope, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    if kind == "predicate":  # a whole predicate waits for a second compliance person
        from deletion.service import approve

        approve(ensure_principal("acme", "cora", ["compliance"]), request.public_id)
    hidden = set(MemoryRecord.all_objects.removed().values_list("pk", flat=True))
    assert hidden == {r.pk for r in named}
    assert MemoryRecord.objects.count() == 8 - len(named)
    # A list of memory ids is marked row by row; a predicate by one rule, the rows left as they are until the purge.
    marked = set(MemoryRecord.all_objects.filter(tombstoned_at__isnull=False).values_list("pk", flat=True))
    assert marked == (hidden if kind == "memory_ids" else set())
    assert RecordHide.objects.count() == (0 if kind == "memory_ids" else 1)


def test_the_tombstones_written_in_one_statement_carry_the_hashes_the_write_guards_compute(agent, compliance):
    """Acceptance writes the subject's tombstone alone; the records' tombstones are written in one statement when
    the purge starts, with the hashes the write guards compute, which the pending ones carried before."""
    values = ['Zoë\'s price: 1,350 € ("final")\n', {"b": [1, 2.5, None], "a": "ü"}, 42]
    records = [fact(agent, "p-1", f"field_{i}", value) for i, value in enumerate(values)]
    records.append(fact(agent, "p-1", "field_0", "a second value", "2", expected=1))
    with CaptureQueriesContext(connection) as queries:
        request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p-1"}, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('INSERT INTO "deletion_tombstone"')]
    assert len(inserts) == 1 and list(Tombstone.objects.values_list("kind", flat=True)) == ["subject"]
    subject = Tombstone.objects.get(request=request, kind="subject")
    assert subject.scope_hash == tombstones.subject_scope(agent.tenant_id, PROJECT, "p-1") and subject.memory_id == ""
    pending = {
        s.memory_id: s
        for s in tombstones.pending_record_stones(agent.tenant_id, memory_ids=[r.memory_id for r in records])
    }
    # Refused before the purge: the deleted value of the fact, even a structured one with its keys reordered.
    with pytest.raises(Tombstoned):
        fact(agent, "p-1", "field_1", {"a": "ü", "b": [1, 2.5, None]}, "9")

    with CaptureQueriesContext(connection) as queries:
        mark_hidden(agent.tenant_id, request.public_id)  # the records' purge starts with it
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('INSERT INTO "deletion_tombstone"')]
    assert len(inserts) == 1  # every record's tombstone
    stones = {s.memory_id: s for s in Tombstone.objects.filter(request=request, kind="record")}
    assert set(stones) == set(pending) == {r.memory_id for r in records}
    for r in records:
        stone = stones[r.memory_id]
        assert stone.scope_hash == tombstones.fact_scope(r.tenant_id, PROJECT, r.subject_id, r.predicate)
        assert stone.value_hash == tombstones.value_digest(r.value)
        assert stone.source_hash == tombstones.source_digest(r.source_canonical_ref, r.source_revision)
        assert (
            stone.request_public_id == request.public_id and stone.lifted_at is None and stone.tenant_id == r.tenant_id
        )
        assert (stone.scope_hash, stone.value_hash, stone.source_hash, stone.created_at) == (
            pending[r.memory_id].scope_hash,
            pending[r.memory_id].value_hash,
            pending[r.memory_id].source_hash,
            pending[r.memory_id].created_at,
        )
    assert not RecordHide.objects.exists()
    # And refused after it, by the written tombstones.
    with pytest.raises(Tombstoned):
        fact(agent, "p-1", "field_1", {"a": "ü", "b": [1, 2.5, None]}, "9")


def test_the_ledger_gets_one_line_per_tombstone_after_commit(
    agent, compliance, settings, tmp_path, django_capture_on_commit_callbacks
):
    from deletion import ledger

    settings.BACKUP_DIR = str(tmp_path)
    person(agent, "p-1", 2)
    with django_capture_on_commit_callbacks(execute=True):
        request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p-1"}, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    lines = [e for e in ledger.read() if e["request_public_id"] == request.public_id]
    stored = Tombstone.objects.filter(request=request)
    assert sorted((e["kind"], e["memory_id"], e["scope_hash"], e["value_hash"], e["source_hash"]) for e in lines) == (
        sorted(stored.values_list("kind", "memory_id", "scope_hash", "value_hash", "source_hash"))
    )
    assert {e["created_at"] for e in lines} == {s.created_at.isoformat() for s in stored}


def test_acceptance_runs_as_many_statements_for_a_big_subject_as_for_a_small_one(agent, compliance):
    person(agent, "p-1", 1)
    person(agent, "p-2", 6)

    def statements(subject: str) -> int:
        with CaptureQueriesContext(connection) as queries:
            request_deletion(compliance, project_id=PROJECT, scope={"subject_id": subject}, reason="Erasure")
        return len(queries.captured_queries)

    assert statements("p-1") == statements("p-2")


def test_acceptance_hides_the_lines_the_records_were_extracted_from(agent, compliance):
    source = _line(agent, "my number changed", ["someone-else"])  # names neither the subject nor its values
    other = _line(agent, "unrelated", ["someone-else"])
    assert_fact(agent, assertion("p-1", "phone", "+41 00 000 00 00", event_ids=[source.public_id]))
    request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p-1"}, reason="Erasure")
    assert Event.objects.get(pk=source.pk).hidden_at is not None
    assert Event.objects.get(pk=other.pk).hidden_at is None


def test_the_records_purge_deletes_what_the_collector_would_and_keeps_the_rest(agent, other_agent, compliance):
    from memory_admin.derived.models import ActionBase, ContextItem, Propagation, SummaryBase
    from memory_admin.memory.models import Dispute

    records = person(agent, "p-1", 2)
    kept = person(agent, "p-2", 1)
    with_dependants(agent, other_agent, records + kept)
    # A record outside the scope whose successor is in it (an edge no assertion makes, but the schema allows).
    outsider = kept[0]
    MemoryRecord.all_objects.filter(pk=outsider.pk).update(superseded_by=records[1])
    dispute = Dispute.objects.create(
        tenant_id=agent.tenant_id, project_id=records[0].project_id, subject_id="p-1", predicate="x", winner=records[1]
    )
    dispute.candidates.set([records[1], kept[1]])
    request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": "p-1"}, reason="Erasure")
    assert isinstance(request, DeletionRequest)
    ids = [r.pk for r in records]
    row = request.stores.get(store="records")
    purge_store.apply(args=[row.pk])
    row.refresh_from_db()
    assert row.state == "verified" and row.purged == 4
    assert not MemoryRecord.all_objects.filter(pk__in=ids).exists()
    assert MemoryRecord.all_objects.filter(pk__in=[r.pk for r in kept]).count() == 2
    assert MemoryRecord.all_objects.get(pk=outsider.pk).superseded_by_id is None
    assert MemoryRecord.all_objects.get(pk=kept[1].pk).superseded_by_id is None  # it is the head
    for model, column in (
        (SummaryBase, "record_id__in"),
        (ActionBase, "record_id__in"),
        (ContextItem, "record_id__in"),
        (Propagation, "record_id__in"),
        (CacheEntry.records.through, "memoryrecord_id__in"),
        (Dispute.candidates.through, "memoryrecord_id__in"),
    ):
        assert not model.objects.filter(**{column: ids}).exists(), model
    assert SummaryBase.objects.filter(record_id=kept[1].pk).exists()  # the other subject's links stay
    assert list(dispute.candidates.values_list("pk", flat=True)) == [kept[1].pk]
    dispute.refresh_from_db()
    assert dispute.winner_id is None  # SET_NULL
    assert not Invalidation.objects.filter(record_id__in=ids).exists()  # SET_NULL: notices stay, unlinked
    assert Invalidation.objects.filter(record__isnull=True, reason__contains=request.public_id).count() == 2


def test_the_records_purge_falls_back_to_the_collector_when_the_records_have_a_delete_signal(agent, compliance):
    from django.db.models.signals import pre_delete

    from deletion.stores.records import delete_records

    records = person(agent, "p-1", 1)
    seen: list[int] = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    pre_delete.connect(receiver, sender=MemoryRecord)
    try:
        assert delete_records([r.pk for r in records]) == 2
    finally:
        pre_delete.disconnect(receiver, sender=MemoryRecord)
    assert sorted(seen) == sorted(r.pk for r in records)
    assert not MemoryRecord.all_objects.filter(pk__in=seen).exists()


@pytest.mark.postgres_only(
    reason="one array parameter for a list of ids is PostgreSQL's (unnest); SQLite binds the list"
)
def test_finding_purging_and_verifying_bind_as_many_parameters_for_a_big_subject_as_for_a_small_one(
    agent, other_agent, compliance
):
    """Every store's find, purge and verify sends the subject's ids as one array, not one placeholder per
    record (a 10,000-record subject was 10,000 parameters bound and planned anew in each statement)."""

    def most_parameters(subject: str, facts: int) -> int:
        with_dependants(agent, other_agent, person(agent, subject, facts))
        request = request_deletion(compliance, project_id=PROJECT, scope={"subject_id": subject}, reason="Erasure")
        assert isinstance(request, DeletionRequest)
        sizes: list[int] = []

        def count(execute, sql, params, many, context):
            sizes.append(len(params or ()))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count):
            for progress in request.stores.order_by("pk"):
                purge_store.apply(args=[progress.pk])
        assert not records_of(subject).exists()
        # Every store ran to its end: verified, or waiting for a holder of a loaded context to acknowledge.
        assert set(request.stores.values_list("state", flat=True)) <= {"verified", "waiting"}
        assert request.stores.filter(state="verified").count() >= len(stores.registered()) - 1
        return max(sizes)

    assert most_parameters("p-1", 1) == most_parameters("p-2", 8)


def test_among_binds_one_array_on_postgresql_and_the_list_elsewhere_and_refuses_mixed_ids(agent):
    from memory_admin.lib import rows

    made = person(agent, "p-1", 2)
    ids, memory_ids = [r.pk for r in made], [r.memory_id for r in made]
    assert sorted(MemoryRecord.all_objects.filter(pk__in=rows.among(ids)).values_list("pk", flat=True)) == sorted(ids)
    found = MemoryRecord.all_objects.filter(memory_id__in=rows.among(memory_ids)).values_list("memory_id", flat=True)
    assert sorted(found) == sorted(memory_ids)
    assert rows.among([]) == [] and not MemoryRecord.all_objects.filter(pk__in=rows.among([])).exists()
    if connection.vendor == "postgresql":
        with CaptureQueriesContext(connection) as queries:
            list(MemoryRecord.all_objects.filter(pk__in=rows.among(ids)))
        assert "unnest" in queries.captured_queries[0]["sql"]
        with pytest.raises(TypeError):
            rows.among([1, "mem-1"])  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            rows.among([True, 2])
