"""`memory_refresh_planner_statistics(min_changed)`: ANALYZE of the records and audit tables after a large
import, callable by the app role, which does not own them (memory/planner_stats.py, issue 36 item 4).

PostgreSQL only: SQLite keeps no statistics that go stale this way.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from memory_admin.memory import planner_stats


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(planner_stats.create_function_sql())


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(planner_stats.drop_function_sql())


class Migration(migrations.Migration):
    dependencies = [("memory", "0018_decision_receipts")]

    operations = [migrations.RunPython(create, drop)]
