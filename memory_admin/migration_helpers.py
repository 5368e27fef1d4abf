"""Helpers for migrations that only apply on PostgreSQL (the embedded SQLite default skips them)."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def on_postgres(forward: list[str], backward: list[str]) -> migrations.RunPython:
    """A migration step that runs raw SQL statements on PostgreSQL and does nothing elsewhere."""

    def run(statements: list[str]) -> Any:
        def apply(apps: Any, schema_editor: Any) -> None:
            if schema_editor.connection.vendor == "postgresql":
                for statement in statements:
                    schema_editor.execute(statement)

        return apply

    return migrations.RunPython(run(forward), run(backward))
