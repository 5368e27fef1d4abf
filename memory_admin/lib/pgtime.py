"""Timestamps read from PostgreSQL by psycopg's C loader instead of Django's Python one.

Django (with psycopg 3) registers its own `timestamptz` loader on every connection: a Python subclass of
psycopg's pure-Python loader that parses the text and then replaces the timezone with the connection's. It
costs about 9 µs per value on the bench machine, against about 1 µs for psycopg's compiled loader: a records
page of 50 rows holds some 300 timestamps, a batch's locked rows several thousand.

Django's sessions run with `TimeZone` set to UTC when `USE_TZ` is on (its `ensure_timezone`), and psycopg's
loader then gives `datetime.timezone.utc`, which is exactly the timezone Django's loader puts on every value,
so the values are equal and carry the same `tzinfo`. The swap is made only in that case, and only
when the compiled loader is there (psycopg's binary package, as requirements.txt installs it); otherwise Django's
loader stays. `FastTimestamptzLoader.timezone` is what Django's `create_cursor` compares with the connection's
timezone to decide whether a cursor needs its own loader: equal, so none is registered per cursor.
"""

from __future__ import annotations

import datetime
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Loader

TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid
# The loader psycopg registers by default: its compiled class when the binary package is installed.
_DEFAULT: Any = psycopg.adapters.get_loader(TIMESTAMPTZ, pq.Format.TEXT)
COMPILED = _DEFAULT is not None and _DEFAULT.__module__.startswith("psycopg_binary")


class FastTimestamptzLoader(Loader):
    """psycopg's default `timestamptz` loader under the attribute Django's cursors check."""

    timezone = datetime.UTC

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self.load = _DEFAULT(oid, context).load  # type: ignore[method-assign]  # no Python frame per value

    def load(self, data: Any) -> Any:  # replaced per instance in __init__
        raise NotImplementedError


def install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """`connection_created` receiver: the compiled loader on a PostgreSQL connection whose session is in UTC."""
    if connection.vendor != "postgresql" or not COMPILED or connection.timezone is not datetime.UTC:
        return
    raw = connection.connection
    if raw.info.parameter_status("TimeZone") not in ("UTC", "Etc/UTC"):
        return
    raw.adapters.register_loader(TIMESTAMPTZ, FastTimestamptzLoader)
