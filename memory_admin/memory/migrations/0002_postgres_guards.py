"""PostgreSQL-only guards the ORM cannot express portably (skipped on SQLite).

- `record_one_belief_per_valid_instant`: at most one accepted record per fact key for any valid
  instant (an exclusion constraint over tstzrange(valid_from, valid_to)); deferred to commit so a
  supersession can insert the new record before cutting the old one's range.
  Guards assert_fact, resolve_dispute and expire_record.
- `audit_event_immutable`: a trigger that refuses UPDATE and DELETE on the audit log from any client.
"""

from __future__ import annotations

from django.db import migrations

from memory_admin.migration_helpers import on_postgres

FORWARD = [
    "CREATE EXTENSION IF NOT EXISTS btree_gist",
    """
    ALTER TABLE memory_memoryrecord ADD CONSTRAINT record_one_belief_per_valid_instant
    EXCLUDE USING gist (
        tenant_id WITH =, project_id WITH =, subject_id WITH =, predicate WITH =,
        tstzrange(valid_from, valid_to, '[)') WITH &&
    ) WHERE (status = 'accepted') DEFERRABLE INITIALLY DEFERRED
    """,
    """
    CREATE FUNCTION audit_event_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'audit events are immutable (%% refused)', TG_OP;
    END $$
    """,
    """
    CREATE TRIGGER audit_event_immutable BEFORE UPDATE OR DELETE ON memory_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_event_refuse_change()
    """,
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS audit_event_immutable ON memory_auditevent",
    "DROP FUNCTION IF EXISTS audit_event_refuse_change()",
    "ALTER TABLE memory_memoryrecord DROP CONSTRAINT IF EXISTS record_one_belief_per_valid_instant",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]
    operations = [on_postgres(FORWARD, BACKWARD)]
