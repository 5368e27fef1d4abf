"""Issue 11's vocabulary and plumbing, each rule in its one home: PublicIdModel, the policy form built from
the connector registry, Principal.tenant_pk, batched enqueueing with Django's public on_commit only, and
the dashboard's shared keyset paging."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction

from deletion.models import DeletionRequest
from memory_admin.accounts.models import Principal
from memory_admin.dashboard.forms import PolicyForm
from memory_admin.derived.models import Summary
from memory_admin.memory.connectors import CONNECTORS, Connector, SettingField
from memory_admin.memory.models import Dispute, PublicIdModel
from memory_admin.queueing import enqueue_batched_after_commit
from tests.support.queueing import RecordingTask


def test_one_public_id_model_names_memory_derived_and_deletion_rows():
    assert {Dispute.public_prefix, Summary.public_prefix, DeletionRequest.public_prefix} >= {"dsp", "del"}
    for model in (Dispute, Summary, DeletionRequest):
        assert issubclass(model, PublicIdModel)
        field = model._meta.get_field("public_id")
        assert (field.max_length, field.unique, field.default) == (64, True, "")


@pytest.mark.django_db
def test_a_deletion_request_gets_its_public_id_on_first_save(compliance, moved_deadline):
    from deletion import service

    request = service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": "task-proposal-017"}, reason="Subject request"
    )
    assert isinstance(request, DeletionRequest) and request.public_id.startswith("del-")


# --- The policy form from the connector registry ----------------------------------------------------


def test_the_policy_form_offers_every_registered_connector_and_its_settings():
    form = PolicyForm()
    assert {value for value, _ in form.fields["connector"].choices} == {"", *CONNECTORS}  # type: ignore[attr-defined]
    names = list(form.fields)
    for connector in CONNECTORS.values():
        for setting in connector.settings_fields:
            assert setting.key in form.fields
            # right after the connector choice, before the reporters
            assert names.index("connector") < names.index(setting.key) < names.index("reporters")


class _PagerConnector(Connector):
    name = "pager"
    label = "Pager (test-only)"
    allowed_keys = Connector.allowed_keys | frozenset({"number", "wait"})
    settings_fields = (SettingField("number", "Pager number"), SettingField("wait", kind="seconds", default=3))


def test_a_new_connector_needs_no_form_code():
    with CONNECTORS.temporarily(_PagerConnector):
        form = PolicyForm(
            {"predicate": "on_call", "connector": "pager", "number": "555", "on_failure": "block_action", "risk": "low"}
        )
        assert form.is_valid(), form.errors
        assert form.to_policy_data()["canonical_source"] == {"connector": "pager", "number": "555", "wait": 3}
        assert PolicyForm.initial_for_new()["wait"] == 3
    assert "pager" not in CONNECTORS


def test_http_json_settings_come_out_as_before():
    data = {
        "predicate": "p",
        "connector": "http_json",
        "url_template": "https://x/{subject_id}",
        "value_pointer": "/v",
        "revision_pointer": "/r",
        "on_failure": "block_action",
        "risk": "low",
    }
    form = PolicyForm(data)
    assert form.is_valid(), form.errors
    assert form.to_policy_data()["canonical_source"] == {
        "connector": "http_json",
        "url_template": "https://x/{subject_id}",
        "value_pointer": "/v",
        "revision_pointer": "/r",
        "timeout_seconds": 5,
    }
    form = PolicyForm({**data, "auth_header": "X-Key"})  # the optional pair goes together, so it is reported
    assert form.is_valid()
    assert form.to_policy_data()["canonical_source"]["auth_secret_env"] == ""


# --- Principal.tenant_pk -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_tenant_pk_is_the_tenant_and_refuses_a_principal_without_one(owner):
    assert owner.tenant_pk == owner.tenant_id and owner.require_tenant == owner.tenant
    superuser = Principal(username="root")
    with pytest.raises(PermissionDenied):
        _ = superuser.tenant_pk
    with pytest.raises(PermissionDenied):
        _ = superuser.require_tenant


# --- Batched enqueueing ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_batch_begun_in_a_rolled_back_savepoint_goes_with_it():
    task = RecordingTask()
    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_batched_after_commit(task, ["lost"])
            raise RuntimeError("savepoint rolled back")
        enqueue_batched_after_commit(task, ["kept"])
        enqueue_batched_after_commit(task, ["kept too"])
    assert task.calls == [(["kept", "kept too"],)]


@pytest.mark.django_db(transaction=True)
def test_batches_of_successive_transactions_are_separate_and_outside_one_is_sent_at_once():
    task = RecordingTask()
    with transaction.atomic():
        enqueue_batched_after_commit(task, ["a"])
    with transaction.atomic():
        enqueue_batched_after_commit(task, ["b"])
    enqueue_batched_after_commit(task, ["c"])
    assert task.calls == [(["a"],), (["b"],), (["c"],)]


# --- Keyset paging, shared by the records list and the audit log ----------------------------------------


@pytest.mark.django_db
def test_records_and_audit_pages_follow_their_cursors(owner, moved_deadline):
    from django.test import Client

    client = Client()
    client.force_login(owner)
    first = client.get("/records/", {"status": "all", "size": "1", "sort": "newest"})
    assert len(first.context["rows"]) == 1 and first.context["next_after"]
    second = client.get(
        "/records/", {"status": "all", "size": 1, "sort": "newest", "after": first.context["next_after"]}
    )
    assert second.context["rows"][0].pk < first.context["rows"][0].pk
    # History's default order groups by fact; its keyset still moves on to the next row, never repeats one.
    grouped = client.get("/records/", {"status": "all", "size": "1"})
    after = client.get("/records/", {"status": "all", "size": 1, "after": grouped.context["next_after"]})
    assert after.context["rows"] and after.context["rows"][0].pk != grouped.context["rows"][0].pk
    audit = client.get("/audit/")
    assert audit.status_code == 200 and audit.context["events"] and audit.context["next_after"] is None
