"""The records' planner statistics kept up with a tenant's growth (issue 16, at 10M records).

PostgreSQL re-analyzes a table after 10 % of its rows changed: 1,000,000 writes at 10M records. A tenant that
imports its memory into a large table stays "empty" in the statistics until then, and plans made on that
estimate read a fact through an index on fewer of its columns: an as-of read took 335 ms instead of about a
millisecond for a tenant of 370,000 records the statistics had not seen yet (bench/onboarding.py's database).
The write paths no longer depend on the estimate (memory.actions `_fact_rows_sql`, memory.batch
`_read_facts_joined`); reads still do. Here the table is analyzed after 10,000 changed rows plus 0.2 % of its
size (30,000 at 10M). ANALYZE samples a fixed number of rows, so each run costs about the same at any size.

PostgreSQL only: SQLite has no autovacuum (and its planner has no such estimate to go stale).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

ANALYZE_SOONER = "autovacuum_analyze_scale_factor = 0.002, autovacuum_analyze_threshold = 10000"


def analyze_sooner(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE memory_memoryrecord SET ({ANALYZE_SOONER})")


def analyze_as_default(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE memory_memoryrecord RESET (autovacuum_analyze_scale_factor, autovacuum_analyze_threshold)"
        )


class Migration(migrations.Migration):
    dependencies = [("memory", "0013_write_path_indexes")]

    operations = [migrations.RunPython(analyze_sooner, analyze_as_default)]
