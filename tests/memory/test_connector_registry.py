"""Canonical-source connectors are one registry (`memory_admin.memory.connectors.CONNECTORS`): a connector
registered with one line is accepted by the field-policy API, offered by the dashboard's policy form, and read
by a recheck before acting; a second connector with a name already registered is refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

import pytest
from django.utils import timezone

from memory_admin.dashboard.forms import PolicyForm
from memory_admin.lib.registry import AlreadyRegistered
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.connectors import CONNECTORS, Connector, FactKey, Observation, SettingField
from memory_admin.memory.connectors.manual import ManualConnector
from memory_admin.memory.models import RecheckAttempt
from tests.support import DEADLINE, deadline

SUBJECT = DEADLINE["subject_id"]
POLICY: dict[str, Any] = {
    "project_id": "project-a",
    "predicate": "submission_deadline",
    "authorized_issuers": ["agent-7"],
    "canonical_ref_prefix": "task-system:",
    "recheck_interval": "P1D",
    "recheck_before_action": True,
    "on_failure": "block_action",
    "risk": "high",
}


class LedgerConnector(Connector):
    """A source that answers from its settings (test-only): what it was told is what the source says now."""

    name = "ledger"
    label = "Ledger (test-only)"
    allowed_keys = Connector.allowed_keys | frozenset({"value", "revision"})
    settings_fields = (SettingField("value", "Value"), SettingField("revision", "Revision"))
    fetched: ClassVar[list[FactKey]] = []

    @classmethod
    def validate(cls, settings: dict[str, Any], *, tenant_id: int | None = None) -> list[str]:
        problems = super().validate(settings, tenant_id=tenant_id)
        return problems + [f"{key} is required." for key in ("value", "revision") if not settings.get(key)]

    def fetch(self, key: FactKey) -> Observation:
        LedgerConnector.fetched.append(key)
        return Observation(self.settings["value"], self.settings["revision"], f"ledger:{key.subject_id}")


@pytest.fixture
def ledger():
    LedgerConnector.fetched = []
    with CONNECTORS.temporarily(LedgerConnector):
        yield LedgerConnector
    assert "ledger" not in CONNECTORS


def test_the_built_ins_are_listed_in_the_forms_order():
    assert list(CONNECTORS) == ["http_json", "manual"]
    choices = [value for value, _ in PolicyForm().fields["connector"].choices]  # type: ignore[attr-defined]
    assert choices == ["", "http_json", "manual"]


def test_a_registered_connector_is_offered_accepted_and_read_before_acting(api, admin, agent, ledger):
    choices = dict(PolicyForm().fields["connector"].choices)  # type: ignore[attr-defined]
    assert choices["ledger"] == "Ledger (test-only)"

    source = {"connector": "ledger", "value": "2026-11-02T17:00+09:00", "revision": "r18"}
    refused = api(admin).post(
        "/api/v1/field-policies/", {**POLICY, "canonical_source": {"connector": "ledger"}}, format="json"
    )
    assert refused.status_code == 400  # the connector's own validation runs
    assert "value is required." in refused.json()["errors"]["canonical_source"]
    created = api(admin).post("/api/v1/field-policies/", {**POLICY, "canonical_source": source}, format="json")
    assert created.status_code == 201, created.json()

    past = timezone.now() - timedelta(days=3)
    record = assert_fact(
        agent,
        deadline("2026-11-02T17:00+09:00", "r18", past, ref="task-system:project-a/task-proposal-017"),
        now=past,
        verified_at=past,
    ).record
    response = api(agent).get("/api/v1/facts/current/", {**DEADLINE, "purpose": "action"})
    assert response.status_code == 200, response.json()
    assert response.json()["action_allowed"] is True
    assert ledger.fetched == [FactKey("project-a", SUBJECT, "submission_deadline")]
    attempt = RecheckAttempt.objects.get(record=record)
    assert attempt.trigger == "action" and attempt.outcome == RecheckAttempt.Result.VERIFIED_UNCHANGED


def test_a_connector_no_longer_registered_is_refused_with_the_names_there_are(api, admin):
    response = api(admin).post(
        "/api/v1/field-policies/", {**POLICY, "canonical_source": {"connector": "ledger"}}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"]["canonical_source"] == [
        "Unknown connector 'ledger'; use one of 'http_json', 'manual'."
    ]


def test_a_second_connector_with_a_registered_name_is_refused():
    class Impostor(Connector):
        name = "manual"

    with pytest.raises(AlreadyRegistered, match="Two canonical-source connectors have the key 'manual'"):
        CONNECTORS.register(Impostor)
    assert CONNECTORS["manual"] is ManualConnector
    assert list(CONNECTORS) == ["http_json", "manual"]
