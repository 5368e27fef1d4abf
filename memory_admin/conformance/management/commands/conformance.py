"""`manage.py conformance`: score memory setups on the suite's cases, side by side."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_admin.conformance.runner import DEFAULT_VARIANTS, product_failed, run_suite, table
from memory_admin.conformance.targets import problems, target_names


class Command(BaseCommand):
    help = "Run the conformance suite (the base cases and their variants) against one target or all of them."

    def add_arguments(self, parser: CommandParser) -> None:
        # Not argparse `choices`: a name a broken plug-in would have registered gets that entry point's reason.
        parser.add_argument(
            "--target",
            default="all",
            metavar="NAME",
            help=f"one target, or all of them (default): {', '.join([*target_names(), 'all'])}",
        )
        parser.add_argument("--variants", type=int, default=DEFAULT_VARIANTS, help="generated variants per base case")
        parser.add_argument("--seed", type=int, default=0, help="variants are determined by the seed")
        parser.add_argument("--case", action="append", dest="cases", help="only this base case (repeatable)")
        parser.add_argument("--json", dest="json_file", help="also write every probe's record to this file")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0 <= options["variants"] <= 50:
            raise CommandError("--variants must be between 0 and 50.")
        for problem in problems():
            self.stderr.write(f"Warning: {problem}")
        names = target_names()
        if options["target"] not in [*names, "all"]:
            raise CommandError(
                f"Unknown target {options['target']!r}; known: {', '.join([*names, 'all'])}"
                + ("" if not problems() else " (entry points skipped: see the warnings above)")
            )
        # The agent's refused reads (409, 404, 410) are the point of the cases, not problems to log.
        request_log = logging.getLogger("django.request")
        level = request_log.level
        request_log.setLevel(logging.ERROR)
        try:
            result = run_suite(
                options["target"], variants=options["variants"], seed=options["seed"], only=options["cases"] or None
            )
        finally:
            request_log.setLevel(level)
        self.stdout.write(table(result))
        if options["json_file"]:
            Path(options["json_file"]).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
            self.stdout.write(f"\nEvery probe's record: {options['json_file']}")
        if product_failed(result):
            raise CommandError("this system fails at least one count (see above).", returncode=1)
