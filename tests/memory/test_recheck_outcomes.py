"""The recheck engine against a real HTTP canonical source on loopback: each of the five outcomes."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import FieldPolicy, MemoryRecord, RecheckAttempt
from memory_admin.memory.rechecks import recheck_now, record_recheck
from tests.support import DEADLINE, deadline
from tests.support.canonical_source import http_json_source

Result = RecheckAttempt.Result
SUBJECT = DEADLINE["subject_id"]


@pytest.fixture
def policy(admin, source):
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        canonical_source=http_json_source(source[0], timeout=0.5),
        recheck_interval=timedelta(days=1),
        recheck_before_action=True,
        on_failure=FieldPolicy.OnFailure.BLOCK_ACTION,
        risk=FieldPolicy.Risk.HIGH,
    )


@pytest.fixture
def verified_record(agent, policy):
    """Nov 2, verified three days ago, past its recheck: the demo deadline in need of a recheck."""
    past = timezone.now() - timedelta(days=3)
    return assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", past), now=past, verified_at=past).record


def reload(record: MemoryRecord) -> MemoryRecord:
    return MemoryRecord.objects.select_related("project").get(pk=record.pk)


def test_an_unchanged_value_is_verified_and_its_recheck_moves(verified_record, source, policy):
    source[1].set(SUBJECT, value="2026-11-02T17:00+09:00", revision="r18")
    before = timezone.now()
    attempt = recheck_now(verified_record, trigger="sweep")
    assert attempt.outcome == Result.VERIFIED_UNCHANGED
    record = reload(verified_record)
    assert record.last_verified_at is not None and record.last_verified_at >= before
    assert record.recheck_after == record.last_verified_at + timedelta(days=1)
    assert attempt.source_revision == "r18" and attempt.observed_value == "2026-11-02T17:00+09:00"


def test_a_changed_value_supersedes_through_assert_fact_as_the_canonical_source(verified_record, source, agent):
    source[1].set(SUBJECT, value="2026-11-05T17:00+09:00", revision="r19")
    attempt = recheck_now(verified_record, trigger="sweep")
    assert attempt.outcome == Result.VERIFIED_CHANGED
    old, new = reload(verified_record), attempt.new_record
    assert new is not None
    assert old.status == "superseded" and old.superseded_by_id == new.pk
    assert new.value == "2026-11-05T17:00+09:00" and new.status == "accepted"
    assert new.issuer.name == "canonical-source"
    assert new.last_verified_at is not None and new.source_revision == "r19"
    assert new.source_canonical_ref.startswith("task-system:")


@pytest.mark.parametrize(
    ("answer", "outcome", "words"),
    [
        ({"mode": "error", "status": 500}, Result.SOURCE_UNAVAILABLE, "HTTP 500"),
        ({"mode": "error", "status": 503}, Result.SOURCE_UNAVAILABLE, "HTTP 503"),
        ({"mode": "auth", "key": "k"}, Result.SOURCE_UNAVAILABLE, "HTTP 401"),
        ({"mode": "slow", "delay": 2}, Result.SOURCE_UNAVAILABLE, "did not answer within"),
        ({"mode": "ambiguous", "values": ["2026-11-02", "2026-11-09"]}, Result.SOURCE_AMBIGUOUS, "2 values"),
        ({"mode": "no_value"}, Result.SOURCE_AMBIGUOUS, "nothing at"),
        ({"mode": "not_json"}, Result.SOURCE_AMBIGUOUS, "did not answer JSON"),
        ({"mode": "not_found"}, Result.SOURCE_AMBIGUOUS, "HTTP 404"),
    ],
)
def test_a_failed_recheck_never_moves_last_verified_at(verified_record, source, answer, outcome, words):
    source[1].set(SUBJECT, **answer)
    before = reload(verified_record)
    attempt = recheck_now(verified_record, trigger="sweep")
    assert attempt.outcome == outcome
    assert words in attempt.error
    after = reload(verified_record)
    assert after.last_verified_at == before.last_verified_at
    assert after.recheck_after == before.recheck_after
    assert after.status == "accepted" and after.value == before.value
    if outcome == Result.SOURCE_AMBIGUOUS:
        assert after.attention  # flagged for an owner


def test_a_slow_source_is_cut_off_at_the_connector_timeout(verified_record, source):
    source[1].set(SUBJECT, mode="slow", delay=3)
    attempt = recheck_now(verified_record, trigger="sweep")
    assert attempt.duration_ms < 1500  # timeout 0.5 s, not the source's 3 s


def test_the_auth_secret_comes_from_the_environment(verified_record, source, policy, monkeypatch, bind_secret):
    bind_secret("SOURCE_SECRET_TASKS", source[0] + "/")  # the operator binds it to this tenant and this source
    policy.canonical_source = http_json_source(
        source[0], auth_header="X-Api-Key", auth_secret_env="SOURCE_SECRET_TASKS"
    )  # an allowlisted name (SOURCE_SECRET_ENV_ALLOWLIST defaults to SOURCE_SECRET_*)
    policy.save()
    source[1].set(SUBJECT, mode="auth", key="s3cret", value="2026-11-02T17:00+09:00", revision="r18")
    monkeypatch.delenv("SOURCE_SECRET_TASKS", raising=False)
    assert recheck_now(verified_record, trigger="sweep").outcome == Result.SOURCE_UNAVAILABLE  # no secret set
    monkeypatch.setenv("SOURCE_SECRET_TASKS", "s3cret")
    assert recheck_now(verified_record, trigger="sweep").outcome == Result.VERIFIED_UNCHANGED


def test_a_field_without_a_canonical_source_is_not_checked(agent):
    record = assert_fact(agent, deadline("2026-11-02", "r18", timezone.now())).record
    attempt = recheck_now(reload(record), trigger="sweep")
    assert attempt.outcome == Result.NOT_CHECKED
    assert reload(record).last_verified_at is None


def test_a_manual_field_waits_for_a_person(verified_record, policy):
    policy.canonical_source = {"connector": "manual"}
    policy.save()
    attempt = recheck_now(verified_record, trigger="sweep")
    assert attempt.outcome == Result.NOT_CHECKED
    assert "manual" in reload(verified_record).attention.lower()


@pytest.mark.parametrize("seed", range(25))
def test_last_verified_at_moves_only_on_verified_outcomes_over_random_sequences(verified_record, seed):
    rng = random.Random(seed)
    record = reload(verified_record)
    clock = timezone.now()
    expected = record.last_verified_at
    for _ in range(12):
        clock += timedelta(minutes=rng.randrange(1, 600))
        head = MemoryRecord.objects.select_related("project").get(
            subject_id=SUBJECT, is_head=True, tenant_id=record.tenant_id
        )
        outcome = rng.choice(list(Result))
        value = head.value if outcome != Result.VERIFIED_CHANGED else f"2026-12-{rng.randrange(1, 28):02d}"
        attempt = record_recheck(
            head,
            outcome=outcome,
            trigger="sweep",
            observed_value=value,
            source_revision=f"r{100 + int(clock.timestamp())}",
            now=clock,
        )
        head_after = MemoryRecord.objects.get(subject_id=SUBJECT, is_head=True, tenant_id=record.tenant_id)
        if attempt.outcome in (Result.VERIFIED_UNCHANGED, Result.VERIFIED_CHANGED):
            expected = clock
        assert head_after.last_verified_at == expected, (seed, outcome, attempt.outcome)
