"""Record counts of large UPDATEs counted once per statement (PostgreSQL only), issue 16.

Migration 0009's UPDATE trigger is row level (an UPDATE trigger with a column list cannot have transition
tables): a deletion that tombstones a subject's 10,000 records, or a batch that supersedes 1,000 facts,
ran the trigger function 10,000 or 1,000 times. `stats.update_counted` and `stats.update_objects_counted`
write such an UPDATE together with its counter deltas in one statement; for that statement they set the
transaction-local setting `memory.record_counts` to `by_statement`, and the row trigger's WHEN clause
skips its rows then (a skipped row queues no trigger event at all). Any other UPDATE is counted per row,
as before.
"""

from __future__ import annotations

from django.db import migrations

from memory_admin.migration_helpers import on_postgres

CHANGED = """
    OLD.tenant_id <> NEW.tenant_id OR OLD.status <> NEW.status
    OR (OLD.last_verified_at IS NULL) <> (NEW.last_verified_at IS NULL)
    OR OLD.recheck_after IS DISTINCT FROM NEW.recheck_after
"""


def trigger(when: str) -> str:
    return f"""
    CREATE TRIGGER memory_record_count_update
    AFTER UPDATE OF tenant_id, status, last_verified_at, recheck_after ON memory_memoryrecord
    FOR EACH ROW WHEN ({when})
    EXECUTE FUNCTION memory_record_count_updated()
    """


BY_ROW = f"({CHANGED}) AND current_setting('memory.record_counts', true) IS DISTINCT FROM 'by_statement'"

FORWARD = [
    "DROP TRIGGER memory_record_count_update ON memory_memoryrecord",
    trigger(BY_ROW),
]
BACKWARD = [
    "DROP TRIGGER memory_record_count_update ON memory_memoryrecord",
    trigger(CHANGED),
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0011_read_paths")]
    operations = [on_postgres(FORWARD, BACKWARD)]
