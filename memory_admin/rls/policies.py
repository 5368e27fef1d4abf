"""Tenant policies on PostgreSQL, applied to every table that has a `tenant_id` column.

One place, keyed on the schema rather than on a list: after each `migrate` (post_migrate), every table of the
schema with a `tenant_id` column, whichever app made it, gets ENABLE and FORCE ROW LEVEL SECURITY and the
policy `tenant_isolation` (USING and WITH CHECK: the row's tenant is the one set by
memory_admin.accounts.tenancy; with none set, no row). tests/test_rls.py fails when a table lacks it.

Exempt (EXEMPT_TABLES): `accounts_principal`, the identity table that is read before any tenant is known —
the sign-in looks a login up by username, the session middleware loads the signed-in principal by id, the
API loads a token's principal. Its rows hold no memory content; every door then scopes the work to the
principal's tenant. Tables without a tenant_id column (tenants themselves, API tokens, sessions, lockout
attempts, Celery beat's schedule) are not tenant rows.

Run by the owner (migrations): the web app's role can neither create nor drop policies. When
`DATABASE_APP_ROLE` is set, the same step grants that role DML on the schema's tables and sequences, now and
for tables the migrating role creates later.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

log = logging.getLogger(__name__)

POLICY = "tenant_isolation"
TENANT_COLUMN = "tenant_id"
TENANT_EXPRESSION = "NULLIF(current_setting('app.tenant_id', true), '')::bigint"
EXEMPT_TABLES = frozenset({"accounts_principal"})


def tenant_tables(conn: BaseDatabaseWrapper) -> list[str]:
    """Tables of the current schema with a tenant_id column, exempt ones left out."""
    with conn.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.table_name FROM information_schema.columns c
            JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE c.table_schema = current_schema() AND c.column_name = %s AND t.table_type = 'BASE TABLE'
            ORDER BY c.table_name
            """,
            [TENANT_COLUMN],
        )
        return [row[0] for row in cursor.fetchall() if row[0] not in EXEMPT_TABLES]


def tables_without_forced_policy(conn: BaseDatabaseWrapper) -> list[str]:
    """Tenant tables whose RLS is off or not forced, or which lack the tenant policy."""
    with conn.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND c.relrowsecurity AND c.relforcerowsecurity
              AND EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %s)
            """,
            [POLICY],
        )
        covered = {row[0] for row in cursor.fetchall()}
    return [table for table in tenant_tables(conn) if table not in covered]


def apply_policies(conn: BaseDatabaseWrapper) -> list[str]:
    """Give each uncovered tenant table its forced policy; returns the tables changed (idempotent)."""
    changed = tables_without_forced_policy(conn)
    qn = conn.ops.quote_name
    with conn.cursor() as cursor:
        for table in changed:
            cursor.execute(f"ALTER TABLE {qn(table)} ENABLE ROW LEVEL SECURITY")
            cursor.execute(f"ALTER TABLE {qn(table)} FORCE ROW LEVEL SECURITY")
            cursor.execute(f"DROP POLICY IF EXISTS {POLICY} ON {qn(table)}")
            cursor.execute(
                f"CREATE POLICY {POLICY} ON {qn(table)} "
                f"USING ({TENANT_COLUMN} = {TENANT_EXPRESSION}) WITH CHECK ({TENANT_COLUMN} = {TENANT_EXPRESSION})"
            )
    if changed:
        log.info("row-level security: tenant policy applied to %s", ", ".join(changed))
    return changed


APP_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def grant_app_role(conn: BaseDatabaseWrapper, role: str, *, truncate: bool = False) -> None:
    """DML on every table and sequence of the schema for the app role, now and (default privileges) for the
    tables the current role creates later. `truncate` only for the test suite (Django's flush).

    The role's name comes from the environment (DATABASE_APP_ROLE) and is put into SQL as an identifier;
    quote_name does not escape quotes, so anything but a plain lower-case name is refused first."""
    if not APP_ROLE_NAME.fullmatch(role):
        raise ImproperlyConfigured(
            f"DATABASE_APP_ROLE must be a plain role name (lower-case letters, digits, _; at most 63): {role!r}"
        )
    qn = conn.ops.quote_name
    table_privileges = "SELECT, INSERT, UPDATE, DELETE" + (", TRUNCATE" if truncate else "")
    with conn.cursor() as cursor:
        cursor.execute(f"GRANT USAGE ON SCHEMA public TO {qn(role)}")
        cursor.execute(f"GRANT {table_privileges} ON ALL TABLES IN SCHEMA public TO {qn(role)}")
        cursor.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {qn(role)}")
        cursor.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {table_privileges} ON TABLES TO {qn(role)}")
        cursor.execute(
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {qn(role)}"
        )


def _is_owner(conn: BaseDatabaseWrapper) -> bool:
    """Whether the connected role may change the schema's tables (the owner, or a superuser)."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper OR EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = current_schema() "
            "AND tableowner = current_user) FROM pg_roles WHERE rolname = current_user"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def on_post_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    conn = connections[using]
    if conn.vendor != "postgresql":
        return  # SQLite: the application's filters are the isolation (README "Row-level security")
    if not _is_owner(conn):
        # The app role after a test flush: it cannot change policies, and it must not need to.
        missing = tables_without_forced_policy(conn)
        if missing:
            log.error("row-level security missing on %s; run migrate as the owner", ", ".join(missing))
        return
    apply_policies(conn)
    role = getattr(settings, "DATABASE_APP_ROLE", "")
    if role:
        grant_app_role(conn, role, truncate=getattr(settings, "DATABASE_APP_ROLE_TRUNCATE", False))
