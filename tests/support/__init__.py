"""Plain helpers shared by the suite: where the repository is, which database the suite runs on, the article's
deadline as an assertion and as an API body, times in the demo's zone, and running a deletion's purge here.

    from tests.support import DEADLINE, at, body, deadline

Fixtures and hooks live in tests/conftest.py; helpers of one kind in the modules beside this one
(tests/README.md lists them). This module imports nothing of the project at import time: pytest loads
tests/support/workers.py (`-p tests.support.workers`) before Django is set up, and that imports this package.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

if TYPE_CHECKING:
    from memory_admin.memory.actions import Assertion

# The repository's root, and where tests leave what helps to read a failure (screenshots, worker logs).
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts"

JST = datetime.fromisoformat("2026-10-20T00:00:00+09:00").tzinfo

POSTGRES = "django.db.backends.postgresql"
SQLITE = "django.db.backends.sqlite3"


def on_postgres() -> bool:
    return bool(settings.DATABASES["default"]["ENGINE"] == POSTGRES)


def run_purge(request: Any) -> None:
    """What the worker does with an accepted deletion request: each store's task in turn, in this process (the
    worker tests run them in a real worker)."""
    from deletion.models import StoreProgress
    from deletion.tasks import purge_store

    for progress in StoreProgress.objects.filter(request=request):
        purge_store.apply(args=[progress.pk])


def at(month: int, day: int, hour: int = 9, minute: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=JST)


DEADLINE: dict[str, Any] = {
    "project_id": "project-a",
    "subject_id": "task-proposal-017",
    "predicate": "submission_deadline",
}
TASK_REF = "task-system:project-a/task-proposal-017"


def deadline(value: Any, revision: str, valid_from: datetime, **kwargs: Any) -> Assertion:
    from memory_admin.memory.actions import Assertion

    return Assertion(
        **DEADLINE,
        value=value,
        valid_from=valid_from,
        source_canonical_ref=kwargs.pop("ref", TASK_REF),
        source_revision=revision,
        **kwargs,
    )


def body(assertion: Assertion) -> dict[str, Any]:
    """The API body for an assertion."""
    data: dict[str, Any] = {
        "project_id": assertion.project_id,
        "subject_id": assertion.subject_id,
        "predicate": assertion.predicate,
        "value": assertion.value,
        "valid_from": assertion.valid_from.isoformat(),
        "source": {"canonical_ref": assertion.source_canonical_ref, "revision": assertion.source_revision},
    }
    if assertion.valid_to is not None:
        data["valid_to"] = assertion.valid_to.isoformat()
    if assertion.expected_revision is not None:
        data["expected_revision"] = assertion.expected_revision
    return data
