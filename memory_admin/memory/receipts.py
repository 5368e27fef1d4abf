"""Decision receipts (issue 35, item 3): every read for acting leaves a signed, chained record of what it answered.

`read_for_action` is the one read for acting: verify before acting (`rechecks.recheck_before_action`), read what
stands (`reads.fact_view(purpose="action")`), and write the receipt, for an answer (200) and for a refusal (409
`recheck_required` or `fact_disputed`, whose error then carries `receipt_id`). Every door (the API's
`GET /facts/current/?purpose=action`, MCP's `recall`, and through the API the Python client and the LangGraph
store) calls it, so none can act without a receipt.

A receipt (`DecisionReceipt.document`) says who read, which fact (and as of when), what was served (memory id,
revision, status, and a commitment to the value) or the refusal's code, freshness (checked at, the value's age,
the policy's maximum age), the field's policy and its version (a digest of its rules), the verification evidence
(the recheck this read made, its outcome and source revision, or none) and the time. It is chained per tenant
(`sequence`, `prev_hash`: the SHA-256 of the previous receipt's canonical form) and signed at write
(`lib.signing.sign_document`; an Ed25519 signature costs tens of microseconds, measured by `make bench-receipts`).

The value served is kept beside the signed document, in `disclosure` (the value and a random nonce), and the
document signs `value_commitment` = SHA-256 of the canonical `{"nonce", "value"}`: the offline verifier checks the
value against it, and a deletion erases the disclosure while the signature and the chain still verify.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from memory_governance.trust import canonical_bytes, digest

from memory_admin.accounts.models import Principal
from memory_admin.lib import sealing, signing
from memory_admin.memory import reads, rechecks
from memory_admin.memory.errors import FactDisputed, NotFound, RecheckRequired
from memory_admin.memory.models import DecisionReceipt, FieldPolicy, ReceiptChain, RecheckAttempt, new_public_id
from memory_admin.memory.policies import policy_for

KIND = "decision_receipt"
FORMAT = 1
SERVED = "served"
REFUSED = "refused"


def value_commitment(value: Any, nonce: str) -> str:
    """SHA-256 of the canonical `{"nonce": nonce, "value": value}` (memory_governance.cli checks it the same way)."""
    return digest(canonical_bytes({"nonce": nonce, "value": _signable(value)}))


def _signable(value: Any) -> Any:
    """A value as the canonical form takes it: a float becomes its decimal text (signed documents carry none)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(key): _signable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_signable(item) for item in value]
    return value


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _seconds(span: timedelta | None) -> int | None:
    return int(span.total_seconds()) if span is not None else None


def policy_version(policy: FieldPolicy) -> dict[str, Any]:
    """The field's policy as it governed this read: its rules, when it last changed, and a digest of the rules
    (the version: any change to a rule changes it)."""
    rules = {
        "project_id": policy.project.key if policy.project_id else None,  # type: ignore[union-attr]
        "predicate": policy.predicate,
        "on_failure": policy.on_failure,
        "recheck_before_action": policy.recheck_before_action,
        "recheck_interval_seconds": _seconds(policy.recheck_interval),
        "risk": policy.risk,
    }
    return {**rules, "updated_at": _iso(policy.updated_at), "version": digest(canonical_bytes(rules))[:16]}


def _recheck_evidence(attempt: RecheckAttempt | None) -> dict[str, Any] | None:
    if attempt is None:
        return None
    return {
        "outcome": attempt.outcome,
        "trigger": attempt.trigger,
        "source_revision": attempt.source_revision,
        "attempted_at": _iso(attempt.attempted_at),
        "duration_ms": attempt.duration_ms,
    }


@dataclass(frozen=True)
class _Decision:
    """What one read for acting decided, as plain values for the receipt."""

    outcome: str  # "served" or the refusal's code
    memory_id: str
    served: dict[str, Any] | None
    refusal: dict[str, Any] | None
    freshness: dict[str, Any]
    disclosure: dict[str, Any] | None
    # The served record's fact: the disclosure is stored sealed under its data key (lib.sealing), so a deletion
    # that destroys the key leaves no readable copy of the value in old row versions, WAL or backups.
    fact: sealing.Fact | None = None


def _freshness(
    now: datetime,
    state: str | None,
    last_verified_at: datetime | None,
    recheck_after: datetime | None,
    policy: FieldPolicy | None,
) -> dict[str, Any]:
    return {
        "state": state,
        "checked_at": _iso(now),
        "last_verified_at": _iso(last_verified_at),
        "age_seconds": _seconds(now - last_verified_at) if last_verified_at else None,
        "max_age_seconds": _seconds(policy.recheck_interval) if policy is not None else None,
        "recheck_after": _iso(recheck_after),
    }


def _served(view: reads.FactView, now: datetime, policy: FieldPolicy | None) -> _Decision:
    record = view.record
    assert record is not None  # an action read answers a record or refuses
    nonce = secrets.token_hex(16)
    return _Decision(
        outcome=SERVED,
        memory_id=record.memory_id,
        served={
            "memory_id": record.memory_id,
            "revision": record.revision,
            "status": view.status,
            "source_revision": record.source_revision,
            "action_allowed": view.action_allowed,
        },
        refusal=None,
        freshness=_freshness(now, view.freshness, view.last_verified_at, record.recheck_after, policy),
        disclosure={"value": _signable(record.value), "nonce": nonce},
        fact=record.sealing_fact(),
    )


def _refused(exc: RecheckRequired | FactDisputed, now: datetime, policy: FieldPolicy | None) -> _Decision:
    """A refusal's receipt names the code and the record or dispute, never the caveat's text (it quotes values)."""
    extra = exc.extra
    last_verified = extra.get("last_verified_at")
    recheck_after = extra.get("recheck_after")
    return _Decision(
        outcome=exc.code,
        memory_id=str(extra.get("memory_id") or ""),
        served=None,
        refusal={
            "code": exc.code,
            "memory_id": extra.get("memory_id"),
            "dispute_id": extra.get("dispute_id"),
            "recheck_outcome": extra.get("recheck_outcome"),
        },
        freshness={
            "state": None,
            "checked_at": _iso(now),
            "last_verified_at": last_verified,
            "age_seconds": (
                _seconds(now - datetime.fromisoformat(last_verified)) if isinstance(last_verified, str) else None
            ),
            "max_age_seconds": _seconds(policy.recheck_interval) if policy is not None else None,
            "recheck_after": recheck_after,
        },
        disclosure=None,
    )


@cache
def _advance_sql() -> str:
    table = connection.ops.quote_name(ReceiptChain._meta.db_table)
    return f"UPDATE {table} SET sequence = sequence + 1 WHERE tenant_id = %s RETURNING sequence, head_hash"


def _take_place(tenant_id: int) -> tuple[int, str]:
    """The next place in the tenant's chain and the hash before it, in the caller's transaction. Moving the head
    first (one UPDATE ... RETURNING: a row lock on PostgreSQL, the write lock on SQLite) makes the place this
    receipt's alone until the transaction ends; a tenant's first receipt creates the head."""
    with connection.cursor() as cursor:
        cursor.execute(_advance_sql(), [tenant_id])
        row = cursor.fetchone()
    if row is not None:
        return int(row[0]), str(row[1])
    try:
        with transaction.atomic():
            ReceiptChain.objects.create(tenant_id=tenant_id, sequence=1, head_hash="")
    except IntegrityError:  # another first receipt of this tenant created it: take the next place
        return _take_place(tenant_id)
    return 1, ""


def _write(
    principal: Principal,
    key: tuple[str, str, str],
    instants: dict[str, datetime | None],
    decision: _Decision,
    policy: FieldPolicy | None,
    attempt: RecheckAttempt | None,
    now: datetime,
) -> DecisionReceipt:
    tenant_id = principal.tenant_pk
    public_id = new_public_id(DecisionReceipt.public_prefix)
    project_id, subject_id, predicate = key
    with transaction.atomic():
        sequence, prev_hash = _take_place(tenant_id)
        document: dict[str, Any] = {
            "kind": KIND,
            "format": FORMAT,
            "receipt_id": public_id,
            "tenant": principal.tenant.slug if principal.tenant is not None else "",
            "sequence": sequence,
            "prev_hash": prev_hash,
            "reader": {"name": principal.name or principal.username, "kind": principal.kind},
            "fact": {
                "project_id": project_id,
                "subject_id": subject_id,
                "predicate": predicate,
                "valid_at": _iso(instants.get("valid_at")),
                "known_at": _iso(instants.get("known_at")),
            },
            "purpose": "action",
            "decision": SERVED if decision.outcome == SERVED else REFUSED,
            "served": decision.served,
            "refusal": decision.refusal,
            "value_commitment": (
                value_commitment(decision.disclosure["value"], decision.disclosure["nonce"])
                if decision.disclosure is not None
                else None
            ),
            "freshness": decision.freshness,
            "policy": policy_version(policy) if policy is not None else None,
            "verification": {"recheck": _recheck_evidence(attempt)},
            "at": _iso(now),
        }
        signed = signing.sign_document(document)
        chained = digest(canonical_bytes(signed))
        receipt = DecisionReceipt.objects.create(
            public_id=public_id,
            tenant_id=tenant_id,
            sequence=sequence,
            reader=principal,
            project_key=project_id,
            subject_id=subject_id,
            predicate=predicate,
            memory_id=decision.memory_id,
            outcome=decision.outcome,
            document=signed,
            hash=chained,
            disclosure=_stored_disclosure(decision),
            created_at=now,
        )
        ReceiptChain.objects.filter(tenant_id=tenant_id).update(head_hash=chained)
    return receipt


def read_for_action(
    principal: Principal,
    project_id: str,
    subject_id: str,
    predicate: str,
    *,
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
) -> tuple[reads.FactView, DecisionReceipt]:
    """The read for acting every door makes: verify before acting, read, and write the receipt.

    An answer comes back with its receipt; a refusal (RecheckRequired, FactDisputed) is raised with
    `receipt_id` among its fields. NotFound (nothing to act on) leaves no receipt."""
    key = (project_id, subject_id, predicate)
    instants = {"valid_at": valid_at, "known_at": known_at}
    checked = rechecks.recheck_before_action(principal, *key, purpose="action", valid_at=valid_at, known_at=known_at)
    attempt = checked.attempt if checked is not None else None
    try:
        view = reads.fact_view(principal, *key, purpose="action", checked=checked, valid_at=valid_at, known_at=known_at)
    except (RecheckRequired, FactDisputed) as exc:
        now = timezone.now()
        policy = checked.policy if checked is not None else policy_for(principal.tenant_pk, project_id, predicate)
        receipt = _write(principal, key, instants, _refused(exc, now, policy), policy, attempt, now)
        exc.extra["receipt_id"] = receipt.public_id
        raise
    now = timezone.now()
    policy = checked.policy if checked is not None else policy_for(principal.tenant_pk, project_id, predicate)
    receipt = _write(principal, key, instants, _served(view, now, policy), policy, attempt, now)
    return view, receipt


# --- Reading receipts ---------------------------------------------------------------------------------------


def may_read_any(principal: Principal) -> bool:
    """Owners and compliance staff read every receipt of their tenant; anyone else only the receipts of its own
    reads."""
    return principal.has_role("owner", "compliance")


def visible(principal: Principal) -> QuerySet[DecisionReceipt]:
    receipts = DecisionReceipt.objects.filter(tenant_id=principal.tenant_pk)
    return receipts if may_read_any(principal) else receipts.filter(reader=principal)


def get_receipt(principal: Principal, receipt_id: str) -> DecisionReceipt:
    """One receipt the principal may read: NotFound for another tenant's, an unknown id, or another reader's
    receipt asked by someone who is neither an owner nor compliance (the API does not say it exists)."""
    receipt = visible(principal).filter(public_id=receipt_id).first()
    if receipt is None:
        raise NotFound(f"No decision receipt {receipt_id!r}.")
    return receipt


_DISCLOSURE = "receipt.disclosure"


def _stored_disclosure(decision: _Decision) -> dict[str, Any] | None:
    if decision.disclosure is None or decision.fact is None or not sealing.enabled():
        return decision.disclosure
    return sealing.seal_json(decision.disclosure, decision.fact, _DISCLOSURE)


def disclosure_of(receipt: DecisionReceipt) -> dict[str, Any] | None:
    """The value a receipt served and its nonce, opened; None once a deletion erased it or destroyed its key."""
    stored = receipt.disclosure
    if not sealing.is_sealed(stored):
        return stored
    opened = sealing.open_json(stored, _DISCLOSURE)
    return opened if isinstance(opened, dict) and "nonce" in opened else None


def as_document(receipt: DecisionReceipt) -> dict[str, Any]:
    """The receipt as served and verified offline: the signed document, with the value it served in
    `disclosure` (outside the signature) unless a deletion erased it."""
    document = dict(receipt.document)
    document["disclosure"] = disclosure_of(receipt)
    return document


def for_fact(
    tenant_id: int, project_id: str, subject_id: str, predicate: str, limit: int = 20
) -> list[DecisionReceipt]:
    """A fact's receipts, newest first (the fact page's list), with their readers."""
    return list(
        DecisionReceipt.objects.filter(
            tenant_id=tenant_id, project_key=project_id, subject_id=subject_id, predicate=predicate
        )
        .select_related("reader")
        .order_by("-id")[:limit]
    )


def verify_chain(tenant_id: int) -> int | None:
    """The sequence number of the first receipt of the tenant whose link or hash does not hold, or None when the
    whole chain holds (each receipt's hash is its document's, and names its predecessor's)."""
    previous = ""
    expected = 1
    for sequence, document, stored in (
        DecisionReceipt.objects.filter(tenant_id=tenant_id)
        .order_by("sequence")
        .values_list("sequence", "document", "hash")
    ):
        if (
            sequence != expected
            or document.get("prev_hash") != previous
            or document.get("sequence") != sequence
            or digest(canonical_bytes(document)) != stored
        ):
            return int(sequence)
        previous, expected = stored, expected + 1
    return None
