"""Deletion stores are one registry (`deletion.stores.STORES`): adding a store is one module and one line.

A store defined here, in the test, is registered with that one line; a real deletion then runs it through
find, hide, purge and verify and the report lists it after the product's own stores, in their unchanged
order. Its adapters receive plain values (a `Job`), never the request's rows, and a restore's replay runs it
too when it says it is replayed. A second store with a name already registered is refused.
"""

from __future__ import annotations

import json
import pkgutil
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

import deletion.stores
from deletion import ledger, stores, tombstones
from deletion.models import StoreProgress, Tombstone
from deletion.restore import replay_tombstones
from deletion.stores import STORES, Found, Job, Scope, Store, Verification
from deletion.tasks import purge_store
from memory_admin.lib.registry import AlreadyRegistered, NotRegistered
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import MemoryRecord
from tests.support import DEADLINE, at, deadline

SUBJECT = DEADLINE["subject_id"]
URL = "/api/v1/deletion-requests/"
# The product's stores, in the order a request runs them and its report lists them (the order of the lines
# that register them, not the modules' names).
PRODUCT_ORDER = [
    "records",
    "logs",
    "embeddings",
    "summaries",
    "scheduled_actions",
    "caches",
    "exports",
    "contexts",
    "disputes",
    "receipts",
    "keys",
    "backups",
]


class Calls:
    """What the test-only store was asked, with the values it was given."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.jobs: list[Job] = []


@pytest.fixture
def probe() -> Iterator[Calls]:
    """A store that exists only in this test: one line registers it, and it is removed afterwards."""
    calls = Calls()

    class ProbeStore(Store):
        name = "probe"
        label = "Probe store (test-only)"
        replayed = True

        def find(self, scope: Scope) -> Found:
            calls.stages.append("find")
            return Found(len(scope.records), {"memory_ids": scope.memory_ids}, scope.memory_ids[:5])

        def hide(self, job: Job, now: datetime) -> int:
            calls.stages.append("hide")
            calls.jobs.append(job)
            return len(job.targets["memory_ids"])

        def purge(self, job: Job) -> int:
            calls.stages.append("purge")
            calls.jobs.append(job)
            job.evidence["probe_purged"] = sorted(job.targets["memory_ids"])
            return len(job.targets["memory_ids"])

        def verify(self, job: Job) -> Verification:
            calls.stages.append("verify")
            calls.jobs.append(job)
            left = MemoryRecord.all_objects.filter(memory_id__in=job.targets["memory_ids"]).count()
            return Verification(left, {"probe_rows_left": left})

    STORES.register(ProbeStore())
    try:
        yield calls
    finally:
        STORES.unregister("probe")
    assert "probe" not in stores.registered()


def two_revisions(agent) -> list[MemoryRecord]:
    first = assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20))).record
    second = assert_fact(agent, deadline("2026-11-02T17:00+09:00", "r18", at(10, 22), expected_revision=1)).record
    return [first, second]


def test_the_registry_holds_one_store_per_module_in_the_products_order():
    modules = {m.name for m in pkgutil.iter_modules(deletion.stores.__path__)} - {"base"}
    assert list(stores.registered()) == PRODUCT_ORDER
    # One module per store, named after it, and none left out of the registry.
    assert modules == set(PRODUCT_ORDER)
    assert {type(s).__module__ for s in stores.registered().values()} == {f"deletion.stores.{m}" for m in modules}
    # The stores a restore replays, in the order the replay ran them before they were a property of a store.
    assert list(stores.replayed()) == ["records", "logs", "summaries", "caches", "receipts"]


def test_no_list_of_store_names_exists_outside_the_stores():
    """The registry lists the stores' classes, and the service, the tasks and the restore know no store by name."""
    root = Path(deletion.stores.__file__).parent.parent
    for path in ("stores/__init__.py", "stores/base.py", "service.py", "tasks.py", "restore.py"):
        source = (root / path).read_text(encoding="utf-8")
        named = [n for n in PRODUCT_ORDER if f'"{n}"' in source or f"'{n}'" in source]
        assert named == [], f"{path} names stores {named}"


def test_a_store_added_in_one_place_runs_through_all_four_steps_and_is_reported(api, agent, compliance, probe):
    records = two_revisions(agent)
    memory_ids = sorted(r.memory_id for r in records)
    client = api(compliance)
    payload = {"project_id": "project-a", "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"}

    preview = client.post(URL, {**payload, "dry_run": True}, format="json").json()
    assert [s["store"] for s in preview["stores"]] == [*PRODUCT_ORDER, "probe"]
    assert {s["store"]: s["found"] for s in preview["stores"]}["probe"] == 2
    assert probe.stages == ["find"]

    response = client.post(URL, payload, format="json")
    assert response.status_code == 202
    request_id = response.json()["id"]
    assert probe.stages == ["find", "find", "hide"]  # found and hidden in the acceptance transaction
    for progress in StoreProgress.objects.filter(request__public_id=request_id).order_by("id"):  # registry order
        purge_store.apply(args=[progress.pk])

    assert probe.stages == ["find", "find", "hide", "purge", "verify"]
    # Plain values, never the request's or the store row's model instances.
    assert all(type(job) is Job for job in probe.jobs)
    job = probe.jobs[-1]
    assert job.request_public_id == request_id and job.project_key == "project-a"
    assert job.tenant_id == compliance.tenant_id and sorted(job.targets["memory_ids"]) == memory_ids
    assert job.accepted_at is not None

    report = client.get(f"{URL}{request_id}/").json()
    assert [s["store"] for s in report["stores"]] == [*PRODUCT_ORDER, "probe"]
    row = report["stores"][-1]
    assert row["state"] == "verified" and row["found"] == 2 and row["hidden"] == 2 and row["purged"] == 2
    assert row["remaining"] == 0
    # The evidence the purge added and the verification's are both kept on the row.
    assert row["evidence"]["probe_purged"] == memory_ids and row["evidence"]["probe_rows_left"] == 0
    assert report["stages"]["purge_confirmed_at"]  # the request waited for the added store too
    # The deletion page lists it too, last, by the label it registered with.
    page = Client()
    page.force_login(compliance)
    html = page.get(f"/deletions/{request_id}/").content.decode()
    sections = re.findall(r'<section class="store" aria-label="([^"]*)" data-store="([^"]*)"', html)
    assert sections[0] == ("Memory records", "records") and sections[-2:] == [
        ("Backups", "backups"),
        ("Probe store (test-only)", "probe"),
    ]
    assert [store for _, store in sections] == [*PRODUCT_ORDER, "probe"]


def test_a_replayed_store_is_run_by_a_restore_with_plain_values(agent, probe, settings, tmp_path):
    """A restore from a backup older than a request replays the ledger through every replayed store,
    the added one included, with no stand-in request."""
    settings.BACKUP_DIR = tmp_path
    records = two_revisions(agent)
    tenant_id = agent.tenant_id
    # The ledger holds the request's tombstones; the restored database (this one) does not.
    stones = [
        Tombstone(
            tenant_id=tenant_id,
            kind=Tombstone.Kind.RECORD,
            memory_id=r.memory_id,
            request_public_id="del-probe",
            scope_hash=tombstones.fact_scope(tenant_id, "project-a", r.subject_id, r.predicate),
            value_hash=tombstones.value_digest(r.value),
            created_at=timezone.now(),
        )
        for r in records
    ]
    ledger.path().parent.mkdir(parents=True, exist_ok=True)
    ledger.path().write_text("".join(json.dumps(ledger.entry(s)) + "\n" for s in stones), encoding="utf-8")

    result = replay_tombstones()

    assert result["tombstones_replayed"] == 2
    assert list(result["purged"]) == ["records", "logs", "summaries", "caches", "receipts", "probe"]
    assert result["purged"]["records"] == 2 and result["purged"]["probe"] == 2
    assert probe.stages == ["find", "purge"]
    job = probe.jobs[0]
    assert type(job) is Job and job.request_public_id == "del-probe" and job.project_key == "project-a"
    assert not MemoryRecord.all_objects.filter(subject_id=SUBJECT).exists()


def test_two_stores_cannot_share_a_name_and_a_name_must_fit_the_store_column():
    class Impostor(Store):
        name = "records"

    with pytest.raises(AlreadyRegistered, match="Two deletion stores have the key 'records'"):
        STORES.register(Impostor())
    assert type(stores.get("records")).__name__ == "RecordsStore"
    assert list(stores.registered()) == PRODUCT_ORDER

    class TooLong(Store):
        name = "x" * (StoreProgress._meta.get_field("store").max_length + 1)  # type: ignore[operator]

    with pytest.raises(ValueError, match="characters"):
        STORES.register(TooLong())
    assert TooLong.name not in stores.registered()


def test_an_unknown_store_is_refused_with_the_names_there_are():
    with pytest.raises(NotRegistered) as unknown:
        stores.get("tape")
    assert str(unknown.value).startswith("No deletion store 'tape' is registered; known: 'records', 'logs', ")
    assert isinstance(unknown.value, LookupError)
