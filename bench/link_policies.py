"""What policing the link tables costs the write path (`make bench-rls`; issue 28).

The link tables (a summary's and a plan's bases, a context's items, a dispute's candidates, a cached answer's
records, a deletion's per-store progress) have no tenant_id in their models: `migrate` gives them one, kept by a
trigger from their parents, and the forced tenant policy (memory_admin/rls/policies.py, add_link_tenants). This
bench takes, as the app role under row-level security, in one run and one database, alternating round by round:

- "policed": the link tables as `migrate` leaves them (trigger and forced policy);
- "unpoliced": the same tables with neither (every other table still policed),

and times, on fact keys that each have a summary and a loaded context (so each supersession reads and marks
link rows through propagation): compare-and-swap supersessions (`actions.assert_fact`, one fact each), batch
supersessions (`batch.assert_facts`, 100 facts a call), and the link-row writers themselves (a summary on 10
bases, a context load of 10 items). Prints median/p95 per mode and the ratio policed / unpoliced. It never
asserts timings.

Run: `make bench-rls` or `make bench-rls BENCH_ARGS="--rounds 3 --writes 20"`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.measure import Figure, percentile, print_table, statement_mode  # noqa: E402
from bench.setup import setup_django  # noqa: E402

TENANT = "bench-rls"
PROJECT = "proj-rls"
BATCH = 100
LINK_ITEMS = 10


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="rounds per mode, alternated (default 6)")
    parser.add_argument("--writes", type=int, default=40, help="CAS writes per round (default 40)")
    parser.add_argument("--batches", type=int, default=2, help=f"batches of {BATCH} per round (default 2)")
    parser.add_argument("--links", type=int, default=20, help="summaries and context loads per round (default 20)")
    args = parser.parse_args(argv)
    for name in ("rounds", "writes", "batches", "links"):
        if not 1 <= getattr(args, name) <= 10_000:
            parser.error(f"--{name} must be between 1 and 10000")
    return args


def set_link_policies(owner: Any, tables: list[str], on: bool) -> None:
    """On: as `migrate` leaves the link tables (tenant_id kept by the trigger, forced policy). Off: no policy
    and no trigger, tenant_id filled by a column default from the session's tenant instead (the cheapest way to
    keep the NOT NULL column, so the rest of the write is the same)."""
    from psycopg import sql

    from memory_admin.rls.policies import LINK_TRIGGER, TENANT_EXPRESSION

    for table in tables:
        ident = sql.Identifier(table)
        statements = (
            [
                "ALTER TABLE {t} ALTER COLUMN tenant_id DROP DEFAULT",
                "ALTER TABLE {t} ENABLE TRIGGER {g}",
                "ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
                "ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
            ]
            if on
            else [
                "ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY",
                "ALTER TABLE {t} DISABLE ROW LEVEL SECURITY",
                "ALTER TABLE {t} DISABLE TRIGGER {g}",
                f"ALTER TABLE {{t}} ALTER COLUMN tenant_id SET DEFAULT {TENANT_EXPRESSION}",
            ]
        )
        for statement in statements:
            owner.execute(sql.SQL(statement).format(t=ident, g=sql.Identifier(LINK_TRIGGER)))


def prepare(keys: int) -> tuple[Any, list[dict[str, Any]]]:
    """A new tenant with `keys` facts, each with a summary and a loaded context on it. Returns (agent, heads)."""
    from django.utils import timezone

    from memory_admin.accounts import tenancy
    from memory_admin.accounts.services import ensure_principal
    from memory_admin.derived import lineage
    from memory_admin.memory.actions import Assertion
    from memory_admin.memory.batch import assert_facts

    agent = ensure_principal(TENANT, "bench-rls-agent", ["agent"])
    tenancy.activate(agent.tenant_id)
    start = timezone.now() - timedelta(days=30)
    heads: list[dict[str, Any]] = []
    for first in range(0, keys, BATCH):
        items = [
            Assertion(
                project_id=PROJECT,
                subject_id=f"subj-{i:05d}",
                predicate="deadline",
                value=f"v0-{i}",
                valid_from=start,
                source_canonical_ref=f"src:{i}",
                source_revision="r0",
            )
            for i in range(first, min(first + BATCH, keys))
        ]
        result = assert_facts(agent, items)
        for item, outcome in zip(items, result.items, strict=True):
            if outcome.result is None:
                raise SystemExit(f"set-up write refused: {outcome.error}")
            record = outcome.result.record
            heads.append({"subject_id": item.subject_id, "revision": record.revision, "n": 0})
            base = [lineage.BaseRef(record.memory_id, record.revision)]
            lineage.create_summary(agent, project_id=PROJECT, text=f"Due {item.value}.", bases=base)
            lineage.register_context_load(
                agent, session_id=f"s-{item.subject_id}", bases=base, expires_at=timezone.now() + timedelta(days=1)
            )
    return agent, heads


def supersede(head: dict[str, Any], now: Any) -> Any:
    from memory_admin.memory.actions import Assertion

    head["n"] += 1
    return Assertion(
        project_id=PROJECT,
        subject_id=head["subject_id"],
        predicate="deadline",
        value=f"v{head['n']}",
        valid_from=now,
        source_canonical_ref=f"src:{head['subject_id']}",
        source_revision=f"r{head['n']}",
        expected_revision=head["revision"],
    )


def run(args: argparse.Namespace) -> list[Figure]:
    from django.db import connection
    from django.utils import timezone

    from bench.rls import as_app_role
    from bench.run import admin_connection, migrate, prepare_database
    from memory_admin.derived import lineage
    from memory_admin.memory.actions import assert_fact
    from memory_admin.memory.batch import assert_facts
    from memory_admin.memory.models import MemoryRecord
    from memory_admin.rls.policies import link_tables

    prepare_database(regenerate=True)
    migrate()
    per_round = args.writes + args.batches * BATCH
    agent, heads = prepare(2 * args.rounds * per_round)
    tables = sorted(link_tables(connection))
    print(f"Link tables ({len(tables)}): {', '.join(tables)}")
    owner = admin_connection(connection.settings_dict["NAME"])  # the owner's, to switch the link tables
    if not as_app_role(int(agent.tenant_id)):
        raise SystemExit("BENCH_APP_ROLE is not set: the figures must be taken as the app role (make bench-rls).")
    connection.ensure_connection()
    samples: dict[tuple[str, str], list[float]] = {}

    def took(mode: str, kind: str, started: float, per: int = 1) -> None:
        samples.setdefault((mode, kind), []).append((time.perf_counter() - started) * 1000 / per)

    cursor = 0
    for round_no in range(args.rounds):
        modes = ("policed", "unpoliced") if round_no % 2 == 0 else ("unpoliced", "policed")
        for mode in modes:
            set_link_policies(owner, tables, on=mode == "policed")
            now = timezone.now()
            for head in heads[cursor : cursor + args.writes]:
                started = time.perf_counter()
                head["revision"] = assert_fact(agent, supersede(head, now)).record.revision
                took(mode, "cas", started)
            cursor += args.writes
            for _ in range(args.batches):
                chunk = heads[cursor : cursor + BATCH]
                cursor += BATCH
                started = time.perf_counter()
                assert_facts(agent, [supersede(h, now) for h in chunk])
                took(mode, "batch", started, BATCH)
            current = MemoryRecord.objects.filter(
                tenant_id=agent.tenant_id, status="accepted", superseded_by=None
            ).order_by("-id")
            bases = [lineage.BaseRef(m, r) for m, r in current.values_list("memory_id", "revision")[:LINK_ITEMS]]
            expires = now + timedelta(days=1)
            for i in range(args.links):
                started = time.perf_counter()
                lineage.create_summary(agent, project_id=PROJECT, text="s", bases=bases)
                took(mode, "summary", started)
                started = time.perf_counter()
                lineage.register_context_load(agent, session_id=f"b-{round_no}-{i}", bases=bases, expires_at=expires)
                took(mode, "context", started)
    set_link_policies(owner, tables, on=True)
    owner.close()
    return report(samples)


def report(samples: dict[tuple[str, str], list[float]]) -> list[Figure]:
    names = {
        "cas": "CAS supersession (1 fact)",
        "batch": f"batch supersession (per fact, {BATCH}/call)",
        "summary": f"summary on {LINK_ITEMS} bases",
        "context": f"context load of {LINK_ITEMS} items",
    }
    figures = []
    for kind, label in names.items():
        policed, unpoliced = samples.get(("policed", kind), []), samples.get(("unpoliced", kind), [])
        if not policed or not unpoliced:
            continue
        ratio = statistics.median(policed) / statistics.median(unpoliced)
        p95_ratio = percentile(policed, 95) / percentile(unpoliced, 95)
        figures.append(Figure(f"{label}: unpoliced", unpoliced))
        figures.append(Figure(f"{label}: policed", policed, note=f"ratio {ratio:.3f} (p95 {p95_ratio:.3f})"))
    return figures


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ["VAR_DIR"] = tempfile.mkdtemp(prefix=f"bench-rls-{os.getpid()}-")
    os.environ["CELERY_BROKER_URL"] = "memory://"  # after-commit tasks (vector refreshes) go nowhere
    os.environ.setdefault("BENCH_APP_ROLE", "ma_app")
    setup_django()
    print(f"Statements: {statement_mode()}")
    print_table(run(args))


if __name__ == "__main__":
    main()
