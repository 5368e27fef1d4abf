"""Issue 11, "rules coded separately in the API and the dashboard": each rule has one home in the domain and
every door asks it. Retrying a deletion (service.retry_stores), "is this a manual field" (policies.is_manual),
which policy governs a field (policies.policy_for / policies_for), freshness (reads.freshness_of /
freshness_filter) and "recheck now" (rechecks.request_recheck_now)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from deletion import service
from deletion.models import DeletionRequest, StoreProgress
from deletion.tasks import purge_store
from memory_admin.accounts.services import ensure_principal
from memory_admin.memory import reads, rechecks
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.errors import Forbidden, InvalidState
from memory_admin.memory.models import FieldPolicy, MemoryRecord, Project, RecheckAttempt
from memory_admin.memory.policies import is_manual, not_the_source, policies_for, policy_for
from tests.support import DEADLINE, at, deadline
from tests.support.canonical_source import http_json_source

URL = "/api/v1/deletion-requests/"
FACT_URL = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"
SUBJECT = DEADLINE["subject_id"]


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def delete_subject(compliance) -> DeletionRequest:
    request = service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": SUBJECT}, reason="Data subject request"
    )
    assert isinstance(request, DeletionRequest)
    return request


def fail_one_store(request: DeletionRequest) -> StoreProgress:
    row = StoreProgress.objects.filter(request=request).order_by("id").first()
    assert row is not None
    StoreProgress.objects.filter(pk=row.pk).update(state=StoreProgress.State.FAILED, last_error="store down")
    return row


def purge(request: DeletionRequest) -> None:
    for progress in StoreProgress.objects.filter(request=request):
        purge_store.apply(args=[progress.pk])
    request.refresh_from_db()
    assert request.purge_confirmed_at is not None


# --- Who may retry a deletion, and in which state: service.retry_stores ---------------------------------


def test_retry_is_refused_for_an_owner_by_the_service_and_by_both_doors(api, owner, compliance, moved_deadline):
    request = delete_subject(compliance)
    failed = fail_one_store(request)
    with pytest.raises(Forbidden):
        service.retry_stores(owner, request.public_id)
    response = api(owner).post(f"{URL}{request.public_id}/retry/")
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert signed_in(owner).post(f"/deletions/{request.public_id}/retry/").status_code == 403
    failed.refresh_from_db()
    assert failed.state == StoreProgress.State.FAILED  # nothing was requeued by the refused retries
    # Compliance staff may: the failed store restarts.
    retried, requeued = service.retry_stores(compliance, request.public_id)
    assert retried.pk == request.pk and requeued == StoreProgress.objects.filter(request=request).count()
    failed.refresh_from_db()
    assert failed.state == StoreProgress.State.PENDING


def test_compliance_retries_through_both_doors(api, compliance, moved_deadline):
    request = delete_subject(compliance)
    failed = fail_one_store(request)
    response = api(compliance).post(f"{URL}{request.public_id}/retry/")
    assert response.status_code == 202 and response.json()["id"] == request.public_id
    failed.refresh_from_db()
    assert failed.state == StoreProgress.State.PENDING
    fail_one_store(request)
    page = signed_in(compliance).post(f"/deletions/{request.public_id}/retry/", follow=True)
    assert page.status_code == 200 and "Requeued." in page.content.decode()
    failed.refresh_from_db()
    assert failed.state == StoreProgress.State.PENDING


def test_retry_after_the_purge_is_confirmed_is_refused_with_a_reason(api, compliance, moved_deadline):
    request = delete_subject(compliance)
    purge(request)
    assert not service.can_retry(request)
    with pytest.raises(InvalidState):
        service.retry_stores(compliance, request.public_id)
    response = api(compliance).post(f"{URL}{request.public_id}/retry/")
    assert response.status_code == 409 and response.json()["code"] == "invalid_state"
    assert "nothing to retry" in response.json()["detail"]
    # A direct POST from the page (the button is gone, the form can still be posted) gets a message.
    page = signed_in(compliance).post(f"/deletions/{request.public_id}/retry/", follow=True)
    assert page.status_code == 200
    text = page.content.decode()
    assert "nothing to retry" in text and "Requeued." not in text
    request.refresh_from_db()
    assert request.state == DeletionRequest.State.PURGE_CONFIRMED


def test_retry_of_a_request_awaiting_approval_is_refused_by_both_doors(api, compliance, moved_deadline):
    waiting = service.request_deletion(
        compliance, project_id="project-a", scope={"predicate": "submission_deadline"}, reason="whole field"
    )
    assert isinstance(waiting, DeletionRequest) and waiting.state == DeletionRequest.State.AWAITING_APPROVAL
    assert not service.can_retry(waiting)
    response = api(compliance).post(f"{URL}{waiting.public_id}/retry/")
    assert response.status_code == 409 and response.json()["code"] == "invalid_state"
    page = signed_in(compliance).post(f"/deletions/{waiting.public_id}/retry/", follow=True)
    assert "nothing to retry" in page.content.decode()
    # The page offers approve/cancel here, never retry: it asks the same rule.
    detail = signed_in(compliance).get(f"/deletions/{waiting.public_id}/").content.decode()
    assert 'data-testid="retry"' not in detail and "Approve" in detail


def test_approve_and_cancel_refuse_an_owner_in_the_service_and_both_doors(api, owner, compliance, moved_deadline):
    """Approve and cancel had their rules in the service already; the doors only call it."""
    waiting = service.request_deletion(
        compliance, project_id="project-a", scope={"predicate": "submission_deadline"}, reason="whole field"
    )
    assert isinstance(waiting, DeletionRequest)
    for verb in ("approve", "cancel"):
        assert api(owner).post(f"{URL}{waiting.public_id}/{verb}/").status_code == 403
        assert signed_in(owner).post(f"/deletions/{waiting.public_id}/{verb}/").status_code == 403
    second = ensure_principal("acme", "cora", ["compliance"])
    assert api(second).post(f"{URL}{waiting.public_id}/approve/").status_code == 202
    # Approved: cancelling is refused (409 in the API, a message on the page).
    assert api(compliance).post(f"{URL}{waiting.public_id}/cancel/").json()["code"] == "invalid_state"
    page = signed_in(compliance).post(f"/deletions/{waiting.public_id}/cancel/", follow=True)
    assert "cannot be cancelled" in page.content.decode()


def test_who_follows_deletions_is_one_rule_for_the_list_pages_and_api(api, owner, agent, compliance, moved_deadline):
    request = delete_subject(compliance)
    assert service.may_read(owner) and not service.may_read(agent)
    assert [r["id"] for r in api(owner).get(URL).json()["results"]] == [request.public_id]
    assert api(agent).get(URL).json() == {"next": None, "previous": None, "results": []}
    assert list(service.visible_requests(agent)) == []
    assert signed_in(agent).get("/deletions/").status_code == 403
    assert signed_in(owner).get("/deletions/").status_code == 200


# --- "Is this a manual field": policies.is_manual ---------------------------------------------------


@pytest.mark.parametrize("kind", ["manual", "http_json", "no_source", "no_policy"])
def test_the_manual_field_rule_is_the_same_for_the_page_the_verify_door_and_reports(kind, owner, agent, admin, source):
    if kind == "manual":
        FieldPolicy.objects.create(
            tenant=admin.tenant, predicate="submission_deadline", canonical_source={"connector": "manual"}
        )
    elif kind == "http_json":
        FieldPolicy.objects.create(
            tenant=admin.tenant,
            predicate="submission_deadline",
            canonical_source=http_json_source(source[0], timeout=0.5),
        )
    elif kind == "no_source":
        FieldPolicy.objects.create(tenant=admin.tenant, predicate="submission_deadline")
    record = assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22), ref="task-system:x")).record
    policy = policy_for(record.tenant_id, "project-a", "submission_deadline")
    manual = is_manual(policy)
    assert manual == (kind == "manual")
    client = signed_in(owner)
    page = client.get(FACT_URL)
    assert page.context["manual_field"] == manual
    assert ('id="verify"' in page.content.decode()) == manual
    # A person's report counts as read from the source exactly on a manual field.
    assert (not_the_source(owner, policy) == "") == manual
    response = client.post(f"/records/{record.memory_id}/verify/", {"verdict": "still_true"}, follow=True)
    attempts = RecheckAttempt.objects.filter(record=record, trigger=RecheckAttempt.Trigger.MANUAL)
    if manual:
        assert attempts.filter(outcome=RecheckAttempt.Result.VERIFIED_UNCHANGED).count() == 1
    else:
        assert not attempts.exists()
        assert "not verified manually" in response.content.decode()
        with pytest.raises(InvalidState):
            rechecks.report_manual_verification(owner, record, outcome=RecheckAttempt.Result.VERIFIED_UNCHANGED)


# --- "Recheck now" only where the server can fetch: rechecks.request_recheck_now -----------------------


def test_recheck_now_refusals_live_in_the_domain(owner, agent, admin):
    FieldPolicy.objects.create(
        tenant=admin.tenant, predicate="submission_deadline", canonical_source={"connector": "manual"}
    )
    record = assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22), ref="task-system:x")).record
    with pytest.raises(Forbidden):
        rechecks.request_recheck_now(agent, record, trigger=RecheckAttempt.Trigger.DASHBOARD)
    with pytest.raises(InvalidState, match="no canonical source the server can fetch"):
        rechecks.request_recheck_now(owner, record, trigger=RecheckAttempt.Trigger.DASHBOARD)
    assert not RecheckAttempt.objects.filter(record=record).exists()
    # The page offers the button by the same rule.
    policy = policy_for(record.tenant_id, "project-a", "submission_deadline")
    assert rechecks.recheck_now_refusal(record, policy)
    assert signed_in(owner).get(FACT_URL).context["can_fetch"] is False


def test_recheck_now_refuses_a_record_that_is_not_current(owner, agent, admin, moved_deadline, source):
    FieldPolicy.objects.create(
        tenant=admin.tenant, predicate="submission_deadline", canonical_source=http_json_source(source[0], timeout=0.5)
    )
    old = MemoryRecord.all_objects.get(pk=moved_deadline[0].record.pk)
    assert old.status == MemoryRecord.Status.SUPERSEDED
    with pytest.raises(InvalidState, match="Only the current record"):
        rechecks.request_recheck_now(owner, old, trigger=RecheckAttempt.Trigger.DASHBOARD)
    page = signed_in(owner).post(f"/records/{old.memory_id}/recheck/", follow=True)
    assert "Only the current record can be rechecked" in page.content.decode()
    assert not RecheckAttempt.objects.filter(record=old).exists()


# --- Which policy governs a field: policies.policy_for, and policies_for for a page of records ----------


def test_policies_for_chooses_as_policy_for(admin, agent):
    other = Project.objects.create(tenant=admin.tenant, key="project-b")
    wide = FieldPolicy.objects.create(tenant=admin.tenant, predicate="status", risk=FieldPolicy.Risk.LOW)
    own = FieldPolicy.objects.create(tenant=admin.tenant, predicate="status", project=other, risk="high")
    only_own = FieldPolicy.objects.create(tenant=admin.tenant, predicate="owner", project=other)
    fields = [
        ("project-a", "status"),
        ("project-b", "status"),
        ("project-a", "owner"),
        ("project-b", "owner"),
        ("project-a", "none"),
    ]
    chosen = policies_for(admin.tenant, fields)
    assert chosen == {f: policy_for(admin.tenant_id, *f) for f in fields}
    assert chosen[("project-a", "status")] == wide and chosen[("project-b", "status")] == own
    assert chosen[("project-a", "owner")] is None and chosen[("project-b", "owner")] == only_own


def test_the_recheck_queue_uses_the_projects_own_policy(owner, agent, admin):
    """The queue's risk comes from the project's own policy before the tenant-wide one (policy_for's rule)."""
    FieldPolicy.objects.create(tenant=admin.tenant, predicate="submission_deadline", risk=FieldPolicy.Risk.LOW)
    project = Project.objects.get_or_create(tenant=admin.tenant, key="project-a")[0]
    FieldPolicy.objects.create(
        tenant=admin.tenant, predicate="submission_deadline", project=project, risk=FieldPolicy.Risk.HIGH
    )
    record = assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22))).record
    MemoryRecord.objects.filter(pk=record.pk).update(recheck_after=timezone.now() - timedelta(days=1))
    rows = signed_in(owner).get("/rechecks/").context["rows"]
    assert [(row.record.pk, row.risk) for row in rows] == [(record.pk, FieldPolicy.Risk.HIGH)]


# --- Freshness: reads.freshness_of, and freshness_filter for the records list ---------------------------


@pytest.mark.parametrize("state", ["never_verified", "fresh", "recheck_due"])
def test_the_dashboard_shows_the_freshness_the_api_answers(state, api, owner, agent):
    record = assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22))).record
    now = timezone.now()
    if state != "never_verified":
        MemoryRecord.objects.filter(pk=record.pk).update(
            last_verified_at=now - timedelta(days=2),
            recheck_after=now + timedelta(days=5) if state == "fresh" else now - timedelta(hours=1),
        )
    answered = api(agent).get("/api/v1/facts/current/", DEADLINE).json()["freshness"]
    assert answered == state
    client = signed_in(owner)
    assert f'class="badge fresh-{state}"' in client.get(FACT_URL).content.decode()
    for other in reads.FRESHNESS:
        listed = [r.pk for r in client.get("/records/", {"freshness": other}).context["rows"]]
        assert (record.pk in listed) == (other == state), other
    record.refresh_from_db()
    assert MemoryRecord.objects.filter(reads.freshness_filter(state, timezone.now()), pk=record.pk).exists()


def test_the_fact_page_offers_a_deletion_request_to_whoever_may_file_one(owner, compliance, moved_deadline):
    assert service.may_act(compliance) and not service.may_act(owner)
    assert 'data-testid="delete-link"' in signed_in(compliance).get(FACT_URL).content.decode()
    assert 'data-testid="delete-link"' not in signed_in(owner).get(FACT_URL).content.decode()
