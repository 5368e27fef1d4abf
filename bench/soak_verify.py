"""The soak's verdict, pure (no database, no clock): the ledger of what the API acknowledged set against what the
database holds, the 5xx answers set against the outage windows, and the last line (bench/soak.py).
tests/ops/test_soak_verifier.py runs it on synthetic ledgers."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

# Seconds after a service is back during which 5xx still belong to its outage (connections re-opened,
# persistent database connections found dead and replaced, a backend marked up again by the proxy).
GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class Row:
    """A record as the owner reads it from the database."""

    tenant: str
    project: str
    subject: str
    predicate: str
    source_revision: str
    memory_id: str
    revision: int


@dataclass(frozen=True)
class Write(Row):
    """A 2xx-acknowledged assertion: the tenant that wrote it, its fact key, the source revision the writer gave
    (unique per write in the soak) and the record the answer named."""

    deleted: bool = False  # its subject was deleted afterwards: the row must be gone once purge is confirmed


@dataclass(frozen=True)
class Read:
    """A memory id that a read (facts/current, search) of `tenant` handed out."""

    tenant: str
    memory_id: str
    path: str


@dataclass(frozen=True)
class Failure:
    """A 5xx answer (or a failed connection: status 0) and when (seconds since the soak started)."""

    at: float
    status: int
    path: str


@dataclass
class Outage:
    name: str
    start: float
    recovered: float | None = None  # when the service answered again (None: never)
    grace: float = GRACE_SECONDS

    @property
    def end(self) -> float:
        return (self.recovered if self.recovered is not None else float("inf")) + self.grace

    def covers(self, at: float) -> bool:
        return self.start <= at <= self.end


@dataclass
class Verdict:
    acknowledged: int = 0
    lost: list[Write] = field(default_factory=list)
    duplicated: list[tuple[str, ...]] = field(default_factory=list)
    cross_tenant: list[str] = field(default_factory=list)
    not_purged: list[Write] = field(default_factory=list)
    per_outage: dict[str, int] = field(default_factory=dict)
    outside: list[Failure] = field(default_factory=list)
    deletions: int = 0
    confirmed: int = 0

    @property
    def clean(self) -> bool:
        return (
            not self.lost
            and not self.duplicated
            and not self.cross_tenant
            and not self.not_purged
            and not self.outside
            and self.confirmed == self.deletions
        )

    def last_line(self) -> str:
        return (
            f"soak: acknowledged {self.acknowledged}, lost {len(self.lost)}, duplicated {len(self.duplicated)}, "
            f"cross-tenant {len(self.cross_tenant)}, 5xx outside outages {len(self.outside)}, "
            f"deletions confirmed {self.confirmed}/{self.deletions}"
        )


def key(item: Row) -> tuple[str, str, str, str, str]:
    return (item.tenant, item.project, item.subject, item.predicate, item.source_revision)


def check_writes(writes: Iterable[Write], rows: Iterable[Row], verdict: Verdict) -> None:
    """Every acknowledged write is there exactly once, in its own tenant, under the memory id it was answered
    with; a write whose subject was deleted is gone. Any soak assertion stored twice is a duplicate."""
    rows = list(rows)
    by_key: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for row in rows:
        by_key[key(row)].append(row)
    tenant_of = {row.memory_id: row.tenant for row in rows}
    # One record per assertion: the same (tenant, fact, source revision) stored twice is a duplicate, acknowledged
    # or not (a retried write the first attempt of which was applied after all).
    verdict.duplicated = sorted(k for k, found in by_key.items() if len(found) > 1)
    seen: set[tuple[str, ...]] = set()
    for write in writes:
        k = key(write)
        if k in seen:  # the same write acknowledged twice (an idempotent repeat answered 200): counted once
            continue
        seen.add(k)
        verdict.acknowledged += 1
        found = by_key.get(k, [])
        if write.deleted:
            if found:
                verdict.not_purged.append(write)
            continue
        if not any(row.memory_id == write.memory_id for row in found):
            owner = tenant_of.get(write.memory_id)
            if owner is not None and owner != write.tenant:
                verdict.cross_tenant.append(f"write {write.memory_id} of {write.tenant} stored under {owner}")
            verdict.lost.append(write)


def check_reads(reads: Iterable[Read], rows: Iterable[Row], verdict: Verdict) -> None:
    """No read of tenant B handed out a record of tenant A. A memory id no longer in the database (purged by a
    deletion) cannot be placed and is not counted."""
    tenant_of = {row.memory_id: row.tenant for row in rows}
    for read in reads:
        owner = tenant_of.get(read.memory_id)
        if owner is not None and owner != read.tenant:
            verdict.cross_tenant.append(f"{read.tenant} read {read.memory_id} of {owner} ({read.path})")


def check_failures(failures: Iterable[Failure], outages: list[Outage], verdict: Verdict) -> None:
    """Each 5xx counted against the first outage window holding it; the rest are outside every outage."""
    verdict.per_outage = {outage.name: 0 for outage in outages}
    for failure in failures:
        holder = next((o for o in outages if o.covers(failure.at)), None)
        if holder is None:
            verdict.outside.append(failure)
        else:
            verdict.per_outage[holder.name] += 1


def statuses(failures: Iterable[Failure]) -> str:
    counts = Counter(f.status for f in failures)
    return ", ".join(f"{status or 'no answer'}: {n}" for status, n in sorted(counts.items())) or "none"
