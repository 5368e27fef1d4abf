"""Row-level security on PostgreSQL: the database itself keeps tenants apart, whatever a query forgets.

The suite runs as the app role `make test` creates (bin/ensure-app-role; tests/conftest.py switches every
connection to it after the owner migrated the test database). These tests use raw SQL and unfiltered ORM
queries on purpose: they are the "one forgotten filter" the policies must make harmless.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from memory_admin.accounts import tenancy
from memory_admin.accounts.tenancy import current_tenant_id, for_each_tenant, tenant_context
from memory_admin.derived.tasks import refresh_record_vectors
from memory_admin.derived.vectors import get_index
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord, Project
from memory_admin.rls.policies import (
    EXEMPT_TABLES,
    POLICY,
    link_tables,
    tables_without_forced_policy,
    tenant_tables,
)
from tests.support import ARTIFACTS, at, deadline
from tests.support.celery_worker import require_real_broker, running_worker, wait_until
from tests.support.rls import LINK_TABLES

pytestmark = [
    pytest.mark.postgres_only(reason="row-level security is PostgreSQL's; SQLite keeps the application's filters"),
    pytest.mark.no_ambient_tenant,
]


def _require_app_role() -> str:
    role = str(getattr(settings, "DATABASE_APP_ROLE", ""))
    if not role:
        pytest.fail("DATABASE_APP_ROLE is not set: run the suite with `make test`, which runs it as the app role.")
    return role


def _rows(sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return list(cursor.fetchall())


def _setting() -> str | None:
    return _rows("SELECT current_setting('app.tenant_id', true)")[0][0]


@pytest.fixture
def two_tenants(agent, outsider) -> dict[str, Any]:
    """A fact in acme (the agent's) and one in globex (the outsider's), each written as its own tenant."""
    with tenant_context(agent.tenant_id):
        mine = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    with tenant_context(outsider.tenant_id):
        theirs = assert_fact(outsider, deadline("2026-12-01T17:00+09:00", "g1", at(10, 20))).record
    return {"a": agent.tenant_id, "b": outsider.tenant_id, "mine": mine, "theirs": theirs}


def test_the_suite_connects_as_a_role_that_owns_nothing_and_bypasses_nothing(db):
    role = _require_app_role()
    [(user, superuser, bypass)] = _rows(
        "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
    )
    assert (user, superuser, bypass) == (role, False, False)
    assert _rows("SELECT tablename FROM pg_tables WHERE tableowner = current_user") == []
    assert _rows("SELECT datname FROM pg_database WHERE pg_get_userbyid(datdba) = current_user") == []


def test_every_table_with_a_tenant_id_has_a_forced_tenant_policy(db):
    _require_app_role()
    tables = tenant_tables(connection)
    assert tables_without_forced_policy(connection) == []
    # Keyed on the schema, not on a list: every model with a tenant column is covered, exempt ones aside.
    model_tables = {
        m._meta.db_table
        for m in apps.get_models()
        if any(getattr(f, "column", None) == "tenant_id" for f in m._meta.concrete_fields)
    }
    assert model_tables - EXEMPT_TABLES <= set(tables)
    assert {"memory_memoryrecord", "memory_auditevent", "deletion_deletionrequest"} <= set(tables)
    policies = _rows(
        "SELECT tablename, qual, with_check FROM pg_policies WHERE schemaname = current_schema() AND policyname = %s",
        [POLICY],
    )
    assert {p[0] for p in policies} >= set(tables)
    assert set(link_tables(connection)) == LINK_TABLES  # a new link table gets the same column and rule; name it
    assert LINK_TABLES <= set(tables)  # each has its tenant_id now (memory_admin/rls, add_link_tenants)
    for table, using, check in policies:
        for expression in (using, check):
            assert (
                "tenant_id = (NULLIF(current_setting('app.tenant_id'::text, true), ''::text))::bigint" in expression
            ), table


# Tables with neither a tenant_id nor a key into a tenant table: no tenant's memory content. A new table must
# be a tenant table, a link table, or named here with its reason (test below).
NOT_TENANT_DATA = {
    "accounts_tenant": "the tenants themselves",
    "accounts_principal": "identity, read before a tenant is known (EXEMPT_TABLES)",
    "accounts_apitoken": "token hashes, looked up before a tenant is known",
    "accounts_principal_groups": "Django's auth groups of a principal",
    "accounts_principal_user_permissions": "Django's auth permissions of a principal",
    "auth_group": "Django auth",
    "auth_group_permissions": "Django auth",
    "auth_permission": "Django auth",
    "axes_accessattempt": "sign-in lockout (usernames and addresses)",
    "axes_accessattemptexpiration": "sign-in lockout",
    "axes_accessfailurelog": "sign-in lockout",
    "axes_accesslog": "sign-in lockout",
    "deletion_backup": "the operator's backup catalogue (whole-database dumps)",
    "django_admin_log": "Django admin's log (staff only)",
    "django_celery_beat_clockedschedule": "beat's schedule",
    "django_celery_beat_crontabschedule": "beat's schedule",
    "django_celery_beat_intervalschedule": "beat's schedule",
    "django_celery_beat_periodictask": "beat's schedule",
    "django_celery_beat_periodictasks": "beat's schedule",
    "django_celery_beat_solarschedule": "beat's schedule",
    "django_content_type": "Django",
    "django_migrations": "Django",
    "django_session": "sessions, loaded before a tenant is known",
}


def test_every_table_is_a_tenant_table_a_link_table_or_named_as_not_tenant_data(db):
    _require_app_role()
    tables = {row[0] for row in _rows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    classified = set(tenant_tables(connection)) | set(link_tables(connection)) | set(NOT_TENANT_DATA)
    assert tables - classified == set()
    assert set(link_tables(connection)) & set(NOT_TENANT_DATA) == set()


@pytest.fixture
def linked(agent, outsider) -> dict[int, Any]:
    """In each of two tenants, a row in every link table: a summary's and a plan's bases, a context's items,
    a dispute's candidates, a cached answer's records, and a deletion's per-store progress."""
    from deletion.service import request_deletion
    from memory_admin.accounts.services import ensure_principal
    from memory_admin.derived import caches, lineage
    from memory_admin.memory.models import Dispute

    made: dict[int, Any] = {}
    for principal in (agent, outsider):
        with tenant_context(principal.tenant_id):
            record = assert_fact(principal, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
            base = [lineage.BaseRef(record.memory_id, record.revision)]
            lineage.create_summary(principal, project_id="project-a", text="Due Oct 30.", bases=base)
            lineage.schedule_action(
                principal, project_id="project-a", kind="email", payload={}, due_at=at(10, 29), bases=base
            )
            lineage.register_context_load(principal, session_id="s-1", bases=base, expires_at=at(12, 1))
            dispute = Dispute.objects.create(
                tenant_id=principal.tenant_id, project=record.project, subject_id="s", predicate="p"
            )
            dispute.candidates.add(record)
            key = caches.fact_key(principal.tenant_id, "project-a", record.subject_id, record.predicate)
            caches.store(principal.tenant_id, key, {"v": 1}, [record], ttl=60)
            officer = ensure_principal(principal.tenant.slug, f"carl-{principal.tenant_id}", ["compliance"])
            request_deletion(officer, project_id="project-a", scope={"subject_id": "nobody"}, reason="Asked.")
            made[principal.tenant_id] = {
                table: _as_dicts(f"SELECT * FROM {connection.ops.quote_name(table)}") for table in LINK_TABLES
            }
    return made


def _as_dicts(sql: str) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        names = [c.name for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.mark.parametrize("table", sorted(LINK_TABLES))
def test_a_link_table_shows_and_takes_only_rows_whose_parents_are_the_current_tenants(linked, agent, outsider, table):
    """Raw SQL on the link table, as the app role: each tenant sees its own rows only, none with no tenant set,
    and neither a copy of the other tenant's row nor a row joining a parent of each tenant can be written."""
    qn = connection.ops.quote_name
    a, b = agent.tenant_id, outsider.tenant_id
    assert linked[a][table] and linked[b][table], f"the fixture wrote no {table} row"
    assert _rows(f"SELECT count(*) FROM {qn(table)}") == [(0,)]  # no tenant: nothing
    theirs = linked[b][table][0]
    with tenant_context(a):
        assert _as_dicts(f"SELECT * FROM {qn(table)}") == linked[a][table]
        columns = [c for c in theirs if c != "id"]
        insert = (
            f"INSERT INTO {qn(table)} ({', '.join(qn(c) for c in columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
        )
        with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
            _rows(insert + " RETURNING id", [theirs[c] for c in columns])
        mine = linked[a][table][0]
        assert mine["tenant_id"] == a and theirs["tenant_id"] == b  # filled from the parents by the trigger
        for column, _, _ in link_tables(connection)[table]:  # each parent in turn taken from the other tenant
            mixed = {**mine, column: theirs[column]}
            with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
                _rows(
                    f"UPDATE {qn(table)} SET {qn(column)} = %s WHERE id = %s RETURNING id", [mixed[column], mine["id"]]
                )
        assert _rows(f"DELETE FROM {qn(table)} WHERE id = %s RETURNING id", [theirs["id"]]) == []
    with tenant_context(b):
        assert _as_dicts(f"SELECT * FROM {qn(table)}") == linked[b][table]  # untouched


def test_raw_sql_without_a_tenant_filter_sees_only_the_current_tenants_rows(two_tenants):
    _require_app_role()
    a, b = two_tenants["a"], two_tenants["b"]
    with tenant_context(a):
        assert _setting() == str(a)
        assert {row[0] for row in _rows("SELECT tenant_id FROM memory_memoryrecord")} == {a}
        assert {row[0] for row in _rows("SELECT tenant_id FROM memory_auditevent")} == {a}
        assert list(MemoryRecord.objects.values_list("memory_id", flat=True)) == [two_tenants["mine"].memory_id]
        assert not MemoryRecord.objects.filter(pk=two_tenants["theirs"].pk).exists()
    with tenant_context(b):
        assert {row[0] for row in _rows("SELECT tenant_id FROM memory_memoryrecord")} == {b}


def test_no_tenant_set_sees_no_row_of_any_tenant_table(two_tenants):
    _require_app_role()
    assert current_tenant_id() is None
    assert _setting() in (None, "")
    for table in tenant_tables(connection):
        assert _rows(f"SELECT count(*) FROM {connection.ops.quote_name(table)}") == [(0,)], table
    # ...while the rows are there: each tenant sees its own.
    for tenant_id in (two_tenants["a"], two_tenants["b"]):
        with tenant_context(tenant_id):
            assert _rows("SELECT count(*) FROM memory_memoryrecord") == [(1,)]


def test_writes_with_another_tenants_id_are_refused(two_tenants):
    _require_app_role()
    a, b = two_tenants["a"], two_tenants["b"]
    with tenant_context(a):
        with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
            Project.objects.create(tenant_id=b, key="planted")
        with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
            MemoryRecord.objects.filter(pk=two_tenants["mine"].pk).update(tenant_id=b)  # moving a row out
        # The other tenant's rows are not there to change or delete.
        assert MemoryRecord.objects.filter(pk=two_tenants["theirs"].pk).update(value="overwritten") == 0
        assert _rows("DELETE FROM memory_project WHERE tenant_id = %s RETURNING id", [b]) == []
    with tenant_context(None):
        with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
            Project.objects.create(tenant_id=a, key="no-tenant")  # no tenant set: no write either
    with tenant_context(b):
        assert MemoryRecord.objects.get(pk=two_tenants["theirs"].pk).value == two_tenants["theirs"].value
        assert not Project.objects.filter(key="planted").exists()


def test_scopes_nest_and_restore_the_previous_tenant_even_on_errors(two_tenants):
    a, b = two_tenants["a"], two_tenants["b"]
    with tenant_context(a):
        with pytest.raises(RuntimeError), tenant_context(b):
            assert _setting() == str(b)
            raise RuntimeError("boom")
        assert (current_tenant_id(), _setting()) == (a, str(a))
        with pytest.raises(DatabaseError), transaction.atomic(), tenant_context(b):
            _rows("SELECT 1/0")  # the transaction is aborted: its rollback restores the outer tenant
        assert (current_tenant_id(), _setting()) == (a, str(a))
        assert _rows("SELECT count(*) FROM memory_memoryrecord") == [(1,)]
    assert current_tenant_id() is None and _setting() in (None, "")


def test_the_cross_tenant_path_sets_each_tenant_in_turn_and_logs_the_sweep(two_tenants, caplog):
    seen: dict[int, set[int]] = {}
    with caplog.at_level("INFO", logger="memory_admin.accounts.tenancy"):
        for tenant_id in for_each_tenant("test sweep"):
            assert current_tenant_id() == tenant_id
            seen[tenant_id] = {row[0] for row in _rows("SELECT tenant_id FROM memory_memoryrecord")}
    assert seen[two_tenants["a"]] == {two_tenants["a"]} and seen[two_tenants["b"]] == {two_tenants["b"]}
    assert current_tenant_id() is None and _setting() in (None, "")
    assert any("test sweep" in r.getMessage() and str(two_tenants["b"]) in r.getMessage() for r in caplog.records)


def test_an_api_request_acts_for_its_tokens_tenant_and_leaves_none_behind(two_tenants, agent, outsider, api):
    _require_app_role()
    for principal, fact in ((agent, two_tenants["mine"]), (outsider, two_tenants["theirs"])):
        answer = api(principal).get("/api/v1/records/", {"project_id": "project-a"})
        assert answer.status_code == 200, answer.content
        assert [r["memory_id"] for r in answer.json()["results"]] == [fact.memory_id]
        assert current_tenant_id() is None and _setting() in (None, "")


@pytest.mark.django_db(transaction=True)
def test_a_connection_opened_inside_a_tenant_scope_gets_the_tenant(agent):
    _require_app_role()
    with tenant_context(agent.tenant_id):
        assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
        connection.close()  # as Django does between requests and tasks
        assert _setting() == str(agent.tenant_id)
        assert _rows("SELECT count(*) FROM memory_memoryrecord") == [(1,)]
    tenancy.activate(None)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_task_sent_for_tenant_a_cannot_read_tenant_b_on_a_real_worker(agent, outsider):
    """refresh_record_vectors reads its records by memory id alone, with no tenant filter: sent for acme
    with an acme and a globex id, the worker indexes the acme record and cannot see the globex one."""
    _require_app_role()
    require_real_broker()
    with tenant_context(agent.tenant_id):
        mine = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    with tenant_context(outsider.tenant_id):
        theirs = assert_fact(outsider, deadline("2026-12-01T17:00+09:00", "g1", at(10, 20))).record
    index = get_index()

    def indexed(record: MemoryRecord) -> bool:
        return bool(index.find(tenant_id=record.tenant_id, object_ids=[record.memory_id]))

    log = ARTIFACTS / "celery-worker-rls.log"
    with running_worker(log) as worker:
        # Each write queued its own refresh, carrying its tenant: both records get indexed.
        assert wait_until(lambda: indexed(mine) and indexed(theirs)), log.read_text()[-3000:]
        index.delete([f"record:{mine.memory_id}", f"record:{theirs.memory_id}"])
        assert not indexed(mine) and not indexed(theirs)
        with tenant_context(agent.tenant_id):
            refresh_record_vectors.delay([theirs.memory_id, mine.memory_id])
        assert wait_until(lambda: indexed(mine)), log.read_text()[-3000:]
        assert worker.poll() is None, "the worker died"
    assert not indexed(theirs)  # same task, same query: globex's row was not there for acme


@pytest.mark.parametrize("role", ['ma_app" CASCADE; DROP TABLE x; --', "MA-APP", "", "a" * 64])
def test_an_app_role_name_that_is_not_a_plain_identifier_is_refused_before_any_sql(role: str) -> None:
    """DATABASE_APP_ROLE reaches GRANT statements as an identifier: only a plain name gets that far."""
    from django.core.exceptions import ImproperlyConfigured

    from memory_admin.rls.policies import grant_app_role

    class NoDatabase:  # any use of the connection would fail the test
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the connection was used ({name}) before the name was checked")

    with pytest.raises(ImproperlyConfigured, match="plain role name"):
        grant_app_role(NoDatabase(), role)  # type: ignore[arg-type]
