"""The backup catalogue: take a backup of the database and record it with its retention."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from deletion.models import Backup


def backup_credentials(db: dict[str, Any]) -> tuple[str, str]:
    """pg_dump and pg_restore log in as BACKUP_DATABASE_USER when set: the owner, who sees every tenant. The
    app role cannot dump the tenant tables (row-level security; docs/deploying.md "Row-level security")."""
    if settings.BACKUP_DATABASE_USER:
        return settings.BACKUP_DATABASE_USER, settings.BACKUP_DATABASE_PASSWORD
    return str(db.get("USER") or "postgres"), str(db.get("PASSWORD") or "")


def take_backup(retention_days: int | None = None) -> Backup:
    """pg_dump on PostgreSQL, the SQLite backup API on SQLite; catalogued with its expiry."""
    now = timezone.now()
    folder = settings.BACKUP_DIR
    folder.mkdir(parents=True, exist_ok=True)
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        path = folder / f"{now:%Y%m%dT%H%M%S%f}.dump"
        pg_dump = shutil.which("pg_dump")
        if pg_dump is None:
            raise RuntimeError("pg_dump is not installed; install the PostgreSQL client to take backups.")
        user, password = backup_credentials(db)
        env = {**os.environ, "PGPASSWORD": password}
        subprocess.run(
            [
                pg_dump,
                "--format=custom",
                "--no-owner",
                f"--file={path}",
                f"--host={db.get('HOST') or '127.0.0.1'}",
                f"--port={db.get('PORT') or 5432}",
                f"--username={user}",
                str(db["NAME"]),
            ],
            check=True,
            env=env,
            capture_output=True,
        )
        method = "pg_dump"
    else:
        path = folder / f"{now:%Y%m%dT%H%M%S%f}.sqlite3"
        # A connection of its own reads the last committed state, as pg_dump does: backing up through
        # Django's connection while it holds a write transaction would wait for that transaction forever.
        source = sqlite3.connect(str(db["NAME"]), timeout=20)
        target = sqlite3.connect(path)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
        method = "sqlite_backup"
    days = retention_days if retention_days is not None else settings.BACKUP_RETENTION_DAYS
    return Backup.objects.create(
        taken_at=now,
        expires_at=now + timedelta(days=days),
        path=str(path),
        method=method,
        size_bytes=path.stat().st_size,
    )
