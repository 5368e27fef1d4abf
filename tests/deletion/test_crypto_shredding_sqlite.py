"""Crypto-shredding on the embedded default (issue 35, item 4): the same proof as test_crypto_shredding.py on a
SQLite file of its own (and its WAL), driven in separate processes (tests/support/shred_driver.py).

A marker planted sealed (values, source refs, a recheck attempt's ref, reasons) is in neither the database file nor its WAL, before or after the deletion, and a copy of the
file taken before the deletion holds envelopes that no longer open once the purge destroyed the keys. A control
subject written with SEALING=0 is reported plainly: the deletion's keys store says its bytes may stay in the files
until they are overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _product(var: Path, database: Path, *args: str, sealing: bool = True) -> Any:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "VAR_DIR": str(var),
        "SEALING": "1" if sealing else "0",
        "CELERY_BROKER_URL": "filesystem://",
        "CACHE_URL": f"file://{var / 'cache'}",
        "VECTOR_INDEX_PATH": str(var / "vectors"),
    }
    for name in ("DATABASE_APP_ROLE", "KEYSTORE_PATH", "KEYSTORE_KEK"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def _hits(paths: list[Path], marker: str) -> dict[str, int]:
    found = {}
    for path in paths:
        if path.exists():
            count = path.read_bytes().count(marker.encode())
            if count:
                found[path.name] = count
    return found


def test_a_sealed_value_is_in_no_sqlite_file_and_an_old_copy_does_not_open(tmp_path: Path) -> None:
    var = tmp_path / "var"
    var.mkdir()
    database = var / "db.sqlite3"
    driver = ("-m", "tests.support.shred_driver")
    _product(var, database, "manage.py", "migrate", "--noinput")
    marker = f"shred{uuid.uuid4().hex[:16]}"
    control = f"clear{uuid.uuid4().hex[:16]}"
    _product(var, database, *driver, "plant", marker, "person-sealed")
    _product(var, database, *driver, "plant", control, "person-clear", sealing=False)
    files = [database, database.with_name("db.sqlite3-wal")]
    assert _hits(files, marker) == {}  # sealed from the first write: never in the files
    assert _hits(files, control)  # the scan sees what is stored in clear
    copy = var / "before.sqlite3"
    shutil.copy(database, copy)  # a backup taken before the deletion (the WAL is folded in below)
    with_wal = database.with_name("db.sqlite3-wal")
    if with_wal.exists():
        shutil.copy(with_wal, copy.with_name("before.sqlite3-wal"))

    report = _product(var, database, *driver, "delete", "person-sealed")
    clear = _product(var, database, *driver, "delete", "person-clear")
    assert report["purge_confirmed"] and report["keys"]["keys_remaining"] == 0, report
    assert report["keys"]["decryption_attempt"].startswith("failed as it must"), report
    assert clear["keys"]["unsealed_records"] == 2 and "may hold" in clear["keys"]["unsealed_note"], clear
    assert clear["keys"]["unsealed_refs"] == 3, clear  # two records' source refs and a recheck attempt's
    assert _hits(files, marker) == {}

    restored = _product(var, copy, *driver, "read", "person-sealed")
    assert restored["sealed"] == 2 and restored["opened"] == 0 and len(restored["refused"]) == 2, restored
    assert restored["sealed_refs"] == 2 and restored["refs"] and restored["recheck_refs"], restored
    assert marker not in json.dumps(restored), restored
