from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_admin.accounts.models import Principal
from memory_admin.accounts.tenancy import tenant_context
from memory_admin.derived.exports import export_project
from memory_admin.memory.errors import DomainError


class Command(BaseCommand):
    help = "Export a project's records (history included) as a JSONL file kept for download."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--project", required=True)
        parser.add_argument("--as", dest="principal", required=True, help="name of the owner or admin exporting")

    def handle(self, *args: Any, tenant: str, project: str, principal: str, **_: Any) -> None:
        who = Principal.objects.filter(tenant__slug=tenant, name=principal).first()
        if who is None:
            raise CommandError(f"No principal {principal!r} in tenant {tenant!r}.")
        try:
            with tenant_context(who.tenant_id):  # --tenant, under row-level security
                export = export_project(who, project)
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(f"Exported {export.rows} records to {export.path}")
