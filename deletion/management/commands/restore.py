from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from deletion.restore import restore_backup


class Command(BaseCommand):
    help = (
        "Restore a catalogued backup, then replay every deletion's tombstones before the data is served. "
        "Stop the web server and workers first."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("backup", help="path of the backup file (see the backup catalogue)")
        parser.add_argument("--yes", action="store_true", help="confirm: the current database is replaced")

    def handle(self, *args: Any, backup: str, yes: bool, **_: Any) -> None:
        if not yes:
            raise CommandError("This replaces the current database with the backup; add --yes to go on.")
        try:
            result = restore_backup(backup)
        except (FileNotFoundError, RuntimeError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Restored {backup}; replayed {result['tombstones_replayed']} tombstones: {result['purged']}")
