"""A separate process that drives the product through its domain functions for the crypto-shredding proof
(tests/deletion/test_crypto_shredding.py): it runs against whatever DATABASE_URL and VAR_DIR (the key store) it is
given, so a test can point it at a throwaway PostgreSQL cluster, or a restored copy of a dump, and then read the
cluster's files itself. Each phase prints one JSON line.

    python -m tests.support.shred_driver plant MARKER SUBJECT   # values, source refs, a dispute and its reason,
                                                                # a recheck attempt's ref, audit events
    python -m tests.support.shred_driver delete SUBJECT         # file, purge every store, report the keys store
    python -m tests.support.shred_driver read SUBJECT           # the subject's values as reads give them
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import django

PROJECT = "shred-project"
TENANT = "shred"


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    django.setup()


def plant(marker: str, subject: str) -> dict[str, Any]:
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal
    from memory_admin.derived import lineage
    from memory_admin.derived.lineage import BaseRef
    from memory_admin.memory import actions, reads, rechecks
    from memory_admin.memory.actions import Assertion

    owner = ensure_principal(TENANT, "owner", ["owner"], password="x", validate=False)
    feed_a = ensure_principal(TENANT, "feed-a", ["agent"])
    feed_b = ensure_principal(TENANT, "feed-b", ["agent"])
    now = timezone.now()
    fact: dict[str, Any] = {"project_id": PROJECT, "subject_id": subject, "predicate": "email"}
    first = actions.assert_fact(
        feed_a,
        Assertion(
            **fact,
            value=f"{marker}@example.com",
            valid_from=now - timedelta(days=2),
            source_canonical_ref=f"crm:contacts/{marker}@example.com",
            source_revision="1",
        ),
    )
    second = actions.assert_fact(
        feed_b,
        Assertion(
            **fact,
            value=f"{marker}.work@example.com",
            valid_from=now - timedelta(days=2),
            source_canonical_ref=f"partner:contacts/{marker}",
            source_revision="7",
        ),
    )
    assert second.dispute is not None, second.outcome
    actions.resolve_dispute(
        owner, second.dispute.public_id, winner=first.record.memory_id, reason=f"kept {marker}@example.com, the CRM's"
    )
    current = reads.current(feed_a, PROJECT, subject, "email")
    assert current is not None
    # A recheck attempt that kept the source's ref (it names the person too).
    rechecks.report_recheck(
        feed_a,
        current,
        outcome="source_unavailable",
        source_ref=f"crm:contacts/{marker}@example.com?fetch=2",
        error="The CRM did not answer.",
    )
    bases = [BaseRef(current.memory_id, current.revision)]
    summary = lineage.create_summary(feed_a, project_id=PROJECT, text=f"Write to {marker}@example.com.", bases=bases)
    action = lineage.schedule_action(
        feed_a,
        project_id=PROJECT,
        kind="send_email",
        payload={"to": f"{marker}@example.com"},
        due_at=now + timedelta(days=1),
        bases=bases,
    )
    return {
        "memory_ids": [first.record.memory_id, second.record.memory_id],
        "dispute": second.dispute.public_id,
        "summary": summary.public_id,
        "action": action.public_id,
    }


def delete(subject: str) -> dict[str, Any]:
    from deletion import service
    from deletion.models import DeletionRequest, StoreProgress
    from deletion.tasks import purge_store
    from memory_admin.accounts.services import ensure_principal

    compliance = ensure_principal(TENANT, "carl", ["compliance"], password="x", validate=False)
    request = service.request_deletion(
        compliance, project_id=PROJECT, scope={"subject_id": subject}, reason="The person asked to be forgotten."
    )
    assert isinstance(request, DeletionRequest)
    for progress in StoreProgress.objects.filter(request=request).order_by("id"):
        purge_store.apply(args=[progress.pk])
    request.refresh_from_db()
    stores = {p.store: p for p in StoreProgress.objects.filter(request=request)}
    return {
        "request": request.public_id,
        "state": request.state,
        "purge_confirmed": request.purge_confirmed_at is not None,
        "stores": {name: p.state for name, p in stores.items()},
        "keys": stores["keys"].evidence,
    }


def read(subject: str) -> dict[str, Any]:
    from django.db import connection

    from memory_admin.derived.models import ScheduledAction, Summary
    from memory_admin.lib import sealing
    from memory_admin.memory.models import AuditEvent, Dispute, MemoryRecord, RecheckAttempt

    records = MemoryRecord.all_objects.filter(subject_id=subject)
    table = MemoryRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT CAST(value AS TEXT) FROM {table} WHERE subject_id = %s", [subject])
        stored = [json.loads(row[0]) for row in cursor.fetchall()]
        cursor.execute(f"SELECT source_canonical_ref FROM {table} WHERE subject_id = %s", [subject])
        stored_refs = [row[0] for row in cursor.fetchall()]
    opened, refused = 0, []
    for item in stored:
        if not sealing.is_sealed(item):
            continue
        try:
            sealing.open_envelope(item[sealing.JSON_MARK], "record.value")
            opened += 1
        except sealing.KeyDestroyed as exc:
            refused.append(str(exc))
    memory_ids = list(records.values_list("memory_id", flat=True))
    return {
        "values": list(records.values_list("value", flat=True)),
        "refs": list(records.values_list("source_canonical_ref", flat=True)),
        "sealed_refs": sum(1 for ref in stored_refs if sealing.is_sealed(ref)),
        "recheck_refs": list(
            RecheckAttempt.objects.filter(record__subject_id=subject).values_list("source_ref", flat=True)
        ),
        "sealed": sum(1 for item in stored if sealing.is_sealed(item)),
        "opened": opened,
        "refused": refused,
        "audit_after": [e for e in AuditEvent.objects.filter(object_id__in=memory_ids).values_list("after", flat=True)],
        "dispute_reasons": list(Dispute.objects.filter(subject_id=subject).values_list("resolution_reason", flat=True)),
        "summaries": list(Summary.objects.filter(bases__record__subject_id=subject).values_list("text", flat=True)),
        "payloads": list(
            ScheduledAction.objects.filter(bases__record__subject_id=subject).values_list("payload", flat=True)
        ),
    }


def main(argv: list[str]) -> int:
    _setup()
    phase, *args = argv
    phases: dict[str, Callable[..., dict[str, Any]]] = {"plant": plant, "delete": delete, "read": read}
    result = phases[phase](*args)
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
