"""Bulk onboarding (issue 16 part 3): `memory.batch.assert_facts` and `POST /api/v1/records/batch/` follow the
rules of one `assert_fact` — decision order, compare-and-swap, audit, tombstones, propagation — with a result
per item, in order, and all-or-nothing only when asked."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from deletion import service
from deletion.models import RefusedWrite
from memory_admin.accounts.services import ensure_principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.derived import lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import Invalidation, Propagation, Summary
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.batch import BATCH_SUPERSEDED_REASON, MAX_BATCH_ITEMS, BatchTooLarge, assert_facts
from memory_admin.memory.errors import DomainError, InvalidInput
from memory_admin.memory.models import AuditEvent, Dispute, FieldPolicy, MemoryRecord
from tests.support import DEADLINE, TASK_REF, at, body, deadline

URL = "/api/v1/records/batch/"


def fact(subject: str, value: Any, revision: str = "r1", **kwargs: Any) -> Assertion:
    return Assertion(
        project_id="project-b",
        subject_id=subject,
        predicate="owner",
        value=value,
        valid_from=kwargs.pop("valid_from", at(10, 20)),
        source_canonical_ref=kwargs.pop("ref", f"crm:{subject}"),
        source_revision=revision,
        **kwargs,
    )


def outcomes(result) -> list[tuple[int, str]]:
    return [(item.status, item.outcome) for item in result.items]


# --- The domain function ----------------------------------------------------------------------------


def test_each_item_gets_its_own_result_in_order(agent):
    assert_fact(agent, fact("acct-2", "bob", "r5"), now=at(10, 20, 10))
    assert_fact(agent, fact("acct-3", "carol", "r5"), now=at(10, 20, 10))
    result = assert_facts(
        agent,
        [
            fact("acct-1", "alice"),  # a new fact
            fact("acct-2", "bob-old", "r4"),  # an older revision imported late: history
            InvalidInput({"value": ["Required."]}),  # the door could not parse it
            fact("acct-3", "carol", "r5"),  # an idempotent repeat
            fact("acct-2", "bob-new", "r6"),  # a newer value without expected_revision
            fact("acct-3", "carol-new", "r6", expected_revision=7),  # a stale expected_revision
            fact("acct-1", "alice-2", "r2", expected_revision=1),  # supersedes item 0 of this batch
            fact("bad/id", "x"),  # invalid identifier
        ],
        now=at(10, 21),
    )
    assert outcomes(result) == [
        (201, "created"),
        (200, "history"),
        (400, "invalid"),
        (200, "unchanged"),
        (428, "expected_revision_required"),
        (409, "revision_conflict"),
        (201, "created"),
        (400, "invalid"),
    ]
    assert result.applied and result.failed == [2, 4, 5, 7]
    assert result.counts() == {
        "created": 2,
        "history": 1,
        "invalid": 2,
        "unchanged": 1,
        "expected_revision_required": 1,
        "revision_conflict": 1,
    }
    chain = list(MemoryRecord.objects.filter(subject_id="acct-1").order_by("revision"))
    assert [(r.revision, r.status, r.is_head, r.value) for r in chain] == [
        (1, "superseded", False, "alice"),
        (2, "accepted", True, "alice-2"),
    ]
    assert chain[0].superseded_by == chain[1] and chain[0].recorded_to == at(10, 21)
    late = next(r for r in MemoryRecord.objects.filter(subject_id="acct-2") if r.value == "bob-old")
    assert late.status == "superseded" and not late.entered_current and late.revision == 2
    assert MemoryRecord.objects.filter(subject_id="acct-3").count() == 1  # nothing stored for the refusals


SCRIPT: list[tuple[str, str, str, dict[str, Any]]] = [
    # (subject, value, source revision, extra) applied in this order
    ("s1", "a", "r1", {}),
    ("s2", "b", "r1", {}),
    ("s1", "a", "r1", {}),  # repeat
    ("s1", "a2", "r2", {"expected_revision": 1}),  # supersede
    ("s1", "a0", "r0", {}),  # late import
    ("s2", "b2", "r2", {}),  # 428
    ("s2", "b2", "r2", {"expected_revision": 9}),  # 409
    ("s3", "c", "r1", {"valid_to": at(12, 1)}),
    ("s3", "c2", "r2", {"expected_revision": 1, "valid_from": at(11, 1)}),  # cuts s3's validity
    ("s4", "d", "r1", {"ref": "feed-a"}),
    ("s4", "d2", "r1", {"ref": "feed-b"}),  # equal rank, unordered: a dispute
    ("s4", "d2", "r1", {"ref": "feed-b"}),  # repeat of a disputed candidate
    ("s4", "d3", "r1", {"ref": "feed-c"}),  # the fact is disputed: 409
    ("s1", "a3", "r3", {"expected_revision": 2, "valid_from": at(12, 1)}),  # a scheduled successor
]


def _assertions() -> list[Assertion]:
    return [fact(subject, value, revision, **extra) for subject, value, revision, extra in SCRIPT]


def _state(tenant_id: int) -> list[tuple[Any, ...]]:
    rows = MemoryRecord.objects.filter(tenant_id=tenant_id).order_by("subject_id", "revision")
    return [
        (
            r.subject_id,
            r.revision,
            r.value,
            r.status,
            r.is_head,
            r.entered_current,
            r.valid_from,
            r.valid_to,
            r.asserted_valid_to,
            r.recorded_to,
            r.superseded_by.revision if r.superseded_by else None,
            r.status_reason,
        )
        for r in rows
    ]


def _audit(tenant_id: int) -> list[tuple[str, str]]:
    ids = dict(MemoryRecord.objects.filter(tenant_id=tenant_id).values_list("memory_id", "revision"))
    events = AuditEvent.objects.filter(tenant_id=tenant_id, object_type="record")
    return sorted((e.action, str(ids.get(e.object_id))) for e in events)


def test_a_batch_stores_what_one_assert_fact_per_item_would(db):
    """The same script, one by one through assert_fact in one tenant and as one batch in another: the same
    outcomes, the same rows (status, revisions, validity cuts, successors) and the same audit events."""
    one = ensure_principal("one-by-one", "agent-1", ["agent"])
    many = ensure_principal("batched", "agent-1", ["agent"])
    now = at(10, 25)
    expected = []
    with tenant_context(one.tenant_id):
        for a in _assertions():
            try:
                expected.append(assert_fact(one, a, now=now).outcome.value)
            except DomainError as exc:
                expected.append(exc.code)
        one_state, one_audit = _state(one.tenant_pk), _audit(one.tenant_pk)
    with tenant_context(many.tenant_id):
        result = assert_facts(many, _assertions(), now=now)
        assert [item.outcome for item in result.items] == expected
        assert _state(many.tenant_pk) == one_state
        assert _audit(many.tenant_pk) == one_audit
    assert "disputed" in expected and "created" in expected and "revision_conflict" in expected


def test_disputes_are_202_with_both_kept(agent):
    assert_fact(agent, fact("acct-9", "x", ref="feed-a"), now=at(10, 20))
    result = assert_facts(agent, [fact("acct-9", "y", ref="feed-b")], now=at(10, 21))
    assert outcomes(result) == [(202, "disputed")]
    assert result.items[0].result is not None
    dispute = result.items[0].result.dispute
    assert dispute is not None and Dispute.objects.get(pk=dispute.pk).candidates.count() == 2
    assert set(MemoryRecord.objects.filter(subject_id="acct-9").values_list("status", flat=True)) == {"disputed"}


def test_an_unauthorized_issuer_is_refused_per_item(agent, admin):
    FieldPolicy.objects.create(tenant=admin.tenant, predicate="submission_deadline", authorized_issuers=["olivia"])
    result = assert_facts(agent, [deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), fact("acct-1", "alice")])
    assert outcomes(result) == [(403, "issuer_not_authorized"), (201, "created")]
    assert not MemoryRecord.objects.filter(predicate="submission_deadline").exists()


def test_an_atomic_batch_writes_nothing_when_an_item_fails_and_names_it(agent):
    assert_fact(agent, fact("acct-2", "bob"), now=at(10, 20))
    before = (MemoryRecord.objects.count(), AuditEvent.objects.count())
    # Item 2 fails only inside the transaction (stale expected_revision), after item 0 and 1 were decided.
    result = assert_facts(
        agent,
        [fact("acct-1", "alice"), fact("acct-5", "eve"), fact("acct-2", "bob-2", "r2", expected_revision=5)],
        atomic=True,
    )
    assert not result.applied and result.failed == [2]
    assert outcomes(result) == [(424, "not_applied"), (424, "not_applied"), (409, "revision_conflict")]
    assert result.items[0].error is not None and "item(s) 2 failed" in result.items[0].error.detail
    assert (MemoryRecord.objects.count(), AuditEvent.objects.count()) == before
    # The same batch, fixed, is applied whole.
    fixed = assert_facts(
        agent,
        [fact("acct-1", "alice"), fact("acct-5", "eve"), fact("acct-2", "bob-2", "r2", expected_revision=1)],
        atomic=True,
    )
    assert fixed.applied and [i.status for i in fixed.items] == [201, 201, 201]


def test_an_atomic_batch_with_a_malformed_item_writes_nothing(agent):
    result = assert_facts(agent, [fact("acct-1", "alice"), fact("acct-2", None)], atomic=True)
    assert not result.applied and result.failed == [1]
    assert result.items[1].error is not None
    assert result.items[1].error.code == "invalid" and "value" in result.items[1].error.extra["errors"]
    assert not MemoryRecord.objects.exists()


def test_more_than_the_limit_is_refused(agent):
    with pytest.raises(BatchTooLarge):
        assert_facts(agent, [fact(f"acct-{i}", i) for i in range(MAX_BATCH_ITEMS + 1)])
    assert not MemoryRecord.objects.exists()


def test_audit_events_are_written_for_each_change(agent):
    assert_fact(agent, fact("acct-1", "alice"), now=at(10, 20))
    assert_facts(
        agent,
        [fact("acct-1", "alice-2", "r2", expected_revision=1), fact("acct-2", "bob"), fact("acct-1", "old", "r0")],
        now=at(10, 21),
    )
    actions = sorted(AuditEvent.objects.filter(at=at(10, 21)).values_list("action", flat=True))
    assert actions == [
        "record.asserted.created",
        "record.asserted.created",
        "record.asserted.history",
        "record.superseded",
    ]
    superseded = AuditEvent.objects.get(action="record.superseded")
    new = MemoryRecord.objects.get(subject_id="acct-1", revision=2)
    assert (superseded.before or {})["status"] == "accepted"
    assert (superseded.after or {})["status"] == "superseded" and (superseded.after or {})[
        "superseded_by"
    ] == new.memory_id
    assert superseded.actor == agent


def test_a_tombstoned_fact_is_refused_with_410_and_the_refusal_is_logged(agent, compliance, moved_deadline):
    service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": DEADLINE["subject_id"]}, reason="Data subject"
    )
    result = assert_facts(
        agent,
        [deadline("2026-11-02T17:00+09:00", "r99", at(10, 23)), fact("acct-1", "alice")],
    )
    assert outcomes(result) == [(410, "tombstoned"), (201, "created")]
    refusal = RefusedWrite.objects.get()
    assert refusal.path == "assert_facts" and refusal.actor == agent.name
    assert not MemoryRecord.objects.filter(subject_id=DEADLINE["subject_id"]).exists()


def test_superseding_in_a_batch_reaches_the_dependants(agent, other_agent, django_capture_on_commit_callbacks):
    old = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20)).record
    summary = lineage.create_summary(
        agent, project_id="project-a", text="Proposal due Oct 30", bases=[BaseRef(old.memory_id, 1)]
    )
    load = lineage.register_context_load(
        other_agent,
        session_id="sess-9",
        bases=[BaseRef(old.memory_id, 1)],
        expires_at=timezone.now() + timedelta(hours=4),
    )
    with django_capture_on_commit_callbacks(execute=True):
        result = assert_facts(
            agent,
            [deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1), fact("acct-1", "alice")],
        )
    assert result.items[0].result is not None
    new = result.items[0].result.record
    assert Summary.objects.get(pk=summary.pk).status == "stale"
    notice = Invalidation.objects.get(load=load)
    assert notice.successor_id == new.pk and notice.reason == BATCH_SUPERSEDED_REASON
    kinds = set(Propagation.objects.filter(record=old).values_list("dependant_kind", "action"))
    assert {("summary", "marked_stale"), ("context", "notice_sent"), ("vector", "marked_unusable")} <= kinds


# --- The API door -----------------------------------------------------------------------------------


def _item(a: Assertion) -> dict[str, Any]:
    return body(a)


def test_the_api_answers_a_result_per_item_in_order(api, agent):
    client = api(agent)
    first = _item(deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    response = client.post(
        URL,
        {
            "items": [
                first,
                {"project_id": "project-a", "subject_id": "x"},  # a bad shape: 400 for this item only
                "not an object",
                _item(fact("acct-1", "alice")),
                first,  # a repeat of item 0
                _item(deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=3)),
            ]
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    data = response.json()
    assert [(r["index"], r["status"], r["outcome"]) for r in data["results"]] == [
        (0, 201, "created"),
        (1, 400, "invalid"),
        (2, 400, "invalid"),
        (3, 201, "created"),
        (4, 200, "unchanged"),
        (5, 409, "revision_conflict"),
    ]
    assert data["applied"] is True and data["atomic"] is False
    assert data["counts"] == {"created": 2, "invalid": 2, "unchanged": 1, "revision_conflict": 1}
    created = data["results"][0]["record"]
    assert created["status"] == "accepted" and created["revision"] == 1 and created["outcome"] == "created"
    assert created["source"] == {
        "canonical_ref": TASK_REF,
        "revision": "r17",
        "issuer_principal_id": "agent-7",
        "event_ids": [],
    }
    bad = data["results"][1]["error"]
    # (valid_from may be left out: it defaults to the time of the request.)
    assert bad["code"] == "invalid" and {"predicate", "value", "source"} <= set(bad["errors"])
    conflict = data["results"][5]["error"]
    assert conflict["code"] == "revision_conflict" and conflict["current"]["revision"] == 1
    assert MemoryRecord.objects.count() == 2


def test_the_api_atomic_batch_is_422_and_writes_nothing(api, agent):
    response = api(agent).post(
        URL,
        {"atomic": True, "items": [_item(fact("acct-1", "alice")), {"project_id": "../etc"}]},
        format="json",
    )
    assert response.status_code == 422
    data = response.json()
    assert data["code"] == "batch_not_applied" and data["failed"] == [1] and "1" in data["detail"]
    assert [r["outcome"] for r in data["results"]] == ["not_applied", "invalid"]
    assert not MemoryRecord.objects.exists()


def test_the_api_refuses_more_than_the_limit_with_413(api, agent):
    items = [_item(fact(f"acct-{i}", i)) for i in range(MAX_BATCH_ITEMS + 1)]
    response = api(agent).post(URL, {"items": items}, format="json")
    assert response.status_code == 413
    assert response.json()["code"] in ("batch_too_large", "payload_too_large")
    assert not MemoryRecord.objects.exists()


@pytest.mark.parametrize(
    "payload",
    [[], {"items": "x"}, {"items": []}, {"items": [{}], "atomic": "yes"}, {"nothing": 1}],
)
def test_the_api_refuses_a_bad_envelope_with_400(api, agent, payload):
    response = api(agent).post(URL, payload, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid"


def test_the_api_refuses_compliance_and_another_tenant_sees_nothing(api, agent, compliance, outsider):
    response = api(compliance).post(URL, {"items": [_item(fact("acct-1", "alice"))]}, format="json")
    assert response.status_code == 200
    assert response.json()["results"][0]["outcome"] == "issuer_not_authorized"
    api(agent).post(URL, {"items": [_item(fact("acct-1", "alice"))]}, format="json")
    # The outsider's batch lands in its own tenant: a first fact there, not a repeat of acme's.
    response = api(outsider).post(URL, {"items": [_item(fact("acct-1", "alice"))]}, format="json")
    assert response.json()["results"][0]["outcome"] == "created"
    assert MemoryRecord.objects.filter(tenant_id=agent.tenant_id).count() == 1


def test_the_batch_door_is_in_the_openapi_schema(api, agent):
    schema = api(agent).get("/api/v1/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/records/batch/"]["post"]
    assert {"200", "400", "413", "422"} <= set(operation["responses"])


def test_a_fact_derived_from_a_deleted_record_is_refused_in_a_batch(agent, compliance, moved_deadline):
    old = moved_deadline[0].record
    service.request_deletion(compliance, project_id="project-a", scope={"memory_ids": [old.memory_id]}, reason="x")
    derived = fact("acct-1", "alice", derived_from=[{"memory_id": old.memory_id, "revision": 1}])
    result = assert_facts(agent, [fact("acct-0", "zed"), derived])
    assert outcomes(result) == [(201, "created"), (410, "tombstoned")]
    assert result.items[1].error is not None and "derived from deleted memory" in result.items[1].error.detail


@pytest.mark.postgres_only(reason="two sessions writing at once: advisory locks and row locks between them")
@pytest.mark.django_db(transaction=True)
def test_two_batches_over_the_same_facts_never_deadlock_and_each_fact_moves_once(agent):
    import threading

    from django.db import connection

    subjects = [f"acct-{i:02d}" for i in range(40)]
    assert_facts(agent, [fact(s, "start") for s in subjects])
    plans = {
        "a": [fact(s, "a", "r2", valid_from=at(10, 22), expected_revision=1) for s in subjects],
        "b": [fact(s, "b", "r3", valid_from=at(10, 23), expected_revision=1) for s in reversed(subjects)],
    }
    barrier = threading.Barrier(2)
    seen: dict[str, list[str]] = {}

    def write(name: str) -> None:
        try:
            with tenant_context(agent.tenant_id):
                barrier.wait()
                seen[name] = [item.outcome for item in assert_facts(agent, plans[name]).items]
        except Exception as exc:  # a deadlock or any other error fails the test below
            seen[name] = [f"error: {exc!r}"]
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(name,)) for name in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_subject = {s: (seen["a"][i], seen["b"][len(subjects) - 1 - i]) for i, s in enumerate(subjects)}
    for subject, (a, b) in by_subject.items():
        assert sorted([a, b]) in (["created", "revision_conflict"], ["created", "history"]), (subject, seen)
    heads = MemoryRecord.objects.filter(tenant_id=agent.tenant_id, is_head=True)
    assert heads.count() == len(subjects) and set(heads.values_list("revision", flat=True)) == {2}


@pytest.mark.postgres_only(reason="bench/batch_floor.py replays PostgreSQL statements through psycopg")
def test_the_batch_floor_replays_a_rolled_back_batch_as_the_batch_would_have_written_it(agent):
    """The floor of bench/onboarding.py (bench/batch_floor.py): a batch captured through assert_facts leaves
    nothing behind, and its statements replayed as raw SQL write what the batch would have: new facts, then their
    supersessions, with their audit events."""
    from bench import batch_floor

    assert_fact(agent, fact("floor-0", "v1"))  # the project exists: a captured one would be rolled back
    subjects = ["floor-1", "floor-2", "floor-3"]
    with pytest.raises(RuntimeError, match="created a project"):
        batch_floor.capture_batch(agent, [replace(fact("floor-1", "v1"), project_id="project-new")])
    captured = batch_floor.capture_batch(agent, [fact(s, f"{s}-v1") for s in subjects])
    assert captured.outcomes == {"created": 3} and captured.statements
    assert not MemoryRecord.all_objects.filter(subject_id__in=subjects).exists()
    assert AuditEvent.objects.filter(action="record.asserted.created").count() == 1
    assert batch_floor.replay_batch(captured) > 0
    heads = MemoryRecord.objects.filter(subject_id__in=subjects, is_head=True).order_by("subject_id")
    assert [(r.subject_id, r.value, r.revision) for r in heads] == [(s, f"{s}-v1", 1) for s in subjects]
    assert AuditEvent.objects.filter(action="record.asserted.created").count() == 4

    second = [fact(s, f"{s}-v2", "r2", expected_revision=1) for s in subjects]
    samples, statements, _ = batch_floor.floor_batches(agent, [second], "created")
    assert len(samples) == 1 and statements > 0
    heads = MemoryRecord.objects.filter(subject_id__in=subjects, is_head=True).order_by("subject_id")
    assert [(r.subject_id, r.value, r.revision) for r in heads] == [(s, f"{s}-v2", 2) for s in subjects]
    old = MemoryRecord.all_objects.filter(subject_id__in=subjects, revision=1)
    assert {(r.status, r.superseded_by_id is not None) for r in old} == {("superseded", True)}
    assert AuditEvent.objects.filter(action="record.asserted.created").count() == 7
