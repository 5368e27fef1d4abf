"""Maintained record counts for the overview (PostgreSQL only; SQLite counts exactly, see memory/stats.py).

Counting 10M rows per overview is not acceptable, and the freshness buckets move with the clock, so
the counts are kept per (tenant, status, verified or not, day of `recheck_after`): any bucket edge
(`now`, `now + 1 day`, ...) falls inside one day, whose few rows stats.py counts exactly.

- `memory_recordcount`: the folded totals, one row per key.
- `memory_recordcountdelta`: what changed since the last fold, appended by triggers on
  memory_memoryrecord: INSERT and DELETE at statement level (transition tables: one INSERT ... SELECT
  per statement, whatever its size, COPY included); UPDATE at row level, only for rows whose key
  columns changed (an UPDATE that sets none of them, such as claiming rechecks, costs nothing).
  Append-only, so concurrent writers never wait on a shared counter row. stats.fold_counts() moves
  the deltas into the totals.
- TRUNCATE of the records (test flushes) truncates both.
The initial totals are counted from the table in the same transaction as the triggers are created.
"""

from __future__ import annotations

from django.db import migrations

from memory_admin.migration_helpers import on_postgres

# Day of recheck_after in days since 1970-01-01 UTC; NULL (no recheck scheduled) is the sentinel
# -2147483648, a day no timestamptz can have (stats.NO_DUE_DAY).
DAY = "coalesce(floor(extract(epoch FROM {0}) / 86400)::integer, -2147483648)"
KEY = "tenant_id, status, last_verified_at IS NOT NULL, " + DAY.format("recheck_after")

FORWARD = [
    """
    CREATE TABLE memory_recordcount (
        tenant_id bigint NOT NULL,
        status varchar(20) NOT NULL,
        verified boolean NOT NULL,
        due_day integer NOT NULL,
        n bigint NOT NULL,
        CONSTRAINT memory_recordcount_key PRIMARY KEY (tenant_id, status, verified, due_day)
    )
    """,
    """
    CREATE TABLE memory_recordcountdelta (
        tenant_id bigint NOT NULL,
        status varchar(20) NOT NULL,
        verified boolean NOT NULL,
        due_day integer NOT NULL,
        delta bigint NOT NULL
    )
    """,
    # stats.record_stats reads one tenant's deltas.
    "CREATE INDEX memory_recordcountdelta_tenant ON memory_recordcountdelta (tenant_id)",
    f"""
    CREATE FUNCTION memory_record_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO memory_recordcountdelta (tenant_id, status, verified, due_day, delta)
        SELECT {KEY}, count(*) FROM inserted_rows GROUP BY 1, 2, 3, 4;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION memory_record_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO memory_recordcountdelta (tenant_id, status, verified, due_day, delta)
        SELECT {KEY}, -count(*) FROM deleted_rows GROUP BY 1, 2, 3, 4;
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION memory_record_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        old_day integer := {DAY.format("OLD.recheck_after")};
        new_day integer := {DAY.format("NEW.recheck_after")};
    BEGIN
        IF OLD.tenant_id <> NEW.tenant_id OR OLD.status <> NEW.status
           OR (OLD.last_verified_at IS NULL) <> (NEW.last_verified_at IS NULL) OR old_day <> new_day THEN
            INSERT INTO memory_recordcountdelta (tenant_id, status, verified, due_day, delta) VALUES
                (OLD.tenant_id, OLD.status, OLD.last_verified_at IS NOT NULL, old_day, -1),
                (NEW.tenant_id, NEW.status, NEW.last_verified_at IS NOT NULL, new_day, 1);
        END IF;
        RETURN NULL;
    END $$
    """,
    """
    CREATE FUNCTION memory_record_count_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- TRUNCATE, not DELETE: row-level security would limit a DELETE to one tenant's rows.
        TRUNCATE memory_recordcountdelta, memory_recordcount;
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER memory_record_count_insert AFTER INSERT ON memory_memoryrecord
    REFERENCING NEW TABLE AS inserted_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_record_count_inserted()
    """,
    """
    CREATE TRIGGER memory_record_count_delete AFTER DELETE ON memory_memoryrecord
    REFERENCING OLD TABLE AS deleted_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_record_count_deleted()
    """,
    # Row level, so that it can name its columns: an UPDATE that sets none of them (claim stamps, vector
    # flags, ...) never calls it, and the WHEN clause skips rows whose key columns did not change.
    """
    CREATE TRIGGER memory_record_count_update
    AFTER UPDATE OF tenant_id, status, last_verified_at, recheck_after ON memory_memoryrecord
    FOR EACH ROW WHEN (
        OLD.tenant_id <> NEW.tenant_id OR OLD.status <> NEW.status
        OR (OLD.last_verified_at IS NULL) <> (NEW.last_verified_at IS NULL)
        OR OLD.recheck_after IS DISTINCT FROM NEW.recheck_after
    )
    EXECUTE FUNCTION memory_record_count_updated()
    """,
    """
    CREATE TRIGGER memory_record_count_truncate AFTER TRUNCATE ON memory_memoryrecord
    FOR EACH STATEMENT EXECUTE FUNCTION memory_record_count_truncated()
    """,
    # No write may slip between the initial count and the triggers (both commit together).
    "LOCK TABLE memory_memoryrecord IN SHARE ROW EXCLUSIVE MODE",
    f"""
    INSERT INTO memory_recordcount (tenant_id, status, verified, due_day, n)
    SELECT {KEY}, count(*) FROM memory_memoryrecord GROUP BY 1, 2, 3, 4
    """,
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS memory_record_count_truncate ON memory_memoryrecord",
    "DROP TRIGGER IF EXISTS memory_record_count_update ON memory_memoryrecord",
    "DROP TRIGGER IF EXISTS memory_record_count_delete ON memory_memoryrecord",
    "DROP TRIGGER IF EXISTS memory_record_count_insert ON memory_memoryrecord",
    "DROP FUNCTION IF EXISTS memory_record_count_truncated()",
    "DROP FUNCTION IF EXISTS memory_record_count_updated()",
    "DROP FUNCTION IF EXISTS memory_record_count_deleted()",
    "DROP FUNCTION IF EXISTS memory_record_count_inserted()",
    "DROP TABLE IF EXISTS memory_recordcountdelta",
    "DROP TABLE IF EXISTS memory_recordcount",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_audit_event_time_order")]
    operations = [on_postgres(FORWARD, BACKWARD)]
