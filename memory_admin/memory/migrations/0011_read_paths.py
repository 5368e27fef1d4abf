"""The read paths at 10M records (issue 16, part 1): an index for the records list filtered by project and predicate.

`record_project_field_newest` (tenant, project, predicate, status, id DESC) serves the dashboard's
`/records/?project=…&predicate=…` (and the API's list with both filters): the first page walks the index newest
first and stops, and the capped count reads one field of one project. Without it PostgreSQL scanned the
exclusion constraint's GiST index for every record of the predicate (1.1 s p95 at 10M records).

On PostgreSQL the index is built CONCURRENTLY (writes go on during a build of minutes at 10M rows), so this
migration is not atomic, and IF NOT EXISTS lets an index built by hand beforehand under the same name count
(an invalid one, left by an interrupted build, is dropped and built again). Elsewhere it is a plain index.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

INDEX = models.Index(fields=["tenant", "project", "predicate", "status", "-id"], name="record_project_field_newest")
COLUMNS = "tenant_id, project_id, predicate, status, id DESC"


def create_index(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("memory", "MemoryRecord")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_index(model, INDEX)
        return
    table = model._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
            [INDEX.name],
        )
        row = cursor.fetchone()
    if row is not None and row[0]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX.name} ON {table} ({COLUMNS})")


def drop_index(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("memory", "MemoryRecord")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.remove_index(model, INDEX)
        return
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("memory", "0010_claim_due"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="memoryrecord", index=INDEX)],
            database_operations=[migrations.RunPython(create_index, drop_index, atomic=False)],
        ),
    ]
