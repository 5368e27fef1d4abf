"""The cost of sealed values (issue 35, item 4; lib.sealing): writes and reads with sealing on against the same
with it off, in one run on one database, as ratios (sealed / in clear).

- write, new fact: `assert_fact` of a fact never seen (its data key is created in the key store);
- write, next revision: `assert_fact` superseding a fact's value (its key exists);
- read, current: `reads.current` of one fact (one record opened);
- read, list of 50: a records page (`with_public_relations()`, 50 records opened), its keys in the process's
  30-second cache of opened keys as on a busy server; "cold": that cache emptied before each page.

Rounds alternate the two settings so that the shared machine's load falls on both alike. The key store is a file
of its own under a temporary directory (KEYSTORE_PATH), as in production it is apart from the database.

    make bench-sealing [BENCH_ARGS="--rounds 5 --per-round 200"]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import setup_django

TENANT = "bench-sealing"
PROJECT = "sealing"


def _prepare() -> None:
    import psycopg
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, connections
    from psycopg import sql

    if connection.vendor != "postgresql":
        sys.exit("bench-sealing needs PostgreSQL (make bench-sealing)")
    db = settings.DATABASES["default"]
    connections.close_all()
    with psycopg.connect(
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
        user=db.get("USER") or None,
        dbname="postgres",
        autocommit=True,
    ) as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone() is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
    call_command("migrate", interactive=False, verbosity=0)


def _timed(call: Callable[[int], object], count: int) -> list[float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        call(i)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=150)
    args = parser.parse_args(argv)
    os.environ["KEYSTORE_PATH"] = str(Path(tempfile.mkdtemp(prefix="bench-keys-")) / "keys.sqlite3")
    setup_django()
    _prepare()

    from django.test import override_settings
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.lib import keystore
    from memory_admin.memory import actions, reads
    from memory_admin.memory.actions import Assertion
    from memory_admin.memory.models import MemoryRecord

    agent = ensure_principal(TENANT, "bench-sealing-agent", ["agent"])
    run = timezone.now().strftime("%Y%m%d%H%M%S%f")
    start = timezone.now() - timedelta(days=1)
    samples: dict[tuple[str, bool], list[float]] = {}
    revisions: dict[str, int] = {}

    def assertion(subject: str, value: str, revision: int) -> Assertion:
        return Assertion(
            project_id=PROJECT,
            subject_id=subject,
            predicate="email",
            value=value,
            valid_from=start,
            source_canonical_ref="crm:contacts",
            source_revision=str(revision),
            expected_revision=revision - 1 if revision > 1 else None,
        )

    for round_number in range(args.rounds):
        for sealed in (True, False) if round_number % 2 == 0 else (False, True):
            tag = f"{run}-{round_number}-{'s' if sealed else 'c'}"
            subjects = [f"person-{tag}-{i}" for i in range(args.per_round)]
            with override_settings(SEALING_ENABLED=sealed):

                def new_fact(i: int, subjects: list[str] = subjects) -> object:
                    revisions[subjects[i]] = 1
                    return actions.assert_fact(agent, assertion(subjects[i], f"{subjects[i]}@example.com", 1))

                def next_revision(i: int, subjects: list[str] = subjects) -> object:
                    revision = revisions[subjects[i]] + 1
                    revisions[subjects[i]] = revision
                    return actions.assert_fact(
                        agent, assertion(subjects[i], f"r{revision}.{subjects[i]}@x.org", revision)
                    )

                samples.setdefault(("write, new fact", sealed), []).extend(_timed(new_fact, args.per_round))
                samples.setdefault(("write, next revision", sealed), []).extend(_timed(next_revision, args.per_round))

            # Reads of the rows this setting wrote (sealed rows are opened; rows in clear are not).
            def current(i: int, subjects: list[str] = subjects) -> object:
                record = reads.current(agent, PROJECT, subjects[i], "email")
                assert record is not None and "@" in str(record.value)
                return record

            page = MemoryRecord.objects.filter(tenant_id=agent.tenant_id, subject_id__in=subjects[:50])

            def list_page(i: int, page: Any = page) -> object:
                rows = list(page.with_public_relations().order_by("-id")[:50])
                assert rows and all("@" in str(r.value) for r in rows)
                return rows

            def list_page_cold(i: int, page: Any = page) -> object:
                keystore._open_cache.clear()  # every key read from the key store again
                return list_page(i, page)

            samples.setdefault(("read, current", sealed), []).extend(_timed(current, args.per_round))
            samples.setdefault(("read, list of 50, cold", sealed), []).extend(
                _timed(list_page_cold, max(20, args.per_round // 5))
            )
            samples.setdefault(("read, list of 50", sealed), []).extend(_timed(list_page, max(20, args.per_round // 5)))

    print(f"Sealing cost, {args.rounds} rounds x {args.per_round} (median ms; ratio = sealed / in clear)")
    print(f"{'path':<24}{'sealed':>10}{'in clear':>10}{'ratio':>8}{'p95 sealed':>12}{'p95 clear':>11}")
    paths = ("write, new fact", "write, next revision", "read, current", "read, list of 50", "read, list of 50, cold")
    for name in paths:
        on, off = samples[(name, True)], samples[(name, False)]
        m_on, m_off = statistics.median(on), statistics.median(off)
        p_on, p_off = sorted(on)[int(len(on) * 0.95) - 1], sorted(off)[int(len(off) * 0.95) - 1]
        print(f"{name:<24}{m_on:>10.3f}{m_off:>10.3f}{m_on / m_off:>8.2f}{p_on:>12.3f}{p_off:>11.3f}")
    print(f"load average {os.getloadavg()[0]:.2f} (the machine is shared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
