from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory_admin.accounts.models import Tenant
from memory_admin.accounts.tenancy import for_each_tenant, tenant_context
from memory_admin.derived.models import Summary
from memory_admin.derived.tasks import embed_summaries, refresh_record_vectors
from memory_admin.memory.models import MemoryRecord


class Command(BaseCommand):
    help = "Rebuild vector entries from the database (all records and summaries, or one tenant's)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")
        parser.add_argument("--batch", type=int, default=500)

    def handle(self, *args: Any, tenant: str | None, batch: int, **_: Any) -> None:
        records = summaries = 0
        if tenant:
            tenant_id = Tenant.objects.filter(slug=tenant).values_list("pk", flat=True).first()
            if tenant_id is not None:
                with tenant_context(tenant_id):
                    records, summaries = self._reindex(tenant_id, batch)
        else:
            # Every tenant in turn, each under its own row-level security scope.
            for tenant_id in for_each_tenant("reindex_vectors"):
                counts = self._reindex(tenant_id, batch)
                records, summaries = records + counts[0], summaries + counts[1]
        self.stdout.write(f"Indexed {records} records and {summaries} summaries.")

    def _reindex(self, tenant_id: int, batch: int) -> tuple[int, int]:
        records = MemoryRecord.objects.filter(tenant_id=tenant_id).order_by("id")
        ids = list(records.values_list("memory_id", flat=True))
        for start in range(0, len(ids), batch):
            refresh_record_vectors(ids[start : start + batch])  # run here, not on a worker
        summary_ids = list(Summary.objects.filter(tenant_id=tenant_id).order_by("id").values_list("id", flat=True))
        for start in range(0, len(summary_ids), batch):
            embed_summaries(summary_ids[start : start + batch])
        return len(ids), len(summary_ids)
