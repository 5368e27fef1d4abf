"""Dashboard pages for policies, the overdue queue, recheck now and manual verification."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import AuditEvent, FieldPolicy, MemoryRecord, RecheckAttempt
from tests.support import DEADLINE, deadline
from tests.support.canonical_source import http_json_source
from tests.support.pages import POLICY_FORM, signed_in

FACT_URL = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"
SUBJECT = DEADLINE["subject_id"]


@pytest.fixture
def http_policy(admin, source):
    return FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_ref_prefix="task-system:",
        canonical_source=http_json_source(source[0], timeout=0.5),
        recheck_interval=timedelta(days=1),
        risk=FieldPolicy.Risk.HIGH,
    )


@pytest.fixture
def overdue(agent, http_policy):
    past = timezone.now() - timedelta(days=3)
    return assert_fact(agent, deadline("2026-11-02", "r18", past), now=past, verified_at=past).record


def test_an_admin_creates_a_policy_in_the_editor(admin):
    response = signed_in(admin).post("/policies/new/", POLICY_FORM)
    assert response.status_code == 302
    policy = FieldPolicy.objects.get(predicate="send_permission")
    assert policy.authorized_issuers == ["ada", "olivia"]
    assert policy.recheck_interval == timedelta(hours=6)
    assert (policy.canonical_source or {})["url_template"] == "http://127.0.0.1:9/{subject_id}"
    assert AuditEvent.objects.filter(action="policy.created").exists()


def test_the_editor_explains_bad_settings_and_saves_nothing(admin):
    bad = {
        **POLICY_FORM,
        "url_template": "ftp://x/{customer}",
        "value_pointer": "value",
        "recheck_interval_amount": "six",
    }
    response = signed_in(admin).post("/policies/new/", bad)
    assert response.status_code == 400
    page = response.content.decode()
    assert "Give a whole number of at least 1." in page
    assert FieldPolicy.objects.count() == 0
    fixed = {**bad, "recheck_interval_amount": "6"}
    response = signed_in(admin).post("/policies/new/", fixed)
    assert response.status_code == 400
    assert "url_template must be an http(s) URL" in response.content.decode()
    assert FieldPolicy.objects.count() == 0


def test_an_admin_edits_and_deletes_a_policy(admin, http_policy):
    client = signed_in(admin)
    assert client.get(f"/policies/{http_policy.pk}/").status_code == 200
    form = {**POLICY_FORM, "predicate": "submission_deadline", "connector": "manual", "risk": "low"}
    assert client.post(f"/policies/{http_policy.pk}/", form).status_code == 302
    http_policy.refresh_from_db()
    assert http_policy.canonical_source == {"connector": "manual"} and http_policy.risk == "low"
    review = client.post(f"/policies/{http_policy.pk}/delete/")
    assert review.status_code == 200 and FieldPolicy.objects.filter(pk=http_policy.pk).exists()
    assert client.post(f"/policies/{http_policy.pk}/delete/", {"confirm": "yes"}).status_code == 302
    assert not FieldPolicy.objects.filter(pk=http_policy.pk).exists()


def test_test_this_source_shows_what_a_recheck_would_conclude(admin, overdue, http_policy, source):
    source[1].set(SUBJECT, value="2026-11-05", revision="r19")
    response = signed_in(admin).post(
        f"/policies/{http_policy.pk}/test/",
        {"subject_id": SUBJECT, "project_id": "project-a"},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith('<div id="test">')
    assert "verified_changed" in html and "2026-11-05" in html
    assert RecheckAttempt.objects.count() == 0


def test_policies_are_for_admins_only(owner, compliance, outsider, http_policy):
    for principal in (owner, compliance):
        client = signed_in(principal)
        # Compliance staff read everything (the list, read-only) and change nothing.
        assert client.get("/policies/").status_code == (200 if principal is compliance else 403)
        assert client.post("/policies/new/", POLICY_FORM).status_code == 403
    assert signed_in(outsider).get(f"/policies/{http_policy.pk}/").status_code == 404
    assert FieldPolicy.objects.count() == 1


def test_the_queue_lists_overdue_records_by_risk(owner, overdue, agent):
    past = timezone.now() - timedelta(days=9)
    other = Assertion(
        project_id="project-a",
        subject_id="other",
        predicate="status",
        value="x",
        valid_from=past,
        source_canonical_ref="crm:other",
        source_revision="1",
    )
    low = assert_fact(agent, other, now=past).record
    MemoryRecord.objects.filter(pk=low.pk).update(recheck_after=past)  # no policy: low risk, long overdue
    page = signed_in(owner).get("/rechecks/")
    rows = page.context["rows"]
    assert [r.record.pk for r in rows][:1] == [overdue.pk]  # high risk first, though younger
    by_age = signed_in(owner).get("/rechecks/?sort=age").context["rows"]
    assert by_age[0].record.pk == low.pk


def test_recheck_now_from_the_fact_page(owner, overdue, source):
    source[1].set(SUBJECT, value="2026-11-02", revision="r18")
    response = signed_in(owner).post(f"/records/{overdue.memory_id}/recheck/", {"next": FACT_URL}, follow=True)
    assert "verified, unchanged" in response.content.decode()
    attempt = RecheckAttempt.objects.get(record=overdue)
    assert attempt.trigger == "dashboard" and attempt.reporter == owner
    page = signed_in(owner).get(FACT_URL).content.decode()
    assert "Recheck history" in page and "Verified, unchanged" in page


def test_recheck_now_when_the_source_is_down_says_so(owner, overdue, source):
    source[1].set(SUBJECT, mode="error", status=502)
    response = signed_in(owner).post(f"/records/{overdue.memory_id}/recheck/", {"next": FACT_URL}, follow=True)
    assert "could not be reached" in response.content.decode()
    assert MemoryRecord.objects.get(pk=overdue.pk).last_verified_at == overdue.last_verified_at


def test_compliance_cannot_start_a_recheck(compliance, overdue):
    assert signed_in(compliance).post(f"/records/{overdue.memory_id}/recheck/").status_code == 403


def test_manual_verification_still_true_and_changed(owner, agent, admin):
    FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_source={"connector": "manual"},
        recheck_interval=timedelta(days=1),
        authorized_issuers=["olivia"],
    )
    past = timezone.now() - timedelta(days=2)
    record = assert_fact(owner, deadline("2026-11-02", "r18", past), now=past).record
    client = signed_in(owner)
    assert "Manual verification" in client.get(FACT_URL).content.decode()
    client.post(f"/records/{record.memory_id}/verify/", {"verdict": "still_true", "next": FACT_URL})
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at is not None
    client.post(
        f"/records/{record.memory_id}/verify/", {"verdict": "changed", "new_value": "2026-11-09", "next": FACT_URL}
    )
    head = MemoryRecord.objects.get(subject_id=SUBJECT, is_head=True)
    assert head.value == "2026-11-09" and head.issuer == owner and head.last_verified_at is not None


def test_manual_verification_by_someone_not_authorized_is_refused(owner, admin):
    record = assert_fact(owner, deadline("2026-11-02", "r18", timezone.now())).record
    FieldPolicy.objects.create(
        tenant=admin.tenant,
        predicate="submission_deadline",
        canonical_source={"connector": "manual"},
        authorized_issuers=["somebody-else"],
    )
    response = signed_in(owner).post(f"/records/{record.memory_id}/verify/", {"verdict": "still_true"}, follow=True)
    assert "Not recorded" in response.content.decode()
    assert MemoryRecord.objects.get(pk=record.pk).last_verified_at is None


@pytest.mark.parametrize(
    ("amount", "unit", "expected"),
    [("6", "hours", timedelta(hours=6)), ("1", "days", timedelta(days=1)), ("2", "weeks", timedelta(days=14))],
)
def test_the_recheck_interval_is_given_in_peoples_units(admin, amount, unit, expected):
    """Issue 34, item 3: a number and a unit, not an ISO 8601 duration typed by hand."""
    form = {**POLICY_FORM, "recheck_interval_amount": amount, "recheck_interval_unit": unit}
    assert signed_in(admin).post("/policies/new/", form).status_code == 302
    policy = FieldPolicy.objects.get(predicate="send_permission")
    assert policy.recheck_interval == expected
    # Shown again as the same number and unit.
    page = signed_in(admin).get(f"/policies/{policy.pk}/").content.decode()
    assert f'name="recheck_interval_amount" value="{amount}"' in page
    assert f'<option value="{unit}" selected>' in page


@pytest.mark.parametrize(
    ("amount", "unit", "message"),
    [
        ("0", "days", "Give a whole number of at least 1."),
        ("1.5", "days", "Give a whole number of at least 1."),
        ("7", "fortnights", "Choose minutes, hours, days or weeks."),
        ("99999", "weeks", "At most 36600 days."),
    ],
)
def test_a_bad_interval_is_explained_beside_it_and_nothing_is_saved(admin, amount, unit, message):
    form = {**POLICY_FORM, "recheck_interval_amount": amount, "recheck_interval_unit": unit}
    response = signed_in(admin).post("/policies/new/", form)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert FieldPolicy.objects.count() == 0


def test_a_script_may_still_post_one_iso_8601_interval(admin):
    form = {k: v for k, v in POLICY_FORM.items() if not k.startswith("recheck_interval")}
    assert signed_in(admin).post("/policies/new/", {**form, "recheck_interval": "P1D"}).status_code == 302
    assert FieldPolicy.objects.get(predicate="send_permission").recheck_interval == timedelta(days=1)
    refused = signed_in(admin).post("/policies/new/", {**form, "predicate": "other", "recheck_interval": "7 days"})
    assert refused.status_code == 400 and "such as 6 hours or 1 day" in refused.content.decode()
