"""What every bench shares before it measures: the bench tenant's names, Django's set-up, the bench agent, and
the servers' cache. Its own module so that the benches import it, and never each other for it (bench/run.py
and bench/cas_floor.py, bench/load.py used to import one another; tests/ops/test_bench_imports_downward.py keeps the
package free of import cycles)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
TENANT = "bench"
AGENT = "bench-agent"


def setup_django() -> None:
    """Import Django with the project's settings; the bench runs with DEBUG off, like production."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "memory_admin.settings"
    os.environ.setdefault("DEBUG", "0")  # DEBUG on would log every query and skew the figures
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    # The production profile redirects plain http to https; the bench's in-process clients speak plain http.
    os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
    import django

    django.setup()


def bench_principal() -> Any:
    from memory_admin.accounts.models import Principal

    return Principal.objects.select_related("tenant").get(username=f"{AGENT}@{TENANT}")


def choose_cache(wanted: str) -> tuple[str, str]:
    """The servers' cache and why: `--cache` (default a local Redis, shared by the workers as in production,
    with a key prefix of this run); locmem when nothing answers there. Locmem is one cache per worker of at most
    300 entries (Django's default): 2,000 keys over 4 workers do not fit, so most answers would be misses, each
    a cache fill that writes its manifest (derived.caches.store), which is not the path measured."""
    if not wanted.startswith("redis://"):
        return wanted, "as asked"
    from bench.rechecks import ensure_broker

    problem = ensure_broker(wanted)  # the same reachability check (and bin/ensure-redis) as the Celery broker
    if problem:
        return "locmem://", f"locmem: {problem}; answers will mostly miss"
    return wanted, "shared by the workers, as in production"
