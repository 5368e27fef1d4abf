"""The hot reads prepared on the server (lib.prepared `run`, settings.PREPARED_READS; issue 36, item 1).

With persistent connections, the record list's pages and the as-of lookup are prepared statements that PostgreSQL
plans once per connection: after its five custom plans it keeps a generic one (pg_prepared_statements counts
them). The answers are the same as unprepared; the statements still pass through the connection's execute
wrappers and the query log; the setting follows DB_CONN_MAX_AGE unless DB_PREPARED_READS says otherwise, and a bad
value stops the settings. SQLite ignores the setting.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from memory_admin.lib.prepared import PreparedRows
from memory_admin.memory import reads
from memory_admin.memory.record_rows import _ROWS
from tests.support import DEADLINE

pytestmark = pytest.mark.django_db


def _prepared_statements(fragment: str) -> list[tuple[str, int, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        return list(cursor.fetchall())


@pytest.mark.postgres_only(reason="pg_prepared_statements and server-side prepare are PostgreSQL's")
def test_the_list_page_is_prepared_and_planned_once_per_connection(api, agent, moved_deadline):
    client = api(agent)
    unprepared = client.get("/api/v1/records/?page_size=7")
    with override_settings(PREPARED_READS=True):
        pages = [client.get("/api/v1/records/?page_size=7") for _ in range(8)]
    assert {page.content for page in pages} == {unprepared.content}
    [(statement, generic, custom)] = _prepared_statements("LIMIT 8 OFFSET 0")
    assert statement.count("memory_memoryrecord") >= 1 and "$1" in statement  # the tenant sent apart
    assert (custom, generic) == (5, 3)  # five custom plans, then the generic one kept: planned no more


@pytest.mark.postgres_only(reason="pg_prepared_statements and server-side prepare are PostgreSQL's")
def test_as_of_is_prepared_and_answers_as_unprepared(agent, moved_deadline):
    unprepared = reads.as_of(agent, **DEADLINE)
    with override_settings(PREPARED_READS=True):
        answers = [reads.as_of(agent, **DEADLINE) for _ in range(7)]
    assert unprepared is not None
    assert {(a.pk, a.revision, a.value) for a in answers if a is not None} == {
        (unprepared.pk, unprepared.revision, unprepared.value)
    }
    [(_statement, generic, custom)] = _prepared_statements("LIMIT 1")
    assert (custom, generic) == (5, 2)


@pytest.mark.postgres_only(reason="server-side prepare is PostgreSQL's")
def test_a_prepared_read_passes_through_the_execute_wrappers_and_the_query_log(api, agent, moved_deadline):
    sent: list[tuple[str, list[Any]]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append((sql, list(params)))
        return execute(sql, params, many, context)

    with override_settings(PREPARED_READS=True), connection.execute_wrapper(record):
        with CaptureQueriesContext(connection) as logged:
            answer = reads.as_of(agent, **DEADLINE)
    assert answer is not None and answer.revision == 2
    [(sql, params)] = sent
    assert "LIMIT 1" in sql and agent.tenant_pk in params
    [shown] = [q["sql"] for q in logged.captured_queries if "LIMIT 1" in (q["sql"] or "")]
    assert "%s" not in shown and DEADLINE["subject_id"] in shown  # logged with its values written in


def test_a_page_with_a_negative_limit_or_offset_is_refused(agent):
    rows: PreparedRows = _ROWS
    with pytest.raises(ValueError, match="not negative"):
        rows.rows(type(agent), ((), ("-id",), None), {"tenant": agent.tenant_pk}, -1, 0)
    with pytest.raises(ValueError, match="not negative"):
        rows.rows(type(agent), ((), ("-id",), None), {"tenant": agent.tenant_pk}, 5, -2)


def _prepared_reads(**env: str) -> subprocess.CompletedProcess[str]:
    code = "import django; django.setup(); from django.conf import settings; print(settings.PREPARED_READS)"
    inherited = {k: v for k, v in os.environ.items() if k not in ("DB_CONN_MAX_AGE", "DB_PREPARED_READS")}
    environ = {**inherited, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", **env}
    environ["DJANGO_SETTINGS_MODULE"] = "memory_admin.settings"
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)


def test_prepared_reads_follow_persistent_connections_unless_told():
    assert _prepared_reads().stdout.strip() == "False"  # a connection per request: nothing to plan once for
    assert _prepared_reads(DB_CONN_MAX_AGE="600").stdout.strip() == "True"
    assert _prepared_reads(DB_CONN_MAX_AGE="600", DB_PREPARED_READS="0").stdout.strip() == "False"
    assert _prepared_reads(DB_PREPARED_READS="1").stdout.strip() == "True"
    refused = _prepared_reads(DB_PREPARED_READS="sometimes")
    assert refused.returncode != 0 and "DB_PREPARED_READS" in refused.stderr
