"""Crypto-shredding reaches the copies a purge cannot (issue 35, item 4): dead tuples, the WAL, and backups taken
before the deletion.

On a throwaway PostgreSQL cluster of its own (initdb and pg_ctl, a free loopback port, a temporary directory,
stopped and removed afterwards), the product is migrated and driven in separate processes
(tests/support/shred_driver.py). A unique e-mail-like marker is planted for a subject (its value, a second source's
value, both records' source refs and a recheck attempt's, a dispute and the person's reason quoting it, the audit
events, a summary and a planned action built on it); a dump is taken; the subject is deleted to
purge_confirmed; after a CHECKPOINT the cluster's files (base/ and pg_wal/) are read byte by byte. The marker must
be in none of them, nor in the dump; and the dump, restored into a fresh database, holds ciphertext whose key is
gone: nothing opens it.

So that a scan finding nothing cannot pass for the wrong reason, a control subject is planted with SEALING=0 and
deleted the same way: its marker is still in the cluster's files after the purge (PostgreSQL frees space, it does
not overwrite it), and the keys store's report says so plainly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.pg_cluster import PgCluster, postgres_bin

pytestmark = pytest.mark.postgres_only(reason="reads the data directory and WAL of a throwaway PostgreSQL cluster")

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    data: Path
    port: int
    var: Path

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, database: str, sql: str) -> str:
        return subprocess.run(
            ["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", self.url(database), "-c", sql],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def product(self, database: str, *args: str, sealing: bool = True) -> Any:
        """Run the product (manage.py, or the driver) on `database` with the cluster's key store; its JSON line."""
        env = {
            **os.environ,
            "DATABASE_URL": self.url(database),
            "VAR_DIR": str(self.var),
            "SEALING": "1" if sealing else "0",
            "CELERY_BROKER_URL": "filesystem://",
            "CACHE_URL": f"file://{self.var / 'cache'}",
            "VECTOR_INDEX_PATH": str(self.var / "vectors"),
        }
        env.pop("DATABASE_APP_ROLE", None)
        command = [sys.executable, *args]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else None

    def hits(self, marker: str) -> dict[str, int]:
        """Occurrences of the marker's bytes in every file of base/ and pg_wal/ (place → count)."""
        needle = marker.encode()
        found: dict[str, int] = {}
        for top in ("base", "pg_wal"):
            for path in (self.data / top).rglob("*"):
                if path.is_file():
                    count = path.read_bytes().count(needle)
                    if count:
                        found[str(path.relative_to(self.data))] = count
        return found


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if postgres_bin() is None or shutil.which("psql") is None or shutil.which("pg_dump") is None:
        pytest.skip("initdb, pg_ctl, psql and pg_dump are needed for a throwaway cluster")
    server = PgCluster.create(prefix="shred-")
    var = server.top / "var"
    var.mkdir()
    try:
        yield Cluster(server.data, server.port, var)
    finally:
        server.destroy()


def test_after_the_purge_no_copy_of_a_sealed_value_is_readable(cluster: Cluster, record_property: Any) -> None:
    cluster.psql("postgres", "CREATE DATABASE shred")
    cluster.product("shred", "manage.py", "migrate", "--noinput")
    marker = f"shred{uuid.uuid4().hex[:16]}"
    control = f"clear{uuid.uuid4().hex[:16]}"

    planted = cluster.product("shred", "-m", "tests.support.shred_driver", "plant", marker, "person-sealed")
    cluster.product("shred", "-m", "tests.support.shred_driver", "plant", control, "person-clear", sealing=False)
    live = cluster.product("shred", "-m", "tests.support.shred_driver", "read", "person-sealed")
    # Reads open the sealed values (and the person's reason); the stored bytes are envelopes.
    assert f"{marker}@example.com" in live["values"] and live["sealed"] == 2 and live["opened"] == 2, live
    assert any(marker in r for r in live["dispute_reasons"]) and marker in json.dumps(live["audit_after"]), live
    # The source refs (the records' and the recheck attempt's) read plain too, stored sealed.
    assert all(marker in ref for ref in live["refs"]) and live["sealed_refs"] == 2, live
    assert len(live["recheck_refs"]) == 1 and marker in live["recheck_refs"][0], live
    assert marker in live["summaries"][0] and marker in live["payloads"][0]["to"], live

    # A backup taken before the deletion (a logical dump here; a base backup holds the same heap bytes).
    dump = cluster.var / "before.sql"
    subprocess.run(["pg_dump", "-f", str(dump), cluster.url("shred")], check=True)
    assert marker.encode() not in dump.read_bytes()
    assert control.encode() in dump.read_bytes()  # the dump is readable: the control was written in clear

    sealed_report = cluster.product("shred", "-m", "tests.support.shred_driver", "delete", "person-sealed")
    clear_report = cluster.product("shred", "-m", "tests.support.shred_driver", "delete", "person-clear")
    record_property("keys_evidence", json.dumps(sealed_report["keys"]))
    assert sealed_report["purge_confirmed"], sealed_report
    keys = sealed_report["keys"]
    assert keys["keys_destroyed"] >= 1 and keys["keys_remaining"] == 0, keys
    assert keys["decryption_attempt"].startswith("failed as it must"), keys
    assert "unsealed_records" not in keys and "unsealed_refs" not in keys
    # The control subject was stored in clear: the report says the files may keep its bytes.
    assert clear_report["purge_confirmed"], clear_report
    assert clear_report["keys"]["unsealed_records"] == 2 and "may hold" in clear_report["keys"]["unsealed_note"]
    assert clear_report["keys"]["unsealed_refs"] == 3  # two records' refs and the recheck attempt's

    cluster.psql("shred", "CHECKPOINT")
    sealed_hits, control_hits = cluster.hits(marker), cluster.hits(control)
    print(f"marker hits after purge: {sealed_hits}; control (stored in clear) hits: {control_hits}")
    record_property("hits", json.dumps({"sealed": sealed_hits, "clear": control_hits}))
    assert sealed_hits == {}
    assert control_hits, "the scan must see bytes stored in clear (dead tuples, WAL), or it proves nothing"

    # The pre-deletion backup, restored: the subject's rows come back as ciphertext whose key is gone.
    cluster.psql("postgres", "CREATE DATABASE restored")
    subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=0", "-f", str(dump), cluster.url("restored")],
        check=True,
        capture_output=True,
    )
    restored = cluster.product("restored", "-m", "tests.support.shred_driver", "read", "person-sealed")
    assert restored["sealed"] == 2 and restored["opened"] == 0 and len(restored["refused"]) == 2, restored
    assert all("destroyed" in r for r in restored["refused"]), restored
    # Values, source refs, audit snapshots, reasons, the summary and the planned action's payload read as erased.
    assert restored["sealed_refs"] == 2 and restored["recheck_refs"], restored
    assert restored["summaries"] and restored["payloads"], restored
    assert marker not in json.dumps(restored), restored
    assert planted["memory_ids"]
