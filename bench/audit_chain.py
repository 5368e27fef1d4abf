"""The audit chain's cost (`make bench-audit`, docs/security.md "Audit chain"), in one run:

1. one audited write, chained (`audit.record_event`: the head's lock, the seal, the INSERT that moves the head),
   next to the same event's row inserted unchained (`lib.rows.insert_many`, the writer before the chain), each in
   its own transaction: median/p95 and the ratio;
2. the seal alone (nonce, three HMACs, the link's hash): Python time per event;
3. `--events` events written in batches of `--batch` (`audit.record_events`), then the whole chain verified
   (`audit_chain.verify_tenant`, what `manage.py audit verify --tenant bench-audit` runs): events per second.

Run: `make bench-audit` or
`DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench_audit .venv/bin/python bench/audit_chain.py`.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.setup import setup_django  # noqa: E402

TENANT = "bench-audit"
SNAPSHOT = {
    "status": "accepted",
    "value": {"deadline": "2026-10-30T17:00+09:00", "owner": "someone@example.com"},
    "revision": 3,
    "valid_from": "2026-10-20T00:00:00+00:00",
    "valid_to": None,
    "recorded_from": "2026-10-20T00:00:01.123456+00:00",
    "recorded_to": None,
    "last_verified_at": None,
    "recheck_after": None,
    "source_canonical_ref": "task-system:project-a/task-proposal-017",
    "source_revision": "r17",
    "status_reason": "",
    "superseded_by": None,
}


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000, help="events written, then verified (default 100,000)")
    parser.add_argument("--batch", type=int, default=1000, help="events per record_events call (default 1,000)")
    parser.add_argument("--writes", type=int, default=1000, help="single writes timed, each way (default 1,000)")
    args = parser.parse_args(argv)
    os.environ.setdefault("AUDIT_CHECKPOINT_EVERY", "1000")
    setup_django()

    from django.core.management import call_command
    from django.db import connection, transaction

    from memory_admin.accounts.models import Tenant
    from memory_admin.accounts.tenancy import tenant_context
    from memory_admin.lib import rows
    from memory_admin.memory import audit, audit_chain
    from memory_admin.memory.models import AuditEvent

    if connection.vendor == "postgresql":
        import psycopg
        from psycopg import sql

        db = connection.settings_dict
        connection.close()
        with psycopg.connect(
            host=db.get("HOST") or None,
            port=db.get("PORT") or None,
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            dbname="postgres",
            autocommit=True,
        ) as admin:
            if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone() is None:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
    call_command("migrate", verbosity=0)
    tenant, _ = Tenant.objects.get_or_create(slug=TENANT, defaults={"name": "Audit bench"})
    load = os.getloadavg()[0]
    print(f"{connection.vendor}, {connection.settings_dict['NAME']}; load average {load:.2f}; 2 CPUs shared")
    with tenant_context(tenant.pk):
        before = AuditEvent.objects.filter(tenant_id=tenant.pk).count()

        def chained(i: int) -> None:
            audit.record_event(
                tenant=tenant.pk,
                actor=None,
                action=audit.Action.RECORD_SUPERSEDED,
                object_type="record",
                object_id=f"mem-bench-{i}",
                before=SNAPSHOT,
                after={**SNAPSHOT, "status": "superseded"},
            )

        def unchained(i: int) -> None:
            rows.insert_many(
                [
                    rows.build(
                        AuditEvent,
                        {
                            "tenant_id": tenant.pk,
                            "at": datetime.now(UTC),
                            "actor_name": "system",
                            "action": audit.Action.RECORD_SUPERSEDED,
                            "object_type": "record",
                            "object_id": f"mem-bench-{i}",
                            "before": SNAPSHOT,
                            "after": {**SNAPSHOT, "status": "superseded"},
                            "reason": "",
                        },
                    )
                ]
            )

        timings: dict[str, list[float]] = {"chained": [], "unchained": []}
        unchained_ids: list[int] = []
        for i in range(args.writes):  # interleaved, so both see the same load
            for name, write in (("chained", chained), ("unchained", unchained)):
                started = time.perf_counter()
                with transaction.atomic():
                    write(i)
                timings[name].append(time.perf_counter() - started)
        # The unchained rows would break the chain: they are the bench's only rows outside it; remove them (the
        # owner's trigger set aside on PostgreSQL, as the bench database's owner runs the bench).
        unchained_ids = list(AuditEvent.objects.filter(tenant_id=tenant.pk, hash="").values_list("id", flat=True))
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("ALTER TABLE memory_auditevent DISABLE TRIGGER audit_event_immutable")
            AuditEvent.objects.filter(pk__in=unchained_ids)._raw_delete(connection.alias)
            if connection.vendor == "postgresql":
                cursor.execute("ALTER TABLE memory_auditevent ENABLE TRIGGER audit_event_immutable")
        chained_ms, unchained_ms = _ms(timings["chained"]), _ms(timings["unchained"])
        print(f"one audited write, chained:    median {chained_ms[0]:.3f} ms, p95 {chained_ms[1]:.3f} ms")
        print(f"one audited write, unchained:  median {unchained_ms[0]:.3f} ms, p95 {unchained_ms[1]:.3f} ms")
        print(f"  chained/unchained (median): {chained_ms[0] / unchained_ms[0]:.2f}")

        head = audit_chain.Head(tenant.pk, audit_chain.GENESIS, 0, 0, None)
        values: dict[str, Any] = {}
        started = time.process_time()
        for i in range(5000):
            values = {
                "at": datetime.now(UTC),
                "actor_id": None,
                "actor_name": "system",
                "action": "record.superseded",
                "object_type": "record",
                "object_id": f"mem-{i}",
                "before": SNAPSHOT,
                "after": SNAPSHOT,
                "reason": "",
            }
            audit_chain.seal(head, values)
        print(f"the seal alone: {(time.process_time() - started) / 5000 * 1e6:.1f} us of CPU per event")

        started = time.perf_counter()
        now = datetime.now(UTC)
        for first in range(0, args.events, args.batch):
            events = [
                audit.Event(None, audit.Action.RECORD_SUPERSEDED, "record", f"mem-b-{first + j}", SNAPSHOT, SNAPSHOT)
                for j in range(min(args.batch, args.events - first))
            ]
            with transaction.atomic():
                audit.record_events(events, tenant=tenant.pk, at=now)
        written = time.perf_counter() - started
        print(f"{args.events:,} events in batches of {args.batch:,}: {written:.2f} s ({args.events / written:,.0f}/s)")

        started = time.perf_counter()
        report = audit_chain.verify_tenant(tenant.pk)
        took = time.perf_counter() - started
        state = "intact" if report.intact else f"BROKEN: {report.as_dict()['first_broken']}"
        print(
            f"verify: {report.events:,} events ({before:,} from earlier runs), {report.checkpoints} checkpoints, "
            f"{state}, in {took:.2f} s ({report.events / took:,.0f} events/s)"
        )


if __name__ == "__main__":
    main()
