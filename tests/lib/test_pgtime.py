"""Timestamps are loaded by psycopg's compiled loader (memory_admin/lib/pgtime.py), with exactly the values and
timezone Django's own loader gives."""

from __future__ import annotations

import datetime

import pytest
from django.db import DataError, connection, transaction
from django.db.backends.postgresql.psycopg_any import register_tzloader

from memory_admin.lib import pgtime

pytestmark = pytest.mark.postgres_only(reason="psycopg's timestamptz loaders are PostgreSQL's")

EDGES = [
    "0001-01-01 00:00:00+00",
    "1969-12-31 23:59:59.999999+00",
    "2026-03-29 01:30:00.5+02",  # another offset in the text: the same instant, shown in UTC
    "2026-10-25 02:30:00.000001+01",
    "9999-12-31 23:59:59.999999+00",
]
QUERY = "SELECT unnest(%s::timestamptz[])"


def test_the_compiled_loader_is_installed_on_the_connection(db):
    connection.ensure_connection()
    assert pgtime.COMPILED  # requirements.txt installs psycopg[binary]
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(pgtime.TIMESTAMPTZ, 0) is pgtime.FastTimestamptzLoader


def test_it_loads_what_djangos_loader_loads(db):
    with connection.cursor() as cursor:
        cursor.execute(QUERY, [EDGES])
        fast = [row[0] for row in cursor.fetchall()]
    with connection.cursor() as cursor:
        register_tzloader(connection.timezone, cursor.cursor)  # Django's own loader, on this cursor only
        cursor.execute(QUERY, [EDGES])
        django_loaded = [row[0] for row in cursor.fetchall()]
    assert fast == django_loaded
    assert all(value.tzinfo is datetime.UTC for value in fast + django_loaded)
    assert fast[2] == datetime.datetime(2026, 3, 28, 23, 30, 0, 500000, tzinfo=datetime.UTC)


def test_a_value_python_cannot_hold_is_refused_as_before(db):
    for loaded_by_django in (False, True):
        with transaction.atomic(), connection.cursor() as cursor:
            if loaded_by_django:
                register_tzloader(connection.timezone, cursor.cursor)
            cursor.execute("SELECT 'infinity'::timestamptz")
            with pytest.raises(DataError):
                cursor.fetchall()
