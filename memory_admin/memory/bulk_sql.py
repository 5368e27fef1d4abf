"""Set-based writes on PostgreSQL (memory.batch): one `INSERT ... SELECT FROM unnest(...)` or one
`UPDATE ... FROM unnest(...)` per statement, each column sent as one parameter in PostgreSQL's array syntax.

Why not `bulk_create` / `bulk_update`: for a thousand rows Django prepares every value of every field
(`get_db_prep_save`) and psycopg adapts some 30,000 parameters, or dumps each list element by element; measured
(bench/onboarding.py), that cost several times what the database spends on the rows. Here a column is one text
value built with a join, and the server parses and casts it to the column's type. Values are written as the
ORM would store them (JSON through the field's encoder, None as SQL NULL); nothing is validated here: the
callers write rows the domain functions built.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from django.db import connection, models

_INTEGER_KINDS = {
    "AutoField",
    "BigAutoField",
    "SmallAutoField",
    "ForeignKey",
    "OneToOneField",
    "IntegerField",
    "BigIntegerField",
    "SmallIntegerField",
    "PositiveIntegerField",
    "PositiveBigIntegerField",
    "PositiveSmallIntegerField",
}


def array_literal(values: Sequence[str | None]) -> str:
    """PostgreSQL's text form of a one-dimensional array: every element quoted (backslash and double quote
    escaped), None as NULL. `'{"a","b\\"c",NULL}'::text[]` is `['a', 'b"c', None]`.

    Escaped with one `replace` over the joined column rather than per element: the elements are joined with NUL,
    which PostgreSQL's text never holds (a NUL in a value is refused here, as the database would).
    """
    if not values:
        return "{}"
    if None in values:
        return "{" + ",".join("NULL" if v is None else _quoted(v) for v in values) + "}"
    joined = "\x00".join(cast("Sequence[str]", values))
    if joined.count("\x00") != len(values) - 1:
        raise ValueError("A text value holds a NUL character, which PostgreSQL cannot store.")
    escaped = joined.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", '","')
    return '{"' + escaped + '"}'


def _quoted(value: str) -> str:
    if "\x00" in value:
        raise ValueError("A text value holds a NUL character, which PostgreSQL cannot store.")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _encoder(field: models.Field[Any, Any]) -> Callable[[Any], str | None]:
    """How a Python value of `field` is written as an array element (the text PostgreSQL parses)."""
    kind = field.get_internal_type()
    if kind == "JSONField":
        encoder = cast("models.JSONField[Any]", field).encoder
        return lambda v: None if v is None else json.dumps(v, cls=encoder)
    if kind == "DateTimeField":
        return _datetime_text
    if kind == "BooleanField":
        return lambda v: None if v is None else ("t" if v else "f")
    if kind in ("CharField", "TextField"):
        return _as_text
    if kind in _INTEGER_KINDS:
        return lambda v: None if v is None else str(int(v))
    raise TypeError(f"memory.bulk_sql cannot write a {kind} ({field}); add its encoder.")


def _datetime_text(value: Any) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        # The ORM would guess a zone (with a warning); every writer here holds aware datetimes.
        raise ValueError(f"memory.bulk_sql writes aware datetimes only; got {value!r}.")
    return str(value.isoformat())


def _as_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _encoded(encode: Callable[[Any], str | None], values: Sequence[Any]) -> list[str | None]:
    if encode is _as_text and all(type(v) is str for v in values):
        return list(values)  # the common case of text columns: nothing to convert
    return [encode(v) for v in values]


def _column(model: type[models.Model], attname: str) -> tuple[str, str, Callable[[Any], str | None]]:
    """The quoted column, its array type and its encoder, for the field whose attname is `attname`."""
    field = next(f for f in model._meta.concrete_fields if f.attname == attname)
    db_type = cast(str, field.db_type(connection))
    return connection.ops.quote_name(cast(str, field.column)), f"{db_type}[]", _encoder(field)


def insert_columns(model: type[models.Model], columns: Mapping[str, Sequence[Any]]) -> int:
    """Insert one row per position of `columns` (attname → values, all of one length) in one statement.
    Columns left out take their database default (or NULL). Returns the number of rows."""
    names, arrays, params = [], [], []
    count = None
    for attname, values in columns.items():
        column, array_type, encode = _column(model, attname)
        count = len(values) if count is None else count
        if len(values) != count:
            raise ValueError(f"Column {attname} has {len(values)} values, expected {count}.")
        names.append(column)
        arrays.append(f"%s::{array_type}")
        params.append(array_literal(_encoded(encode, values)))
    if not count:
        return 0
    table = connection.ops.quote_name(model._meta.db_table)
    sql = f"INSERT INTO {table} ({', '.join(names)}) SELECT * FROM unnest({', '.join(arrays)})"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return count


def insert_objects(objects: Sequence[models.Model]) -> int:
    """Insert the model instances `objects` (of one model, primary keys set) with every concrete field."""
    if not objects:
        return 0
    model = type(objects[0])
    columns = {f.attname: [getattr(o, f.attname) for o in objects] for f in model._meta.concrete_fields}
    if any(pk is None for pk in columns[cast("models.Field[Any, Any]", model._meta.pk).attname]):
        raise ValueError("insert_objects writes rows whose primary keys are set (reserve them first).")
    return insert_columns(model, columns)


def update_objects(objects: Sequence[models.Model], attnames: Sequence[str]) -> int:
    """Write the fields `attnames` of `objects` (each its own values) in one `UPDATE ... FROM unnest(...)`."""
    if not objects:
        return 0
    model = type(objects[0])
    pk_name = cast("models.Field[Any, Any]", model._meta.pk).attname
    pk_column, pk_type, pk_encode = _column(model, pk_name)
    sets, arrays, aliases = [], [f"%s::{pk_type}"], ["pk"]
    params = [array_literal(_encoded(pk_encode, [o.pk for o in objects]))]
    for n, attname in enumerate(attnames):
        column, array_type, encode = _column(model, attname)
        sets.append(f"{column} = v.c{n}")
        arrays.append(f"%s::{array_type}")
        aliases.append(f"c{n}")
        params.append(array_literal(_encoded(encode, [getattr(o, attname) for o in objects])))
    table = connection.ops.quote_name(model._meta.db_table)
    sql = (
        f"UPDATE {table} AS t SET {', '.join(sets)} FROM unnest({', '.join(arrays)}) AS v ({', '.join(aliases)}) "
        f"WHERE t.{pk_column} = v.pk"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)
