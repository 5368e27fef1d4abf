"""The signed deletion certificate (issue 35, item 2): issued once the purge is confirmed, per store what was found,
removed and read again empty, the four stage times; it verifies offline with the client package's command (no
server, no Django) and fails if one byte changes; compliance of the request's tenant only."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from deletion import stores
from deletion.models import DeletionRequest
from memory_admin.lib import signing
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord
from tests.support import ARTIFACTS, DEADLINE, at, deadline, run_purge
from tests.support.celery_worker import require_real_broker, running_worker, wait_until
from tests.support.trust import verify_offline

SUBJECT = DEADLINE["subject_id"]
URL = "/api/v1/deletion-requests/"
VALUE = "2026-11-02T17:00+09:00"


def file_request(api, compliance) -> DeletionRequest:
    response = api(compliance).post(
        URL,
        {"project_id": "project-a", "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
        format="json",
    )
    assert response.status_code == 202, response.content
    return DeletionRequest.objects.get(public_id=response.json()["id"])


@pytest.fixture
def purged(api, agent, compliance) -> DeletionRequest:
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    assert_fact(agent, deadline(VALUE, "r18", at(10, 22), expected_revision=1))
    request = file_request(api, compliance)
    run_purge(request)
    request.refresh_from_db()
    assert request.state == DeletionRequest.State.PURGE_CONFIRMED
    return request


def test_the_certificate_says_per_store_what_was_found_removed_and_read_again_empty(api, compliance, purged):
    response = api(compliance).get(f"{URL}{purged.public_id}/certificate/")
    assert response.status_code == 200, response.content
    certificate = response.json()
    assert certificate["kind"] == "deletion_certificate"
    assert certificate["request_id"] == purged.public_id
    assert [s["store"] for s in certificate["stores"]] == list(stores.registered())
    records = next(s for s in certificate["stores"] if s["store"] == "records")
    assert (records["found"], records["purged"], records["remaining"]) == (2, 2, 0)
    assert records["verification"]["rows_remaining"] == 0
    assert records["verification"]["query"].startswith("memory_memoryrecord")
    assert all(s["remaining"] == 0 and s["purge_verified_at"] for s in certificate["stores"])
    assert certificate["stages"]["purge_confirmed_at"] == purged.purge_confirmed_at.isoformat()
    assert certificate["stages"]["accepted_at"] == purged.accepted_at.isoformat()
    assert set(certificate["stages"]) == {
        "accepted_at",
        "removed_from_reads_at",
        "purge_confirmed_at",
        "backups_hold_until",
    }
    assert SUBJECT in certificate["scope"]["description"]
    # Signed by this deployment's key; the erased value and the request's free-text reason are not in it.
    assert signing.verify(certificate) == certificate["key_id"]
    text = json.dumps(certificate)
    assert VALUE not in text and "Data subject request" not in text
    assert not MemoryRecord.all_objects.filter(subject_id=SUBJECT).exists()
    # Built again from the same rows, it is the same document (two downloads are byte for byte the same).
    assert api(compliance).get(f"{URL}{purged.public_id}/certificate/").json() == certificate


def test_the_certificate_verifies_offline_and_fails_after_a_one_byte_change(api, compliance, purged, tmp_path):
    certificate = api(compliance).get(f"{URL}{purged.public_id}/certificate/").json()
    intact = verify_offline(tmp_path, certificate)
    assert intact.returncode == 0, intact.stderr
    assert "intact" in intact.stdout and certificate["key_id"] in intact.stdout

    text = json.dumps(certificate)
    position = text.index('"found": 2') + len('"found": ')
    changed = verify_offline(tmp_path, text[:position] + "3" + text[position + 1 :])
    assert changed.returncode == 1
    assert "does not match" in changed.stderr

    dated = dict(certificate, stages={**certificate["stages"], "backups_hold_until": "2099-01-01T00:00:00+00:00"})
    assert verify_offline(tmp_path, dated).returncode == 1

    other_key = tmp_path / "other.pem"
    other_key.write_bytes(
        Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    other = verify_offline(tmp_path, certificate, key=other_key)
    assert other.returncode == 1 and "not among the keys given" in other.stderr


def test_a_certificate_before_the_purge_is_confirmed_is_refused(api, agent, compliance):
    assert_fact(agent, deadline(VALUE, "r18", at(10, 22)))
    request = file_request(api, compliance)  # accepted; the purge has not run
    response = api(compliance).get(f"{URL}{request.public_id}/certificate/")
    assert response.status_code == 409
    assert response.json()["code"] == "certificate_not_ready"


def test_only_compliance_of_the_requests_tenant_gets_the_certificate(api, compliance, owner, agent, outsider, purged):
    path = f"{URL}{purged.public_id}/certificate/"
    assert api(outsider).get(path).status_code == 404  # another tenant's id, even holding every role
    assert api(owner).get(path).status_code == 403  # follows the request, is not compliance
    assert api(agent).get(path).status_code == 404  # follows no deletion at all
    assert api(compliance).get(f"{URL}del-unknown/certificate/").status_code == 404


def test_the_verifier_says_why_it_cannot_read_a_file(tmp_path):
    broken = verify_offline(tmp_path, "{not json")
    assert broken.returncode == 2 and "not JSON" in broken.stderr
    unsigned = verify_offline(tmp_path, {"kind": "deletion_certificate", "request_id": "del-1"})
    assert unsigned.returncode == 1 and "no signature" in unsigned.stderr


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_purge_carried_by_a_real_worker_gets_a_certificate_that_verifies_offline(api, agent, compliance, tmp_path):
    require_real_broker()
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    assert_fact(agent, deadline(VALUE, "r18", at(10, 22), expected_revision=1))
    log = ARTIFACTS / "celery-certificate-worker.log"
    with running_worker(log):
        request = file_request(api, compliance)
        path = f"{URL}{request.public_id}/certificate/"
        confirmed = DeletionRequest.objects.filter(pk=request.pk, state=DeletionRequest.State.PURGE_CONFIRMED)
        assert wait_until(confirmed.exists, timeout=90), log.read_text()[-3000:]
    certificate = api(compliance).get(path).json()
    assert {s["remaining"] for s in certificate["stores"]} == {0}
    records = next(s for s in certificate["stores"] if s["store"] == "records")
    assert (records["found"], records["purged"]) == (2, 2)
    intact = verify_offline(tmp_path, certificate)
    assert intact.returncode == 0, intact.stderr
