"""Issue 15, section 4 on the server: disputes keep the chosen side on a refused resolution and say what is
wrong beside the control, with the differences marked; retrieval shows ranks, never similarity scores, and
says why each copy is held back; deletions show evidence as labelled fields, explain stage 4 and offer
"retry" only where a store failed; the printable report shows no ISO strings, JSON or Python reprs."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from deletion import service
from deletion.models import Backup, DeletionRequest, StoreProgress
from deletion.tasks import purge_store
from memory_admin.memory.actions import Assertion, assert_fact
from memory_admin.memory.models import Dispute, FieldPolicy
from tests.support import DEADLINE, at, deadline

PRICE: dict[str, Any] = {"project_id": "project-a", "subject_id": "product-x", "predicate": "unit_price"}
ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def visible(html: str) -> str:
    """The page's text as a person reads it: no tags, no attribute values (ISO belongs in `datetime=`)."""
    html = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


@pytest.fixture
def price_dispute(agent, other_agent) -> Dispute:
    assert_fact(
        agent,
        Assertion(
            **PRICE,
            value={"amount": 1200, "currency": "JPY", "per": "unit"},
            valid_from=at(10, 26),
            source_canonical_ref="vendor:x",
            source_revision="a",
        ),
    )
    result = assert_fact(
        other_agent,
        Assertion(
            **PRICE,
            value={"amount": 1350, "currency": "JPY", "per": "unit"},
            valid_from=at(10, 26),
            source_canonical_ref="partner:x",
            source_revision="b",
        ),
    )
    assert result.dispute is not None
    return result.dispute


def test_a_refused_resolution_keeps_the_chosen_side_and_says_why_beside_the_reason(owner, price_dispute):
    winner = next(c for c in price_dispute.candidates.all() if c.source_canonical_ref == "partner:x").memory_id
    response = signed_in(owner).post(f"/disputes/{price_dispute.public_id}/resolve/", {"winner": winner, "reason": ""})
    assert response.status_code == 400
    page = response.content.decode()
    checked = re.search(rf'<input type="radio" name="winner" value="{winner}"[^>]*>', page)
    assert checked and " checked" in checked.group(0)
    assert 'data-testid="reason-error"' in page and 'aria-invalid="true"' in page
    assert Dispute.objects.get(pk=price_dispute.pk).status == "open"


def test_a_resolution_without_a_side_keeps_the_reason_and_marks_the_choice(owner, price_dispute):
    response = signed_in(owner).post(
        f"/disputes/{price_dispute.public_id}/resolve/", {"winner": "", "reason": "the partner is binding"}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="winner-error"' in page and 'value="the partner is binding"' in page
    assert "still open" in page


def test_the_disputes_page_marks_only_what_differs(owner, price_dispute):
    page = signed_in(owner).get("/disputes/").content.decode()
    marked = re.findall(r'<mark class="diff">(.*?)</mark>', page, flags=re.S)
    text = " ".join(visible(m) for m in marked)
    assert "1,200" in text and "1,350" in text and "vendor:x" in text and "partner:x" in text
    assert "unit" not in text.replace("Unit", "")  # the field both agree on is not marked
    assert "{" not in visible(page) and "'amount'" not in page


def test_the_retrieval_preview_ranks_hits_without_scores(owner, agent, other_agent):
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    new = assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1)).record
    page = signed_in(owner).get("/retrieval/?q=submission+deadline+proposal&project=project-a").content.decode()
    assert "Match 1" in page and "score" not in page.lower()
    held = re.search(r'data-reason="superseded">(.*?)</span></p>', page, flags=re.S)
    assert held and "a newer value replaced it" in held.group(1) and new.memory_id in held.group(1)


@pytest.fixture
def deletion(compliance, agent) -> DeletionRequest:
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22)))
    request = service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": DEADLINE["subject_id"]}, reason="Data subject"
    )
    assert isinstance(request, DeletionRequest)
    return request


def _run(request: DeletionRequest) -> None:
    for progress in StoreProgress.objects.filter(request=request):
        purge_store.apply(args=[progress.pk])


def test_the_progress_page_shows_evidence_as_labelled_fields_and_a_refresh_link(compliance, deletion):
    _run(deletion)
    page = signed_in(compliance).get(f"/deletions/{deletion.public_id}/").content.decode()
    records = re.search(r'data-store="records">(.*?)</section>', page, flags=re.S)
    assert records is not None
    assert "<dt>Rows remaining</dt>" in records.group(1) and "<dt>Tombstones</dt>" in records.group(1)
    text = visible(page)
    assert not ISO.search(text) and "{" not in text and "[" not in text
    if DeletionRequest.objects.get(pk=deletion.pk).purge_confirmed_at is None:
        assert 'data-testid="refresh"' in page and f'href="/deletions/{deletion.public_id}/"' in page


def test_stage_four_says_which_backups_hold_the_data_until_when(compliance, deletion):
    # A catalogued backup taken before the purge (taking a real dump is test_deletion's business).
    backup = Backup.objects.create(
        taken_at=timezone.now() - timedelta(hours=1),
        expires_at=timezone.now() + timedelta(days=30),
        path="/nonexistent/backup.dump",
        method="catalogue-only",
    )
    _run(deletion)
    deletion.refresh_from_db()
    if deletion.purge_confirmed_at is None:  # agents must acknowledge first; nobody here holds it
        pytest.fail(f"the purge did not complete: {list(deletion.stores.values_list('store', 'state'))}")
    page = signed_in(compliance).get(f"/deletions/{deletion.public_id}/").content.decode()
    stage = re.search(r'data-testid="stage-4">(.*?)</li>', page, flags=re.S)
    assert stage is not None
    assert "backups made before" in stage.group(1) and "they expire on" in stage.group(1)
    assert backup.expires_at.isoformat() in stage.group(1)  # in the <time> element's attribute only
    assert Backup.objects.filter(pk=backup.pk).exists()


def test_retry_is_offered_only_where_a_store_failed(compliance, deletion):
    client = signed_in(compliance)
    url = f"/deletions/{deletion.public_id}/"
    assert 'data-testid="retry"' not in client.get(url).content.decode()
    StoreProgress.objects.filter(request=deletion, store="caches").update(
        state=StoreProgress.State.FAILED, last_error="The cache did not answer."
    )
    page = client.get(url).content.decode()
    assert 'data-testid="retry"' in page and "(caches)" in page


def test_the_printable_report_is_in_words(compliance, deletion):
    _run(deletion)
    response = signed_in(compliance).get(f"/deletions/{deletion.public_id}/report/")
    page = response.content.decode()
    assert "3. Purge confirmed" in page and "4. Backups expire" in page
    assert "<style>" not in page  # the CSP allows no inline style: the report uses app.css (print rules)
    text = visible(page)
    assert not ISO.search(text), ISO.search(text)
    assert "{'" not in text and "['" not in text and "None" not in text and '{"' not in text


# --- Policies: the chosen connector's settings, errors beside fields, a test before saving ----------------

POLICY_FORM = {
    "project_id": "project-a",
    "predicate": "submission_deadline",
    "authorized_issuers": "",
    "canonical_ref_prefix": "task-system:",
    "connector": "http_json",
    "url_template": "",
    "value_pointer": "/data/deadline",
    "revision_pointer": "/data/revision",
    "timeout_seconds": "1",
    "recheck_interval": "P1D",
    "on_failure": "block_action",
    "risk": "high",
    "retention_days": "",
}


def _setting_box(page: str, key: str) -> str:
    found = re.search(rf'<div class="connector-setting"[^>]*>\s*<div class="form-field">\s*<label for="id_{key}"', page)
    assert found, key
    return found.group(0)


def test_the_policy_form_shows_the_chosen_connectors_settings_only(admin):
    client = signed_in(admin)
    blank = client.get("/policies/new/").content.decode()
    assert " hidden" in _setting_box(blank, "url_template")  # no source chosen: no source settings
    # Without JavaScript: choose, then "Show its settings" (nothing saved, no errors shown).
    shown = client.post("/policies/new/", {**POLICY_FORM, "action": "show"})
    page = shown.content.decode()
    assert shown.status_code == 200 and " hidden" not in _setting_box(page, "url_template")
    assert 'class="field-error"' not in page and FieldPolicy.objects.count() == 0
    manual = client.post("/policies/new/", {**POLICY_FORM, "connector": "manual", "action": "show"}).content.decode()
    assert " hidden" in _setting_box(manual, "url_template")
    assert 'src="/static/js/v-policy.js"' in manual


def test_a_bad_setting_is_reported_beside_its_field(admin):
    bad = {**POLICY_FORM, "url_template": "ftp://x/{customer}", "value_pointer": "value", "action": "save"}
    response = signed_in(admin).post("/policies/new/", bad)
    assert response.status_code == 400
    page = response.content.decode()
    url_error = re.search(r'<p class="field-error" id="id_url_template_error">(.*?)</p>', page, flags=re.S)
    pointer_error = re.search(r'<p class="field-error" id="id_value_pointer_error">(.*?)</p>', page, flags=re.S)
    assert url_error and "url_template" in url_error.group(1)
    assert pointer_error and "value_pointer" in pointer_error.group(1)
    assert re.search(r'<input[^>]*aria-describedby="id_url_template_error"', page)
    assert FieldPolicy.objects.count() == 0


def test_settings_are_tested_before_saving_and_nothing_is_saved(admin, agent, source):
    base_url, script = source
    assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22)))
    script.set(DEADLINE["subject_id"], value="2026-11-05T17:00+09:00", revision="r19")
    form = {
        **POLICY_FORM,
        "url_template": base_url + "/tasks/{project_id}/{subject_id}",
        "try-subject_id": DEADLINE["subject_id"],
        "action": "test",
    }
    response = signed_in(admin).post("/policies/new/", form)
    assert response.status_code == 200
    result = re.search(r'data-testid="test-result"(.*?)</div>', response.content.decode(), flags=re.S)
    assert result and "verified, changed" in result.group(1) and "r19" in result.group(1)
    assert not ISO.search(visible(result.group(1)))
    assert FieldPolicy.objects.count() == 0
    # The typed settings are still in the form, ready to save.
    assert f'value="{base_url}/tasks/{{project_id}}/{{subject_id}}"' in response.content.decode()


def test_testing_refuses_bad_settings_beside_the_field_without_fetching(admin):
    form = {**POLICY_FORM, "url_template": "ftp://x/{customer}", "try-subject_id": "x", "action": "test"}
    response = signed_in(admin).post("/policies/new/", form)
    assert response.status_code == 400
    assert 'id="id_url_template_error"' in response.content.decode()
    # Nothing fetched: the result says so instead of showing a value.
    assert "not tested: nothing was fetched" in response.content.decode()
    assert "The source says" not in response.content.decode()


def test_deleting_a_policy_asks_for_confirmation_first(admin):
    policy = FieldPolicy.objects.create(tenant=admin.tenant, predicate="meeting_room")
    client = signed_in(admin)
    review = client.post(f"/policies/{policy.pk}/delete/")
    assert review.status_code == 200 and "Confirm: delete policy" in review.content.decode()
    assert FieldPolicy.objects.filter(pk=policy.pk).exists()
