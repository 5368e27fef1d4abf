"""Personas and helpers shared by the suite.

The suite runs against PostgreSQL (`make test` finds or starts one): the constraints it checks, the
advisory locks and the audit trigger exist only there.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import ensure_principal, issue_token
from memory_admin.memory.actions import Assertion, AssertResult, assert_fact

JST = datetime.fromisoformat("2026-10-20T00:00:00+09:00").tzinfo


def pytest_sessionstart(session: pytest.Session) -> None:
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.exit("The suite needs PostgreSQL: run it with `make test` (or set DATABASE_URL).", returncode=2)


def at(month: int, day: int, hour: int = 9, minute: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=JST)


@pytest.fixture
def owner(db: None) -> Principal:
    return ensure_principal("acme", "olivia", ["owner"], password="pw-olivia")


@pytest.fixture
def compliance(db: None) -> Principal:
    return ensure_principal("acme", "carl", ["compliance"], password="pw-carl")


@pytest.fixture
def admin(db: None) -> Principal:
    return ensure_principal("acme", "ada", ["admin"], password="pw-ada")


@pytest.fixture
def agent(db: None) -> Principal:
    return ensure_principal("acme", "agent-7", ["agent"])


@pytest.fixture
def other_agent(db: None) -> Principal:
    return ensure_principal("acme", "agent-9", ["agent"])


@pytest.fixture
def outsider(db: None) -> Principal:
    """Another tenant's principal holding every role: it must still see nothing of acme."""
    return ensure_principal("globex", "oscar", ["owner", "admin", "agent", "compliance"], password="pw-oscar")


@pytest.fixture
def api() -> Callable[[Principal], APIClient]:
    def client_for(principal: Principal) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(principal)}")
        return client

    return client_for


DEADLINE = {"project_id": "project-a", "subject_id": "task-proposal-017", "predicate": "submission_deadline"}
TASK_REF = "task-system:project-a/task-proposal-017"


def deadline(value: str, revision: str, valid_from: datetime, **kwargs: Any) -> Assertion:
    return Assertion(
        **DEADLINE,
        value=value,
        valid_from=valid_from,
        source_canonical_ref=kwargs.pop("ref", TASK_REF),
        source_revision=revision,
        **kwargs,
    )


@pytest.fixture
def moved_deadline(agent: Principal) -> tuple[AssertResult, AssertResult]:
    """The article's story: Oct 30 told on Oct 20 (r17), moved to Nov 2 on Oct 22 (r18)."""
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)), now=at(10, 20, 9, 1))
    second = assert_fact(
        agent,
        deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1),
        now=at(10, 22, 9, 1),
    )
    return first, second


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


@pytest.fixture
def source():
    """A stand-in canonical source on loopback: (base URL, the script of its answers)."""
    from tests.canonical_source import serving

    with serving() as (base_url, script):
        yield base_url, script
