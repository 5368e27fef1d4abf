"""Sealing the rows written in clear (before crypto-shredding, or while SEALING was off): `manage.py seal_values`.

Each sealed column of each model (lib.sealing: `sealed = True`) is read as stored; a row holding a value in clear is
written again through the field's `pre_save` (lib.rows.update), which seals it under the row's fact key. Rows
already sealed are left as they are, so a value whose key a deletion destroyed is never re-sealed as "erased".

Audit events are immutable (a trigger refuses updates on PostgreSQL): the ones written in clear stay so until a
deletion redacts them, and are counted. PostgreSQL keeps the old, clear versions of the rows rewritten here as dead
tuples (and in the WAL and earlier backups) until the space is reused: after sealing an existing database, a
`VACUUM FULL` of the tables named, and new backups replacing the old, finish the job (docs/deletion.md).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models, transaction
from django.db.models import F, TextField
from django.db.models.functions import Cast

from memory_admin.lib import rows, sealing
from memory_admin.memory.models import AuditEvent, Dispute, ExpiryRequest, MemoryRecord, RecheckAttempt

RESEALED: tuple[type[models.Model], ...] = (MemoryRecord, Dispute, RecheckAttempt, ExpiryRequest)


def _sealed_fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    return [f for f in model._meta.concrete_fields if getattr(f, "sealed", False)]


def _in_clear(stored: str | None, field: models.Field[Any, Any]) -> bool:
    if stored is None or stored == "":
        return False
    if isinstance(field, models.JSONField):
        try:
            return not sealing.is_sealed(json.loads(stored))
        except ValueError:
            return True
    return not stored.startswith(sealing.TEXT_MARK)


def _base(model: type[models.Model]) -> models.QuerySet[Any]:
    return model.all_objects.all() if model is MemoryRecord else model._base_manager.all()


def seal_existing(*, batch: int = 500, dry_run: bool = False) -> dict[str, int]:
    """Seal every row stored in clear; how many rows per table were (or, with `dry_run`, would be) sealed, and
    `memory_auditevent (left in clear)`."""
    counts: dict[str, int] = {}
    for model in RESEALED:
        fields = _sealed_fields(model)
        names = [f.name for f in fields]
        table = model._meta.db_table
        counts[table] = 0
        last = 0
        while True:
            raw = (
                _base(model)
                .filter(pk__gt=last)
                .order_by("pk")
                .annotate(**{f"stored_{f.name}": Cast(F(f.name), output_field=TextField()) for f in fields})
                .values_list("pk", *[f"stored_{n}" for n in names])[:batch]
            )
            chunk = list(raw)
            if not chunk:
                break
            last = chunk[-1][0]
            clear = [row[0] for row in chunk if any(_in_clear(v, f) for v, f in zip(row[1:], fields, strict=True))]
            counts[table] += len(clear)
            if dry_run or not clear:
                continue
            with transaction.atomic():
                for obj in _base(model).filter(pk__in=clear).select_for_update():
                    rows.update(obj, names)
    audit_clear = 0
    for before, after in (
        AuditEvent.objects.filter(redacted_at__isnull=True)
        .annotate(b=Cast(F("before"), output_field=TextField()), a=Cast(F("after"), output_field=TextField()))
        .values_list("b", "a")
        .iterator(chunk_size=2000)
    ):
        text = (before or "") + (after or "")
        if '"value"' in text and '"value": {"$sealed"' not in text and '"value":{"$sealed"' not in text:
            audit_clear += 1
    counts[f"{AuditEvent._meta.db_table} (left in clear)"] = audit_clear
    return counts
