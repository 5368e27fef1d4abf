"""The tombstone ledger: every tombstone, content-free, also appended to a file beside the backups.

A backup taken before a deletion does not hold that deletion's tombstones; restoring it would bring the
content back. `manage.py restore` therefore replays the ledger before the restored data is served.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from deletion.models import Tombstone

FIELDS = (
    "tenant_id",
    "kind",
    "memory_id",
    "scope_hash",
    "value_hash",
    "source_hash",
    "subject_value_hash",
    "request_public_id",
)
# Fields later ledgers added, with the value a line written before them stands for.
ADDED_FIELDS: dict[str, Any] = {"subject_value_hash": None}


def path() -> Path:
    return Path(settings.BACKUP_DIR) / "tombstones.jsonl"


def entry(stone: Tombstone) -> dict[str, Any]:
    return entry_of(created_at=stone.created_at, **{name: getattr(stone, name) for name in FIELDS})


def entry_of(*, created_at: datetime, **fields: Any) -> dict[str, Any]:
    """A ledger line's content from a tombstone's values (every name of FIELDS; KeyError if one is missing)."""
    return {name: fields[name] for name in FIELDS} | {"created_at": created_at.isoformat()}


def append_entries_after_commit(entries: Iterable[dict[str, Any]]) -> None:
    """Append the entries (`entry`'s shape) to the ledger once the caller's transaction commits."""
    lines = [json.dumps(e, sort_keys=True) + "\n" for e in entries]

    def write() -> None:
        target = path()
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.writelines(lines)

    transaction.on_commit(write)


def read() -> Iterator[dict[str, Any]]:
    if not path().exists():
        return
    with path().open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield ADDED_FIELDS | json.loads(line)
