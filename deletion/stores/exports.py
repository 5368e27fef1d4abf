"""Exported files: withheld from download, then rewritten without the scope's lines."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from deletion.stores.base import Found, Job, Scope, Store, Verification
from memory_admin.derived.models import ExportFile


class ExportsStore(Store):
    """Exported files: withheld from download, then rewritten without the scope's lines."""

    name = "exports"
    label = "Exports"

    def _lines(self, path: str, memory_ids: set[str]) -> int:
        if not os.path.exists(path):
            return 0
        with open(path, encoding="utf-8") as handle:
            return sum(1 for line in handle if json.loads(line).get("memory_id") in memory_ids)

    def find(self, scope: Scope) -> Found:
        ids = set(scope.memory_ids)
        files = [
            e
            for e in ExportFile.objects.filter(tenant_id=scope.tenant_id, removed_at__isnull=True)
            if self._lines(e.path, ids)
        ]
        return Found(
            len(files),
            {"ids": [f.pk for f in files], "memory_ids": scope.memory_ids},
            [Path(f.path).name for f in files[:5]],
        )

    def hide(self, job: Job, now: datetime) -> int:
        return ExportFile.objects.filter(pk__in=job.targets["ids"]).update(withheld=True)

    def purge(self, job: Job) -> int:
        ids = set(job.targets["memory_ids"])
        rewritten = 0
        for export in ExportFile.objects.filter(pk__in=job.targets["ids"]):
            if not os.path.exists(export.path):
                continue
            tmp = export.path + ".rewrite"
            kept = 0
            with open(export.path, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as dst:
                for line in src:
                    if json.loads(line).get("memory_id") not in ids:
                        dst.write(line)
                        kept += 1
            os.replace(tmp, export.path)
            ExportFile.objects.filter(pk=export.pk).update(rows=kept, withheld=False)
            rewritten += 1
        return rewritten

    def verify(self, job: Job) -> Verification:
        ids = set(job.targets["memory_ids"])
        exports = list(ExportFile.objects.filter(tenant_id=job.tenant_id, removed_at__isnull=True))
        lines = sum(self._lines(e.path, ids) for e in exports)
        return Verification(lines, {"files_scanned": len(exports), "lines_with_scope": lines})
