from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory_admin.accounts.models import Tenant
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.demo import PASSWORD, TENANT, seed_demo


class Command(BaseCommand):
    help = "Load the demo tenant (the article's story plus synthetic volume). Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--subjects",
            type=int,
            default=1500,
            help="synthetic subjects (2-3 records each)",
        )

    def handle(self, *args: Any, subjects: int, **_: Any) -> None:
        tenant = Tenant.objects.get_or_create(slug=TENANT, defaults={"name": TENANT})[0]
        with tenant_context(tenant.pk):  # the demo tenant's rows, under row-level security
            result = seed_demo(subjects=subjects)
        self.stdout.write(f"Demo tenant '{TENANT}' ready ({result['synthetic_records']} synthetic records added).")
        self.stdout.write(f"Humans: owner@{TENANT}, compliance@{TENANT}, admin@{TENANT} (password '{PASSWORD}').")
        self.stdout.write(f"Agent agent@{TENANT} API token (shown once):")
        self.stdout.write(result["agent_token"])
