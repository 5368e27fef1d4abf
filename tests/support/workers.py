"""Each pytest-xdist worker (`make test`, `make test-sqlite`: TEST_WORKERS processes) gets its own files, queue
and cache keys, set in the environment before Django reads its settings (this module is loaded with `-p
tests.support.workers`, pyproject.toml's addopts, earlier than any conftest), so every process a test starts — a
Celery worker, gunicorn, a management command — inherits them too:

- VAR_DIR (and with it the SQLite test database, the filesystem broker's folders, exports, backups, static
  files), VECTOR_INDEX_PATH and a file cache's folder: a subfolder named after the worker (gw0, gw1, ...);
- CELERY_TASK_DEFAULT_QUEUE and CACHE_KEY_PREFIX: the worker's name appended, so workers sharing one Redis
  neither take each other's tasks nor read each other's cached answers and throttle counts.

PostgreSQL needs nothing here: pytest-django gives each worker its own test database (test_<name>_gw0, ...).
Without xdist (PYTEST_XDIST_WORKER unset) nothing changes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.support import ROOT


def worker_environment(environ: dict[str, str], worker: str) -> dict[str, str]:
    """The variables to change for `worker` (a name like gw0), given the run's environment."""
    if not re.fullmatch(r"gw\d{1,3}", worker):
        raise ValueError(f"unexpected xdist worker name {worker!r}")
    var = Path(environ.get("VAR_DIR") or ROOT / "var" / "test") / worker
    changed = {"VAR_DIR": str(var)}
    if environ.get("VECTOR_INDEX_PATH"):
        changed["VECTOR_INDEX_PATH"] = str(var / "vectors")
    if environ.get("CACHE_URL", "").startswith("file://"):
        changed["CACHE_URL"] = f"file://{var / 'cache'}"
    if environ.get("DATABASE_URL", "").startswith("sqlite:///"):
        changed["DATABASE_URL"] = f"sqlite:///{var / 'db.sqlite3'}"
    for name, default in (("CELERY_TASK_DEFAULT_QUEUE", "tests"), ("CACHE_KEY_PREFIX", "tests")):
        changed[name] = f"{environ.get(name) or default}-{worker}"
    return changed


_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker:
    os.environ.update(worker_environment(dict(os.environ), _worker))
    Path(os.environ["VAR_DIR"]).mkdir(parents=True, exist_ok=True)
