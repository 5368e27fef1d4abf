"""A real Celery worker process, on the broker the suite runs with, reading the test database
(PostgreSQL under `make test`; under `make test-sqlite`, the SQLite test file and the filesystem broker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from tests.support import ROOT


def _test_database_url() -> str:
    """The test database (not the one DATABASE_URL names), as a URL settings.py parses for the worker."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        name = str(db["NAME"])
        if connection.is_in_memory_db():  # type: ignore[attr-defined]  # the SQLite wrapper's own method
            raise RuntimeError(f"The SQLite test database {name!r} is in memory; a worker process cannot open it.")
        return f"sqlite:///{Path(name).resolve()}"
    if connection.vendor != "postgresql":
        raise RuntimeError(f"No worker database URL for the {connection.vendor!r} backend.")
    auth = quote(db["USER"], safe="") + (f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{quote(db['NAME'], safe='')}"


def require_real_broker() -> None:
    """`make test` runs the celery tests on Redis: a filesystem broker there means Redis was not found.
    `make test-sqlite` runs them on the filesystem broker on purpose (the embedded default)."""
    if settings.CELERY_BROKER_URL.startswith("filesystem://") and connection.vendor == "postgresql":
        pytest.fail("No Redis broker: `make test` starts Redis on 127.0.0.1:6379 when redis-server is installed.")


def _environment(extra_env: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        **extra_env,
        "DATABASE_URL": _test_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CELERY_TASK_DEFAULT_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE,
    }


@contextmanager
def _celery_process(log_path: Path, args: list[str], extra_env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "memory_admin", *args],
            cwd=ROOT,
            env=_environment(extra_env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def running_worker(log_path: Path, **extra_env: str) -> Iterator[subprocess.Popen[bytes]]:
    args = ["worker", "--pool=solo", "--loglevel=INFO", "--without-mingle", "--without-gossip"]
    with _celery_process(log_path, [*args, "-Q", settings.CELERY_TASK_DEFAULT_QUEUE], extra_env) as worker:
        yield worker


@contextmanager
def running_beat(log_path: Path, **extra_env: str) -> Iterator[subprocess.Popen[bytes]]:
    """Celery beat sending the product's schedule (settings.CELERY_BEAT_SCHEDULE) to the test's queue; its
    state in a file beside the log (the database scheduler's tables are the operator's, not the test's)."""
    state = log_path.with_suffix(".schedule")
    for leftover in log_path.parent.glob(state.name + "*"):
        leftover.unlink()
    args = ["beat", "--loglevel=INFO", "-S", "celery.beat:PersistentScheduler", "--schedule", str(state)]
    with _celery_process(log_path, args, extra_env) as beat:
        yield beat


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False
