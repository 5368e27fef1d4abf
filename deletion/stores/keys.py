"""The data keys that seal the scope's values (crypto-shredding, issue 35 item 4; lib.sealing, lib.keystore).

Every value of the scope, and every text written about it (audit snapshots and reasons, dispute and expiry reasons,
recheck observations, the records' and recheck attempts' source refs), is stored sealed under its fact's data key. Destroying those keys makes every copy the other
stores cannot reach — the heap's dead tuples and free space, the WAL and its archives, replicas, and backups taken
before the purge — ciphertext that nobody can open.

- Acceptance (`find`, then `hide`): the keys are found and retired — taken off their facts, so that a value written
  about the subject after the request gets a new key that this deletion does not destroy. Retired keys still open
  what they sealed (the other stores' `find` reads the values when the purge starts).
- Purge: the retired keys are deleted from the key store, which is then rewritten (`VACUUM`).
- Verify: the keys are read again (none may remain) and a decryption of one of the scope's stored envelopes, kept
  at acceptance as ciphertext, is attempted: it must fail.

A memory-ids scope retires only the keys of facts whose every revision is in the scope; a fact keeping other
revisions keeps its key (they still need it), and the evidence says how many such facts there are: their deleted
revisions' old copies stay readable to whoever holds the key store and a copy of the database.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

from django.db.models import F, Q, TextField
from django.db.models.functions import Cast

from deletion.models import DeletionRequest
from deletion.stores.base import Found, Job, Scope, Store, Verification
from memory_admin.lib import keystore, sealing
from memory_admin.memory.models import MemoryRecord, RecheckAttempt

ScopeKind = DeletionRequest.ScopeKind

PROBE_PURPOSE = "record.value"

CIPHERTEXT_ONLY = [
    "dead tuples and free space in the database's heap and index files, until PostgreSQL reuses the space",
    "WAL segments, WAL archives and replicas",
    "backups taken before the purge, until they expire (stage 4)",
]
UNSEALED_NOTE = (
    "Stored in clear (written before sealing, or with SEALING off): the database files, the WAL and backups may "
    "hold these values' bytes (and these source refs') until they are overwritten."
)


class KeysStore(Store):
    name = "keys"
    label = "Encryption keys"

    def find(self, scope: Scope) -> Found:
        facts = sorted({(r.subject_id, r.predicate) for r in scope.records})
        shared: list[tuple[str, str]] = []
        if scope.kind == ScopeKind.SUBJECT:
            selection = keystore.Selection(scope.tenant_id, scope.project_id, subject_id=str(scope.value))
        elif scope.kind == ScopeKind.PREDICATE:
            selection = keystore.Selection(scope.tenant_id, scope.project_id, predicate=str(scope.value))
        else:
            whole, shared = _wholly_in_scope(scope, facts)
            selection = keystore.Selection(scope.tenant_id, scope.project_id, facts=tuple(whole))
        key_ids = keystore.key_ids(selection)
        probe, unsealed = _probe(scope)
        targets: dict[str, Any] = {
            "key_ids": key_ids,
            "probe": probe,
            "unsealed_records": unsealed,
            "unsealed_refs": _refs_in_clear(scope),
            "facts_keeping_key": len(shared),
        }
        return Found(len(key_ids), targets, [f"{len(key_ids)} data key{'s' if len(key_ids) != 1 else ''}"])

    def hide(self, job: Job, now: datetime) -> int:
        return keystore.retire(job.targets.get("key_ids", []))

    def purge(self, job: Job) -> int:
        return keystore.destroy_ids(job.targets.get("key_ids", []))

    def verify(self, job: Job) -> Verification:
        t = job.targets
        key_ids = t.get("key_ids", [])
        remaining = len(keystore.keys_by_id(key_ids))
        evidence: dict[str, Any] = {
            "check": "the scope's data keys read again from the key store, and a stored envelope decrypted",
            "keys_destroyed": len(key_ids) - remaining,
            "keys_remaining": remaining,
            "key_store": keystore.describe(),
        }
        probe = t.get("probe")
        if probe:
            try:
                sealing.open_envelope(probe, PROBE_PURPOSE)
            except sealing.KeyDestroyed as exc:
                evidence["decryption_attempt"] = f"failed as it must: {exc}"
            else:
                evidence["decryption_attempt"] = "succeeded: a key of the scope still opens its values"
                remaining += 1
        else:
            evidence["decryption_attempt"] = "none: no sealed value in the scope"
        evidence["ciphertext_only"] = CIPHERTEXT_ONLY
        if t.get("unsealed_records"):
            evidence["unsealed_records"] = t["unsealed_records"]
        if t.get("unsealed_refs"):
            evidence["unsealed_refs"] = t["unsealed_refs"]
        if t.get("unsealed_records") or t.get("unsealed_refs"):
            evidence["unsealed_note"] = UNSEALED_NOTE
        if t.get("facts_keeping_key"):
            evidence["facts_keeping_key"] = t["facts_keeping_key"]
            evidence["facts_keeping_key_note"] = (
                "Facts with revisions outside the request keep their key: old copies of the deleted revisions stay "
                "sealed under a key that still exists."
            )
        return Verification(remaining, evidence)


def _item_selections(tenant_id: int, kind: str, keyed: list[list[Any]]) -> list[keystore.Selection]:
    """The keys of derived items (`sealing.item_fact`): [project id, public id] pairs, by project."""
    by_project: dict[int, list[tuple[str, str]]] = {}
    for project_id, public_id in keyed:
        fact = sealing.item_fact(tenant_id, int(project_id), kind, str(public_id))
        if fact is not None:
            by_project.setdefault(fact.project_id, []).append((fact.subject_id, fact.predicate))
    return [keystore.Selection(tenant_id, p, facts=tuple(facts)) for p, facts in by_project.items()]


def destroy_item_keys(tenant_id: int, kind: str, keyed: list[list[Any]]) -> int:
    """Destroy the keys of the derived items `keyed` (summaries, planned actions a deletion removed or blanked)."""
    return sum(keystore.destroy(selection) for selection in _item_selections(tenant_id, kind, keyed))


def item_keys_remaining(tenant_id: int, kind: str, keyed: list[list[Any]]) -> int:
    return sum(keystore.count(selection) for selection in _item_selections(tenant_id, kind, keyed))


def _wholly_in_scope(scope: Scope, facts: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The facts whose every revision is in a memory-ids scope, and the others."""
    in_scope = Counter((r.subject_id, r.predicate) for r in scope.records)
    subjects = {s for s, _ in facts}
    totals = Counter(
        MemoryRecord.all_objects.filter(
            tenant_id=scope.tenant_id, project_id=scope.project_id, subject_id__in=subjects
        ).values_list("subject_id", "predicate")
    )
    whole = [f for f in facts if totals[f] <= in_scope[f]]
    return whole, [f for f in facts if totals[f] > in_scope[f]]


def _probe(scope: Scope) -> tuple[str, int]:
    """One stored envelope of the scope's values (ciphertext, kept to prove the purge) and how many of the scope's
    records are stored in clear: two set-based statements (the acceptance is kept short)."""
    if not scope.records:
        return "", 0
    stored = scope.records_query().annotate(stored=Cast(F("value"), output_field=TextField()))
    sealed = Q(stored__contains=f'"{sealing.JSON_MARK}"')
    first = stored.filter(sealed).values_list("stored", flat=True)[:1]
    probe = next((e for e in map(_envelope_in, first) if e), "")
    return probe, stored.exclude(sealed).count()


def _refs_in_clear(scope: Scope) -> int:
    """How many source refs of the scope are stored in clear: its records' refs and their recheck attempts'."""
    if not scope.records:
        return 0
    records = scope.records_query()
    clear = ~Q(source_canonical_ref__startswith=sealing.TEXT_MARK) & ~Q(source_canonical_ref="")
    attempts = RecheckAttempt.objects.filter(record__in=records.values("pk")).exclude(source_ref="")
    return records.filter(clear).count() + attempts.exclude(source_ref__startswith=sealing.TEXT_MARK).count()


def _envelope_in(text: str | None) -> str | None:
    try:
        parsed = json.loads(text or "null")
    except ValueError:
        return None
    if sealing.is_sealed(parsed) and isinstance(parsed, dict):
        return str(parsed[sealing.JSON_MARK])
    return None
