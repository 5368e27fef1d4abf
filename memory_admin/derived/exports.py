"""Project exports: the project's live records as JSONL files, kept for download."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory_admin.accounts.models import Principal
from memory_admin.derived.models import ExportFile
from memory_admin.memory.errors import Forbidden, NotFound
from memory_admin.memory.models import MemoryRecord, Project
from memory_admin.memory.shapes import record_payload


def export_root() -> Path:
    return Path(settings.VAR_DIR) / "exports"


def export_path(tenant_id: int, project_pk: int) -> Path:
    """A new export file's path, built only from ids the product generates (the tenant's and project's
    primary keys, a timestamp and a random token), never from a user's string such as the project id;
    checked to resolve inside the export root all the same."""
    root = export_root().resolve()
    name = f"{timezone.now():%Y%m%dT%H%M%S%f}-{secrets.token_hex(4)}.jsonl"
    path = (root / str(int(tenant_id)) / str(int(project_pk)) / name).resolve()
    if not path.is_relative_to(root):
        raise RuntimeError(f"Refusing to write an export outside {root}.")
    return path


def inside_export_root(path: str) -> bool:
    """Whether a stored export path still resolves inside the export root (rows written before the paths
    were built from ids may not)."""
    return Path(path).resolve().is_relative_to(export_root().resolve())


def export_project(principal: Principal, project_id: str) -> ExportFile:
    """Write every live record of the project (history included) to a new JSONL file."""
    # Writing an export file is a change (a new copy every deletion must reach later): compliance staff,
    # who read everything and change nothing, download exports but do not make them.
    if not principal.has_role("owner", "admin"):
        raise Forbidden("Only owners and admins export projects.")
    project = Project.objects.filter(tenant_id=principal.tenant_pk, key=project_id).first()
    if project is None:
        raise NotFound(f"No project {project_id!r}.")
    path = export_path(principal.tenant_pk, project.pk)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with transaction.atomic():
        records = MemoryRecord.objects.filter(project=project).with_public_relations().order_by("id")
        with path.open("x", encoding="utf-8") as handle:  # a new file, never one already there
            for record in records.iterator(chunk_size=2000):
                handle.write(json.dumps(record_payload(record), ensure_ascii=False) + "\n")
                rows += 1
        return ExportFile.objects.create(
            tenant_id=principal.tenant_pk, project=project, path=str(path), rows=rows, created_by=principal
        )


def downloadable(principal: Principal, export_id: int) -> ExportFile:
    export = ExportFile.objects.filter(tenant_id=principal.tenant_pk, pk=export_id).select_related("project").first()
    if export is None or export.removed_at is not None or not inside_export_root(export.path):
        raise NotFound("No such export.")
    if export.withheld:
        raise Forbidden("This export is withheld while a deletion rewrites it.")
    return export
