"""`migrate` alone makes a database safe for the app role (docs/deploying.md, step 1; issue 28).

A brand-new database, migrated by the documented command and nothing else (`DATABASE_URL=<owner>
DATABASE_APP_ROLE=<app role> python manage.py migrate`, in its own process), then read as the app role with raw
SQL: every tenant table and every link table has its forced policy, the role holds its DML grants, and it sees
and writes only the rows of the tenant its session names. The suite's own database gets no help either
(tests/conftest.py applies nothing); this test proves the same of a database the suite did not create.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.test_rls import LINK_TABLES

pytestmark = pytest.mark.postgres_only(reason="row-level security and role grants are PostgreSQL's")

ROOT = Path(__file__).resolve().parent.parent


def _owner_url(dbname: str) -> str:
    """DATABASE_URL is the owner's under `make test` (the suite switches its own connections to the app role)."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + quote(dbname, safe="")))


def _app_role_url(dbname: str) -> str:
    parts = urlsplit(_owner_url(dbname))
    host = parts.hostname or "127.0.0.1"
    password = os.environ.get("DATABASE_APP_PASSWORD", "")
    auth = quote(settings.DATABASE_APP_ROLE, safe="") + (f":{quote(password, safe='')}" if password else "")
    return urlunsplit(parts._replace(netloc=f"{auth}@{host}:{parts.port or 5432}"))


@pytest.fixture
def fresh_database() -> Iterator[str]:
    if not settings.DATABASE_APP_ROLE:
        pytest.fail("DATABASE_APP_ROLE is not set: run the suite with `make test`.")
    name = f"{connection.settings_dict['NAME']}_fresh_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_owner_url("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(_owner_url("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _migrate(dbname: str, *args: str) -> None:
    env = {**os.environ, "DATABASE_URL": _owner_url(dbname), "DATABASE_APP_ROLE": settings.DATABASE_APP_ROLE}
    env.pop("DATABASE_APP_ROLE_TRUNCATE", None)  # what an operator runs: DML only
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _rows(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return list(conn.execute(sql, params).fetchall())


def _unpoliced(conn: psycopg.Connection[Any]) -> list[str]:
    """Tables with a tenant_id column, or hanging off one by a NOT NULL key, that lack a forced policy."""
    return [
        row[0]
        for row in _rows(
            conn,
            """
            SELECT c.relname FROM pg_class c
            WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
              AND (c.relname = ANY(%s) OR (c.relname <> 'accounts_principal' AND EXISTS (
                   SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id')))
              AND NOT (c.relrowsecurity AND c.relforcerowsecurity
                       AND EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid))
            ORDER BY 1
            """,
            (sorted(LINK_TABLES),),
        )
    ]


def test_a_database_migrated_by_the_documented_command_alone_keeps_tenants_apart(fresh_database: str) -> None:
    _migrate(fresh_database)
    role = settings.DATABASE_APP_ROLE

    with psycopg.connect(_owner_url(fresh_database), autocommit=True) as owner:
        assert _unpoliced(owner) == []
        forced = _rows(
            owner, "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relforcerowsecurity"
        )
        assert forced[0][0] >= 20 + len(LINK_TABLES)
        granted = {
            (table, privilege)
            for table, privilege in _rows(
                owner,
                "SELECT table_name, privilege_type FROM information_schema.role_table_grants WHERE grantee = %s",
                (role,),
            )
        }
        for table in ("memory_memoryrecord", "memory_auditevent", "derived_summarybase", "accounts_tenant"):
            assert {(table, p) for p in ("SELECT", "INSERT", "UPDATE", "DELETE")} <= granted, table
        assert not any(privilege == "TRUNCATE" for _, privilege in granted)  # the test-only grant is not made
        # Two tenants' rows, written as the owner (a superuser here, or BYPASSRLS in docs/deploying.md's recipe).
        a, b = (
            _rows(
                owner,
                "INSERT INTO accounts_tenant (slug, name, time_zone, created_at) VALUES (%s, %s, 'UTC', now()) RETURNING id",
                (slug, slug),
            )[0][0]
            for slug in ("fresh-a", "fresh-b")
        )
        for tenant in (a, b):
            owner.execute(
                "INSERT INTO memory_project (tenant_id, key, name, created_at) VALUES (%s, %s, %s, now())",
                (tenant, f"p{tenant}", "fresh"),
            )

    with psycopg.connect(_app_role_url(fresh_database), autocommit=True) as app:
        assert _rows(app, "SELECT current_user, rolbypassrls FROM pg_roles WHERE rolname = current_user") == [
            (role, False)
        ]
        assert _rows(app, "SELECT key FROM memory_project") == []  # no tenant set: nothing
        app.execute("SELECT set_config('app.tenant_id', %s, false)", (str(a),))
        assert _rows(app, "SELECT tenant_id, key FROM memory_project") == [(a, f"p{a}")]
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            app.execute(
                "INSERT INTO memory_project (tenant_id, key, name, created_at) VALUES (%s, 'x', 'x', now())", (b,)
            )
        assert _rows(app, "UPDATE memory_project SET key = 'moved' WHERE tenant_id = %s RETURNING id", (b,)) == []


def test_a_later_migrate_of_one_app_keeps_the_policies_and_is_idempotent(fresh_database: str) -> None:
    _migrate(fresh_database)
    with psycopg.connect(_owner_url(fresh_database), autocommit=True) as owner:
        # A policy an operator dropped by hand (or a table a later release added) is back after the next migrate.
        owner.execute("ALTER TABLE derived_summarybase NO FORCE ROW LEVEL SECURITY")
        owner.execute("DROP POLICY tenant_isolation ON memory_memoryrecord")
        assert _unpoliced(owner) == ["derived_summarybase", "memory_memoryrecord"]
    _migrate(fresh_database, "memory")  # `migrate APP`: nothing to apply, post_migrate still runs
    with psycopg.connect(_owner_url(fresh_database), autocommit=True) as owner:
        assert _unpoliced(owner) == []
        policies = _rows(owner, "SELECT count(*) FROM pg_policies WHERE schemaname = 'public'")[0][0]
    _migrate(fresh_database, "--run-syncdb")
    with psycopg.connect(_owner_url(fresh_database), autocommit=True) as owner:
        assert _rows(owner, "SELECT count(*) FROM pg_policies WHERE schemaname = 'public'")[0][0] == policies
