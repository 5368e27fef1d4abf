"""Work enqueued after commit: never for a rolled-back transaction; one message per transaction when
batched."""

from __future__ import annotations

import pytest
from django.db import transaction

from memory_admin.queueing import enqueue_after_commit, enqueue_batched_after_commit
from tests.support.queueing import RecordingTask


@pytest.mark.django_db(transaction=True)
def test_batched_calls_of_one_transaction_share_one_message():
    task = RecordingTask()
    with transaction.atomic():
        enqueue_batched_after_commit(task, ["a", "b"])
        enqueue_batched_after_commit(task, ["b", "c"])
        assert task.calls == []  # nothing before the commit
    assert task.calls == [(["a", "b", "c"],)]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_sends_nothing_and_the_next_one_still_sends():
    task = RecordingTask()
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_batched_after_commit(task, ["lost"])
        enqueue_after_commit(task, "lost too")
        raise RuntimeError("rollback")
    assert task.calls == []
    with transaction.atomic():
        enqueue_batched_after_commit(task, ["kept"])
    assert task.calls == [(["kept"],)]


@pytest.mark.django_db(transaction=True)
def test_a_broker_failure_after_commit_is_logged_not_raised(caplog):
    class Failing(RecordingTask):
        def delay(self, *args: object) -> None:
            raise ConnectionError("broker down")

    with transaction.atomic():
        enqueue_batched_after_commit(Failing(), ["x"])
        enqueue_after_commit(Failing(), "y")
    errors = [r for r in caplog.records if r.levelname == "ERROR" and r.name == "memory_admin.queueing"]
    assert len(errors) == 2 and all(r.exc_info and "broker down" in str(r.exc_info[1]) for r in errors)
