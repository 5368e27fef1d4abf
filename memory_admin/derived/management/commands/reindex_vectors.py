from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory_admin.derived.models import Summary
from memory_admin.derived.tasks import embed_summaries, refresh_record_vectors
from memory_admin.memory.models import MemoryRecord


class Command(BaseCommand):
    help = "Rebuild vector entries from the database (all records and summaries, or one tenant's)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")
        parser.add_argument("--batch", type=int, default=500)

    def handle(self, *args: Any, tenant: str | None, batch: int, **_: Any) -> None:
        records = MemoryRecord.objects.order_by("id")
        summaries = Summary.objects.order_by("id")
        if tenant:
            records = records.filter(tenant__slug=tenant)
            summaries = summaries.filter(tenant__slug=tenant)
        ids = list(records.values_list("memory_id", flat=True))
        for start in range(0, len(ids), batch):
            refresh_record_vectors(ids[start : start + batch])  # run here, not on a worker
        summary_ids = list(summaries.values_list("id", flat=True))
        for start in range(0, len(summary_ids), batch):
            embed_summaries(summary_ids[start : start + batch])
        self.stdout.write(f"Indexed {len(ids)} records and {len(summary_ids)} summaries.")
