"""The deletion's keys store (deletion/stores/keys.py; issue 35, item 4): which data keys a request destroys, and
what it leaves alone."""

from __future__ import annotations

from dataclasses import replace

from django.utils import timezone

from deletion.models import StoreProgress
from deletion.tasks import purge_store
from memory_admin.lib import keystore, sealing
from memory_admin.memory import audit_chain
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import AuditEvent, MemoryRecord
from tests.support import DEADLINE, at, deadline

URL = "/api/v1/deletion-requests/"


def _file(api, compliance, scope: dict) -> str:
    response = api(compliance).post(
        URL, {"project_id": DEADLINE["project_id"], "scope": scope, "reason": "Data subject request"}, format="json"
    )
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


def _purge(request_id: str) -> dict:
    for progress in StoreProgress.objects.filter(request__public_id=request_id).order_by("id"):
        purge_store.apply(args=[progress.pk])
    return StoreProgress.objects.get(request__public_id=request_id, store="keys").evidence


def test_a_value_written_after_the_acceptance_keeps_its_new_key(api, agent, compliance):
    old = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    request_id = _file(api, compliance, {"subject_id": DEADLINE["subject_id"]})
    # Accepted: the subject's key is retired. A new value about the subject (valid from after the deletion) is
    # allowed, and is sealed under a new key the purge does not destroy.
    later = assert_fact(agent, replace(deadline("2026-12-01T17:00+09:00", "r30", timezone.now()))).record
    evidence = _purge(request_id)
    assert evidence["keys_destroyed"] == 1 and evidence["keys_remaining"] == 0
    assert evidence["decryption_attempt"].startswith("failed as it must")
    assert not MemoryRecord.all_objects.filter(pk=old.pk).exists()
    assert MemoryRecord.objects.get(pk=later.pk).value == "2026-12-01T17:00+09:00"


def test_memory_ids_destroy_a_fact_s_key_only_when_every_revision_goes(api, agent, compliance):
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    second = assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1)).record
    alone = assert_fact(agent, replace(deadline("Room 4B", "1", at(10, 20)), predicate="room")).record
    fact = keystore.Selection(first.tenant_id, first.project_id, facts=((first.subject_id, first.predicate),))
    request_id = _file(api, compliance, {"memory_ids": [first.memory_id, alone.memory_id]})
    evidence = _purge(request_id)
    # The room's only revision went: its key is destroyed. The deadline keeps a revision, so its key stays.
    assert evidence["keys_destroyed"] == 1 and evidence["facts_keeping_key"] == 1
    assert "still exists" in evidence["facts_keeping_key_note"]
    assert keystore.count(fact) == 1
    assert MemoryRecord.objects.get(pk=second.pk).value == "2026-11-02T17:00+09:00"


def test_a_scope_stored_in_clear_is_reported_plainly(api, agent, compliance, settings):
    settings.SEALING_ENABLED = False
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    settings.SEALING_ENABLED = True
    evidence = _purge(_file(api, compliance, {"subject_id": DEADLINE["subject_id"]}))
    assert evidence["unsealed_records"] == 1 and "may hold these values' bytes" in evidence["unsealed_note"]
    assert evidence["decryption_attempt"] == "none: no sealed value in the scope"
    assert sealing.enabled()


def test_the_audit_chain_still_verifies_after_the_keys_are_destroyed(api, agent, compliance):
    """The chain's commitments cover the snapshots as stored (sealed): destroying the key, and the deletion's
    redaction, leave every link verifiable (issue 35, items 1 and 4 together)."""
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1))
    sealed = AuditEvent.objects.filter(object_id=first.memory_id).first()
    assert sealed is not None
    with sealing.reading_stored():
        stored = AuditEvent.objects.filter(pk=sealed.pk).values_list("after", flat=True).get()
    # The chain's commitment covers this envelope, not the value.
    assert isinstance(stored, dict) and sealing.is_sealed(stored["value"])
    assert audit_chain.verify_tenant(first.tenant_id).broken is None
    evidence = _purge(_file(api, compliance, {"subject_id": DEADLINE["subject_id"]}))
    assert evidence["keys_destroyed"] == 1
    report = audit_chain.verify_tenant(first.tenant_id)
    assert report.broken is None, report.broken
    assert report.events > 3
