"""The planner's statistics brought up to date after a large import (issue 36, item 4).

A tenant that imports its memory into a large table is invisible to PostgreSQL's statistics until the table is
analyzed again, and autovacuum gets to it only after its naptime and its queue (migration 0014 made it analyze
after 10,000 rows + 0.2 %, but does not make it come sooner): meanwhile the planner estimates the tenant's rows
at none and picks plans for an empty tenant, and a read by `memory_id` took 50-100 ms instead of well under one.
So a batch of `STATS_REFRESH_BATCH_MIN` assertions or more queues `refresh_planner_statistics` after commit, and
`manage.py import` runs it when it ends: the tables whose changed rows since their last analysis reach
`STATS_REFRESH_MIN_ROWS` are analyzed then.

Who may analyze: only a table's owner (PostgreSQL 15), and the web processes and workers connect as the app role,
which owns nothing. Migration 0017 creates `memory_refresh_planner_statistics(min_changed)` as the owner, with
SECURITY DEFINER: it analyzes only the fixed tables below, only those past the threshold (1,000 rows at least,
whatever the caller asks), and skips when another session is analyzing already (an advisory lock), so calling it
often costs one read of pg_stat_user_tables. It takes no name from its caller.
SQLite has no such statistics to go stale: nothing to do there.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

# The tables a large import grows: the records, and the audit events written with them.
TABLES = ("memory_memoryrecord", "memory_auditevent")
FUNCTION = "memory_refresh_planner_statistics"


def refresh(min_changed: int | None = None) -> list[str]:
    """Analyze the tables past `min_changed` changed rows (default STATS_REFRESH_MIN_ROWS); answers their names
    (none on SQLite, none when another session is analyzing)."""
    if connection.vendor != "postgresql":
        return []
    threshold = settings.STATS_REFRESH_MIN_ROWS if min_changed is None else min_changed
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {FUNCTION}(%s)", [int(threshold)])
        row = cursor.fetchone()
    return list(row[0] or []) if row else []


def create_function_sql() -> str:
    tables = ", ".join(f"'{t}'" for t in TABLES)
    # The advisory lock key: any constant of this product's own; the table names are constants (quoted by
    # quote_ident), never input. No percent sign: the migration's SQL goes through the driver's placeholders.
    return f"""
CREATE OR REPLACE FUNCTION {FUNCTION}(min_changed bigint) RETURNS text[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    analyzed text[] := '{{}}';
    t text;
BEGIN
    IF NOT pg_try_advisory_xact_lock(736036001) THEN
        RETURN analyzed;
    END IF;
    FOR t IN
        SELECT s.relname FROM pg_stat_user_tables s
        WHERE s.relid IN (SELECT c.oid FROM pg_class c WHERE c.relname IN ({tables})
                          AND c.relnamespace = current_schema()::regnamespace)
          AND s.n_mod_since_analyze >= GREATEST(min_changed, 1000)
        ORDER BY s.relname
    LOOP
        EXECUTE 'ANALYZE ' || quote_ident(t);
        analyzed := analyzed || t;
    END LOOP;
    RETURN analyzed;
END
$$
"""


def drop_function_sql() -> str:
    return f"DROP FUNCTION IF EXISTS {FUNCTION}(bigint)"
