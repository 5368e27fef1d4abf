"""`make bench-growth` end to end at tiny sizes on PostgreSQL (bench/growth.py): it generates one database per size
with the bench's COPY generator, measures each, and prints one table with the sizes as columns and a number in
every cell; `--measure-only` fails clearly on a missing database and `--min-free-gb` refuses a generation that
would leave too little disk. Figures are never asserted, only the table's shape."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from bench import growth
from tests.support import ROOT

pytestmark = pytest.mark.postgres_only(reason="bench-growth generates its databases with PostgreSQL's COPY")


def owner_url(dbname: str) -> str:
    """DATABASE_URL (the owner's role, as `make test` sets it) with another database."""
    return urlunsplit(urlsplit(os.environ["DATABASE_URL"])._replace(path="/" + dbname, query=""))


@pytest.fixture
def prefix() -> Iterator[str]:
    """A database prefix of this test alone; its databases are dropped afterwards."""
    name = f"test_bench_growth_{os.getpid()}_"
    yield name
    with psycopg.connect(owner_url("postgres"), autocommit=True) as admin:
        rows = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [name + "%"]).fetchall()
        for (db,) in rows:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))


def run_growth(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABASE_APP_ROLE")}
    env["DATABASE_URL"] = owner_url("postgres")
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "growth.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def record_indexes(dbname: str) -> list[tuple[str, str]]:
    """memory_memoryrecord's indexes in database `dbname`: name and definition."""
    with psycopg.connect(owner_url(dbname)) as db:
        found = db.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_memoryrecord' ORDER BY 1"
        ).fetchall()
    return [(str(name), str(definition)) for name, definition in found]


def table_of(output: str) -> tuple[list[str], dict[str, list[str]]]:
    """The printed table: the header's size labels, and each row's cells by its label."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("figure "))
    header = lines[start][growth.LABEL_WIDTH :].split()
    assert set(lines[start + 1]) == {"-"}
    rows = {}
    for line in lines[start + 2 :]:
        if line.startswith("Figures are printed"):
            break
        rows[line[: growth.LABEL_WIDTH].strip()] = line[growth.LABEL_WIDTH :].split()
    return header, rows


@pytest.mark.django_db  # the test database: the indexes the migrations made, to compare with
def test_two_tiny_sizes_give_one_column_each_and_a_number_in_every_cell(prefix: str) -> None:
    done = run_growth(
        "--sizes", "2000,4000", "--iterations", "5", "--batch-facts", "20", "--min-free-gb", "0",
        "--database-prefix", prefix,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[2k] Generating 2,000 records: 20 subjects" in done.stdout
    assert "[4k] Generating 4,000 records: 40 subjects" in done.stdout
    header, rows = table_of(done.stdout)
    assert header == ["2k", "4k"]
    assert list(rows) == [title for _, title, _ in growth.ROWS]
    for title, cells in rows.items():
        assert len(cells) == 2, (title, cells)
        for cell in cells:
            float(cell.replace(",", ""))  # a number: raises on "-" or anything else
    records = [int(cell.replace(",", "")) for cell in rows["records in the table"]]
    # The generated rows, plus what this run wrote (the CAS writes' new revisions and the batch's new facts).
    assert records[0] >= 2000 and records[1] >= 4000
    assert records[1] > records[0]

    # The load drops the secondary indexes and builds them after (bench/run.py drop_plain_indexes): the generated
    # database ends with every index the migrations made, as the test database has them.
    assert "indexes built" in done.stdout
    assert record_indexes(prefix + "2k") == record_indexes(connection.settings_dict["NAME"]) != []

    again = run_growth("--sizes", "2000", "--generate-only", "--database-prefix", prefix)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{prefix}2k: 2,000 records present, kept" in again.stdout
    assert "Generating" not in again.stdout


def test_measure_only_names_the_missing_database(prefix: str) -> None:
    done = run_growth("--sizes", "3000", "--measure-only", "--database-prefix", prefix)
    assert done.returncode != 0
    assert f"database {prefix}3k for 3,000 records is missing" in done.stderr
    assert "figure " not in done.stdout


def test_min_free_gb_refuses_a_generation_that_would_fill_the_disk(prefix: str) -> None:
    done = run_growth("--sizes", "3000", "--generate-only", "--min-free-gb", "1000000", "--database-prefix", prefix)
    assert done.returncode != 0
    assert f"refusing to generate 3,000 records into {prefix}3k" in done.stderr
    with psycopg.connect(owner_url("postgres"), autocommit=True) as admin:
        created = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [prefix + "3k"]).fetchone()
    assert created is None  # refused before anything was created
