"""Personas and helpers shared by the suite.

The suite runs on PostgreSQL (`make test` finds or starts one) and on SQLite, the embedded default
(`make test-sqlite`, a file database so a real worker process can share it). A test that needs what only
PostgreSQL has (the audit trigger, the exclusion constraint, advisory locks, row locks between sessions)
is marked `@pytest.mark.postgres_only(reason=...)` and skipped, with its reason, on SQLite.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import ensure_principal, issue_token
from memory_admin.memory.actions import Assertion, AssertResult, assert_fact

JST = datetime.fromisoformat("2026-10-20T00:00:00+09:00").tzinfo


POSTGRES = "django.db.backends.postgresql"
SQLITE = "django.db.backends.sqlite3"


def on_postgres() -> bool:
    return bool(settings.DATABASES["default"]["ENGINE"] == POSTGRES)


def pytest_sessionstart(session: pytest.Session) -> None:
    if settings.DATABASES["default"]["ENGINE"] not in (POSTGRES, SQLITE):
        pytest.exit(
            "The suite runs on PostgreSQL (`make test`) or SQLite (`make test-sqlite`); "
            f"DATABASE_URL names {settings.DATABASES['default']['ENGINE']}.",
            returncode=2,
        )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "no_ambient_tenant: on PostgreSQL, no tenant follows the test's own code (tests/test_rls.py)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("postgres_only")
        if marker is None:
            continue
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
        if not reason:
            raise pytest.UsageError(f"{item.nodeid}: postgres_only needs reason=... (what only PostgreSQL has)")
        if not on_postgres():
            item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {reason}"))


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """On SQLite the test database is a file under VAR_DIR (not Django's default in-memory database),
    so the Celery worker the celery tests start, another process, opens the same database. No test may open
    that file or its -wal/-shm itself (only through SQLite): closing the descriptor drops this process's
    POSIX locks on it, and the worker then deletes the WAL under this process's connection (a walk over
    VAR_DIR reads them in a child process: tests/test_deletion_marker_scan.py, scan_var)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] == SQLITE and not db.get("TEST", {}).get("NAME"):
        db.setdefault("TEST", {})["NAME"] = str(Path(settings.VAR_DIR) / "test-db.sqlite3")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Under `make test` (DATABASE_APP_ROLE set), pytest-django creates the test database and runs `migrate`
    on it as the owner — the documented command, nothing more: its post_migrate applies the tenant policies
    and grants the app role its DML (memory_admin/rls); `--reuse-db` runs that migrate again, and it is
    idempotent. The suite itself applies no policy and grants nothing. Then every connection of the suite —
    this process, the live servers' threads, the Celery workers tests/celery_worker.py starts — logs in as the
    app role, as production's processes do, under row-level security. The owner is back for pytest-django's
    teardown, which drops the database."""
    from django.db import connection

    role = getattr(settings, "DATABASE_APP_ROLE", "")
    if not on_postgres() or not role:
        yield
        return
    db = connection.settings_dict
    owner = {"USER": db["USER"], "PASSWORD": db.get("PASSWORD", "")}
    _OWNER.update(owner)
    with django_db_blocker.unblock():
        connection.close()
    db.update(USER=role, PASSWORD=os.environ.get("DATABASE_APP_PASSWORD", ""))
    # Backups and restores are the owner's (pg_dump cannot read what the policies hide from the app role).
    backup_user = (settings.BACKUP_DATABASE_USER, settings.BACKUP_DATABASE_PASSWORD)
    settings.BACKUP_DATABASE_USER, settings.BACKUP_DATABASE_PASSWORD = owner["USER"], owner["PASSWORD"]
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            connection.close()
        db.update(owner)
        settings.BACKUP_DATABASE_USER, settings.BACKUP_DATABASE_PASSWORD = backup_user


@pytest.fixture(scope="session", autouse=True)
def _vector_index_of_this_embedder() -> None:
    """A test run's vector index (under TEST_VAR, kept between runs) built by another embedder is emptied for this
    one, as `make run` does before serving (`reindex_vectors --if-needed`): the test database is new, so there is
    nothing to re-embed."""
    from memory_admin.derived.vectors import get_index

    index = get_index()
    if index.stored_embedder() not in (None, index.embedder.name):
        index.recreate()


# The owner's credentials while the suite runs as the app role (empty on SQLite or without an app role).
_OWNER: dict[str, str] = {}


@pytest.fixture
def as_db_owner() -> Iterator[None]:
    """Migrations are the owner's: a test that runs migrations connects as the owner for its duration
    (the app role may not alter tables); every other test stays the app role."""
    from django.db import connection

    if not _OWNER:
        yield
        return
    db = connection.settings_dict
    app = {"USER": db["USER"], "PASSWORD": db.get("PASSWORD", "")}
    connection.close()
    db.update(_OWNER)
    try:
        yield
    finally:
        connection.close()
        db.update(app)


@pytest.fixture(autouse=True)
def _ambient_tenant(request: pytest.FixtureRequest) -> Iterator[None]:
    """The tenant a test's own code acts for on PostgreSQL, where row-level security shows a query only the
    rows of the tenant set (memory_admin.accounts.tenancy). A door sets it from its principal (a request, a
    task, a command); a test that calls the domain and reads rows directly stands in for a door of the
    personas' tenant: the first tenant created in the test, or `acme` (the personas') once it exists. A
    test that works in another tenant says so with `tenant_context`; the ambient tenant never overrides it,
    and no request or worker inherits it (each door sets its own, and restores this one after). Tests marked
    `no_ambient_tenant` (tests/test_rls.py) get none. Nothing set by one test survives into the next."""
    from memory_admin.accounts import tenancy

    tenancy._current.set(None)  # whatever an earlier test left set (a view called without its request scope)
    if not on_postgres():
        yield
        tenancy._current.set(None)
        return
    from django.db.models.signals import post_save

    from memory_admin.accounts.models import Tenant

    ambient: list[int] = []

    def follow(sender: Any, instance: Tenant, created: bool, **kwargs: Any) -> None:
        current = tenancy.current_tenant_id()
        if not created or (current is not None and current not in ambient):
            return  # an explicit tenant_context is in force
        if current is None or instance.slug == "acme":
            ambient.append(instance.pk)
            tenancy.activate(instance.pk)

    if not request.node.get_closest_marker("no_ambient_tenant"):
        post_save.connect(follow, sender=Tenant, dispatch_uid="tests._ambient_tenant", weak=False)
    try:
        yield
    finally:
        post_save.disconnect(sender=Tenant, dispatch_uid="tests._ambient_tenant")
        tenancy._current.set(None)
        from django.db import connection

        if connection.connection is not None and not connection.in_atomic_block:
            with request.getfixturevalue("django_db_blocker").unblock():
                try:
                    tenancy.activate(None)  # a transactional test's session keeps what it set
                except Exception:
                    connection.close()


_ID_BLOCKS = itertools.count(1)


@pytest.fixture(autouse=True)
def _ids_never_come_back(request: pytest.FixtureRequest, django_db_blocker: Any) -> None:
    """On SQLite a rolled-back test gives its ids back (AUTOINCREMENT's counter rolls back with the rows), so
    the next test's tenant is id 1 again; PostgreSQL's sequences never go back. State that outlives a test
    and is keyed by id (the vector index, the cache, project ids remembered per process) relies on that:
    here each test's ids start at a fresh block, committed before the test's transaction begins."""
    if not settings.DATABASES["default"]["ENGINE"] == SQLITE:
        return
    if request.node.get_closest_marker("django_db") is None and "django_db_setup" not in request.fixturenames:
        return  # a test without the database: nothing to do (and no test database yet, maybe)
    request.getfixturevalue("django_db_setup")  # the test database exists before its counters are moved
    from django.db import connection

    with django_db_blocker.unblock():
        if connection.in_atomic_block:
            return  # already inside a test transaction: a bump here would roll back with it
        base = next(_ID_BLOCKS) * 10_000_000
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%'")
            tables = [row[0] for row in cursor.fetchall()]
            cursor.execute("DELETE FROM sqlite_sequence")
            cursor.executemany("INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [(t, base) for t in tables])


def run_purge(request: Any) -> None:
    """What the worker does with an accepted deletion request: each store's task in turn, in this process (the
    worker tests run them in a real worker)."""
    from deletion.models import StoreProgress
    from deletion.tasks import purge_store

    for progress in StoreProgress.objects.filter(request=request):
        purge_store.apply(args=[progress.pk])


def at(month: int, day: int, hour: int = 9, minute: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=JST)


@pytest.fixture
def owner(db: None) -> Principal:
    return ensure_principal("acme", "olivia", ["owner"], password="pw-olivia", validate=False)


@pytest.fixture
def compliance(db: None) -> Principal:
    return ensure_principal("acme", "carl", ["compliance"], password="pw-carl", validate=False)


@pytest.fixture
def admin(db: None) -> Principal:
    return ensure_principal("acme", "ada", ["admin"], password="pw-ada", validate=False)


@pytest.fixture
def agent(db: None) -> Principal:
    return ensure_principal("acme", "agent-7", ["agent"])


@pytest.fixture
def other_agent(db: None) -> Principal:
    return ensure_principal("acme", "agent-9", ["agent"])


@pytest.fixture
def outsider(db: None) -> Principal:
    """Another tenant's principal holding every role: it must still see nothing of acme."""
    return ensure_principal(
        "globex", "oscar", ["owner", "admin", "agent", "compliance"], password="pw-oscar", validate=False
    )


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
def bind_secret(settings):
    """bind_secret(NAME, url_prefix, ..., tenants=("acme",)): the operator's SOURCE_SECRET_BINDINGS entry for one
    secret variable (docs/canonical-sources.md), parsed as settings.py parses it."""
    import json

    from memory_admin.lib.source_settings import parse_secret_bindings

    def bind(name: str, *urls: str, tenants: tuple[str, ...] = ("acme",)) -> None:
        entry = parse_secret_bindings(json.dumps({name: {"tenants": list(tenants), "urls": list(urls)}}))
        settings.SOURCE_SECRET_BINDINGS = {**settings.SOURCE_SECRET_BINDINGS, **entry}

    return bind


@pytest.fixture
def source():
    """A stand-in canonical source on loopback: (base URL, the script of its answers)."""
    from tests.canonical_source import serving

    with serving() as (base_url, script):
        yield base_url, script
