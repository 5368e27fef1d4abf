"""Domain tasks run on a real worker over the real broker (Redis under `make test`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import AuditCheckpoint, AuditEvent, MemoryRecord
from memory_admin.memory.tasks import checkpoint_audit_chains, settle_valid_time_transitions
from tests.support import ARTIFACTS, deadline
from tests.support.celery_worker import require_real_broker, running_worker, wait_until


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_worker_settles_records_whose_validity_ended(agent):
    require_real_broker()
    now = timezone.now()
    ended = assert_fact(agent, deadline("2026-10-30", "r17", now - timedelta(days=3), valid_to=now - timedelta(days=1)))
    assert ended.record.status == "accepted"
    with running_worker(ARTIFACTS / "celery-worker.log") as worker:
        settle_valid_time_transitions.delay()
        settled = wait_until(lambda: MemoryRecord.objects.get(pk=ended.record.pk).status == "expired")
        assert worker.poll() is None, "the worker died"
    assert settled, (ARTIFACTS / "celery-worker.log").read_text()[-3000:]


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_worker_signs_a_checkpoint_at_the_end_of_a_chain_that_grew(agent):
    """The beat task `checkpoint-audit-chains` (issue 35, item 1), tenant by tenant under row-level security."""
    require_real_broker()
    assert_fact(agent, deadline("2026-10-30", "r17", timezone.now() - timedelta(days=1)))
    assert_fact(agent, deadline("2026-11-02", "r18", timezone.now(), expected_revision=1))
    points = AuditCheckpoint.objects.filter(tenant_id=agent.tenant_id)
    signed = points.count()
    with running_worker(ARTIFACTS / "celery-worker.log") as worker:
        checkpoint_audit_chains.delay()
        grew = wait_until(lambda: points.count() == signed + 1)
        assert worker.poll() is None, "the worker died"
    assert grew, (ARTIFACTS / "celery-worker.log").read_text()[-3000:]
    last = AuditEvent.objects.filter(tenant_id=agent.tenant_id).latest("id")
    assert points.order_by("-event_id").values_list("event_id", flat=True).first() == last.pk
