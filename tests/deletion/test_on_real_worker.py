"""Deletions carried by a real worker on a real broker: the whole flow, a worker killed mid-purge (taken over
by another within 30 s on the default lease and sweep), the worker's database connection lost mid-store (retried
at once), and a cache server that is down during the purge."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from deletion.models import DeletionRequest, StoreProgress
from deletion.tasks import reconcile_deletions
from memory_admin.derived import lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord
from tests.support import ARTIFACTS, DEADLINE, at, deadline
from tests.support.celery_worker import require_real_broker, running_beat, running_worker, wait_until

SUBJECT = DEADLINE["subject_id"]
pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def needs_redis_broker():
    require_real_broker()


def subject(agent) -> list[MemoryRecord]:
    lineage.log_event(
        agent,
        project_id="project-a",
        session_id="s-1",
        actor="owner",
        text=f"{SUBJECT} due Oct 30",
        occurred_at=at(10, 20),
        subject_ids=[SUBJECT],
    )
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    second = assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1)).record
    lineage.create_summary(agent, project_id="project-a", text="Due Nov 2", bases=[BaseRef(second.memory_id, 2)])
    return [first, second]


def file(api, compliance) -> str:
    response = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": "project-a", "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
        format="json",
    )
    assert response.status_code == 202
    return response.json()["id"]


def confirmed(request_id: str) -> bool:
    return DeletionRequest.objects.get(public_id=request_id).purge_confirmed_at is not None


def test_the_worker_carries_a_deletion_through_every_store(api, agent, other_agent, compliance):
    records = subject(agent)
    lineage.register_context_load(
        other_agent,
        session_id="sess-9",
        bases=[BaseRef(records[1].memory_id, 2)],
        expires_at=timezone.now() + timedelta(hours=1),
    )
    with running_worker(ARTIFACTS / "celery-deletion-worker.log") as worker:
        request_id = file(api, compliance)
        contexts = StoreProgress.objects.filter(request__public_id=request_id, store="contexts")
        assert wait_until(lambda: contexts.get().state == "waiting", timeout=60)
        assert not confirmed(request_id)  # an agent still holds a copy
        notice = api(other_agent).get("/api/v1/agents/agent-9/invalidations/").json()["results"][0]
        api(other_agent).post(f"/api/v1/agents/agent-9/invalidations/{notice['id']}/ack/")
        reconcile_deletions.delay()
        assert wait_until(lambda: confirmed(request_id), timeout=60), (
            ARTIFACTS / "celery-deletion-worker.log"
        ).read_text()[-3000:]
        assert worker.poll() is None
    report = api(compliance).get(f"/api/v1/deletion-requests/{request_id}/").json()
    assert {s["state"] for s in report["stores"]} == {"verified"}
    assert not MemoryRecord.all_objects.filter(pk__in=[r.pk for r in records]).exists()


def test_a_worker_killed_mid_purge_sets_no_stage_early_and_the_request_completes(api, agent, compliance):
    subject(agent)
    log = ARTIFACTS / "celery-deletion-kill.log"
    drill = {"DELETION_DRILL_PAUSE_SECONDS": "4", "DELETION_LEASE_SECONDS": "3"}
    with running_worker(log, **drill) as worker:
        request_id = file(api, compliance)
        rows = StoreProgress.objects.filter(request__public_id=request_id)
        assert wait_until(lambda: rows.filter(state="running").exists(), timeout=60)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    assert rows.filter(state="running").exists()
    assert not confirmed(request_id)  # no stage was set early
    assert rows.exclude(state="verified").exists()
    time.sleep(3.5)  # the dead worker's lease runs out
    with running_worker(log, **drill) as worker:
        reconcile_deletions.delay()
        assert wait_until(lambda: confirmed(request_id), timeout=120), log.read_text()[-3000:]
    assert {r.state for r in rows} == {"verified"}
    assert max(r.attempts for r in rows) >= 2  # the interrupted store was taken over


def test_a_worker_killed_mid_store_is_taken_over_by_another_within_30_seconds(api, agent, compliance):
    """Default lease and resume sweep (issue 36, item 2): the dead worker's lease is no longer renewed, beat's
    resume sweep sends the store to the live worker, without waiting for the broker to hand the dead worker's
    message out again (an hour on Redis by default)."""
    subject(agent)
    log = ARTIFACTS / "celery-deletion-takeover.log"
    hang = {"DELETION_DRILL_PAUSE_SECONDS": "600", "DELETION_DRILL_STORE": "logs"}
    with running_worker(log, **hang) as first:
        request_id = file(api, compliance)
        logs = StoreProgress.objects.filter(request__public_id=request_id, store="logs")
        assert wait_until(lambda: logs.get().state == "running", timeout=60), log.read_text()[-3000:]
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    killed = time.monotonic()
    assert logs.get().state == "running" and not confirmed(request_id)
    with running_worker(log) as second, running_beat(ARTIFACTS / "celery-deletion-takeover-beat.log"):
        assert wait_until(lambda: confirmed(request_id), timeout=30), log.read_text()[-3000:]
        took = time.monotonic() - killed
        assert second.poll() is None
    print(f"takeover: purge confirmed {took:.1f} s after the worker was killed")
    assert logs.get().state == "verified" and logs.get().attempts >= 2


@pytest.mark.postgres_only(reason="ends the worker's PostgreSQL backend with pg_terminate_backend")
def test_a_store_whose_database_connection_is_lost_is_written_back_and_retried_at_once(api, agent, compliance):
    """The worker lives on; its connection dies mid-store (as in a PostgreSQL restart). The failure is written
    back on a new connection and the store retried at once: with a lease of ten minutes and no sweep, nothing
    else could finish it within the wait."""
    subject(agent)
    log = ARTIFACTS / "celery-deletion-lost-connection.log"
    drill = {"DELETION_DRILL_PAUSE_SECONDS": "4", "DELETION_DRILL_STORE": "logs", "DELETION_LEASE_SECONDS": "600"}
    before = log.stat().st_size if log.exists() else 0  # the log is appended to, run after run
    with running_worker(log, **drill) as worker:
        request_id = file(api, compliance)
        logs = StoreProgress.objects.filter(request__public_id=request_id, store="logs")
        assert wait_until(lambda: logs.get().state == "running", timeout=60), log.read_text()[-3000:]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            assert cursor.fetchone()[0] >= 1  # the worker's connection (and its lease heartbeat's)
        assert wait_until(lambda: confirmed(request_id), timeout=60), log.read_text()[-3000:]
        assert worker.poll() is None
    assert logs.get().state == "verified" and logs.get().attempts >= 2
    assert "purge_store" in (ours := log.read_bytes()[before:].decode()) and "retry: Retry" in ours


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_cache_server_down_during_the_purge_keeps_that_store_pending_until_it_is_back(api, agent, compliance):
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.fail("redis-server is needed for this test (Debian: apt-get install redis-server).")
    subject(agent)
    port = _free_port()
    cache_url = f"redis://127.0.0.1:{port}/0"
    log = ARTIFACTS / "celery-deletion-redis.log"
    # The cache server the worker uses is not running when the purge starts.
    with running_worker(log, CACHE_URL=cache_url) as worker:
        request_id = file(api, compliance)
        rows = StoreProgress.objects.filter(request__public_id=request_id)
        assert wait_until(
            lambda: (
                rows.filter(store="caches", state="failed").exists()
                and not rows.exclude(store="caches").exclude(state="verified").exists()
            ),
            timeout=60,
        )
        caches = rows.get(store="caches")
        assert caches.last_error and caches.attempts >= 1
        assert not confirmed(request_id)
        server = subprocess.Popen(
            [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        try:
            assert wait_until(lambda: confirmed(request_id), timeout=90), log.read_text()[-3000:]
        finally:
            server.terminate()
            server.wait()
        assert worker.poll() is None
    assert rows.get(store="caches").state == "verified"
