"""`GET /api/v1/trust/keys/` (public) and `GET /api/v1/audit/verify/` (owners and compliance of the tenant):
issue 35, item 1."""

from __future__ import annotations

import pytest
from django.db import connection, models
from memory_governance.trust import load_public_key, verify_document
from rest_framework.test import APIClient

from memory_admin.lib import signing
from memory_admin.memory.models import AuditEvent
from tests.support import on_postgres

KEYS = "/api/v1/trust/keys/"
VERIFY = "/api/v1/audit/verify/"


def test_the_keys_are_public_and_old_keys_stay_listed_after_a_rotation(db, monkeypatch):
    monkeypatch.delenv("TRUST_SIGNING_KEY", raising=False)
    signing.reset_cache()
    before = APIClient().get(KEYS)
    assert before.status_code == 200
    current = before.json()["keys"][0]
    assert current["algorithm"] == "ed25519" and current["valid_to"] is None
    assert current["key_id"] == signing.signing_key().key_id
    load_public_key(current["public_key_pem"])
    signing.rotate_file_keyring()
    after = APIClient(HTTP_AUTHORIZATION="Bearer mga_not-a-real-token").get(KEYS)  # a bad token changes nothing
    assert after.status_code == 200
    listed = {key["key_id"]: key for key in after.json()["keys"]}
    assert current["key_id"] in listed and listed[current["key_id"]]["valid_to"] is not None
    assert after.json()["keys"][0]["key_id"] != current["key_id"]


def test_owners_and_compliance_see_an_intact_chain_with_its_signed_checkpoint(api, owner, compliance, moved_deadline):
    for who in (owner, compliance):
        response = api(who).get(VERIFY)
        assert response.status_code == 200, response.content
        answer = response.json()
        assert answer["intact"] is True and answer["first_broken"] is None
        assert answer["events"] == AuditEvent.objects.filter(tenant_id=owner.tenant_id).count() > 0
    checkpoint = answer["latest_checkpoint"]
    assert checkpoint["type"] == "audit_checkpoint" and checkpoint["tenant"] == owner.tenant_id
    keys = [load_public_key(key["public_key_pem"]) for key in APIClient().get(KEYS).json()["keys"]]
    assert verify_document(checkpoint, keys) == checkpoint["key_id"]


def test_other_roles_and_anonymous_callers_are_refused(api, agent, admin, moved_deadline):
    assert api(agent).get(VERIFY).status_code == 403
    assert api(admin).get(VERIFY).status_code == 403
    assert APIClient().get(VERIFY).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_a_tampered_event_is_named_in_the_answer(as_db_owner, api, owner, moved_deadline):
    event = AuditEvent.objects.filter(tenant_id=owner.tenant_id).order_by("id").first()
    assert event is not None
    with connection.cursor() as cursor:
        if on_postgres():
            cursor.execute("ALTER TABLE memory_auditevent DISABLE TRIGGER audit_event_immutable")
        models.QuerySet.update(AuditEvent.objects.filter(pk=event.pk), actor_name="someone else")
        if on_postgres():
            cursor.execute("ALTER TABLE memory_auditevent ENABLE TRIGGER audit_event_immutable")
    answer = api(owner).get(VERIFY).json()
    assert answer["intact"] is False
    assert answer["first_broken"]["event_id"] == event.pk and "hash does not match" in answer["first_broken"]["problem"]
