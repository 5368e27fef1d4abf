from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_admin.lib import sealing
from memory_admin.memory.resealing import seal_existing


class Command(BaseCommand):
    help = (
        "Seal values and texts stored in clear (written before crypto-shredding, or with SEALING=0) under their "
        "facts' data keys; docs/deletion.md, 'Sealed values (crypto-shredding)'."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count the rows in clear; change nothing")
        parser.add_argument("--batch", type=int, default=500, help="rows read per statement (default 500)")

    def handle(self, *args: Any, dry_run: bool, batch: int, **_: Any) -> None:
        if not 1 <= batch <= 10_000:
            raise CommandError("--batch must be between 1 and 10000.")
        if not dry_run and not sealing.enabled():
            raise CommandError("SEALING is off in this environment: nothing would be sealed. Set SEALING=1.")
        counts = seal_existing(batch=batch, dry_run=dry_run)
        verb = "in clear" if dry_run else "sealed"
        for table, count in counts.items():
            self.stdout.write(f"{table}: {count} {verb if '(' not in table else ''}".rstrip())
