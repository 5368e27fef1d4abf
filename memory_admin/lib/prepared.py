"""A hot read compiled to SQL once, then run with new values (the agent's as-of lookup, reads.as_of).

Building and compiling a queryset costs more CPU than running it when the answer is one row found by an index
(about 3 ms against 0.3 ms for the as-of lookup, CPU, on the bench's machine): the Q tree is cloned and walked, the joins resolved and every
column named again on every call. A `PreparedRead` has Django compile the queryset once per database (the SQL
is Django's, from the one definition of the rule), with a sentinel for each value that changes, and then runs
that SQL with the values put where the sentinels were, building the model instances as the queryset would
(the same converters, `select_related` included). Its SQL text is the same on every call, so a server that
prepares statements (settings, DB_PREPARE_THRESHOLD) plans it once per connection.

A value is put back through the field that compiled its sentinel (a datetime on SQLite becomes the text
Django would have sent). If Django ever compiles a sentinel out of recognition, `template` refuses to build
(ValueError), and `get` then logs it and runs the queryset itself: the answer is the same either way, and
tests/memory/test_read_paths.py fails on the missing template.

On PostgreSQL with `settings.PREPARED_READS` (on when connections persist), the statement is also prepared on the
server (psycopg's protocol-level prepare, `run`), so that PostgreSQL plans it once per connection instead of on
every call: after five custom plans it keeps a generic one. That is why a page's LIMIT and OFFSET are written into
its text (a LIMIT given as a parameter makes the generic plan look far costlier than a custom one, and PostgreSQL
then plans every call), and why integers are sent as bigint (one prepared statement per text, whatever the size of
the tenant's id).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Hashable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connections, router
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import Field, JSONField, Model, QuerySet
from django.db.models.query import get_related_populators

log = logging.getLogger(__name__)


def _slots(params: Any, wanted: Mapping[str, Any]) -> tuple[tuple[int, str], ...]:
    """Where each sentinel (`wanted`: name -> its value as a query parameter) sits among the compiled `params`;
    ValueError if one is missing or a parameter matches two."""
    slots = []
    for position, param in enumerate(params):
        names = [name for name, prepared in wanted.items() if type(param) is type(prepared) and param == prepared]
        if len(names) > 1:
            raise ValueError(f"parameter {position} matches the sentinels {names}")
        if names:
            slots.append((position, names[0]))
    missing = set(wanted) - {name for _, name in slots}
    if missing:
        raise ValueError(f"sentinels {sorted(missing)} not found in the compiled query")
    return tuple(slots)


_MARK = "ma-prepared-slot-7391004217-"


def _inlined(
    connection: Any, sql: str, params: Any, slots: tuple[tuple[int, str], ...]
) -> tuple[str, tuple[Any, ...], tuple[tuple[int, str], ...]]:
    """On PostgreSQL, the compiled SQL with its constant parameters (statuses, flags: the same on every call) written
    into its text once, by psycopg's own quoting, so that a call adapts only the values that change; the slots
    then number the parameters left. Elsewhere (SQLite binds natively) as compiled. ValueError if a value's
    place cannot be found again."""
    if connection.vendor != "postgresql":
        return sql, tuple(params), slots
    from psycopg import ClientCursor

    marked = list(params)
    for i, (position, _name) in enumerate(slots):
        marked[position] = f"{_MARK}{i}"
    connection.ensure_connection()
    with ClientCursor(connection.connection) as cursor:
        text = cursor.mogrify(sql, marked).replace("%", "%%")
    for i in range(len(slots)):
        quoted = f"'{_MARK}{i}'"
        if text.count(quoted) != 1:
            raise ValueError(f"parameter {i} not found once in the statement with its constants written in")
        text = text.replace(quoted, "%s")
    return text, (None,) * len(slots), tuple((i, name) for i, (_position, name) in enumerate(slots))


NEVER_BY_COUNT = 2**62  # a psycopg prepare threshold no statement's count reaches


def prepares(connection: Any) -> bool:
    """Whether `run` prepares its statements on this connection's server (settings.PREPARED_READS)."""
    return connection.vendor == "postgresql" and bool(getattr(settings, "PREPARED_READS", False))


def run[Fetched](connection: Any, sql: str, params: list[Any], fetch: Callable[[Any], Fetched]) -> Fetched:
    """Run `sql` (%s placeholders) with `params` and return `fetch(cursor)`. Where `prepares`, through a cursor
    that binds on the server and prepares the statement on first use (psycopg keeps it per connection, evicting
    the least used past its `prepared_max`), as Django's own cursor runs one: its checks, the connection's
    execute wrappers, the query log, errors wrapped as Django's."""
    if not prepares(connection):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return fetch(cursor)
    from psycopg import Cursor
    from psycopg.types.numeric import Int8

    with connection.cursor() as wrapper, Cursor(connection.connection) as cursor:
        if connection.connection.prepare_threshold is None:
            # Django's default: psycopg then prepares nothing, even when told to. A threshold no statement reaches
            # lets `prepare=True` prepare these statements, and psycopg still prepares no other by itself.
            connection.connection.prepare_threshold = NEVER_BY_COUNT

        def execute(sql: str, params: Any, many: bool, context: Mapping[str, Any]) -> None:
            connection.validate_no_broken_transaction()
            bound = [Int8(value) if type(value) is int else value for value in params]
            with connection.wrap_database_errors:
                cursor.execute(sql, bound, prepare=True)

        for outer in reversed(connection.execute_wrappers):
            execute = partial(outer, execute)
        logged = isinstance(wrapper, CursorDebugWrapper)
        # Logged as Django logs a statement it binds on the server: with its values written in.
        shown = connection.ops.compose_sql(sql, params) if logged else sql
        with wrapper.debug_sql(shown, params) if logged else nullcontext():
            execute(sql, params, False, {"connection": connection, "cursor": wrapper})
        return fetch(cursor)


@dataclass(frozen=True)
class _Template:
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, str], ...]  # (position in params, name of the value put there)
    compiler: Any
    converters: Any
    model_slice: slice
    init_list: list[str]
    populators: list[Any]


class PreparedRead:
    """`build(**values)` is an ordered queryset of `model` (`select_related` allowed; no prefetch, no
    annotation) whose first row is the answer. `sentinels` holds one value per name, each unlike any constant
    of the query, and `fields` the model field each value is compared with, whose `get_db_prep_value` makes
    it a query parameter."""

    def __init__(
        self,
        model: type[Model],
        build: Callable[..., QuerySet[Any]],
        sentinels: Mapping[str, Any],
        fields: Mapping[str, Field[Any, Any]],
    ) -> None:
        self.model = model
        self.build = build
        self.sentinels = dict(sentinels)
        self.fields = dict(fields)
        self._templates: dict[str, _Template | None] = {}

    def _prep(self, name: str, value: Any, connection: Any) -> Any:
        return self.fields[name].get_db_prep_value(value, connection)

    def template(self, alias: str) -> _Template:
        """The compiled SQL for database `alias`, with where each value goes; ValueError if a sentinel cannot
        be found in the compiled parameters exactly once per use."""
        connection = connections[alias]
        queryset = self.build(**self.sentinels)[:1]
        compiler = queryset.query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        wanted = {name: self._prep(name, value, connection) for name, value in self.sentinels.items()}
        sql, params, slots = _inlined(connection, sql, params, _slots(params, wanted))
        select, klass_info = compiler.select, compiler.klass_info
        if compiler.annotation_col_map or klass_info is None:
            raise ValueError("only model rows are supported")
        fields = klass_info["select_fields"]
        model_slice = slice(fields[0], fields[-1] + 1)
        return _Template(
            sql=sql,
            params=params,
            slots=slots,
            compiler=compiler,
            converters=compiler.get_converters([s[0] for s in select[: compiler.col_count]]),
            model_slice=model_slice,
            init_list=[f[0].target.attname for f in select[model_slice]],
            # Django 6.0's signature (its stubs already describe a later one).
            populators=get_related_populators(klass_info, select, alias),  # type: ignore[call-arg]
        )

    def _template_or_none(self, alias: str) -> _Template | None:
        if alias not in self._templates:
            try:
                self._templates[alias] = self.template(alias)
            except Exception:  # Django compiled it otherwise than expected: the queryset answers the same
                log.exception("%s: cannot prepare this read; running it as a queryset", self.model.__name__)
                self._templates[alias] = None
        return self._templates[alias]

    def get(self, **values: Any) -> Any:
        """The first row of `build(**values)` as a model instance (None when there is none)."""
        alias = router.db_for_read(self.model)
        template = self._template_or_none(alias)
        if template is None:
            return self.build(**values).first()
        connection = connections[alias]
        params = list(template.params)
        prepared = {name: self._prep(name, value, connection) for name, value in values.items()}
        for position, name in template.slots:
            params[position] = prepared[name]
        row = run(connection, template.sql, params, lambda cursor: cursor.fetchone())
        if row is None:
            return None
        if template.converters:
            row = next(iter(template.compiler.apply_converters([row], template.converters)))
        instance = self.model.from_db(alias, template.init_list, row[template.model_slice])
        for populator in template.populators:
            populator.populate(row, instance)
        return instance


# --- Pages of rows ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RowsTemplate:
    sql: str  # LIMIT and OFFSET are written after it, as integers, on each call
    params: tuple[Any, ...]
    slots: tuple[tuple[int, str], ...]
    # (column, Django's converters of it, its expression): what `apply_converters` would run on it
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]


def stored_form(field: Any) -> bool:
    """Whether a column is handed over as stored (no converter applied): JSON columns come as their JSON text,
    sealed columns (lib.sealing) as their envelopes; the reader decodes or opens what it needs, how it needs."""
    return isinstance(field, JSONField) or bool(getattr(field, "sealed", False))


class PreparedRows:
    """Pages of plain row tuples (no model instances) from a `values_list` queryset compiled once per process.

    `build(shape, **values)` is the ordered, unsliced `values_list` queryset of a `shape` (any hashable that says
    which filters and which order the page has: each shape is compiled once per database, with `sentinels` for
    the values it takes). `rows(shape, values, limit, offset)` then runs that SQL with the values put where their
    sentinels were, and LIMIT/OFFSET written in as integers. Columns keep the converters Django applies to them (a
    datetime on SQLite), except JSON and sealed columns, which come as stored (`stored_form`). A shape Django
    compiles out of recognition raises ValueError when first used (tests/memory/test_read_paths.py)."""

    MAX_SHAPES = 512  # compiled shapes kept per process (a forged mix of filters cannot grow it without bound)

    def __init__(
        self,
        build: Callable[..., QuerySet[Any]],
        sentinels: Mapping[str, Any],
        fields: Mapping[str, Field[Any, Any]],
    ) -> None:
        self.build = build
        self.sentinels = dict(sentinels)
        self.fields = dict(fields)
        self._templates: dict[tuple[str, Hashable], _RowsTemplate] = {}

    def template(self, alias: str, shape: Hashable, names: Collection[str]) -> _RowsTemplate:
        key = (alias, shape)
        found = self._templates.get(key)
        if found is not None:
            return found
        connection = connections[alias]
        queryset = self.build(shape, **{name: self.sentinels[name] for name in names})
        compiler = queryset.query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        wanted = {name: self.fields[name].get_db_prep_value(self.sentinels[name], connection) for name in names}
        sql, params, slots = _inlined(connection, sql, params, _slots(params, wanted))
        expressions = [column[0] for column in compiler.select[: compiler.col_count]]
        converters = compiler.get_converters(expressions)
        kept = tuple(
            (index, tuple(functions), expression)
            for index, (functions, expression) in sorted(converters.items())
            if not stored_form(expression.output_field)
        )
        template = _RowsTemplate(sql, params, slots, kept)
        if len(self._templates) >= self.MAX_SHAPES:
            self._templates.clear()
        self._templates[key] = template
        return template

    def rows(
        self, model: type[Model], shape: Hashable, values: Mapping[str, Any], limit: int, offset: int
    ) -> list[Any]:
        alias = router.db_for_read(model)
        template = self.template(alias, shape, values.keys())
        connection = connections[alias]
        params = list(template.params)
        prepared = {name: self.fields[name].get_db_prep_value(value, connection) for name, value in values.items()}
        for position, name in template.slots:
            params[position] = prepared[name]
        if limit < 0 or offset < 0:  # SQLite reads LIMIT -1 as no limit at all
            raise ValueError(f"a page's LIMIT and OFFSET are not negative, not {limit} and {offset}")
        sql = f"{template.sql} LIMIT {int(limit)} OFFSET {int(offset)}"
        rows: list[Any] = run(connection, sql, params, lambda cursor: cursor.fetchall())
        if template.converters and rows:
            rows = [list(row) for row in rows]
            for row in rows:
                for index, functions, expression in template.converters:
                    value = row[index]
                    for function in functions:
                        value = function(value, expression, connection)
                    row[index] = value
        return rows
