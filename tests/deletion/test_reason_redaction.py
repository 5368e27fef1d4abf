"""A deletion request's reason never keeps the values it erases (issue 35, item 5): they are cut out when the
request is filed, before the reason is stored or audited, and the answer says so."""

from __future__ import annotations

from deletion.models import DeletionRequest
from deletion.reasons import REDACTED, redact
from deletion.stores.base import Scope, ScopeRecord
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.audit import Action
from memory_admin.memory.models import AuditEvent
from tests.support import DEADLINE, at, deadline

URL = "/api/v1/deletion-requests/"


def scope(*values, subjects=()):
    records = [
        ScopeRecord(i, 1, 1, f"mem-{i}", "s", "p", value, 1, True, "ref", "r1", [], None)
        for i, value in enumerate(values)
    ]
    return Scope(tenant_id=1, project_id=1, project_key="project-a", records=records, subjects=list(subjects))


def test_values_texts_inside_values_numbers_and_e_mail_addresses_are_cut_out():
    found = scope(
        "Alice Martin",
        {"mail": "Reach me at bob@example.org please", "phone": 5551234, "tags": ["vip-customer", "no"]},
        3,
        subjects=["carol@example.net"],
    )
    reason, changed = redact(
        "User alice martin (BOB@example.org, 5551234, vip-customer) and carol@example.net asked; no more", found
    )
    assert changed
    assert reason == f"User {REDACTED} ({REDACTED}, {REDACTED}, {REDACTED}) and {REDACTED} asked; no more"


def test_a_reason_without_values_is_kept_as_written():
    assert redact("Data subject request under GDPR art. 17", scope("Alice Martin", "on")) == (
        "Data subject request under GDPR art. 17",
        False,
    )


def test_a_subject_id_that_is_not_an_e_mail_address_stays():
    assert redact("forget subject task-17", scope(subjects=["task-17"])) == ("forget subject task-17", False)


def test_the_api_answer_says_the_reason_was_redacted_and_the_audit_never_saw_the_value(api, agent, compliance):
    assert_fact(agent, deadline("dana@example.com", "r1", at(10, 1)))
    response = api(compliance).post(
        URL,
        {
            "project_id": "project-a",
            "scope": {"subject_id": DEADLINE["subject_id"]},
            "reason": "Dana asked: erase dana@example.com now",
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    answer = response.json()
    assert answer["reason_redacted"] is True and answer["reason"] == f"Dana asked: erase {REDACTED} now"
    request = DeletionRequest.objects.get(public_id=answer["id"])
    assert request.reason == answer["reason"]
    event = AuditEvent.objects.get(object_id=request.public_id, action=Action.DELETION_REQUESTED)
    assert "dana@example.com" not in event.reason
    again = api(compliance).get(f"{URL}{request.public_id}/")
    assert again.json()["reason_redacted"] is True


def test_a_plain_reason_is_not_marked_redacted(api, agent, compliance):
    assert_fact(agent, deadline("dana@example.com", "r1", at(10, 1)))
    response = api(compliance).post(
        URL,
        {"project_id": "project-a", "scope": {"subject_id": DEADLINE["subject_id"]}, "reason": "Right to erasure"},
        format="json",
    )
    assert response.status_code == 202 and response.json()["reason_redacted"] is False
    assert response.json()["reason"] == "Right to erasure"
