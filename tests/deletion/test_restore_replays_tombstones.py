"""Restoring a backup older than a deletion replays its tombstones before the data is served."""

from __future__ import annotations

import pytest

from deletion.backups import take_backup
from deletion.models import StoreProgress, Tombstone
from deletion.restore import restore_backup
from deletion.tasks import purge_store
from memory_admin.derived import lineage
from memory_admin.derived.lineage import BaseRef
from memory_admin.derived.models import Event, Summary
from memory_admin.memory import receipts
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import AuditEvent, DecisionReceipt, MemoryRecord
from tests.support import DEADLINE, at, deadline

SUBJECT = DEADLINE["subject_id"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("purged", [True, False], ids=["purged", "accepted-only"])
def test_a_restored_backup_does_not_bring_deleted_content_back(api, agent, compliance, tmp_path, settings, purged):
    """Restored after the purge, the ledger holds every tombstone; restored while the purge had not started, it
    holds the subject's alone (its records' were to be written by the purge), and the replay finds the records by
    the subject's keyed hash and writes their tombstones."""
    settings.BACKUP_DIR = tmp_path
    lineage.log_event(
        agent,
        project_id="project-a",
        session_id="s-1",
        actor="owner",
        text=f"{SUBJECT} due Oct 30",
        occurred_at=at(10, 20),
        subject_ids=[SUBJECT],
    )
    record = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    keep = assert_fact(
        agent,
        deadline("x", "1", at(10, 20)).__class__(
            project_id="project-a",
            subject_id="task-other",
            predicate="submission_deadline",
            value="2026-12-01",
            valid_from=at(10, 20),
            source_canonical_ref="task-system:other",
            source_revision="1",
        ),
    ).record
    lineage.create_summary(agent, project_id="project-a", text="Due Oct 30", bases=[BaseRef(record.memory_id, 1)])
    _, receipt = receipts.read_for_action(agent, *DEADLINE.values())  # a receipt disclosing the value served
    assert receipt.disclosure is not None
    backup = take_backup(retention_days=30)  # taken before the deletion: it holds the subject

    response = api(compliance).post(
        "/api/v1/deletion-requests/",
        {"project_id": "project-a", "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
        format="json",
    )
    assert response.status_code == 202, response.json()
    if purged:
        for progress in StoreProgress.objects.filter(request__public_id=response.json()["id"]):
            purge_store.apply(args=[progress.pk])
        assert not MemoryRecord.all_objects.filter(subject_id=SUBJECT).exists()
    else:
        assert not MemoryRecord.objects.filter(subject_id=SUBJECT).exists()  # hidden by the rule, not purged
        assert not Tombstone.objects.filter(kind="record").exists()

    result = restore_backup(backup.path)

    assert result["tombstones_replayed"] >= 2  # the record's and the subject's
    assert not MemoryRecord.all_objects.filter(subject_id=SUBJECT).exists()
    assert MemoryRecord.objects.filter(memory_id=keep.memory_id).exists()  # the rest of the backup is back
    assert Tombstone.objects.filter(memory_id=record.memory_id).exists()
    assert not [s for s in Summary.objects.all() if s.text == "Due Oct 30"]  # texts are sealed: compared opened
    assert all(SUBJECT not in e.text for e in Event.objects.all())
    assert AuditEvent.objects.filter(object_id=record.memory_id, redacted_at__isnull=True).count() == 0
    restored = DecisionReceipt.objects.get(pk=receipt.pk)  # the receipt stays, its value erased again
    assert restored.disclosure is None and restored.document == receipt.document
    # And the restored database still refuses the deleted value.
    again = api(agent).post(
        "/api/v1/records/",
        {
            **DEADLINE,
            "value": "2026-10-30T17:00+09:00",
            "valid_from": at(10, 20).isoformat(),
            "source": {"canonical_ref": "task-system:x", "revision": "r99"},
        },
        format="json",
    )
    assert again.status_code == 410
