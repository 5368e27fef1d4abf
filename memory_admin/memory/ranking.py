"""How two sources of one field are ordered (PRODUCT.md rule 3: "newer wins" only when comparable)."""

from __future__ import annotations

import re
from datetime import datetime

from memory_admin.memory.models import FieldPolicy

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


def source_rank(policy: FieldPolicy | None, canonical_ref: str) -> int:
    """1 for the field's canonical source (its `canonical_ref_prefix`), 0 for every other source."""
    if policy is not None and policy.canonical_ref_prefix and canonical_ref.startswith(policy.canonical_ref_prefix):
        return 1
    return 0
