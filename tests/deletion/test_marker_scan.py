"""A deletion reaches every place a memory's content can be: one marker, planted everywhere through the
public doors, must be found nowhere once the purge is confirmed.

The scan is not a list of places someone remembered: it reads every text and JSON column of every table
the database has (introspected), the decoded sessions, every key of the cache, the vector index (rows of
every version, and the bytes of its files), and every file under VAR_DIR (exports, backups, the cache
and broker folders). The only hits allowed afterwards are in backups taken before the purge, which the
request reports as stage 4. Before the deletion, the same scan must find the marker in each planted
place, so a scan that sees nothing cannot pass.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.sessions.models import Session
from django.core.cache import caches
from django.core.cache.backends.filebased import FileBasedCache
from django.core.cache.backends.locmem import LocMemCache
from django.db import connection, models
from django.test import Client
from django.utils import timezone

from deletion.backups import take_backup
from deletion.models import Backup, DeletionRequest, StoreProgress
from deletion.tasks import purge_store
from memory_admin.accounts.models import Principal
from memory_admin.accounts.services import ensure_principal
from memory_admin.derived.models import Event, Invalidation, ScheduledAction, Summary
from memory_admin.derived.tasks import embed_summaries, refresh_record_vectors
from memory_admin.derived.vectors import get_index, sql_str
from memory_admin.lib import sealing
from memory_admin.memory import receipts
from memory_admin.memory.models import AuditEvent, DecisionReceipt, Dispute, MemoryRecord, RecheckAttempt
from tests.support import at

PROJECT = "project-a"
SUBJECT = "person-marker"
OTHER = "person-kept"
TEXT_TYPES = {"CharField", "TextField", "JSONField", "SlugField", "EmailField", "URLField", "UUIDField"}


# --- The scan ------------------------------------------------------------------------------------


@dataclass
class Scan:
    marker: str
    columns: list[tuple[str, str]] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)  # place → count
    counts: dict[str, int] = field(default_factory=dict)  # what was read, per kind

    def report(self) -> str:
        lines = [
            f"scanned {len(self.columns)} text/JSON columns in {len({t for t, _ in self.columns})} tables, "
            + ", ".join(f"{k}: {v}" for k, v in self.counts.items())
        ]
        lines += [f"  {table}.{column}" for table, column in self.columns]
        lines += [f"HIT {place}: {n}" for place, n in sorted(self.hits.items())] or ["no hit"]
        return "\n".join(lines)


def text_columns() -> list[tuple[str, str]]:
    """Every text-like column of every table in the database, from the database's own catalogue."""
    found = []
    with connection.cursor() as cursor:
        for table in sorted(connection.introspection.table_names(cursor)):
            for column in connection.introspection.get_table_description(cursor, table):
                if connection.introspection.get_field_type(column.type_code, column) in TEXT_TYPES:
                    found.append((table, column.name))
    return found


def model_text_columns() -> set[tuple[str, str]]:
    """The same, from every installed model (M2M tables included): the two lists must agree."""
    wanted = set()
    for model in apps.get_models(include_auto_created=True):
        if model._meta.proxy or not model._meta.managed:
            continue
        for f in model._meta.concrete_fields:
            if isinstance(f, models.CharField | models.TextField | models.JSONField):
                wanted.add((model._meta.db_table, str(f.column)))
    return wanted


def scan_database(scan: Scan) -> None:
    quote = connection.ops.quote_name
    rows = 0
    with connection.cursor() as cursor:
        for table, column in scan.columns:
            cursor.execute(
                f"SELECT COUNT(*) FROM {quote(table)} WHERE CAST({quote(column)} AS TEXT) LIKE %s",
                [f"%{scan.marker}%"],
            )
            count = cursor.fetchone()[0]
            if count:
                scan.hits[f"db {table}.{column}"] = count
            cursor.execute(f"SELECT COUNT(*) FROM {quote(table)}")
            rows += cursor.fetchone()[0]
    scan.counts["cells"] = rows
    # Session data is signed and encoded: decoded, so a value a page put in a session would be seen.
    sessions = list(Session.objects.all())
    decoded = sum(1 for s in sessions if scan.marker in repr(s.get_decoded()))
    if decoded:
        scan.hits["db django_session (decoded)"] = decoded
    scan.counts["sessions"] = len(sessions)


def cache_items() -> dict[str, Any]:
    """Every entry of the configured cache (Redis in `make test`; locmem and file caches too)."""
    cache = caches["default"]
    if hasattr(cache, "iter_keys"):  # django-redis: this run's keys (its key prefix)
        keys = list(cache.iter_keys("*"))
        return cache.get_many(keys)
    if isinstance(cache, LocMemCache):
        return {k: pickle.loads(v) for k, v in cache._cache.items()}  # type: ignore[attr-defined]
    if isinstance(cache, FileBasedCache):
        items = {}
        for path in cache._list_cache_files():  # type: ignore[attr-defined]
            with open(path, "rb") as handle:
                pickle.load(handle)  # the expiry (FileBasedCache writes it pickled, then the zlib'd value)
                items[path] = pickle.loads(zlib.decompress(handle.read()))
        return items
    pytest.fail(f"No way to list the keys of {type(cache).__name__}")


def scan_cache(scan: Scan) -> None:
    items = cache_items()
    hits = [k for k, v in items.items() if scan.marker in repr(v) or scan.marker.encode() in pickle.dumps(v)]
    if hits:
        scan.hits["cache"] = len(hits)
    scan.counts["cache_keys"] = len(items)


def scan_vectors(scan: Scan) -> None:
    index = get_index()
    rows = index.rows_in_any_version(f"text LIKE {sql_str('%' + scan.marker + '%')}")
    if rows:
        scan.hits["vectors rows (every version)"] = rows
    if index.contains_text(scan.marker):
        scan.hits["vectors current version"] = 1
    if index.files_contain(scan.marker):
        scan.hits["vectors files"] = 1
    scan.counts["vector_versions"] = index.versions()


# Run in a child process, never here: see scan_var.
_READ_VAR = """
import json, sys
from pathlib import Path
root, needle = Path(sys.argv[1]), sys.argv[2].encode()
files = [p for p in root.rglob("*") if p.is_file()]
print(json.dumps({"files": len(files), "holding": [str(p) for p in files if needle in p.read_bytes()]}))
"""


def scan_var(scan: Scan) -> list[Path]:
    """Every file under VAR_DIR (exports, backups, file cache, broker folders, the vector files, and on
    SQLite the test database with its -wal and -shm files), read by a child process. Reading them here would
    corrupt the test database: closing a descriptor this process opened on a file drops every POSIX lock the
    process holds on that file, so SQLite's connection silently loses its locks on the database and on the
    -shm; the next process to open the database (the Celery worker of tests/deletion/test_on_real_worker.py) takes
    itself for the only one, checkpoints and deletes the WAL on close, and this process goes on writing to a
    WAL nobody else reads ("database disk image is malformed"; https://sqlite.org/howtocorrupt.html 2.2)."""
    found = subprocess.run(
        [sys.executable, "-c", _READ_VAR, str(settings.VAR_DIR), scan.marker],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(found.stdout)
    holding = [Path(path) for path in result["holding"]]
    if holding:
        scan.hits["var files"] = len(holding)
    scan.counts["var_files"] = result["files"]
    return holding


def scan_everything(marker: str) -> tuple[Scan, list[Path]]:
    scan = Scan(marker, columns=text_columns())
    scan_database(scan)
    scan_cache(scan)
    scan_vectors(scan)
    holding = scan_var(scan)
    return scan, holding


# --- The doors -----------------------------------------------------------------------------------


def ok(response: Any, *codes: int) -> dict[str, Any]:
    assert response.status_code in (codes or (200, 201)), response.content
    return response.json()


def record(
    client: Any, predicate: str, value: Any, revision: str, ref: str, subject: str = SUBJECT, **extra: Any
) -> dict[str, Any]:
    body = {
        "project_id": PROJECT,
        "subject_id": subject,
        "predicate": predicate,
        "value": value,
        "valid_from": at(10, 20).isoformat(),
        "source": {"canonical_ref": ref, "revision": revision},
        **extra,
    }
    return ok(client.post("/api/v1/records/", body, format="json"), 200, 201, 202)


def plant(api: Any, agent: Any, other_agent: Any, owner: Any, marker: str) -> dict[str, Any]:
    """The marker in every place a memory's content can reach, each through its public door."""
    a, b, boss = api(agent), api(other_agent), api(owner)
    email, new_email = f"{marker}@example.com", f"{marker}.new@example.com"

    def event(text: str, subjects: list[str]) -> dict:
        body = {
            "project_id": PROJECT,
            "session_id": "s-m",
            "actor": "user",
            "text": text,
            "occurred_at": at(10, 20).isoformat(),
            "subject_ids": subjects,
        }
        return ok(b.post("/api/v1/events/", body, format="json"))

    # Logs: a line about the subject, and a line quoting its value without naming anyone.
    tagged = event(f"{SUBJECT} gave the address {email}", [SUBJECT])
    untagged = event(f"someone wrote to {new_email} this morning", [])
    # Records, with history: the value, then a new value (audit snapshots of both).
    r1 = record(
        a,
        "email",
        email,
        "1",
        "crm:person-marker",
        source={"canonical_ref": "crm:person-marker", "revision": "1", "event_ids": [tagged["id"]]},
    )
    r2 = record(a, "email", new_email, "2", "crm:person-marker", expected_revision=1)
    base = [{"memory_id": r2["memory_id"], "revision": r2["revision"]}]
    # Derived items: a summary (and its vector entry), a scheduled action, another agent's loaded context.
    summary = ok(
        a.post(
            "/api/v1/summaries/",
            {"project_id": PROJECT, "text": f"Write to {new_email}", "derived_from": base},
            format="json",
        )
    )
    action = ok(
        a.post(
            "/api/v1/scheduled-actions/",
            {
                "project_id": PROJECT,
                "kind": "send_reminder",
                "payload": {"to": new_email},
                "due_at": (timezone.now() + timedelta(days=3)).isoformat(),
                "derived_from": base,
            },
            format="json",
        )
    )
    ok(
        b.post(
            "/api/v1/context-loads/",
            {"session_id": "sess-9", "memories": base, "expires_at": (timezone.now() + timedelta(hours=2)).isoformat()},
            format="json",
        )
    )
    refresh_record_vectors([r1["memory_id"], r2["memory_id"]])
    embed_summaries([Summary.objects.get(public_id=summary["id"]).pk])
    # A recheck report quoting what the source showed.
    ok(
        a.post(
            f"/api/v1/records/{r2['memory_id']}/rechecks/",
            {
                "outcome": "source_ambiguous",
                "observed_value": f"{marker}-observed",
                "error": f"the source showed {marker}-observed",
            },
            format="json",
        )
    )
    # A person's words about the value: an exclusion reason, which propagation repeats to the summary,
    # the action and the agent's notice.
    ok(boss.post(f"/api/v1/records/{r2['memory_id']}/exclude/", {"reason": f"{new_email} bounced"}, format="json"))
    # A dispute between two equal sources, resolved with a reason quoting the value.
    phone_a = record(a, "phone", f"{marker}-phone-a", "a", "crm:phone")
    phone_b = record(b, "phone", f"{marker}-phone-b", "b", "partner:phone")
    dispute_id = phone_b["dispute_id"]
    ok(
        boss.post(
            f"/api/v1/disputes/{dispute_id}/resolve/",
            {"winner": phone_a["memory_id"], "reason": f"kept {marker}-phone-a, the CRM's"},
            format="json",
        )
    )
    # The cache: a current answer.
    answer = ok(a.get("/api/v1/facts/current/", {"project_id": PROJECT, "subject_id": SUBJECT, "predicate": "phone"}))
    assert marker in str(answer["value"])
    # A read for acting: its decision receipt keeps the value served (memory.receipts).
    acted = ok(
        a.get(
            "/api/v1/facts/current/",
            {"project_id": PROJECT, "subject_id": SUBJECT, "predicate": "phone", "purpose": "action"},
        )
    )
    assert acted["receipt_id"]
    # An export of the project (the dashboard's door).
    dashboard = Client()
    dashboard.force_login(owner)
    assert dashboard.post("/exports/", {"project_id": PROJECT}).status_code == 302
    # Information about someone else, which the deletion must leave alone.
    kept = record(a, "email", "kept.person@example.com", "1", "crm:person-kept", subject=OTHER)
    kept_line = event("the kept person's address is kept.person@example.com", [])
    return {
        "action": action["id"],
        "dispute": dispute_id,
        "kept": kept["memory_id"],
        "kept_line": kept_line["id"],
        "untagged": untagged["id"],
    }


def run_all(request_id: str) -> None:
    for progress in StoreProgress.objects.filter(request__public_id=request_id).order_by("id"):
        purge_store.apply(args=[progress.pk])


# --- The test ------------------------------------------------------------------------------------


def test_a_deleted_subject_s_marker_is_found_nowhere_after_the_purge(
    api, agent, other_agent, owner, compliance, record_property
):
    marker = f"mk{uuid.uuid4().hex}"
    planted = plant(api, agent, other_agent, owner, marker)

    # The scan covers every text/JSON column any model has (and whatever else the database holds).
    columns = set(text_columns())
    assert model_text_columns() <= columns, sorted(model_text_columns() - columns)

    before, _ = scan_everything(marker)
    print("BEFORE THE DELETION\n" + before.report())
    record_property("scan_before", before.report())
    tables = {
        m: m._meta.db_table
        for m in (
            MemoryRecord,
            AuditEvent,
            Event,
            Summary,
            ScheduledAction,
            Invalidation,
            RecheckAttempt,
            Dispute,
            DecisionReceipt,
        )
    }
    # Sealed under the subject's data keys (lib.sealing, issue 35 item 4): read through the models they hold the
    # marker, while their stored bytes do not.
    sealed = [
        (MemoryRecord.all_objects, "value"),
        (AuditEvent.objects, "after"),
        (AuditEvent.objects, "reason"),
        (RecheckAttempt.objects, "observed_value"),
        (Dispute.objects, "resolution_reason"),
        (Summary.objects, "text"),
        (ScheduledAction.objects, "payload"),
    ]
    for manager, name in sealed:
        assert any(marker in str(v) for v in manager.values_list(name, flat=True)), name
        with sealing.reading_stored():
            leaked = [
                (getattr(row, "action", ""), getattr(row, "object_type", ""))
                for row in manager.all()
                if marker in json.dumps(getattr(row, name), default=str)
            ]
        assert f"db {manager.model._meta.db_table}.{name}" not in before.hits, (name, leaked)
    # A decision receipt's disclosure (the value served for acting) is sealed by its writer: opened, it holds the
    # marker; stored, it does not.
    assert any(marker in str(receipts.disclosure_of(r)) for r in DecisionReceipt.objects.all())
    assert f"db {tables[DecisionReceipt]}.disclosure" not in before.hits
    planted_in = {
        f"db {tables[Event]}.text",
        f"db {tables[ScheduledAction]}.status_reason",
        f"db {tables[Invalidation]}.reason",
        "cache",
        "vectors rows (every version)",
        "vectors current version",
        "var files",
    }
    assert planted_in <= set(before.hits), sorted(planted_in - set(before.hits))

    backup = take_backup(retention_days=30)  # taken before the purge: stage 4 reports it
    client = api(compliance)
    filed = ok(
        client.post(
            "/api/v1/deletion-requests/",
            {"project_id": PROJECT, "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
            format="json",
        ),
        202,
    )
    request_id = filed["id"]
    assert {"scheduled_actions", "disputes"} <= {s["store"] for s in filed["stores"]}

    # Stage 2, before any purge: the action and the dispute's reason are no longer readable.
    gone = api(agent).get(f"/api/v1/scheduled-actions/{planted['action']}/")
    assert gone.status_code == 410 and gone.json()["code"] == "tombstoned" and marker not in gone.content.decode()
    dispute = api(owner).get(f"/api/v1/disputes/{planted['dispute']}/")
    assert marker not in dispute.content.decode()
    lines = {e["id"] for e in api(agent).get("/api/v1/events/", {"session_id": "s-m"}).json()["results"]}
    assert planted["untagged"] not in lines and planted["kept_line"] in lines

    run_all(request_id)
    notice = api(other_agent).get("/api/v1/agents/agent-9/invalidations/").json()["results"]
    assert notice and all(marker not in n["reason"] for n in notice)
    for n in notice:
        api(other_agent).post(f"/api/v1/agents/agent-9/invalidations/{n['id']}/ack/")
    run_all(request_id)
    report = ok(client.get(f"/api/v1/deletion-requests/{request_id}/"))
    assert {s["store"]: s["state"] for s in report["stores"]} == dict.fromkeys(
        [
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
        ],
        "verified",
    )
    assert report["stages"]["purge_confirmed_at"]
    assert report["stages"]["backups_expire_at"] == backup.expires_at.isoformat()
    assert marker not in str(report)  # the report itself is content-free

    after, holding = scan_everything(marker)
    print("AFTER THE PURGE\n" + after.report())
    record_property("scan_after", after.report())
    confirmed = DeletionRequest.objects.get(public_id=request_id).purge_confirmed_at
    earlier_backups = {Path(b.path).resolve() for b in Backup.objects.filter(taken_at__lte=confirmed)}
    allowed = {p for p in holding if p.resolve() in earlier_backups}
    hits = dict(after.hits)
    if holding and set(holding) == allowed:
        hits.pop("var files")
    assert hits == {}, after.report()

    # What was not the subject's is untouched: the other person's record and the line about them.
    assert MemoryRecord.objects.filter(memory_id=planted["kept"]).exists()
    assert Event.objects.get(public_id=planted["kept_line"]).redacted_at is None
    # The untagged line quoting the deleted value was redacted, with a marker saying by which request.
    line = Event.objects.get(public_id=planted["untagged"])
    assert line.redacted_at and request_id in line.text
    action = ScheduledAction.objects.get(public_id=planted["action"])
    assert action.status == "cancelled" and request_id in str(action.payload)
    assert not Dispute.objects.filter(public_id=planted["dispute"]).exists()  # every candidate was deleted


def test_the_scheduled_action_store_alone_a_payload_derived_from_a_deleted_record(api, agent, compliance):
    """The reported case: payload {"to": V} from the record; purge_confirmed while GET still returned V."""
    a = api(agent)
    made = record(a, "email", "v.person@example.com", "1", "crm:person-marker")
    base = [{"memory_id": made["memory_id"], "revision": made["revision"]}]
    action = ok(
        a.post(
            "/api/v1/scheduled-actions/",
            {
                "project_id": PROJECT,
                "kind": "send",
                "payload": {"to": "v.person@example.com"},
                "due_at": (timezone.now() + timedelta(days=1)).isoformat(),
                "derived_from": base,
            },
            format="json",
        )
    )
    request_id = ok(
        api(compliance).post(
            "/api/v1/deletion-requests/",
            {"project_id": PROJECT, "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
            format="json",
        ),
        202,
    )["id"]
    run_all(request_id)
    assert DeletionRequest.objects.get(public_id=request_id).purge_confirmed_at is not None
    response = a.get(f"/api/v1/scheduled-actions/{action['id']}/")
    assert response.status_code == 410 and "v.person@example.com" not in response.content.decode()
    stored = ScheduledAction.objects.get(public_id=action["id"])
    assert "v.person@example.com" not in str(stored.payload) + stored.status_reason
    row = StoreProgress.objects.get(request__public_id=request_id, store="scheduled_actions")
    assert row.found == 1 and row.hidden == 1 and row.purged == 1 and row.state == "verified"
    # A confirmation cannot put a payload back on the withdrawn action.
    again = a.post(
        f"/api/v1/scheduled-actions/{action['id']}/confirm/",
        {"derived_from": base, "payload": {"to": "v.person@example.com"}},
        format="json",
    )
    assert again.status_code in (400, 409, 410)
    assert "v.person@example.com" not in str(ScheduledAction.objects.get(public_id=action["id"]).payload)


@pytest.mark.parametrize("subjects", [[], ["someone-else"]])
def test_a_line_naming_no_subject_that_quotes_a_deleted_value(api, agent, compliance, subjects):
    """The decision: an untagged line quoting a deleted value is redacted with the subject's lines (found
    at acceptance); a line tagged with someone else is theirs and stays; a line written after the
    deletion is new data and is accepted (a keyed hash cannot be matched against free text)."""
    a = api(agent)
    record(a, "email", "quoted.person@example.com", "1", "crm:person-marker")
    line = ok(
        a.post(
            "/api/v1/events/",
            {
                "project_id": PROJECT,
                "session_id": "s-q",
                "actor": "user",
                "text": "mail quoted.person@example.com today",
                "occurred_at": at(10, 21).isoformat(),
                "subject_ids": subjects,
            },
            format="json",
        )
    )
    request_id = ok(
        api(compliance).post(
            "/api/v1/deletion-requests/",
            {"project_id": PROJECT, "scope": {"subject_id": SUBJECT}, "reason": "Data subject request"},
            format="json",
        ),
        202,
    )["id"]
    run_all(request_id)
    event = Event.objects.get(public_id=line["id"])
    if subjects:
        assert event.redacted_at is None and "quoted.person@example.com" in event.text
    else:
        assert event.redacted_at is not None and "quoted.person@example.com" not in event.text
    row = StoreProgress.objects.get(request__public_id=request_id, store="logs")
    assert row.targets["untagged_lines_quoting_values"] == {
        "values_searched": 1,
        "values_left_out": 0,
        "lines": 0 if subjects else 1,
    }
    later = a.post(
        "/api/v1/events/",
        {
            "project_id": PROJECT,
            "session_id": "s-q",
            "actor": "user",
            "text": "mail quoted.person@example.com again",
            "occurred_at": timezone.now().isoformat(),
        },
        format="json",
    )
    assert later.status_code == 201


_OTHER_PROCESS_READS = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=20)
print(db.execute(sys.argv[2]).fetchone()[0])
db.close()
"""


def another_process_reads(sql: str) -> str:
    """What a second process (a Celery worker, say) sees of the test database: it opens, reads and closes."""
    name = str(connection.settings_dict["NAME"])
    return subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS_READS, name, sql], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.django_db(transaction=True)
def test_the_var_scan_leaves_this_process_s_sqlite_locks_alone():
    """The var scan reads the SQLite test database's files (they live under VAR_DIR). Read here, they used to
    drop this process's POSIX locks on them: the next process to open the database (here a reader, in
    tests/deletion/test_on_real_worker.py the Celery worker) took itself for the only one and deleted the WAL when
    it closed, and what this process wrote next went to the deleted WAL, seen by no other process (and later
    "database disk image is malformed")."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL has no database file under VAR_DIR")
    name = Path(connection.settings_dict["NAME"]).resolve()
    assert name.is_relative_to(Path(settings.VAR_DIR).resolve())  # the scan does read the database's files
    ensure_principal("acme", "before-scan", ["agent"])  # this process holds an open connection in WAL mode
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"

    scan_var(Scan(f"marker-{uuid.uuid4().hex}"))
    table = Principal._meta.db_table
    assert another_process_reads(f"SELECT count(*) FROM {table} WHERE username = 'before-scan@acme'") == "1"

    ensure_principal("acme", "after-scan", ["agent"])  # written after the other process came and went
    assert another_process_reads(f"SELECT count(*) FROM {table} WHERE username = 'after-scan@acme'") == "1"
