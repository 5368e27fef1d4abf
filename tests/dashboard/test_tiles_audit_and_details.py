"""Smaller dashboard fixes seen in the browser (issue 9, item 5): the deleted tile, the order of audit
events, the tombstone page, the audit action filter, confirmations, the run banner, duplicate ids,
the retry control after a confirmed purge, and "Recheck now" only where a source can be fetched."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from deletion import service
from deletion.models import DeletionRequest, StoreProgress, Tombstone
from deletion.tasks import purge_store
from memory_admin.memory import audit
from memory_admin.memory.actions import Assertion, Outcome, assert_fact
from memory_admin.memory.models import AuditEvent, FieldPolicy, MemoryRecord, RecheckAttempt
from tests.support import DEADLINE, at, deadline
from tests.support.canonical_source import http_json_source

FACT_URL = "/facts/?project=project-a&subject=task-proposal-017&predicate=submission_deadline"
SUBJECT = DEADLINE["subject_id"]


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def fact(subject: str, now, value: str = "v") -> Assertion:
    return Assertion(
        project_id="project-a",
        subject_id=subject,
        predicate="status",
        value=value,
        valid_from=now,
        source_canonical_ref=f"crm:{subject}",
        source_revision="1",
    )


def delete_subject(compliance) -> DeletionRequest:
    request = service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": SUBJECT}, reason="Data subject request"
    )
    assert isinstance(request, DeletionRequest)
    return request


def purge(request: DeletionRequest) -> None:
    """What the worker does: each store's task in turn (the worker tests run them for real)."""
    for progress in StoreProgress.objects.filter(request=request):
        purge_store.apply(args=[progress.pk])
    request.refresh_from_db()
    assert request.purge_confirmed_at is not None


# --- The overview's "deleted" tile ----------------------------------------------------------------


def test_the_deleted_tile_counts_tombstones_after_the_purge_and_links_to_a_real_page(owner, compliance, moved_deadline):
    request = delete_subject(compliance)
    purge(request)
    assert not MemoryRecord.all_objects.filter(subject_id=SUBJECT).exists()  # the rows are gone
    client = signed_in(owner)
    response = client.get("/")
    assert response.context["deleted"] == 2  # both versions of the deadline, counted by their tombstones
    page = response.content.decode()
    assert "?status=deleted" not in page
    assert 'href="/deletions/"' in page
    assert client.get("/deletions/").status_code == 200


# --- Audit events in the order of the time shown ------------------------------------------------------


def test_recent_changes_and_the_fact_events_are_ordered_by_the_time_shown(owner, agent):
    # Inserted in this order, happening on Nov 6, Oct 12 and Nov 12 (an import replays older events).
    for subject, moment in (("a", at(11, 6)), ("b", at(10, 12)), ("c", at(11, 12))):
        assert_fact(agent, fact(subject, moment), now=moment)
    recent = signed_in(owner).get("/").context["recent"]
    times = [event.at for event in recent]
    assert times == sorted(times, reverse=True)
    assert [e.object_id for e in recent][:1] == [MemoryRecord.objects.get(subject_id="c").memory_id]


def test_the_audit_log_is_ordered_and_paged_by_event_time_without_gaps_or_repeats(owner, agent):
    for i in range(57):
        moment = at(10, 1) + timedelta(hours=(i * 37) % 57)  # insertion order differs from event time
        assert_fact(agent, fact(f"item-{i:02d}", moment), now=moment)
    client = signed_in(owner)
    first = client.get("/audit/")
    page_one = first.context["events"]
    assert len(page_one) == 50 and first.context["next_after"]
    second = client.get("/audit/", {"after": first.context["next_after"]})
    page_two = second.context["events"]
    seen = [e.pk for e in page_one + page_two]
    assert len(seen) == len(set(seen)) == AuditEvent.objects.count() == 57
    times = [(e.at, e.pk) for e in page_one + page_two]
    assert times == sorted(times, reverse=True)
    assert second.context["next_after"] is None


def test_a_broken_audit_cursor_gets_a_message_not_a_500(owner):
    response = signed_in(owner).get("/audit/", {"after": "yesterday.x"})
    assert response.status_code == 200
    assert "not valid any more" in response.content.decode()


# --- A deleted fact's URLs ------------------------------------------------------------------------


@pytest.mark.parametrize("purged", [False, True], ids=["removed-from-reads", "purge-confirmed"])
def test_a_deleted_facts_urls_show_a_tombstone_page_without_content(
    owner, compliance, outsider, moved_deadline, purged
):
    memory_id = moved_deadline[1].record.memory_id
    request = delete_subject(compliance)
    if purged:
        purge(request)
    client = signed_in(owner)
    for url in (f"/records/{memory_id}/", FACT_URL):
        response = client.get(url)
        assert response.status_code == 410, url
        page = response.content.decode()
        assert "Deleted" in page and memory_id in page
        assert request.public_id in page and f'href="/deletions/{request.public_id}/"' in page
        assert "2026-11-02" not in page and "2026-10-30" not in page  # no content, not even the values
    # Another tenant learns nothing, and an id that never existed is still a plain 404.
    assert signed_in(outsider).get(f"/records/{memory_id}/").status_code == 404
    assert signed_in(outsider).get(FACT_URL).status_code == 404
    assert client.get("/records/mem-never-existed/").status_code == 404


def test_a_live_record_still_opens_its_fact_page(owner, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    response = signed_in(owner).get(f"/records/{memory_id}/")
    assert response.status_code == 302 and response["Location"].startswith("/facts/?")


# --- The audit action filter ------------------------------------------------------------------------


def test_the_audit_filter_offers_deletion_recheck_and_tombstone_actions(owner, compliance, moved_deadline):
    request = delete_subject(compliance)
    stone = Tombstone.objects.filter(request=request).first()
    assert stone is not None
    service.lift_tombstone(owner, stone.pk, "Filed against the wrong subject")
    client = signed_in(owner)
    for action, object_id in (("deletion.requested", request.public_id), ("tombstone.lifted", str(stone.pk))):
        response = client.get("/audit/", {"action": action})
        assert not response.context["form"].errors, action
        assert [e.object_id for e in response.context["events"]] == [object_id]
    choices = {value for value, _ in response.context["form"].fields["action"].choices}
    assert {"deletion.purge_confirmed", "record.rechecked.source_unavailable", "tombstone.lifted"} <= choices


ACTION_LITERAL = re.compile(r"""(?:\baction=f?|_ACTION = )["']([a-z_]+\.[a-z_.{}]+)["']""")


def test_every_action_is_written_through_the_one_vocabulary():
    """No writer spells an audit action as a string: each passes an audit.Action member (or audit.asserted /
    audit.rechecked, which refuse a value outside the vocabulary)."""
    root = Path(settings.BASE_DIR)
    literals: list[str] = []
    writers = 0
    for path in [*root.joinpath("memory_admin").rglob("*.py"), *root.joinpath("deletion").rglob("*.py")]:
        if "migrations" not in path.parts:
            text = path.read_text(encoding="utf-8")
            literals += [f"{path.name}: {m}" for m in ACTION_LITERAL.findall(text)]
            writers += len(re.findall(r"\baction=audit\.(?:Action\.[A-Z_]+|asserted|rechecked)\b", text))
    assert writers >= 15  # the scan finds the writers
    assert literals == []
    for result in RecheckAttempt.Result.values:
        assert audit.rechecked(result) == f"record.rechecked.{result}"
    for outcome in Outcome:
        if outcome != Outcome.UNCHANGED:  # nothing is stored, nothing audited
            assert audit.asserted(outcome) == f"record.asserted.{outcome.value}"
    with pytest.raises(ValueError):
        audit.asserted(Outcome.UNCHANGED)


# --- Confirmation before single changes -------------------------------------------------------------


@pytest.mark.parametrize("operation", ["exclude", "expire"])
def test_a_single_exclude_or_expire_asks_for_confirmation_first(owner, moved_deadline, operation):
    memory_id = moved_deadline[1].record.memory_id
    client = signed_in(owner)
    review = client.post(f"/records/{memory_id}/{operation}/", {"reason": "Closed", "next": FACT_URL})
    assert review.status_code == 200
    page = review.content.decode()
    assert f'action="/records/{memory_id}/{operation}/"' in page and 'name="confirm" value="yes"' in page
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"
    assert not AuditEvent.objects.filter(action=f"record.{operation}d").exists()
    done = client.post(f"/records/{memory_id}/{operation}/", {"reason": "Closed", "next": FACT_URL, "confirm": "yes"})
    assert done.status_code == 302
    assert MemoryRecord.objects.get(memory_id=memory_id).status == f"{operation}d"


def test_a_confirmation_without_a_reason_changes_nothing(owner, moved_deadline):
    memory_id = moved_deadline[1].record.memory_id
    response = signed_in(owner).post(f"/records/{memory_id}/exclude/", {"reason": " ", "confirm": "yes"})
    assert response.status_code == 400 and "Give a reason" in response.content.decode()
    assert MemoryRecord.objects.get(memory_id=memory_id).status == "accepted"


@pytest.fixture
def manual_policy(admin) -> FieldPolicy:
    return FieldPolicy.objects.create(
        tenant=admin.tenant, predicate="submission_deadline", canonical_source={"connector": "manual"}
    )


def test_deleting_a_policy_asks_for_confirmation_first(admin, manual_policy):
    client = signed_in(admin)
    review = client.post(f"/policies/{manual_policy.pk}/delete/")
    assert review.status_code == 200
    assert f'action="/policies/{manual_policy.pk}/delete/"' in review.content.decode()
    assert FieldPolicy.objects.filter(pk=manual_policy.pk).exists()
    assert client.post(f"/policies/{manual_policy.pk}/delete/", {"confirm": "yes"}).status_code == 302
    assert not FieldPolicy.objects.filter(pk=manual_policy.pk).exists()
    assert AuditEvent.objects.filter(action="policy.deleted").count() == 1


# --- The run banner, duplicate ids, the retry control -----------------------------------------------------


def test_the_run_banner_gives_the_demo_password():
    from memory_admin.demo import PASSWORD

    banner = (Path(settings.BASE_DIR) / "bin" / "run").read_text(encoding="utf-8")
    assert "the name before @" not in banner
    assert f"password: {PASSWORD}" in banner


def test_the_policy_page_has_no_duplicate_ids(admin, manual_policy):
    page = signed_in(admin).get(f"/policies/{manual_policy.pk}/").content.decode()
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert ids.count("id_project_id") == 1
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_the_retry_control_is_part_of_the_live_fragment_and_leaves_once_the_purge_is_confirmed(
    compliance, moved_deadline
):
    request = delete_subject(compliance)
    client = signed_in(compliance)
    url = f"/deletions/{request.public_id}/"
    # Offered only where a store failed: pending stores need no person (issue 15).
    while_purging = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'data-testid="retry"' not in while_purging
    first = StoreProgress.objects.filter(request=request).order_by("id").first()
    assert first is not None
    StoreProgress.objects.filter(pk=first.pk).update(state=StoreProgress.State.FAILED, last_error="store down")
    failed = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'data-testid="retry"' in failed and "Retry the failed store" in failed
    purge(request)
    confirmed = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "Purge confirmed" in confirmed and 'data-testid="retry"' not in confirmed
    assert 'data-testid="retry"' not in client.get(url).content.decode()


# --- "Recheck now" only where the canonical source can be fetched ---------------------------------------


def test_recheck_now_is_not_offered_on_a_field_without_a_fetchable_source(owner, agent, manual_policy):
    past = timezone.now() - timedelta(days=3)
    record = assert_fact(agent, deadline("2026-11-02", "r18", past, ref="task-system:x"), now=past).record
    MemoryRecord.objects.filter(pk=record.pk).update(recheck_after=past)
    client = signed_in(owner)
    page = client.get(FACT_URL).content.decode()
    assert 'data-testid="recheck-submit"' not in page and "Manual verification" in page
    queue = client.get("/rechecks/").content.decode()
    assert record.memory_id in queue and f'data-testid="recheck-{record.memory_id}"' not in queue
    response = client.post(f"/records/{record.memory_id}/recheck/", {"next": FACT_URL}, follow=True)
    assert "no canonical source the server can fetch" in response.content.decode()
    assert not RecheckAttempt.objects.filter(record=record).exists()


def test_recheck_now_is_offered_where_the_server_can_fetch_the_source(owner, agent, admin, source):
    FieldPolicy.objects.create(
        tenant=admin.tenant, predicate="submission_deadline", canonical_source=http_json_source(source[0], timeout=0.5)
    )
    assert_fact(agent, deadline("2026-11-02", "r18", at(10, 22), ref="task-system:x"))
    assert 'data-testid="recheck-submit"' in signed_in(owner).get(FACT_URL).content.decode()
