"""The sweep claims due records without double work, and a real worker rechecks them end to end."""

from __future__ import annotations

import contextvars
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.rechecks import claim_due
from memory_admin.memory.tasks import sweep_due_rechecks
from tests.support import ARTIFACTS
from tests.support.canonical_source import http_json_source, serving
from tests.support.celery_worker import require_real_broker, running_worker, wait_until


def due_records(agent, count: int, prefix: str = "task") -> list[MemoryRecord]:
    past = timezone.now() - timedelta(days=3)
    made = []
    for i in range(count):
        a = Assertion(
            project_id="project-a",
            subject_id=f"{prefix}-{i:03d}",
            predicate="submission_deadline",
            value=f"2026-11-{(i % 27) + 1:02d}",
            valid_from=past,
            source_canonical_ref=f"task-system:project-a/{prefix}-{i:03d}",
            source_revision="r1",
        )
        made.append(assert_fact(agent, a, now=past, verified_at=past).record)
    return made


@pytest.fixture
def policy_for_source(admin):
    def make(base_url: str, timeout: float = 0.5) -> FieldPolicy:
        return FieldPolicy.objects.create(
            tenant=admin.tenant,
            predicate="submission_deadline",
            canonical_ref_prefix="task-system:",
            canonical_source=http_json_source(base_url, timeout=timeout),
            recheck_interval=timedelta(days=1),
        )

    return make


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_never_claim_the_same_record(agent, policy_for_source):
    policy_for_source("http://127.0.0.1:9")
    records = due_records(agent, 120)
    barrier = threading.Barrier(2)
    claimed: list[list[int]] = []

    def sweep() -> None:
        try:
            barrier.wait()
            mine: list[int] = []
            while batch := claim_due(limit=7):
                mine.extend(batch)
            claimed.append(mine)
        finally:
            connection.close()

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(sweep,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = claimed
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(r.pk for r in records)
    assert claim_due() == []  # everything is claimed for this round


def test_a_claim_expires_after_the_lease(agent, policy_for_source):
    policy_for_source("http://127.0.0.1:9")
    due_records(agent, 3)
    assert len(claim_due()) == 3
    assert claim_due() == []
    assert len(claim_due(timezone.now() + timedelta(minutes=16))) == 3


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_worker_rechecks_each_outcome_end_to_end(agent, policy_for_source, monkeypatch):
    require_real_broker()
    monkeypatch.setenv("RECHECK_RETRY_DELAY_MS", "200")
    with serving() as (base_url, script):
        policy_for_source(base_url)
        unchanged, changed, broken, slow, ambiguous = due_records(agent, 5)
        script.set(unchanged.subject_id, value=unchanged.value, revision="r1")
        script.set(changed.subject_id, value="2026-12-24", revision="r2")
        script.set(broken.subject_id, mode="error", status=500)
        script.set(slow.subject_id, mode="slow", delay=2)
        script.set(ambiguous.subject_id, mode="ambiguous", values=["2026-11-01", "2026-11-30"])
        with running_worker(ARTIFACTS / "celery-recheck-worker.log") as worker:
            sweep_due_rechecks.delay()

            def settled() -> bool:
                attempts = RecheckAttempt.objects.values_list("record_id", "outcome")
                per_record: dict[int, list[str]] = {}
                for record_id, outcome in attempts:
                    per_record.setdefault(record_id, []).append(outcome)
                done_once = all(per_record.get(r.pk) for r in (unchanged, changed, ambiguous))
                retried = all(len(per_record.get(r.pk, [])) == 4 for r in (broken, slow))
                return done_once and retried

            ok = wait_until(settled, timeout=90)
            assert worker.poll() is None, "the worker died"
        log = (ARTIFACTS / "celery-recheck-worker.log").read_text()[-4000:]
        assert ok, log

    def outcomes(record: MemoryRecord) -> list[str]:
        return list(RecheckAttempt.objects.filter(record=record).order_by("id").values_list("outcome", flat=True))

    def fresh(record: MemoryRecord) -> MemoryRecord:
        return MemoryRecord.objects.get(pk=record.pk)

    assert outcomes(unchanged) == ["verified_unchanged"]
    verified_before, verified_now = unchanged.last_verified_at, fresh(unchanged).last_verified_at
    assert verified_before is not None and verified_now is not None and verified_now > verified_before
    assert outcomes(changed) == ["verified_changed"]
    assert fresh(changed).status == "superseded"
    assert MemoryRecord.objects.get(subject_id=changed.subject_id, is_head=True).value == "2026-12-24"
    assert outcomes(broken) == ["source_unavailable"] * 4  # the first try and three retries
    assert outcomes(slow) == ["source_unavailable"] * 4
    assert outcomes(ambiguous) == ["source_ambiguous"]
    for record in (broken, slow, ambiguous):
        assert fresh(record).last_verified_at == record.last_verified_at  # never moved by a failure
    assert fresh(ambiguous).attention
    assert script.hits[unchanged.subject_id] == 1  # claimed once, checked once
