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

Link tables (`link_tables`): a table without a tenant_id in its model whose NOT NULL foreign keys point at
tenant tables — a summary's bases, a plan's bases, a context's items, a deletion's per-store progress, a
dispute's candidates, a cached answer's records, and any such table added later — gets a tenant_id column
here (`add_link_tenants`), filled from its parents by a trigger that also refuses a row joining two tenants'
rows, and then the same forced policy as every tenant table. The models never name that column: Django's
inserts leave it to the trigger. `make bench-rls` measures the write path with and without it.

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
TENANT_RULE = f"{TENANT_COLUMN} = {TENANT_EXPRESSION}"
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


LINK_TRIGGER = "rls_link_tenant"


def link_tables(conn: BaseDatabaseWrapper) -> dict[str, list[tuple[str, str, str]]]:
    """Tables that hang off tenant tables without a tenant_id of their own in the models: {table: [(column,
    parent table, parent column), ...]} for each of its single-column NOT NULL foreign keys into a
    (non-exempt) tenant table. A table counts while it has no tenant_id column, and after `add_link_tenants`
    gave it one (its trigger marks it)."""
    with conn.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, a.attname, p.relname, pa.attname
            FROM pg_constraint k
            JOIN pg_class c ON c.oid = k.conrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_class p ON p.oid = k.confrelid
            JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
            JOIN pg_attribute pa ON pa.attrelid = k.confrelid AND pa.attnum = k.confkey[1]
            WHERE k.contype = 'f' AND cardinality(k.conkey) = 1 AND a.attnotnull AND c.relkind = 'r'
              AND n.nspname = current_schema() AND p.relname <> ALL(%s)
              AND EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = p.oid AND t.attname = %s
                          AND NOT t.attisdropped)
              AND (NOT EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = c.oid AND t.attname = %s
                               AND NOT t.attisdropped)
                   OR EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = %s))
            ORDER BY c.relname, a.attname
            """,
            [sorted(EXEMPT_TABLES), TENANT_COLUMN, TENANT_COLUMN, LINK_TRIGGER],
        )
        links: dict[str, list[tuple[str, str, str]]] = {}
        for table, column, parent, parent_column in cursor.fetchall():
            links.setdefault(table, []).append((column, parent, parent_column))
    return links


def add_link_tenants(conn: BaseDatabaseWrapper) -> list[str]:
    """Give each link table a tenant_id column, filled from its parents and kept so by a trigger, so that the
    same forced policy as every tenant table holds for it. Returns the tables that got the column (idempotent;
    the trigger is rebuilt each time, so a parent added later is checked too).

    Why a column and not a policy through the parents (`EXISTS` on each parent): measured with `make bench-rls`,
    PostgreSQL plans such a policy as a hashed subplan over every row of the tenant's parent table — the
    tenant's whole record table for a summary's bases — which made a batch supersession 2.7 times slower at a
    few thousand records, and grows with the tenant. The column costs one primary-key probe per parent when a
    row is written (the trigger, in its own plan), and nothing on reads beyond the usual tenant comparison.

    The trigger (BEFORE INSERT OR UPDATE, per row) sets tenant_id from the first parent and refuses a row whose
    parents belong to different tenants or are not visible (another tenant's, or none set): the error says
    row-level security, as the policy's own refusal does."""
    if conn.vendor != "postgresql":
        return []
    qn = conn.ops.quote_name
    added = []
    with conn.cursor() as cursor:
        for table, parents in link_tables(conn).items():
            cursor.execute(
                "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s AND NOT attisdropped",
                [table, TENANT_COLUMN],
            )
            column, parent, parent_column = parents[0]
            if cursor.fetchone() is None:
                cursor.execute(f"ALTER TABLE {qn(table)} ADD COLUMN {TENANT_COLUMN} bigint")
                cursor.execute(
                    f"UPDATE {qn(table)} t SET {TENANT_COLUMN} = p.{TENANT_COLUMN} FROM {qn(parent)} p "
                    f"WHERE p.{qn(parent_column)} = t.{qn(column)}"
                )
                cursor.execute(f"ALTER TABLE {qn(table)} ALTER COLUMN {TENANT_COLUMN} SET NOT NULL")
                added.append(table)
            function = qn(f"{LINK_TRIGGER}_{table}"[:63])
            lookups = "\n".join(
                f"  SELECT {TENANT_COLUMN} INTO parent_tenant FROM {qn(p)} WHERE {qn(pc)} = NEW.{qn(c)};\n"
                f"  IF parent_tenant IS NULL OR (tenant IS NOT NULL AND parent_tenant <> tenant) THEN\n"
                f"    RAISE EXCEPTION 'new row violates row-level security policy for table \"%\"', TG_TABLE_NAME\n"
                f"      USING ERRCODE = 'insufficient_privilege';\n"
                f"  END IF;\n"
                f"  tenant := parent_tenant;"
                for c, p, pc in parents
            )
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $body$\n"
                f"DECLARE tenant bigint; parent_tenant bigint;\nBEGIN\n{lookups}\n"
                f"  NEW.{TENANT_COLUMN} := tenant;\n  RETURN NEW;\nEND\n$body$"
            )
            cursor.execute(f"DROP TRIGGER IF EXISTS {LINK_TRIGGER} ON {qn(table)}")
            cursor.execute(
                f"CREATE TRIGGER {LINK_TRIGGER} BEFORE INSERT OR UPDATE ON {qn(table)} "
                f"FOR EACH ROW EXECUTE FUNCTION {function}()"
            )
    if added:
        log.info("row-level security: tenant_id added to link tables %s", ", ".join(added))
    return added


def tables_without_forced_policy(conn: BaseDatabaseWrapper) -> list[str]:
    """Tenant and link tables whose RLS is off or not forced, or which lack the tenant policy."""
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
    policed = {*tenant_tables(conn), *link_tables(conn)}
    return sorted(table for table in policed if table not in covered)


def apply_policies(conn: BaseDatabaseWrapper) -> list[str]:
    """Give each link table its tenant_id (`add_link_tenants`), then each uncovered tenant table its forced
    policy; returns the tables whose policy changed (idempotent)."""
    add_link_tenants(conn)
    changed = tables_without_forced_policy(conn)
    qn = conn.ops.quote_name
    with conn.cursor() as cursor:
        for table in changed:
            cursor.execute(f"ALTER TABLE {qn(table)} ENABLE ROW LEVEL SECURITY")
            cursor.execute(f"ALTER TABLE {qn(table)} FORCE ROW LEVEL SECURITY")
            cursor.execute(f"DROP POLICY IF EXISTS {POLICY} ON {qn(table)}")
            cursor.execute(f"CREATE POLICY {POLICY} ON {qn(table)} USING ({TENANT_RULE}) WITH CHECK ({TENANT_RULE})")
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
        return  # SQLite: the application's filters are the isolation (docs/deploying.md "Row-level security")
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
