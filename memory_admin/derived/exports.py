"""Project exports: the project's live records as JSONL files, kept for download."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.derived.models import ExportFile
from memory_admin.memory.api.serializers import record_payload
from memory_admin.memory.errors import Forbidden, NotFound
from memory_admin.memory.models import MemoryRecord, Project


def export_root() -> Path:
    return Path(settings.VAR_DIR) / "exports"


def export_project(principal: Principal, project_id: str) -> ExportFile:
    """Write every live record of the project (history included) to a new JSONL file."""
    if not principal.has_role("owner", "admin", "compliance"):
        raise Forbidden("Only owners, admins and compliance staff export projects.")
    project = Project.objects.filter(tenant_id=principal.tenant_id, key=project_id).first()
    if project is None:
        raise NotFound(f"No project {project_id!r}.")
    folder = export_root() / str(principal.tenant_id) / project.key
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{timezone.now():%Y%m%dT%H%M%S%f}.jsonl"
    rows = 0
    with transaction.atomic():
        records = MemoryRecord.objects.filter(project=project).with_public_relations().order_by("id")
        with path.open("w", encoding="utf-8") as handle:
            for record in records.iterator(chunk_size=2000):
                handle.write(json.dumps(record_payload(record), ensure_ascii=False) + "\n")
                rows += 1
        return ExportFile.objects.create(
            tenant_id=principal.tenant_id, project=project, path=str(path), rows=rows, created_by=principal
        )


def downloadable(principal: Principal, export_id: int) -> ExportFile:
    export = ExportFile.objects.filter(tenant_id=principal.tenant_id, pk=export_id).select_related("project").first()
    if export is None or export.removed_at is not None:
        raise NotFound("No such export.")
    if export.withheld:
        raise Forbidden("This export is withheld while a deletion rewrites it.")
    return export
