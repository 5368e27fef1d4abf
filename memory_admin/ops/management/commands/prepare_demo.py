from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from memory_admin.accounts.models import Tenant
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.demo import TENANT, seed_story

STEPS = 4


class Command(BaseCommand):
    help = (
        "What `make run` does before serving, in one process, each step said as it starts: apply migrations, "
        "check the search index's embedder, load the demo's story (people, policies, facts) with a fresh agent "
        "token, collect static files. The token is written to --token-file (mode 0600) for the banner. The "
        "synthetic volume is loaded afterwards, in the background (`seed_demo --volume-only`)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--token-file",
            type=Path,
            help="where to write the agent's fresh token (default: VAR_DIR/demo-agent-token)",
        )

    def handle(self, *args: Any, token_file: Path | None, **_: Any) -> None:
        began = time.monotonic()
        self._step(1, "Preparing the database (every migration on a first run; nothing to do after)")
        call_command("migrate", interactive=False, verbosity=1 if self._first_run() else 0, stdout=self.stdout)
        self._step(2, "Checking the search index")
        call_command("reindex_vectors", if_needed=True, stdout=self.stdout)
        self._step(3, "Loading the demo's story, its people and a fresh agent token")
        tenant = Tenant.objects.get_or_create(slug=TENANT, defaults={"name": TENANT})[0]
        with tenant_context(tenant.pk):
            token = seed_story()
        target = token_file or Path(settings.VAR_DIR) / "demo-agent-token"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(token + "\n")
        self._step(4, "Collecting static files")
        call_command("collectstatic", interactive=False, verbosity=0)
        self.stdout.write(f"Ready in {time.monotonic() - began:.0f} s.")

    @staticmethod
    def _first_run() -> bool:
        return "django_migrations" not in connection.introspection.table_names()

    def _step(self, number: int, words: str) -> None:
        self.stdout.write(f"[{number}/{STEPS}] {words}…")
        sys.stdout.flush()
