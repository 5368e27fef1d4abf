"""Restoring a backup, and replaying the tombstones the backup predates before its data is served.

Stop the web server and workers first: between the restore and the replay, the restored rows exist.
The replay runs in the same command, so nothing is served from a restore that skipped it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connection, connections, transaction
from django.db.models import Q

from deletion import ledger, stores, tombstones
from deletion.backups import backup_credentials
from deletion.models import Tombstone
from deletion.stores import Job, Scope
from memory_admin.accounts.tenancy import for_each_tenant
from memory_admin.memory.models import MemoryRecord, Project


def restore_backup(backup_path: str) -> dict[str, Any]:
    """Load the backup into the configured database, then replay the tombstone ledger."""
    path = Path(backup_path)
    if not path.exists():
        raise FileNotFoundError(f"No backup at {path}")
    db = connection.settings_dict
    user, password = backup_credentials(db)
    connections.close_all()
    if connection.vendor == "postgresql":
        pg_restore = shutil.which("pg_restore")
        if pg_restore is None:
            raise RuntimeError("pg_restore is not installed; install the PostgreSQL client to restore.")
        subprocess.run(
            [
                pg_restore,
                "--clean",
                "--if-exists",
                "--no-owner",
                "--single-transaction",
                f"--host={db.get('HOST') or '127.0.0.1'}",
                f"--port={db.get('PORT') or 5432}",
                f"--username={user}",
                f"--dbname={db['NAME']}",
                str(path),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PGPASSWORD": password},
        )
    else:
        shutil.copyfile(path, db["NAME"])
    return replay_tombstones()


def replay_tombstones() -> dict[str, Any]:
    """Re-create every ledger tombstone the database lacks and purge what it covers, through the same
    store adapters a deletion request uses (those registered as `replayed`). Tenant by tenant, under
    row-level security (a tenant not in this database has nothing to purge)."""
    entries = list(ledger.read())  # read once, filtered for each tenant
    tombstones_replayed, purged = 0, defaultdict[str, int](int)
    for tenant_id in for_each_tenant("replay_tombstones"):
        result = _replay_tenant(tenant_id, [e for e in entries if e["tenant_id"] == tenant_id])
        tombstones_replayed += result["tombstones_replayed"]
        for name, count in result["purged"].items():
            purged[name] += count
    return {"tombstones_replayed": tombstones_replayed, "purged": dict(purged)}


def _replay_tenant(tenant_id: int, entries: list[dict[str, Any]]) -> dict[str, Any]:
    have = set(
        Tombstone.objects.filter(tenant_id=tenant_id).values_list("tenant_id", "kind", "memory_id", "scope_hash")
    )
    missing = [e for e in entries if (e["tenant_id"], e["kind"], e["memory_id"], e["scope_hash"]) not in have]
    by_request: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in missing:
        by_request[entry["request_public_id"]].append(entry)
    with_record_lines = {e["request_public_id"] for e in entries if e["kind"] == Tombstone.Kind.RECORD}
    purged: dict[str, int] = defaultdict(int)
    written = len(missing)
    with transaction.atomic():
        Tombstone.objects.bulk_create([Tombstone(**{k: e[k] for k in ledger.FIELDS}, request=None) for e in missing])
        for public_id, entries in by_request.items():
            tenant_id = entries[0]["tenant_id"]
            memory_ids = [e["memory_id"] for e in entries if e["kind"] == Tombstone.Kind.RECORD]
            records = list(MemoryRecord.all_objects.filter(tenant_id=tenant_id, memory_id__in=memory_ids))
            if public_id not in with_record_lines:
                # A subject's or a predicate's request whose purge had not started: its records' tombstones were
                # never written (the rule hiding them stood for them), so its scope line finds them.
                for entry in entries:
                    if entry["kind"] != Tombstone.Kind.RECORD:
                        covered = _records_of_scope_line(tenant_id, entry)
                        records += covered
                        written += len(covered)  # one tombstone each
            for project_id in {r.project_id for r in records}:
                project = Project.objects.get(pk=project_id)
                mine = [r for r in records if r.project_id == project_id]
                has_subject_stone = any(e["kind"] == Tombstone.Kind.SUBJECT for e in entries)
                scope = Scope(
                    tenant_id=tenant_id,
                    project_id=project_id,
                    project_key=project.key,
                    records=mine,
                    subjects=sorted({r.subject_id for r in mine}) if has_subject_stone else [],
                )
                # Every store finds its targets before any purges, as at acceptance: purging the records
                # first would cascade away the links the other stores find their copies by.
                replayed = stores.replayed()
                found = {name: store.find(scope) for name, store in replayed.items()}
                for name, store in replayed.items():
                    job = Job(
                        tenant_id=tenant_id,
                        request_public_id=public_id,
                        project_id=project_id,
                        project_key=project.key,
                        targets=found[name].targets,
                    )
                    purged[name] += store.purge(job)
    return {"tombstones_replayed": written, "purged": dict(purged)}


def _records_of_scope_line(tenant_id: int, entry: dict[str, Any]) -> list[MemoryRecord]:
    """The records a subject's or a predicate's ledger line covers: those recorded before it whose project and
    subject (or predicate) give its keyed hash (the line holds no identifier, so every pair is hashed and
    compared). Their own tombstones are written here, as the purge would have written them."""
    by_subject = entry["kind"] == Tombstone.Kind.SUBJECT
    name = "subject_id" if by_subject else "predicate"
    digest = tombstones.subject_scope if by_subject else tombstones.predicate_scope
    created_at = datetime.fromisoformat(entry["created_at"])
    before = MemoryRecord.all_objects.filter(tenant_id=tenant_id, recorded_from__lte=created_at)
    pairs = before.values_list("project__key", name).distinct()
    matching = [
        (project, value) for project, value in pairs if digest(tenant_id, project, value) == entry["scope_hash"]
    ]
    if not matching:
        return []
    wanted = Q(pk__in=[])
    for project, value in matching:
        wanted |= Q(project__key=project, **{name: value})
    records = list(before.filter(wanted).select_related("project").order_by("id"))
    stones = []
    for project in {r.project.key for r in records}:
        stones += tombstones.unsaved(
            tombstones.record_rows(
                tenant_id, project, [r for r in records if r.project.key == project], subject_wide=by_subject
            ),
            tenant_id=tenant_id,
            request=None,
            request_public_id=entry["request_public_id"],
            created_at=created_at,
        )
    Tombstone.objects.bulk_create(stones)
    return records
