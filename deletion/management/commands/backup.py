from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from deletion.backups import take_backup


class Command(BaseCommand):
    help = "Back up the database and record it in the backup catalogue (it gives deletions their stage 4)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--retention-days", type=int, default=None)

    def handle(self, *args: Any, retention_days: int | None, **_: Any) -> None:
        backup = take_backup(retention_days)
        self.stdout.write(
            f"{backup.method} backup {backup.path} ({backup.size_bytes} bytes), kept until {backup.expires_at:%Y-%m-%d}."
        )
