"""The settings the fault handling rests on (issue 36, item 2; docs/operations.md "Faults"), read as a process
of the product reads them at start: the Redis broker's visibility timeout, the cache's socket timeouts, the
deletion lease and beat's resume sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import ROOT

PRINT = (
    "import json, django; django.setup(); from django.conf import settings as s; print(json.dumps({"
    "'broker': getattr(s, 'CELERY_BROKER_TRANSPORT_OPTIONS', {}), 'cache': s.CACHES['default'].get('OPTIONS', {}),"
    "'lease': s.DELETION_LEASE_SECONDS, 'resume': s.CELERY_BEAT_SCHEDULE['resume-abandoned-deletion-stores']}))"
)


def _settings(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "DJANGO_SETTINGS_MODULE": "memory_admin.settings", **env}
    return subprocess.run(
        [sys.executable, "-c", PRINT], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


def test_the_redis_broker_hands_a_dead_workers_message_out_again_after_minutes_not_an_hour() -> None:
    done = _settings(CELERY_BROKER_URL="redis://127.0.0.1:6379/15", CACHE_URL="redis://127.0.0.1:6379/13")
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["broker"] == {"visibility_timeout": 900}
    assert read["cache"] == {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5}
    # A killed worker's store is taken over within lease + sweep: under the 30 s the issue asks.
    assert read["lease"] + read["resume"]["schedule"] < 30
    assert read["resume"]["task"] == "deletion.tasks.resume_abandoned_stores"


def test_the_operator_may_change_them_within_bounds() -> None:
    done = _settings(CELERY_BROKER_URL="redis://127.0.0.1:6379/15", CELERY_VISIBILITY_TIMEOUT="3600")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["broker"] == {"visibility_timeout": 3600}
    refused = _settings(CELERY_BROKER_URL="redis://127.0.0.1:6379/15", CELERY_VISIBILITY_TIMEOUT="5")
    assert refused.returncode != 0 and "CELERY_VISIBILITY_TIMEOUT" in refused.stderr
