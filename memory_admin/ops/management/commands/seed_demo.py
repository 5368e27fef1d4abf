from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_admin.accounts.models import Tenant
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.demo import PASSWORD, TENANT, seed_story, seed_volume


class Command(BaseCommand):
    help = (
        "Load the demo tenant: the article's story (people, policies, facts and a fresh agent token), then "
        "synthetic volume for the pages. Idempotent; a volume load that stopped resumes where it was."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--subjects", type=int, default=1500, help="synthetic subjects (2-3 records each)")
        part = parser.add_mutually_exclusive_group()
        part.add_argument("--story-only", action="store_true", help="the story and a token, no volume")
        part.add_argument(
            "--volume-only",
            action="store_true",
            help="only the synthetic volume, with its progress (what `make run` loads in the background)",
        )

    def handle(self, *args: Any, subjects: int, story_only: bool, volume_only: bool, **_: Any) -> None:
        if not 0 <= subjects <= 1_000_000:
            raise CommandError("--subjects is between 0 and 1000000.")
        tenant = Tenant.objects.get_or_create(slug=TENANT, defaults={"name": TENANT})[0]
        with tenant_context(tenant.pk):  # the demo tenant's rows, under row-level security
            token = None if volume_only else seed_story()
            made = 0 if story_only else seed_volume(subjects=subjects, on_chunk=self._progress if volume_only else None)
        if volume_only:
            self.stdout.write(f"Demo volume loaded ({made} synthetic records added).")
            return
        volume = "" if story_only else f" ({made} synthetic records added)"
        self.stdout.write(f"Demo tenant '{TENANT}' ready{volume}.")
        self.stdout.write(f"Humans: owner@{TENANT}, compliance@{TENANT}, admin@{TENANT} (password '{PASSWORD}').")
        self.stdout.write(f"Agent agent@{TENANT} API token (shown once):")
        self.stdout.write(str(token))

    def _progress(self, done: int, total: int) -> None:
        self.stdout.write(f"demo volume: {done}/{total} subjects")
        sys.stdout.flush()
