"""How two sources of one field are ordered (PRODUCT.md rule 3: "newer wins" only when comparable)."""

from __future__ import annotations

import re
from datetime import datetime

from memory_admin.accounts.models import Principal
from memory_admin.memory.models import FieldPolicy, MemoryRecord
from memory_admin.memory.policies import is_canonical_issuer, not_the_source

_NUMBERED = re.compile(r"^([A-Za-z_.\-]*?)(\d+)$")


def compare_source_revisions(new: str, old: str) -> int | None:
    """-1, 0 or 1 when `new` is older, the same or newer than `old`; None when they cannot be ordered.

    Revisions order when both are plain numbers or share a prefix before a number ("r17" < "r18"),
    or when both are ISO 8601 timestamps. Anything else (two hashes, say) only compares for equality.
    """
    if new == old:
        return 0
    a, b = _NUMBERED.match(new), _NUMBERED.match(old)
    if a and b and a.group(1) == b.group(1):
        return (int(a.group(2)) > int(b.group(2))) - (int(a.group(2)) < int(b.group(2)))
    try:
        ta, tb = datetime.fromisoformat(new), datetime.fromisoformat(old)
        return (ta > tb) - (ta < tb)
    except (ValueError, TypeError):
        return None


def source_rank(policy: FieldPolicy | None, canonical_ref: str, issuer: Principal, *, fetched: bool) -> int:
    """1 for the field's canonical source, 0 for every other source.

    A `canonical_ref` that starts with the policy's `canonical_ref_prefix` is only the client's claim (rule 9:
    an agent's guess never edits the canonical value). It ranks 1 only when the server can back it: the value
    was read from the source by the server (`fetched`: assert_fact's `verified_at`), or the issuer is the
    recheck engine's principal, or a principal the policy names as the field's source (the one rule of that,
    `policies.not_the_source`). Any other issuer's claim ranks 0.
    """
    if policy is None or not policy.canonical_ref_prefix or not canonical_ref.startswith(policy.canonical_ref_prefix):
        return 0
    if fetched or is_canonical_issuer(issuer) or not not_the_source(issuer, policy):
        return 1
    return 0


def record_rank(policy: FieldPolicy | None, record: MemoryRecord) -> int:
    """`source_rank` of a stored record, from what it keeps: its issuer, and `last_verified_at` (set when it was
    written from a server fetch, or since confirmed by the canonical source). The issuer is loaded only when
    the ref claims the prefix."""
    if policy is None or not policy.canonical_ref_prefix:
        return 0
    if not record.source_canonical_ref.startswith(policy.canonical_ref_prefix):
        return 0
    return source_rank(policy, record.source_canonical_ref, record.issuer, fetched=record.last_verified_at is not None)
