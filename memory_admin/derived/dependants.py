"""What was built on a fact's versions, for the people who must see that a fix reached every copy."""

from __future__ import annotations

from typing import Any

from memory_admin.derived.models import (
    ActionBase,
    CacheEntry,
    ContextItem,
    Invalidation,
    Propagation,
    SummaryBase,
)
from memory_admin.memory.models import MemoryRecord


def dependants_of(chain: list[MemoryRecord]) -> dict[str, Any]:
    """Everything built on the versions of one fact, for the fact page (a constant number of queries)."""
    pks = [r.pk for r in chain]
    notices = list(
        Invalidation.objects.filter(record_id__in=pks).select_related("agent", "load", "record").order_by("-id")[:200]
    )
    return {
        "summaries": SummaryBase.objects.filter(record_id__in=pks)
        .select_related("summary", "record")
        .order_by("-summary_id")[:100],
        "plans": ActionBase.objects.filter(record_id__in=pks)
        .select_related("action", "record")
        .order_by("-action_id")[:100],
        "contexts": ContextItem.objects.filter(record_id__in=pks)
        .select_related("load", "load__agent", "record")
        .order_by("-load_id")[:100],
        "notices": notices,
        "unacknowledged": sum(1 for n in notices if n.acknowledged_at is None),
        "cache_keys": CacheEntry.objects.filter(records__in=pks).distinct().order_by("-id")[:100],
        "propagations": Propagation.objects.filter(record_id__in=pks).select_related("record").order_by("-id")[:200],
    }
