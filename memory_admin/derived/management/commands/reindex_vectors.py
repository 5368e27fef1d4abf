from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memory_admin.accounts.models import Tenant
from memory_admin.accounts.tenancy import for_each_tenant, tenant_context
from memory_admin.derived.embedding import embedder_status
from memory_admin.derived.models import Summary
from memory_admin.derived.tasks import embed_summaries, refresh_record_vectors
from memory_admin.derived.vectors import get_index
from memory_admin.memory.models import MemoryRecord


class Command(BaseCommand):
    help = (
        "Re-embed vector entries from the database (all records and summaries, or one tenant's), with a progress "
        "bar. --rebuild first empties the index for the current embedder (after changing EMBEDDER); --if-needed "
        "does that only when the index on disk was built by another embedder (what `make run` runs)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")
        parser.add_argument("--batch", type=int, default=256, help="texts embedded per call (default 256)")
        parser.add_argument("--rebuild", action="store_true", help="empty the index first (every tenant)")
        parser.add_argument(
            "--if-needed", action="store_true", help="rebuild only if the index was built by another embedder"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")

    def handle(
        self,
        *args: Any,
        tenant: str | None,
        batch: int,
        rebuild: bool,
        if_needed: bool,
        no_progress: bool,
        **_: Any,
    ) -> None:
        if not 1 <= batch <= 10_000:
            raise CommandError("--batch is between 1 and 10000.")
        status = embedder_status()
        if status.fallback:
            self.stderr.write(
                f"The {status.wanted} embedder could not load ({status.reason}); embedding with {status.name}."
            )
        index = get_index()
        if if_needed:
            stored = index.stored_embedder()
            if stored is None or stored == index.embedder.name:
                self.stdout.write(f"The index is built by {index.embedder.name}: nothing to rebuild.")
                return
            self.stdout.write(f"The index was built by {stored}; rebuilding it for {index.embedder.name}.")
            rebuild = True
        if rebuild and tenant:
            raise CommandError("--rebuild empties the whole index: run it without --tenant.")
        if rebuild:
            index.recreate()
        records = summaries = 0
        if tenant:
            tenant_id = Tenant.objects.filter(slug=tenant).values_list("pk", flat=True).first()
            if tenant_id is None:
                raise CommandError(f"No tenant {tenant!r}.")
            with tenant_context(tenant_id):
                records, summaries = self._reindex(tenant_id, batch, no_progress)
        else:
            # Every tenant in turn, each under its own row-level security scope.
            for tenant_id in for_each_tenant("reindex_vectors"):
                counts = self._reindex(tenant_id, batch, no_progress)
                records, summaries = records + counts[0], summaries + counts[1]
        self.stdout.write(f"Indexed {records} records and {summaries} summaries with {index.embedder.name}.")

    def _reindex(self, tenant_id: int, batch: int, no_progress: bool) -> tuple[int, int]:
        ids = list(MemoryRecord.objects.filter(tenant_id=tenant_id).order_by("id").values_list("memory_id", flat=True))
        summary_ids = list(Summary.objects.filter(tenant_id=tenant_id).order_by("id").values_list("id", flat=True))
        with tqdm(
            total=len(ids) + len(summary_ids), unit="text", disable=no_progress, file=sys.stderr, desc="embedding"
        ) as bar:
            for start in range(0, len(ids), batch):
                chunk = ids[start : start + batch]
                refresh_record_vectors(chunk)  # run here, not on a worker
                bar.update(len(chunk))
            for start in range(0, len(summary_ids), batch):
                chunk_ids = summary_ids[start : start + batch]
                embed_summaries(chunk_ids)
                bar.update(len(chunk_ids))
        return len(ids), len(summary_ids)
