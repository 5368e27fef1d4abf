"""The backup catalogue: nothing is purged here; it gives stage 4."""

from __future__ import annotations

from pathlib import Path

from django.utils import timezone

from deletion.models import Backup
from deletion.stores.base import Found, Job, Scope, Store, Verification


class BackupsStore(Store):
    """The backup catalogue: nothing is purged here; it gives stage 4."""

    name = "backups"
    label = "Backups"

    def find(self, scope: Scope) -> Found:
        backups = list(Backup.objects.filter(expires_at__gt=timezone.now()).order_by("taken_at"))
        return Found(len(backups), {}, [Path(b.path).name for b in backups[:5]])

    def verify(self, job: Job) -> Verification:
        held = Backup.objects.filter(
            taken_at__lte=job.purge_confirmed_at or timezone.now(), expires_at__gt=timezone.now()
        )
        latest = max((b.expires_at for b in held), default=None)
        return Verification(
            0,
            {
                "backups_still_holding": held.count(),
                "latest_expiry": latest.isoformat() if latest else None,
                "note": "Backups are not rewritten; they age out by their retention.",
            },
        )
