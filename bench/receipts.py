"""What a decision receipt costs the read for acting (`make bench-receipts`; issue 35, item 3).

In one run and one database, alternating round by round so the machine's load falls on both alike, it times:

- "without": the read for acting as it was before receipts: `rechecks.recheck_before_action` then
  `reads.fact_view(purpose="action")` (no recheck is due: the field's policy names no source, so neither path
  leaves the database);
- "with": `receipts.read_for_action`, the same two steps and the receipt: the chain head moved (one UPDATE ...
  RETURNING), the document built and signed (Ed25519), the receipt inserted, the head's hash written, in one
  committed transaction;
- the floor of any durable write: one one-row UPDATE in its own committed transaction;

and, alone, what signing one receipt costs (`lib.signing.sign_document` on a receipt's document, CPU only).
Prints median/p95 per mode and the ratio with / without. It never asserts timings.

Run: `make bench-receipts` (PostgreSQL, its own database) or
`make bench-receipts BENCH_ARGS="--rounds 5 --reads 200"`; on SQLite: `DATABASE_URL=sqlite:///var/bench-receipts.sqlite3
.venv/bin/python bench/receipts.py`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT / "bench"]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.measure import Figure, percentile, print_table  # noqa: E402
from bench.setup import setup_django  # noqa: E402

TENANT = "bench-receipts"
KEY = ("project-r", "subject-r", "deadline_r")


def prepare() -> None:
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor == "postgresql":
        from bench.run import prepare_database

        prepare_database(regenerate=False)
    started = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    print(f"Migrations applied ({time.perf_counter() - started:.1f} s) on {connection.vendor}")


def seed() -> object:
    from datetime import timedelta

    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.memory.actions import Assertion, assert_fact
    from memory_admin.memory.models import FieldPolicy
    from memory_admin.memory.reads import current

    agent = ensure_principal(TENANT, "bench-reader", ["agent"])
    owner = ensure_principal(TENANT, "bench-owner", ["owner", "admin"])
    FieldPolicy.objects.get_or_create(
        tenant=owner.tenant,
        predicate=KEY[2],
        defaults={"recheck_interval": timedelta(days=30), "on_failure": FieldPolicy.OnFailure.BLOCK_ACTION},
    )
    if current(agent, *KEY) is None:
        now = timezone.now() - timedelta(hours=1)
        assert_fact(
            agent,
            Assertion(
                project_id=KEY[0],
                subject_id=KEY[1],
                predicate=KEY[2],
                value="2026-11-02T17:00+09:00",
                valid_from=now,
                source_canonical_ref="bench:deadline",
                source_revision="1",
            ),
            now=now,
            verified_at=now,
        )
    return agent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reads", type=int, default=200, help="reads per mode per round")
    args = parser.parse_args(argv)

    setup_django()
    prepare()
    agent = seed()

    from memory_admin.lib import signing
    from memory_admin.memory import reads, receipts, rechecks

    def without(_: int) -> None:
        checked = rechecks.recheck_before_action(agent, *KEY, purpose="action")  # type: ignore[arg-type]
        reads.fact_view(agent, *KEY, purpose="action", checked=checked)  # type: ignore[arg-type]

    def with_receipt(_: int) -> None:
        receipts.read_for_action(agent, *KEY)  # type: ignore[arg-type]

    def timed(fn: object, n: int) -> list[float]:
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)  # type: ignore[operator]
            samples.append((time.perf_counter() - t0) * 1000)
        return samples

    from django.db import transaction

    from memory_admin.memory.models import ReceiptChain

    tenant_id = agent.tenant_id  # type: ignore[attr-defined]

    def durable_write(_: int) -> None:
        # The floor of any durable write: one one-row UPDATE in its own committed transaction (WAL flush).
        with transaction.atomic():
            ReceiptChain.objects.filter(tenant_id=tenant_id).update(head_hash=F("head_hash"))

    from django.db.models import F

    for fn in (without, with_receipt, durable_write):  # warm up: connections, prepared statements, the keyring
        timed(fn, 20)
    plain: list[float] = []
    receipted: list[float] = []
    floor: list[float] = []
    for _ in range(args.rounds):
        plain += timed(without, args.reads)
        receipted += timed(with_receipt, args.reads)
        floor += timed(durable_write, args.reads)

    document = receipts.as_document(receipts.DecisionReceipt.objects.order_by("-id").first())  # type: ignore[arg-type]
    unsigned = {k: v for k, v in document.items() if k not in ("signature", "disclosure")}
    signing_ms = timed(lambda _: signing.sign_document(unsigned), 2000)

    figures = [
        Figure("action read without receipt", plain),
        Figure("action read with receipt (signed, chained)", receipted),
        Figure("signing one receipt (Ed25519 + canonical JSON)", signing_ms),
        Figure("floor: one committed one-row UPDATE", floor),
    ]
    print_table(figures)
    ratio = statistics.median(receipted) / statistics.median(plain)
    ratio95 = percentile(receipted, 95) / percentile(plain, 95)
    print(
        f"\nratio with / without: median {ratio:.2f}x, p95 {ratio95:.2f}x "
        f"({args.rounds} rounds x {args.reads} reads per mode, alternating)"
    )
    added = statistics.median(receipted) - statistics.median(plain)
    print(
        f"the receipt adds {added:.2f} ms (median); signing is {statistics.median(signing_ms):.3f} ms of it, "
        f"a committed one-row write alone {statistics.median(floor):.2f} ms"
    )


if __name__ == "__main__":
    main()
