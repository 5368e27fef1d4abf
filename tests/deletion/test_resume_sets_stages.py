"""A worker killed after it verified a request's last store but before it set the request's stages: beat's resume
sweep sets them (found by `make soak`, issue 36 item 2: the request stayed `purging` with every store verified,
until the broker would hand the dead worker's message out again, CELERY_VISIBILITY_TIMEOUT later).

The death is the moment between the last store's write-back and `finish_if_verified`: each store's task runs here
with `finish_if_verified` made a no-op, as if the process had ended right after its write-back."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import OperationalError

from deletion import tasks
from deletion.models import DeletionRequest, StoreProgress
from memory_admin.memory.actions import assert_fact
from tests.support import DEADLINE, at, deadline

URL = "/api/v1/deletion-requests/"


@pytest.mark.django_db
def test_the_resume_sweep_sets_the_stages_of_a_request_whose_stores_are_all_verified(
    api, agent, compliance, monkeypatch
) -> None:
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    filed = api(compliance).post(
        URL,
        {"project_id": "project-a", "scope": {"subject_id": DEADLINE["subject_id"]}, "reason": "Data subject request"},
        format="json",
    )
    assert filed.status_code == 202, filed.content
    request = DeletionRequest.objects.get(public_id=filed.json()["id"])

    with monkeypatch.context() as patched:
        patched.setattr(tasks, "finish_if_verified", lambda request_id: False)  # the worker died before this call
        for progress in StoreProgress.objects.filter(request=request):
            tasks.purge_store.apply(args=[progress.pk])
    request.refresh_from_db()
    assert set(request.stores.values_list("state", flat=True)) == {StoreProgress.State.VERIFIED}
    assert (request.state, request.purge_confirmed_at) == (DeletionRequest.State.PURGING, None)

    assert tasks.resume_abandoned_stores() == 1
    request.refresh_from_db()
    assert request.state == DeletionRequest.State.PURGE_CONFIRMED
    stages = api(compliance).get(f"{URL}{request.public_id}/").json()["stages"]
    order = [datetime.fromisoformat(stages[k]) for k in ("accepted_at", "removed_from_reads_at", "purge_confirmed_at")]
    assert order == sorted(order)
    verified = [when for when in request.stores.values_list("verified_at", flat=True) if when is not None]
    assert request.purge_confirmed_at is not None and len(verified) == request.stores.count()
    assert request.purge_confirmed_at >= max(verified)  # never before the last store was verified

    assert tasks.resume_abandoned_stores() == 0  # nothing left to set


@pytest.mark.django_db
def test_a_store_whose_claim_meets_a_lost_connection_is_retried_not_dropped(
    api, agent, compliance, monkeypatch
) -> None:
    """The database gone at the moment a store's task claims it (a PostgreSQL restart): the task is retried and the
    request reaches purge_confirmed, instead of failing and waiting for beat's reconcile sweep."""
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    filed = api(compliance).post(
        URL,
        {"project_id": "project-a", "scope": {"subject_id": DEADLINE["subject_id"]}, "reason": "Data subject request"},
        format="json",
    )
    request = DeletionRequest.objects.get(public_id=filed.json()["id"])
    claim = tasks._claim
    failed: list[int] = []

    def claim_after_a_lost_connection(progress_id: int) -> bool:
        if not failed:
            failed.append(progress_id)
            raise OperationalError("the database system is shutting down")
        return claim(progress_id)

    monkeypatch.setattr(tasks, "_claim", claim_after_a_lost_connection)
    for progress in StoreProgress.objects.filter(request=request):
        tasks.purge_store.apply(args=[progress.pk])
    assert failed, "the claim never met the lost connection"
    assert StoreProgress.objects.get(pk=failed[0]).state == StoreProgress.State.VERIFIED
    request.refresh_from_db()
    assert request.state == DeletionRequest.State.PURGE_CONFIRMED and request.purge_confirmed_at is not None
