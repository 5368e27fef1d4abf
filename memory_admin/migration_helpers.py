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


def without_like_indexes(table: str, columns: list[str]) -> migrations.RunPython:
    """Drop the `varchar_pattern_ops` indexes Django adds on PostgreSQL next to the index of an indexed or
    unique CharField (they serve `LIKE 'prefix%'` only; no query of these columns uses one), so that a row
    written costs one index fewer per column. Reversible; elsewhere nothing. Django drops such an index with
    IF EXISTS when a later migration alters the field, so its absence breaks no future migration."""

    def names(schema_editor: Any) -> list[tuple[str, str]]:
        return [(schema_editor._create_index_name(table, [c], suffix="_like"), c) for c in columns]

    def drop(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for name, _ in names(schema_editor):
                schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")

    def create(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for name, column in names(schema_editor):
                schema_editor.execute(
                    f"CREATE INDEX IF NOT EXISTS {schema_editor.quote_name(name)} ON {schema_editor.quote_name(table)}"
                    f" ({schema_editor.quote_name(column)} varchar_pattern_ops)"
                )

    return migrations.RunPython(drop, create)
