"""Writes of the write path as plain SQL, built once per model: the one home of "SQL the ORM would send, without
the ORM's per-call cost".

1. Single rows (memory.actions, memory.audit): one assertion inserts a record, updates one or two and appends its
   audit events. Django's `save()` and `bulk_create()` build and compile their SQL anew on every call, which cost
   more Python time per write than the write's round trips did (issue 16, CAS writes). `insert`, `insert_many` and
   `update` send the statements `save()` would send — the same columns, each value prepared by its own field
   (`get_db_prep_save`) — with the SQL text built once per model. No model signal is sent: none is connected to
   these models (tests/memory/test_cas_write_path.py checks it). `build` makes an unsaved instance by position and `load`
   one from a row of a statement that began with `select_list`, each worked out once per model.
2. Sets of rows on PostgreSQL (memory.batch): one `INSERT ... SELECT` or one `UPDATE ... FROM` per statement over
   `ROWS FROM (unnest(...), ...)`, each column sent as one parameter: in PostgreSQL's array syntax, or for a JSON
   column one JSON array (`jsonb_array_elements`).
   Why not `bulk_create` / `bulk_update`: for a thousand rows Django prepares every value of every field
   (`get_db_prep_save`) and psycopg adapts some 30,000 parameters, or dumps each list element by element;
   measured (bench/onboarding.py), that cost several times what the database spends on the rows. Here a column is
   one text value built with a join, and the server parses and casts it to the column's type. Values are written
   as the ORM would store them (JSON through the field's encoder, None as SQL NULL); nothing is validated here:
   the callers write rows the domain functions built. `insert_new` is bulk_create of a log whose ids nobody reads.
"""

from __future__ import annotations

import inspect
import json
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, cast

from django.db import connection, models
from django.db.models.base import ModelState
from django.db.models.expressions import RawSQL
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

# --- 1. Single rows ---------------------------------------------------------------------------------


def _q(name: str | None) -> str:
    assert name is not None
    return connection.ops.quote_name(name)


@cache
def _insert_columns(model: type[models.Model], with_pk: bool) -> tuple[_Columns, str]:
    fields = [f for f in model._meta.concrete_fields if with_pk or not f.primary_key]
    columns = ", ".join(_q(f.column) for f in fields)
    return _columns(fields), f"INSERT INTO {_q(model._meta.db_table)} ({columns}) VALUES "


@cache
def _update_columns(model: type[models.Model], names: tuple[str, ...]) -> tuple[_Columns, str]:
    meta = model._meta
    fields: list[models.Field[Any, Any]] = [meta.get_field(name) for name in names]  # type: ignore[misc]
    assignments = ", ".join(f"{_q(f.column)} = %s" for f in fields)
    pk = meta.pk
    assert pk is not None
    return _columns(fields), f"UPDATE {_q(meta.db_table)} SET {assignments} WHERE {_q(pk.column)} = %s"


@dataclass(frozen=True)
class _Columns:
    """The fields a statement writes, worked out once per model and statement: each with how its value is
    prepared, and the foreign keys among them (save()'s check of related objects runs over those only)."""

    fields: tuple[models.Field[Any, Any], ...]
    preparers: tuple[Callable[[Any], Any], ...]
    relations: tuple[models.ForeignKey[Any, Any], ...]


def _columns(fields: Sequence[models.Field[Any, Any]]) -> _Columns:
    model = fields[0].model if fields else None
    if model is not None and any(f.is_relation for f in model._meta.private_fields):
        # save() checks a GenericForeignKey's object too; no model written here has one.
        raise TypeError(f"lib.rows does not write {model.__name__}: it has a generic relation.")
    relations = tuple(cast("models.ForeignKey[Any, Any]", f) for f in fields if f.is_relation)
    return _Columns(tuple(fields), tuple(preparer(f) for f in fields), relations)


# Integer fields whose `get_db_prep_save` of an int is the backend's integer adapter (get_prep_value is int()).
_UNCHANGED: set[type[models.Field[Any, Any]]] = {
    models.IntegerField,
    models.BigIntegerField,
    models.PositiveIntegerField,
}


def preparer(field: models.Field[Any, Any]) -> Callable[[Any], Any]:
    """`field.get_db_prep_save(value, connection)`, with the value types it leaves unchanged returned at once.

    Exact field classes only (a subclass may prepare differently). A str subclass (a TextChoices member) goes
    through `isinstance`, as CharField.to_python lets it through; None is returned as None by every field
    listed, as by `to_python`. An aware datetime is what DateTimeField.get_prep_value leaves as it is (a naive
    one takes the field's path, with its warning); the backend's adapter still runs. tests/memory/test_cas_write_path.py
    compares each against the field's own method.
    """
    prep = field.get_db_prep_save
    kind = type(field)
    if kind in (models.CharField, models.TextField):

        def text(value: Any) -> Any:
            return value if value is None or isinstance(value, str) else prep(value, connection)

        return text
    if kind is models.BooleanField:

        def flag(value: Any) -> Any:
            return value if value is None or type(value) is bool else prep(value, connection)

        return flag
    if kind in _UNCHANGED:
        internal_type = field.get_internal_type()

        def number(value: Any) -> Any:
            if value is None:
                return None
            if type(value) is int:
                return connection.ops.adapt_integerfield_value(value, internal_type)
            return prep(value, connection)

        return number
    if kind is models.DateTimeField:

        def moment(value: Any) -> Any:
            if value is None:
                return None
            if type(value) is datetime and value.tzinfo is not None:
                return connection.ops.adapt_datetimefield_value(value)
            return prep(value, connection)

        return moment
    return lambda value: prep(value, connection)


def _prepare_related(obj: models.Model, relations: Sequence[models.ForeignKey[Any, Any]]) -> None:
    """`Model._prepare_related_fields_for_save` over the foreign keys written (Django's loops over every field and
    compares each with the list given, which cost more than the rest of a row's preparation): an object assigned
    before it got an id takes the id now; an unsaved one → ValueError."""
    for field in relations:
        if not field.is_cached(obj):
            continue
        related = getattr(obj, field.name, None)
        if not related:
            continue
        if not related._is_pk_set():
            if not field.remote_field.multiple:
                field.remote_field.delete_cached_value(related)
            raise ValueError(f"save() prohibited to prevent data loss due to unsaved related object '{field.name}'.")
        if getattr(obj, field.attname) in field.empty_values:
            setattr(obj, field.name, related)
        if getattr(related, field.target_field.attname) != getattr(obj, field.attname):
            field.delete_cached_value(obj)


def _values(obj: models.Model, columns: _Columns, add: bool) -> list[Any]:
    # As save(): a foreign key assigned before its object got an id takes the id now (unsaved → ValueError).
    _prepare_related(obj, columns.relations)
    return [prep(f.pre_save(obj, add)) for f, prep in zip(columns.fields, columns.preparers, strict=True)]


@cache
def _build_plan(model: type[models.Model]) -> tuple[tuple[models.Field[Any, Any], ...], frozenset[str]]:
    fields = tuple(model._meta.concrete_fields)
    return fields, frozenset(f.attname for f in fields) | frozenset(f.name for f in fields if f.is_relation)


def build[M: models.Model](model: type[M], values: Mapping[str, Any]) -> M:
    """`model(**values)` (unsaved), built by position: Django's keyword path looks up every field in the keywords
    and sets each related object through its descriptor, which cost more than the rest of an assertion's row.
    `values` names fields by attname (`project_id`) or, for a foreign key, by name with the related object
    (`project=...`: its id is taken, and the object cached as the descriptor would). Fields left out take
    their default."""
    fields, known = _build_plan(model)
    if not known.issuperset(values):
        raise TypeError(f"{model.__name__} has no field(s) {sorted(set(values) - known)}.")
    args: list[Any] = []
    related: list[tuple[models.Field[Any, Any], Any]] = []
    for f in fields:
        if f.attname in values:
            args.append(values[f.attname])
        elif f.name in values:  # a foreign key given its object
            obj = values[f.name]
            args.append(None if obj is None else getattr(obj, f.target_field.attname))  # type: ignore[attr-defined]
            related.append((f, obj))
        else:
            args.append(f.get_default())
    instance = _instance(model, args)
    for f, obj in related:
        f.set_cached_value(instance, obj)  # type: ignore[attr-defined]
    return instance


@cache
def _plain_attnames(model: type[models.Model]) -> tuple[str, ...] | None:
    """The attnames `model(*values)` would set, when that is all it does: the model keeps Django's `__init__`
    and `from_db`, and every field's attribute is a plain deferred attribute (a foreign key's only clears a
    cached object, which a new instance has not). None when the model does anything more."""
    if model._meta.abstract or model.__init__ is not models.Model.__init__:
        return None
    if model.from_db.__func__ not in (models.Model.from_db.__func__, from_db):  # type: ignore[attr-defined]
        return None
    attnames = []
    for field in model._meta.concrete_fields:
        if type(inspect.getattr_static(model, field.attname, None)) not in _PLAIN_ATTRIBUTES:
            return None
        attnames.append(field.attname)
    return tuple(attnames)


_PLAIN_ATTRIBUTES = (DeferredAttribute, ForeignKeyDeferredAttribute)


def _instance[M: models.Model](model: type[M], values: Sequence[Any]) -> M:
    """`model(*values)`, `values` one per concrete field in order (none DEFERRED): what Django's `__init__` does
    for them (a fresh ModelState, each value set by attname) without its per-field calls, which were a fifth of a
    batch's Python time. Django's own constructor whenever anything listens to the model's init signals or the
    model is not plain (`_plain_attnames`); tests/lib/test_rows_instances.py compares the two."""
    attnames = _plain_attnames(model)
    if attnames is None or pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model(*values)
    if len(values) != len(attnames):
        raise TypeError(f"{model.__name__} takes {len(attnames)} values, got {len(values)}.")
    instance = model.__new__(model)
    instance._state = ModelState()
    instance.__dict__.update(zip(attnames, values, strict=True))
    return instance


def from_db[M: models.Model](
    cls: type[M], db: str | None, field_names: Collection[str], values: Collection[Any], **options: Any
) -> M:
    """`Model.from_db` for every query of a model that takes it (`from_db = classmethod(rows.from_db)`): what
    Django's does, without its constructor's per-field calls and init signals: a fresh ModelState and each loaded
    value set by attname, a deferred field left unset (loaded on access, as Django does). Django's own whenever
    something listens to the init signals, the model is not plain (`_plain_attnames`), or a later Django passes
    an option. Building a records list page's 50 rows (19 of 30 fields) takes 0.5 ms less CPU than Django's
    (1.26 vs 1.76 ms, the query's own client time included); tests/lib/test_rows_instances.py compares the two."""
    attnames = _plain_attnames(cls)
    if options or attnames is None or pre_init.has_listeners(cls) or post_init.has_listeners(cls):
        django_from_db = models.Model.from_db.__func__  # type: ignore[attr-defined]
        return cast("M", django_from_db(cls, db, field_names, values, **options))
    loaded = attnames if len(values) == len(attnames) else _loaded_attnames(cls, tuple(field_names))
    instance = cls.__new__(cls)
    instance._state = ModelState()
    instance.__dict__.update(zip(loaded, values, strict=True))
    instance._state.adding = False
    instance._state.db = db
    return instance


@lru_cache(maxsize=256)
def _loaded_attnames(model: type[models.Model], field_names: tuple[str, ...]) -> tuple[str, ...]:
    # A row with deferred fields holds the loaded ones in the model's field order (as Django's from_db reads it).
    names = set(field_names)
    return tuple(f.attname for f in model._meta.concrete_fields if f.attname in names)


def _saved(obj: models.Model) -> None:
    obj._state.adding = False
    obj._state.db = connection.alias


def insert(obj: models.Model) -> None:
    """`obj.save(force_insert=True)`: one INSERT; the id is the one set, else the one the database gives."""
    with_pk = obj.pk is not None
    columns, head = _insert_columns(type(obj), with_pk)
    row = "(" + ", ".join(["%s"] * len(columns.fields)) + ")"
    pk = type(obj)._meta.pk
    assert pk is not None
    with connection.cursor() as cursor:
        if with_pk:
            cursor.execute(head + row, _values(obj, columns, True))
        elif connection.features.can_return_columns_from_insert:
            cursor.execute(f"{head}{row} RETURNING {_q(pk.column)}", _values(obj, columns, True))
            obj.pk = cursor.fetchone()[0]
        else:
            cursor.execute(head + row, _values(obj, columns, True))
            obj.pk = cursor.lastrowid
    _saved(obj)


def insert_many(objs: Sequence[models.Model]) -> None:
    """`bulk_create(objs)` of rows whose ids nobody reads afterwards: one multi-row INSERT."""
    if not objs:
        return
    columns, head = _insert_columns(type(objs[0]), False)
    row = "(" + ", ".join(["%s"] * len(columns.fields)) + ")"
    params: list[Any] = []
    for obj in objs:
        params.extend(_values(obj, columns, True))
    with connection.cursor() as cursor:
        cursor.execute(head + ", ".join([row] * len(objs)), params)
    for obj in objs:
        _saved(obj)


def insert_many_then(objs: Sequence[models.Model], statement: str, params: Sequence[Any]) -> int:
    """`insert_many(objs)` followed by `statement` (an UPDATE without RETURNING), in one round trip on PostgreSQL
    (a data-modifying WITH), else two statements; returns the largest id inserted (the audit chain writes its
    events and moves its head this way: memory.audit_chain)."""
    if not objs:
        raise ValueError("insert_many_then needs rows to insert")
    model = type(objs[0])
    columns, head = _insert_columns(model, False)
    row = "(" + ", ".join(["%s"] * len(columns.fields)) + ")"
    values: list[Any] = []
    for obj in objs:
        values.extend(_values(obj, columns, True))
    insert = head + ", ".join([row] * len(objs))
    pk = _q(cast("models.Field[Any, Any]", model._meta.pk).column)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"WITH inserted AS ({insert} RETURNING {pk}) {statement} RETURNING (SELECT {pk} FROM inserted ORDER BY {pk} DESC LIMIT 1)",
                [*values, *params],
            )
            last = cursor.fetchone()
            if last is None:
                raise RuntimeError("insert_many_then: the statement after the insert changed no row")
            last_id = int(last[0])
        else:
            cursor.execute(insert, values)
            last_id = int(cursor.lastrowid)
            cursor.execute(statement, params)
    for obj in objs:
        _saved(obj)
    return last_id


def update(obj: models.Model, names: Iterable[str]) -> None:
    """`obj.save(update_fields=names)` of a saved row: one UPDATE of those columns by id."""
    columns, sql = _update_columns(type(obj), tuple(names))
    with connection.cursor() as cursor:
        cursor.execute(sql, [*_values(obj, columns, False), obj.pk])


# --- Reading rows --------------------------------------------------------------------------------------
# A write's reads (the fact's rows, the field's policy) are statements of its own, with columns beyond the model's
# (the fact's highest revision, the id drawn for the new version). `Manager.raw()` works out anew on every call how
# each column maps to a field and which converters it needs; here that is done once per model and backend.


@cache
def select_list(model: type[models.Model], alias: str) -> str:
    """The model's columns, qualified by `alias`, in the order `load` reads them (a statement's first columns)."""
    return ", ".join(f"{alias}.{_q(f.column)}" for f in model._meta.concrete_fields)


_Converters = list[tuple[int, list[Callable[..., Any]], Any]]
_LOADERS: weakref.WeakKeyDictionary[Any, dict[type[models.Model], tuple[list[str], _Converters]]] = (
    weakref.WeakKeyDictionary()
)


def _loader(model: type[models.Model]) -> tuple[list[str], _Converters]:
    # Per connection's operations object: converters are the backend's, and each thread has its own connection.
    known = _LOADERS.setdefault(connection.ops, {})
    if model not in known:
        fields = model._meta.concrete_fields
        converters: _Converters = []
        for n, field in enumerate(fields):
            column = field.get_col(model._meta.db_table)
            found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if found:
                converters.append((n, found, column))
        known[model] = ([f.attname for f in fields], converters)
    return known[model]


def load[M: models.Model](model: type[M], row: Sequence[Any]) -> M:
    """The instance of `model` in the first columns of `row` (a statement that began with `select_list(model)`),
    each value converted as a queryset would convert it."""
    attnames, converters = _loader(model)
    values = list(row[: len(attnames)])
    for n, functions, column in converters:
        value = values[n]
        for convert in functions:
            value = convert(value, column, connection)
        values[n] = value
    instance = _instance(model, values)
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance


# --- 2. Sets of rows (PostgreSQL) -------------------------------------------------------------------

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
    """How a Python value of `field` is written as an array element (the text PostgreSQL parses). JSON columns
    are not sent as arrays (`_sent_column`)."""
    kind = field.get_internal_type()
    if kind == "DateTimeField":
        return _datetime_text
    if kind == "BooleanField":
        return lambda v: None if v is None else ("t" if v else "f")
    if kind in ("CharField", "TextField"):
        return _as_text
    if kind in _INTEGER_KINDS:
        return lambda v: None if v is None else str(int(v))
    raise TypeError(f"lib.rows cannot write a {kind} ({field}); add its encoder.")


def _datetime_text(value: Any) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        # The ORM would guess a zone (with a warning); every writer here holds aware datetimes.
        raise ValueError(f"lib.rows writes aware datetimes only; got {value!r}.")
    return str(value.isoformat())


def _as_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _encoded(encode: Callable[[Any], str | None], values: Sequence[Any]) -> list[str | None]:
    if encode is _as_text and all(type(v) is str for v in values):
        return list(values)  # the common case of text columns: nothing to convert
    return [encode(v) for v in values]


@dataclass(frozen=True)
class _Column:
    """How one column of a set of rows is sent: `source` is the set-returning call that yields its values in
    order (its one parameter is `param`), `select` the value inserted or assigned from the row alias `r`."""

    name: str
    source: str
    select: str
    param: str


def _sent_column(model: type[models.Model], attname: str, values: Sequence[Any], n: int) -> _Column:
    """Column `attname` of `model` with `values`, as the `n`th item of a `ROWS FROM (...) AS r (c0, ...)`.

    A JSON column is one JSON array dumped in one call (the field's encoder per element, as the ORM would),
    expanded by `jsonb_array_elements`: a `json.dumps` per value, then escaping the dumps into an array literal,
    cost more than the rest of the row (audit snapshots are objects of a dozen keys). None becomes SQL NULL as
    before (the JSON null an element dumps to is turned back); JSON null itself is never stored by these writers.
    Every other column is one array literal (`array_literal`) given to `unnest`."""
    field = next(f for f in model._meta.concrete_fields if f.attname == attname)
    column = connection.ops.quote_name(cast(str, field.column))
    alias = f"r.c{n}"
    if field.get_internal_type() == "JSONField":
        encoder = cast("models.JSONField[Any]", field).encoder
        return _Column(
            column,
            "jsonb_array_elements(%s::jsonb)",
            f"NULLIF({alias}, 'null'::jsonb)",
            json.dumps(list(values), cls=encoder),
        )
    db_type = cast(str, field.db_type(connection))
    return _Column(column, f"unnest(%s::{db_type}[])", alias, array_literal(_encoded(_encoder(field), values)))


def _rows_from(columns: Sequence[_Column]) -> str:
    """The FROM item that zips `columns`' values row by row, aliased `r` (c0, c1, ...)."""
    names = ", ".join(f"c{n}" for n in range(len(columns)))
    return f"ROWS FROM ({', '.join(c.source for c in columns)}) AS r ({names})"


def insert_columns(model: type[models.Model], columns: Mapping[str, Sequence[Any]]) -> int:
    """Insert one row per position of `columns` (attname → values, all of one length) in one statement.
    Columns left out take their database default (or NULL). Returns the number of rows."""
    sent: list[_Column] = []
    count = None
    for attname, values in columns.items():
        count = len(values) if count is None else count
        if len(values) != count:
            raise ValueError(f"Column {attname} has {len(values)} values, expected {count}.")
        sent.append(_sent_column(model, attname, values, len(sent)))
    if not count:
        return 0
    table = connection.ops.quote_name(model._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({', '.join(c.name for c in sent)}) "
        f"SELECT {', '.join(c.select for c in sent)} FROM {_rows_from(sent)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [c.param for c in sent])
    return count


def _stored(field: models.Field[Any, Any], objects: Sequence[models.Model], add: bool) -> list[Any]:
    """The values of `field` of `objects` as the row keeps them: the attributes, or for a sealed field
    (lib.sealing, `sealed = True`) what its `pre_save` gives (the value sealed under the row's data key), and
    for a field computed from others (`computed = True`: lib.sealing.SystemOfField) what its `pre_save` computes, as
    `insert` and `update` write it."""
    if getattr(field, "sealed", False) or getattr(field, "computed", False):
        return [field.pre_save(o, add) for o in objects]
    return [getattr(o, field.attname) for o in objects]


def insert_objects(objects: Sequence[models.Model]) -> int:
    """Insert the model instances `objects` (of one model, primary keys set) with every concrete field."""
    if not objects:
        return 0
    model = type(objects[0])
    columns = {f.attname: _stored(f, objects, True) for f in model._meta.concrete_fields}
    if any(pk is None for pk in columns[cast("models.Field[Any, Any]", model._meta.pk).attname]):
        raise ValueError("insert_objects writes rows whose primary keys are set (reserve them first).")
    return insert_columns(model, columns)


@dataclass(frozen=True)
class Unnested:
    """The per-row values of an `UPDATE ... FROM unnest(...)`: the FROM item `source` (alias `v`, the primary
    keys as `v.pk`), the SET list `assignments` (each column of alias `t` from `v`), and the parameters."""

    source: str
    assignments: str
    params: list[str]
    pk_column: str


def unnested(objects: Sequence[models.Model], attnames: Sequence[str]) -> Unnested:
    """The FROM item and SET list that write the fields `attnames` of `objects` (each its own values)."""
    model = type(objects[0])
    pk_name = cast("models.Field[Any, Any]", model._meta.pk).attname
    pk = _sent_column(model, pk_name, [o.pk for o in objects], 0)
    by_attname = {f.attname: f for f in model._meta.concrete_fields}
    sent = [pk] + [
        _sent_column(model, attname, _stored(by_attname[attname], objects, False), n)
        for n, attname in enumerate(attnames, start=1)
    ]
    selects = ", ".join(f"{c.select} AS {f'c{n}' if n else 'pk'}" for n, c in enumerate(sent))
    source = f"(SELECT {selects} FROM {_rows_from(sent)}) AS v"
    assignments = ", ".join(f"{c.name} = v.c{n}" for n, c in enumerate(sent) if n)
    return Unnested(source, assignments, [c.param for c in sent], pk.name)


def update_objects(objects: Sequence[models.Model], attnames: Sequence[str]) -> int:
    """Write the fields `attnames` of `objects` (each its own values) in one `UPDATE ... FROM unnest(...)`."""
    if not objects:
        return 0
    u = unnested(objects, attnames)
    table = connection.ops.quote_name(type(objects[0])._meta.db_table)
    sql = f"UPDATE {table} AS t SET {u.assignments} FROM {u.source} WHERE t.{u.pk_column} = v.pk"
    with connection.cursor() as cursor:
        cursor.execute(sql, u.params)
        return int(cursor.rowcount)


def insert_new(objects: Sequence[models.Model]) -> None:
    """`bulk_create(objects)` (one model) of rows whose ids nobody reads afterwards (a log): on PostgreSQL one
    `INSERT ... SELECT FROM unnest(...)` of every concrete field but the id, elsewhere bulk_create itself."""
    if not objects:
        return
    model = type(objects[0])
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(objects)
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    insert_columns(model, {f.attname: _stored(f, objects, True) for f in fields})


# --- 3. Long lists of ids in a condition --------------------------------------------------------------


def among(values: Sequence[int] | Sequence[str]) -> Any:
    """`values` as the right side of an `__in` lookup: on PostgreSQL one array parameter
    (`IN (SELECT unnest(%s::bigint[]))`, or `text[]` for strings), elsewhere the list itself.

    A deletion's stores match a subject's 10,000 record ids or memory ids: as a list that is 10,000
    placeholders the server parses, binds and plans anew in every statement (and psycopg adapts one by one);
    as an array it is one value. The elements are all ints or all strings (a memory id, a public id)."""
    if connection.vendor != "postgresql" or not values:
        return list(values)
    if all(type(v) is int for v in values):
        return RawSQL("SELECT unnest(%s::bigint[])", [list(values)])
    if all(type(v) is str for v in values):
        return RawSQL("SELECT unnest(%s::text[])", [list(values)])
    raise TypeError("among() takes ints only or strings only")
