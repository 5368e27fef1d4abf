"""Single-row writes of the write path (memory.actions, memory.audit) as plain statements.

One assertion inserts a record, updates one or two and appends its audit events. Django's `save()` and
`bulk_create()` build and compile their SQL anew on every call, which cost more Python time per write than the
write's round trips did (issue 16, CAS writes). These send the statements `save()` would send — the same
columns, each value prepared by its own field (`get_db_prep_save`) — with the SQL text built once per model.
No model signal is sent: none is connected to these models (tests/test_cas_floor.py checks it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from django.db import connection, models


def _q(name: str | None) -> str:
    assert name is not None
    return connection.ops.quote_name(name)


@cache
def _insert_columns(model: type[models.Model], with_pk: bool) -> tuple[list[models.Field[Any, Any]], str]:
    fields = [f for f in model._meta.concrete_fields if with_pk or not f.primary_key]
    columns = ", ".join(_q(f.column) for f in fields)
    return fields, f"INSERT INTO {_q(model._meta.db_table)} ({columns}) VALUES "


def _values(obj: models.Model, fields: Sequence[models.Field[Any, Any]], add: bool) -> list[Any]:
    # As save(): a foreign key assigned before its object got an id takes the id now (unsaved → ValueError).
    obj._prepare_related_fields_for_save(operation_name="save", fields=fields)  # type: ignore[attr-defined]
    return [f.get_db_prep_save(f.pre_save(obj, add), connection) for f in fields]


def _saved(obj: models.Model) -> None:
    obj._state.adding = False
    obj._state.db = connection.alias


def insert(obj: models.Model) -> None:
    """`obj.save(force_insert=True)`: one INSERT; the id is the one set, else the one the database gives."""
    with_pk = obj.pk is not None
    fields, head = _insert_columns(type(obj), with_pk)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    pk = type(obj)._meta.pk
    assert pk is not None
    with connection.cursor() as cursor:
        if with_pk:
            cursor.execute(head + row, _values(obj, fields, True))
        elif connection.features.can_return_columns_from_insert:
            cursor.execute(f"{head}{row} RETURNING {_q(pk.column)}", _values(obj, fields, True))
            obj.pk = cursor.fetchone()[0]
        else:
            cursor.execute(head + row, _values(obj, fields, True))
            obj.pk = cursor.lastrowid
    _saved(obj)


def insert_many(objs: Sequence[models.Model]) -> None:
    """`bulk_create(objs)` of rows whose ids nobody reads afterwards: one multi-row INSERT."""
    if not objs:
        return
    fields, head = _insert_columns(type(objs[0]), False)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params: list[Any] = []
    for obj in objs:
        params.extend(_values(obj, fields, True))
    with connection.cursor() as cursor:
        cursor.execute(head + ", ".join([row] * len(objs)), params)
    for obj in objs:
        _saved(obj)


def update(obj: models.Model, names: Iterable[str]) -> None:
    """`obj.save(update_fields=names)` of a saved row: one UPDATE of those columns by id."""
    meta = obj._meta
    fields: list[models.Field[Any, Any]] = [meta.get_field(name) for name in names]  # type: ignore[misc]
    assignments = ", ".join(f"{_q(f.column)} = %s" for f in fields)
    pk = meta.pk
    assert pk is not None
    sql = f"UPDATE {_q(meta.db_table)} SET {assignments} WHERE {_q(pk.column)} = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*_values(obj, fields, False), obj.pk])
