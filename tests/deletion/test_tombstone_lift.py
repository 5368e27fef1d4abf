"""The door for lifting a tombstone (deletion.service.lift_tombstone): the API (`POST /api/v1/tombstones/{id}/lift/`,
`GET /api/v1/tombstones/`) and the dashboard's confirmation page, owners only, with a reason, audited."""

from __future__ import annotations

import json

import pytest
from django.db.models import ProtectedError
from django.test import Client
from django.utils import timezone

from deletion import service
from deletion.models import DeletionRequest, Tombstone
from memory_admin.memory import stats
from memory_admin.memory.models import AuditEvent, MemoryRecord, RecordHide
from tests.support import DEADLINE, at, body, deadline, run_purge

SUBJECT = DEADLINE["subject_id"]
REASSERTION = deadline("2026-11-02T17:00+09:00", "r99", at(10, 23))


@pytest.fixture
def accepted(compliance, moved_deadline) -> DeletionRequest:
    """The deadline's subject deleted, accepted and not purged yet (no worker runs here): its records hidden by
    the request's rule."""
    request = service.request_deletion(
        compliance, project_id="project-a", scope={"subject_id": SUBJECT}, reason="Data subject request"
    )
    assert isinstance(request, DeletionRequest)
    return request


@pytest.fixture
def deleted(accepted) -> list[Tombstone]:
    """A subject tombstone and one per record: the request purged (its records' tombstones are written when the
    purge starts)."""
    run_purge(accepted)
    stones = list(Tombstone.objects.filter(request=accepted).order_by("id"))
    assert stones
    return stones


def lift(client, stone: Tombstone, **data):
    return client.post(f"/api/v1/tombstones/{stone.pk}/lift/", data, format="json")


def test_an_owner_lifts_with_a_reason_and_it_is_audited(api, owner, deleted):
    stone = deleted[0]
    response = lift(api(owner), stone, reason="Filed against the wrong subject")
    assert response.status_code == 200
    data = response.json()
    assert data["id"] == stone.pk and data["lifted_by"] == owner.name and data["lift_reason"]
    assert data["lifted_at"] is not None and data["request_id"] == stone.request_public_id
    stone.refresh_from_db()
    assert stone.lifted_at is not None and stone.lifted_by == owner
    event = AuditEvent.objects.get(action="tombstone.lifted", object_id=str(stone.pk))
    assert event.actor == owner and event.reason == "Filed against the wrong subject"


def test_a_lift_before_the_purge_marks_the_records_the_rule_hid(api, owner, agent, accepted):
    """Between acceptance and purge the subject's records are hidden by the request's rule, their rows unmarked: a
    write let through by the lift would find them as the fact's current rows. So the lift marks them first (still
    hidden, counted as before), writes their own tombstones (which the rule stood for) and deletes the rule; once
    those are lifted too, the write starts a new fact, and the purge still deletes every deleted record."""
    stones = list(Tombstone.objects.filter(request=accepted))
    assert [s.kind for s in stones] == ["subject"]
    doomed = set(MemoryRecord.all_objects.filter(subject_id=SUBJECT).values_list("pk", flat=True))
    assert RecordHide.objects.filter(hidden_by=accepted.public_id).exists()
    assert not MemoryRecord.all_objects.filter(pk__in=doomed, tombstoned_at__isnull=False).exists()
    counts = stats.record_stats(owner.tenant_id).by_status
    assert lift(api(owner), stones[0], reason="Filed against the wrong subject").status_code == 200
    assert not RecordHide.objects.exists()
    marked = MemoryRecord.all_objects.filter(pk__in=doomed)
    assert set(marked.values_list("status", "is_head").distinct()) == {("deleted", False)}
    assert not marked.filter(tombstoned_at__isnull=True).exists()
    assert not MemoryRecord.objects.filter(subject_id=SUBJECT).exists()
    assert stats.record_stats(owner.tenant_id).by_status == counts
    written = Tombstone.objects.filter(request=accepted, kind="record")
    assert set(written.values_list("memory_id", flat=True)) == set(
        MemoryRecord.all_objects.filter(pk__in=doomed).values_list("memory_id", flat=True)
    )
    refused = api(agent).post("/api/v1/records/", body(REASSERTION), format="json")
    assert refused.status_code == 410, refused.json()  # the records' own tombstones still refuse their content
    for stone in written:
        assert lift(api(owner), stone, reason="Filed against the wrong subject").status_code == 200
    accepted_again = api(agent).post("/api/v1/records/", body(REASSERTION), format="json")
    assert accepted_again.status_code == 201, accepted_again.json()
    assert accepted_again.json()["revision"] == 3  # after the two deleted revisions, awaiting purge
    run_purge(accepted)
    assert not MemoryRecord.all_objects.filter(pk__in=doomed).exists()
    assert MemoryRecord.objects.filter(subject_id=SUBJECT).count() == 1
    assert (
        stats.record_stats(owner.tenant_id).by_status
        == stats.exact_record_stats(owner.tenant_id, timezone.now()).by_status
    )


@pytest.mark.parametrize("who", ["compliance", "agent", "admin"])
def test_others_in_the_tenant_are_refused(request, api, who, deleted):
    response = lift(api(request.getfixturevalue(who)), deleted[0], reason="Because")
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert not Tombstone.objects.filter(lifted_at__isnull=False).exists()
    assert not AuditEvent.objects.filter(action="tombstone.lifted").exists()


def test_another_tenant_sees_no_tombstone(api, outsider, deleted):
    response = lift(api(outsider), deleted[0], reason="Because")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert api(outsider).get("/api/v1/tombstones/").json()["results"] == []
    assert Tombstone.objects.get(pk=deleted[0].pk).lifted_at is None


@pytest.mark.parametrize("data", [{}, {"reason": ""}, {"reason": "   "}])
def test_a_reason_is_required(api, owner, deleted, data):
    response = lift(api(owner), deleted[0], **data)
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    assert "reason" in response.json()["errors"]
    assert Tombstone.objects.get(pk=deleted[0].pk).lifted_at is None


@pytest.mark.parametrize("bad", ["abc", "99999999999999999999999", "0"])
def test_an_id_that_names_no_tombstone_is_a_404(api, owner, deleted, bad):
    response = api(owner).post(f"/api/v1/tombstones/{bad}/lift/", {"reason": "x"}, format="json")
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_after_lifting_the_refused_reassertion_is_accepted(api, owner, agent, deleted):
    client = api(agent)
    refused = client.post("/api/v1/records/", body(REASSERTION), format="json")
    assert refused.status_code == 410 and refused.json()["code"] == "tombstoned"
    for stone in deleted:
        assert lift(api(owner), stone, reason="The subject asked to be remembered again").status_code == 200
    accepted = client.post("/api/v1/records/", body(REASSERTION), format="json")
    assert accepted.status_code == 201, accepted.json()


def test_the_list_is_content_free_and_for_compliance_owners_and_admins(api, owner, compliance, admin, agent, deleted):
    for reader in (owner, compliance, admin):
        page = api(reader).get("/api/v1/tombstones/")
        assert page.status_code == 200
        assert sorted(s["id"] for s in page.json()["results"]) == [s.pk for s in deleted]
        assert set(page.json()) == {"next", "previous", "results"}
    text = json.dumps(api(owner).get("/api/v1/tombstones/").json())
    assert "2026-11-02" not in text and "scope_hash" not in text and deleted[0].scope_hash not in text
    refused = api(agent).get("/api/v1/tombstones/")
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"


def test_the_list_pages_by_cursor(api, owner, deleted):
    assert len(deleted) >= 2
    first = api(owner).get("/api/v1/tombstones/", {"page_size": 1}).json()
    assert len(first["results"]) == 1 and first["next"]
    second = api(owner).get(first["next"]).json()
    assert second["results"][0]["id"] < first["results"][0]["id"]


# --- The dashboard's door ---------------------------------------------------------------------------


def signed_in(principal) -> Client:
    client = Client()
    client.force_login(principal)
    return client


def record_stone(deleted: list[Tombstone]) -> Tombstone:
    return next(s for s in deleted if s.kind == Tombstone.Kind.RECORD)


def test_the_tombstone_page_offers_owners_the_lift_after_a_confirmation(owner, deleted):
    stone = record_stone(deleted)
    client = signed_in(owner)
    page = client.get(f"/records/{stone.memory_id}/")
    assert page.status_code == 410 and f"/tombstones/{stone.pk}/lift/" in page.content.decode()
    confirm = client.post(f"/tombstones/{stone.pk}/lift/", {"next": f"/records/{stone.memory_id}/"})
    assert confirm.status_code == 200 and 'name="confirm" value="yes"' in confirm.content.decode()
    assert Tombstone.objects.get(pk=stone.pk).lifted_at is None  # nothing before the confirmation
    no_reason = client.post(f"/tombstones/{stone.pk}/lift/", {"confirm": "yes", "reason": " "})
    assert no_reason.status_code == 400 and Tombstone.objects.get(pk=stone.pk).lifted_at is None
    done = client.post(
        f"/tombstones/{stone.pk}/lift/",
        {"confirm": "yes", "reason": "Wrong subject", "next": f"/records/{stone.memory_id}/"},
    )
    assert done.status_code == 302 and done["Location"] == f"/records/{stone.memory_id}/"
    assert Tombstone.objects.get(pk=stone.pk).lifted_at is not None
    assert AuditEvent.objects.filter(action="tombstone.lifted", object_id=str(stone.pk), actor=owner).count() == 1


def test_the_dashboard_lift_is_for_owners_of_the_tenant_only(compliance, outsider, deleted):
    stone = record_stone(deleted)
    page = signed_in(compliance).get(f"/records/{stone.memory_id}/")
    assert f"/tombstones/{stone.pk}/lift/" not in page.content.decode()
    refused = signed_in(compliance).post(f"/tombstones/{stone.pk}/lift/", {"confirm": "yes", "reason": "x"})
    assert refused.status_code == 403
    assert (
        signed_in(outsider).post(f"/tombstones/{stone.pk}/lift/", {"confirm": "yes", "reason": "x"}).status_code == 404
    )
    assert not Tombstone.objects.filter(lifted_at__isnull=False).exists()


def test_the_lifter_stays_protected_while_the_unlifted_name_no_one(owner, deleted):
    """`lifted_by` is indexed only where set (a deletion's tombstones add no entry); the principal who lifted one
    still cannot be deleted (PROTECT still finds the lifted row), and the unlifted tombstones name no one."""
    stone = service.lift_tombstone(owner, deleted[0].pk, "Filed against the wrong subject")
    assert stone.lifted_by == owner
    assert Tombstone.objects.filter(lifted_by__isnull=True).count() == len(deleted) - 1
    with pytest.raises(ProtectedError):
        owner.delete()
    assert Tombstone.objects.filter(lifted_by=owner).get().pk == stone.pk
