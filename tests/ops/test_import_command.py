"""`manage.py import FILE --tenant T --as PRINCIPAL`: JSONL in the API's record shape, through the batch door's
domain function, with a summary by outcome and line-numbered errors; `--atomic` never half-applies a batch."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from memory_admin.accounts.services import ensure_principal
from memory_admin.memory.actions import assert_fact
from memory_admin.memory.models import AuditEvent, MemoryRecord
from tests.support import at, body, deadline


def line(subject: str, value: Any, revision: str = "r1", **extra: Any) -> str:
    data = {
        "project_id": "project-b",
        "subject_id": subject,
        "predicate": "owner",
        "value": value,
        "valid_from": at(10, 20).isoformat(),
        "source": {"canonical_ref": f"crm:{subject}", "revision": revision},
        **extra,
    }
    return json.dumps(data)


def write(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "facts.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def run(path: str, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("import", path, "--tenant", "acme", "--as", "agent-7", "--no-progress", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_imports_every_line_and_summarises_by_outcome(agent, tmp_path):
    path = write(tmp_path, [line(f"acct-{i}", f"owner-{i}") for i in range(7)] + [line("acct-0", "owner-0")])
    out, err = run(path, "--batch-size", "3")
    assert "created: 7" in out and "unchanged: 1" in out and "8 line(s)" in out, out
    assert err == ""
    assert MemoryRecord.objects.filter(tenant=agent.tenant, status="accepted").count() == 7
    assert AuditEvent.objects.filter(action="record.asserted.created").count() == 7


def test_bad_lines_are_reported_with_their_number_and_the_rest_is_imported(agent, tmp_path):
    assert_fact(agent, deadline("2026-10-30T17:00+09:00", "r17", at(10, 20)))
    lines = [
        line("acct-1", "alice"),
        "{not json",
        "",
        line("bad/id", "x"),
        json.dumps(body(deadline("2026-11-02T17:00+09:00", "r18", at(10, 22)))),  # no expected_revision: 428
        line("acct-2", "bob", valid_from="2026-10-20T09:00:00"),  # a naive datetime
        line("acct-3", "carol"),
    ]
    with pytest.raises(CommandError, match="4 line"):
        run(write(tmp_path, lines))
    assert set(MemoryRecord.objects.filter(subject_id__startswith="acct").values_list("subject_id", flat=True)) == {
        "acct-1",
        "acct-3",
    }


def test_errors_name_the_line_and_the_reason(agent, tmp_path):
    lines = [line("acct-1", "alice"), "{not json", line("bad/id", "x"), line("acct-2", None)]
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError):
        call_command(
            "import", write(tmp_path, lines), "--tenant", "acme", "--as", "agent-7", "--no-progress",
            stdout=out, stderr=err,
        )  # fmt: skip
    errors = err.getvalue()
    assert "line 2: invalid (400)" in errors and "Not JSON" in errors
    assert "line 3: invalid (400)" in errors and "subject_id" in errors
    assert "line 4: invalid (400)" in errors and "value" in errors
    assert "line 1" not in errors
    assert "created: 1" in out.getvalue() and "invalid: 3" in out.getvalue()


def test_atomic_never_half_applies_a_batch_and_stops_there(agent, tmp_path):
    lines = [line("acct-1", "a"), line("acct-2", "b"), line("acct-3", "c"), line("bad/id", "d"), line("acct-5", "e")]
    with pytest.raises(CommandError, match="lines 3-4 was not applied"):
        run(write(tmp_path, lines), "--atomic", "--batch-size", "2")
    # The first batch (lines 1-2) is in; the failing batch (3-4) and everything after it are not.
    assert sorted(MemoryRecord.objects.values_list("subject_id", flat=True)) == ["acct-1", "acct-2"]


def test_it_refuses_an_unknown_principal_a_missing_file_and_a_bad_batch_size(agent, tmp_path):
    path = write(tmp_path, [line("acct-1", "a")])
    with pytest.raises(CommandError, match="No principal"):
        call_command("import", path, "--tenant", "acme", "--as", "nobody", stdout=StringIO())
    with pytest.raises(CommandError, match="No principal"):
        call_command("import", path, "--tenant", "globex", "--as", "agent-7", stdout=StringIO())
    with pytest.raises(CommandError, match="No file"):
        call_command("import", str(tmp_path / "missing.jsonl"), "--tenant", "acme", "--as", "agent-7")
    with pytest.raises(CommandError, match="batch-size"):
        call_command("import", path, "--tenant", "acme", "--as", "agent-7", "--batch-size", "1001")
    assert not MemoryRecord.objects.exists()


def test_a_compliance_officer_may_not_import(compliance, tmp_path):
    ensure_principal("acme", "agent-7", ["agent"])
    with pytest.raises(CommandError, match="1 line"):
        call_command(
            "import", write(tmp_path, [line("acct-1", "a")]), "--tenant", "acme", "--as", "carl", "--no-progress",
            stdout=StringIO(), stderr=StringIO(),
        )  # fmt: skip
    assert not MemoryRecord.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_command_runs_as_a_process_with_a_progress_bar(tmp_path):
    """The real command line (a separate process, as an operator runs it): progress on stderr, summary on stdout."""
    ensure_principal("acme", "agent-7", ["agent"])
    path = write(tmp_path, [line(f"acct-{i}", i) for i in range(25)])
    env = _child_env()
    done = subprocess.run(
        [sys.executable, "manage.py", "import", path, "--tenant", "acme", "--as", "agent-7", "--batch-size", "10"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "created: 25" in done.stdout
    assert "25/25" in done.stderr  # tqdm's bar reached the end
    assert MemoryRecord.objects.count() == 25


def _child_env() -> dict[str, str]:
    import os

    from django.db import connection

    env = dict(os.environ)
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        user = db["USER"]
        password = db.get("PASSWORD") or ""
        auth = f"{user}:{password}@" if password else f"{user}@"
        env["DATABASE_URL"] = f"postgres://{auth}{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    else:
        env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
    return env


def test_a_line_naming_a_key_twice_is_refused_by_number_and_the_rest_is_imported(agent, tmp_path):
    """Issue 30, item 7: the last `subject_id` used to win silently, so a tool reading the first saw another
    subject than the one written."""
    twice = line("acct-p", "alice")[:-1] + ', "subject_id": "acct-q"}'
    path = write(tmp_path, [line("acct-1", "alice"), twice, line("acct-2", "bob")])
    err = StringIO()
    with pytest.raises(CommandError, match="1 line"):
        call_command(
            "import", path, "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=StringIO(), stderr=err
        )
    assert "line 2" in err.getvalue() and '"subject_id" twice' in err.getvalue(), err.getvalue()
    assert "acct-q" not in err.getvalue() and "alice" not in err.getvalue()  # no value in the error
    subjects = set(MemoryRecord.objects.filter(subject_id__startswith="acct").values_list("subject_id", flat=True))
    assert subjects == {"acct-1", "acct-2"}


def _bad_lines() -> list[bytes]:
    """What used to end the command with a traceback (issue 30, item 6): a byte that is not UTF-8, nesting 10,000
    deep, and a NUL escape (PostgreSQL refuses it in text and jsonb); each carries a value that must not be
    printed."""
    good = line("acct-bad", "secret-value-7").encode()
    return [
        good[:-2] + b'\xff"}',  # the closing quote's neighbour is a lone 0xff byte
        b'{"value": ' + b"[" * 10_000 + b"]" * 10_000 + b', "note": "secret-value-8"}',
        line("acct-nul", "secret\x00value-9").encode(),  # json.dumps writes it as the escape,
    ]


@pytest.mark.parametrize("atomic", [False, True])
def test_bad_bytes_deep_nesting_and_nul_are_refused_by_line_and_the_rest_goes_on(agent, tmp_path, atomic):
    good = [line(f"acct-{i}", f"owner-{i}").encode() for i in range(4)]
    path = tmp_path / "facts.jsonl"
    path.write_bytes(b"\n".join([good[0], *_bad_lines(), good[1], good[2], good[3]]) + b"\n")
    out, err = StringIO(), StringIO()
    args = ["--atomic"] if atomic else []
    with pytest.raises(CommandError) as caught:
        call_command(
            "import", str(path), "--tenant", "acme", "--as", "agent-7", "--no-progress", "--batch-size", "3", *args,
            stdout=out, stderr=err,
        )  # fmt: skip
    errors = err.getvalue()
    assert "line 2: invalid (400)" in errors and "Not UTF-8" in errors, errors
    assert "line 3: invalid (400)" in errors and "nested deeper than" in errors
    assert "Imported" in out.getvalue()  # the summary is printed either way
    assert "secret" not in errors and "secret" not in str(caught.value) and "Traceback" not in errors
    subjects = set(MemoryRecord.objects.filter(subject_id__startswith="acct").values_list("subject_id", flat=True))
    if atomic:
        # Lines 1-3 are one batch: not applied, and the import stops there.
        assert "lines 1-3 was not applied" in str(caught.value)
        assert subjects == set()
    else:
        assert "line 4: invalid (400)" in errors and "NUL" in errors
        assert "created: 4" in out.getvalue() and "invalid: 3" in out.getvalue(), out.getvalue()
        assert subjects == {"acct-0", "acct-1", "acct-2", "acct-3"}
        assert "3 line(s) were refused" in str(caught.value)


def test_a_batch_the_database_refuses_is_retried_line_by_line(agent, tmp_path, monkeypatch):
    """A line no check before the database catches (here: a value the database is made to refuse) costs only
    itself, not the 499 good lines of its batch, and its error is named without the values."""
    import importlib

    from django.db import DataError

    command = importlib.import_module("memory_admin.ops.management.commands.import")

    real = command.assert_facts

    def refusing(who, items, **kwargs):
        if any(getattr(item, "value", None) == "poison-secret" for item in items):
            raise DataError('invalid input: "poison-secret"')
        return real(who, items, **kwargs)

    monkeypatch.setattr(command, "assert_facts", refusing)
    path = write(tmp_path, [line("acct-1", "a"), line("acct-2", "poison-secret"), line("acct-3", "c")])
    err = StringIO()
    with pytest.raises(CommandError, match="1 line"):
        call_command(
            "import", path, "--tenant", "acme", "--as", "agent-7", "--no-progress", stdout=StringIO(), stderr=err
        )
    assert "line 2: invalid (400)" in err.getvalue() and "DataError" in err.getvalue()
    assert "poison" not in err.getvalue()
    assert set(MemoryRecord.objects.values_list("subject_id", flat=True)) == {"acct-1", "acct-3"}
