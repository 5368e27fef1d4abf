"""Record counts for the overview: by status, freshness buckets by each record's own `recheck_after`, overdue.

On PostgreSQL the counts are **maintained**, not estimated: statement-level triggers (migration
0009_record_counts) keep per-tenant totals by (status, verified or not, day of `recheck_after`), so
an overview reads a few hundred counter rows instead of counting 10M records. The buckets move with
the clock; each of their three edges (now, now + 1 day, now + 7 days) falls inside one day of
`recheck_after`, and only the accepted rows of those three days are counted exactly (the partial index
`record_due_for_recheck`). The figures equal exact counts at the reader's snapshot.

On SQLite (the embedded, small deployment) they are counted exactly, with the same definitions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import Case, Count, F, Q, QuerySet, Value, When
from django.utils import timezone

from memory_admin.lib.rows import unnested, update_objects
from memory_admin.memory.models import HIDDEN_SQL, HiddenByRule, MemoryRecord, RecordHide

Status = MemoryRecord.Status
DAY = timedelta(days=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NO_DUE_DAY = -(2**31)  # the counters' day for "no recheck_after" (migration 0009)
FOLD_AFTER = 2000  # pending delta rows of a tenant past which a read folds them into the totals
FOLD_LOCK = 0x6D63  # first key of fold_counts' advisory lock (the second is the tenant)

# Accepted records by the freshness rule (reads.freshness_of), the "fresh" ones split by when their own
# recheck falls due. Keys in chart order, with their labels.
Bucket = Literal["overdue", "due_1d", "due_7d", "due_later", "unscheduled", "never"]
BUCKETS: tuple[tuple[Bucket, str], ...] = (
    ("overdue", "recheck overdue"),
    ("due_1d", "due within 1 day"),
    ("due_7d", "due in 1-7 days"),
    ("due_later", "due in more than 7 days"),
    ("unscheduled", "verified, no recheck scheduled"),
    ("never", "never verified"),
)


@dataclass(frozen=True)
class RecordStats:
    by_status: dict[str, int]  # every status, 0 when none; "deleted": tombstoned, not purged yet
    freshness: dict[Bucket, int]  # accepted records only, keys in BUCKETS order
    overdue: int  # accepted records with recheck_after <= now, verified or not (the recheck sweep's due set)
    method: Literal["maintained", "exact"]

    @property
    def chart(self) -> list[tuple[str, int]]:
        return [(label, self.freshness[key]) for key, label in BUCKETS]


def record_stats(tenant_id: int, now: datetime | None = None) -> RecordStats:
    """The overview's counts for one tenant, at `now` (default: the current time)."""
    now = now or timezone.now()
    if connection.vendor == "postgresql":
        return _maintained(tenant_id, now)
    return exact_record_stats(tenant_id, now)


def exact_record_stats(tenant_id: int, now: datetime) -> RecordStats:
    """The same figures counted from the records (SQLite; and the reference the maintained ones must equal)."""
    # Tombstoned records count as deleted (their status is); so do the ones a rule hides until their purge.
    records = MemoryRecord.all_objects.filter(tenant_id=tenant_id).annotate(
        counted_as=Case(When(HiddenByRule(), then=Value(Status.DELETED.value)), default=F("status"))
    )
    by_status = dict(records.values_list("counted_as").annotate(n=Count("id")).order_by())
    verified = Q(last_verified_at__isnull=False)
    due = records.filter(counted_as=Status.ACCEPTED).aggregate(
        overdue=Count("id", filter=verified & Q(recheck_after__lte=now)),
        due_1d=Count("id", filter=verified & Q(recheck_after__gt=now, recheck_after__lte=now + DAY)),
        due_7d=Count("id", filter=verified & Q(recheck_after__gt=now + DAY, recheck_after__lte=now + 7 * DAY)),
        due_later=Count("id", filter=verified & Q(recheck_after__gt=now + 7 * DAY)),
        unscheduled=Count("id", filter=verified & Q(recheck_after__isnull=True)),
        never=Count("id", filter=Q(last_verified_at__isnull=True)),
        all_overdue=Count("id", filter=Q(recheck_after__lte=now)),
    )
    return RecordStats(
        by_status={status: by_status.get(status, 0) for status in Status.values},
        freshness={key: due[key] for key, _ in BUCKETS},
        overdue=due["all_overdue"],
        method="exact",
    )


def _day_sql(column: str) -> str:
    """SQL for the day of `column`, as `day_of` and migration 0009's triggers compute it."""
    return f"floor(extract(epoch FROM {column}) / 86400)::integer"


def _due_day_sql(column: str) -> str:
    """The counters' `due_day` of `column` in SQL: its day, or NO_DUE_DAY when it is NULL (migration 0009)."""
    return f"coalesce({_day_sql(column)}, {NO_DUE_DAY})"


def day_of(moment: datetime) -> int:
    """Days since 1970-01-01 UTC, as the counters' triggers compute them."""
    return (moment - EPOCH) // DAY


# A tenant's counter rows: the folded totals (pending 0) and the deltas not folded yet (pending 1).
_COUNTER_ROWS = """
    SELECT status, verified, due_day, n, 0 AS pending FROM memory_recordcount WHERE tenant_id = %(tenant)s
    UNION ALL
    SELECT status, verified, due_day, delta, 1 FROM memory_recordcountdelta WHERE tenant_id = %(tenant)s
"""


def _maintained(tenant_id: int, now: datetime) -> RecordStats:
    d0 = day_of(now)  # edges: now in day d0, now + 1 day in d0 + 1, now + 7 days in d0 + 7
    with connection.cursor() as cursor:
        # One statement, one snapshot: folded totals plus the deltas not folded yet, and the accepted
        # rows of the three edge days (each row once, by verified and by which side of its edge it lies).
        cursor.execute(
            f"""
            SELECT 'c', status, verified, due_day, sum(n), sum(pending) FROM ({_COUNTER_ROWS}) AS counts
            GROUP BY status, verified, due_day
            UNION ALL
            SELECT 'e', NULL, last_verified_at IS NOT NULL, {_day_sql("recheck_after")},
                   count(*) FILTER (WHERE recheck_after <= %(now)s
                                    + ({_day_sql("recheck_after")} - %(d0)s) * interval '1 day'),
                   count(*)
            FROM memory_memoryrecord
            WHERE tenant_id = %(tenant)s AND status = 'accepted' AND tombstoned_at IS NULL AND (
                (recheck_after >= %(s0)s AND recheck_after < %(s0)s + interval '1 day')
                OR (recheck_after >= %(s1)s AND recheck_after < %(s1)s + interval '1 day')
                OR (recheck_after >= %(s7)s AND recheck_after < %(s7)s + interval '1 day'))
              AND NOT {HIDDEN_SQL.format(t="memory_memoryrecord")}
            GROUP BY 3, 4
            """,
            {
                "tenant": tenant_id,
                "now": now,
                "d0": d0,
                "s0": EPOCH + d0 * DAY,
                "s1": EPOCH + (d0 + 1) * DAY,
                "s7": EPOCH + (d0 + 7) * DAY,
            },
        )
        rows = cursor.fetchall()

    by_status: Counter[str] = Counter()
    whole: Counter[tuple[bool, int]] = Counter()  # accepted records by (verified, due day)
    # Accepted records of an edge day: (verified, day) -> (on or before the edge, after it)
    edge: dict[tuple[bool, int], tuple[int, int]] = {}
    pending = 0
    for kind, status, verified, day, n, extra in rows:
        if kind == "c":
            by_status[status] += int(n)
            pending += int(extra)
            if status == Status.ACCEPTED:
                whole[(verified, day)] += int(n)
        else:
            edge[(verified, day)] = (int(n), int(extra) - int(n))

    def side(verified: bool, day: int) -> tuple[int, int]:
        return edge.get((verified, day), (0, 0))

    def days(verified: bool, low: int, high: int) -> int:
        """Accepted records with low < due day < high (whole days, no edge inside)."""
        return sum(n for (v, day), n in whole.items() if v is verified and day != NO_DUE_DAY and low < day < high)

    freshness: dict[Bucket, int] = {
        "overdue": days(True, NO_DUE_DAY, d0) + side(True, d0)[0],
        "due_1d": side(True, d0)[1] + side(True, d0 + 1)[0],
        "due_7d": side(True, d0 + 1)[1] + days(True, d0 + 1, d0 + 7) + side(True, d0 + 7)[0],
        "due_later": side(True, d0 + 7)[1] + days(True, d0 + 7, 2**31),
        "unscheduled": whole[(True, NO_DUE_DAY)],
        "never": sum(n for (v, _), n in whole.items() if not v),
    }
    overdue = freshness["overdue"] + days(False, NO_DUE_DAY, d0) + side(False, d0)[0]
    if pending > FOLD_AFTER:
        fold_counts(tenant_id)
    return RecordStats(
        by_status={status: by_status[status] for status in Status.values},
        freshness=freshness,
        overdue=overdue,
        method="maintained",
    )


def status_counts(tenant_id: int) -> dict[str, int] | None:
    """A tenant's records by status from the maintained counters (PostgreSQL), or None where none are kept
    (SQLite: count the rows instead). One small read: the tenant's counter rows and its pending deltas.

    A deletion sets `status = deleted` together with `tombstoned_at`, so the live records (the default
    manager's) of any other status are exactly that status's count. The records page's total reads this
    when its only filter is the status, rather than counting up to its cap."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT status, sum(n), sum(pending) FROM ({_COUNTER_ROWS}) AS counts GROUP BY status",
            {"tenant": tenant_id},
        )
        rows = cursor.fetchall()
    if sum(int(pending) for _, _, pending in rows) > FOLD_AFTER:
        fold_counts(tenant_id)
    by_status = {status: int(n) for status, n, _ in rows}
    return {status: by_status.get(status, 0) for status in Status.values}


def fold_counts(tenant_id: int) -> int:
    """Move a tenant's pending deltas into its totals (PostgreSQL); returns how many delta rows were folded.

    Safe to run concurrently with writers (a delta not yet committed stays for the next fold) and with
    itself (one fold at a time; another caller returns 0 at once). The overview's read calls it when a
    tenant has more than FOLD_AFTER pending deltas, so the read stays a few hundred rows.
    """
    if connection.vendor != "postgresql":
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s::integer, %s::integer)", [FOLD_LOCK, tenant_id])
        if not cursor.fetchone()[0]:
            return 0
        cursor.execute(
            """
            WITH moved AS (
                DELETE FROM memory_recordcountdelta WHERE tenant_id = %(tenant)s
                RETURNING tenant_id, status, verified, due_day, delta
            ), folded AS (
                INSERT INTO memory_recordcount AS c (tenant_id, status, verified, due_day, n)
                SELECT tenant_id, status, verified, due_day, sum(delta) FROM moved
                GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                ON CONFLICT (tenant_id, status, verified, due_day) DO UPDATE SET n = c.n + EXCLUDED.n
            )
            SELECT count(*) FROM moved
            """,
            {"tenant": tenant_id},
        )
        moved = int(cursor.fetchone()[0])
        cursor.execute("DELETE FROM memory_recordcount WHERE tenant_id = %s AND n = 0", [tenant_id])
    return moved


def recount(tenant_id: int) -> int:
    """Count a tenant's totals again from its records (PostgreSQL): after a load that bypassed the triggers
    (the bench's COPY under session_replication_role = replica). Returns the records counted."""
    if connection.vendor != "postgresql":
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s::integer, %s::integer)", [FOLD_LOCK, tenant_id])
        cursor.execute("LOCK TABLE memory_memoryrecord IN SHARE MODE")  # no write between the delete and the count
        cursor.execute("DELETE FROM memory_recordcountdelta WHERE tenant_id = %s", [tenant_id])
        cursor.execute("DELETE FROM memory_recordcount WHERE tenant_id = %s", [tenant_id])
        # Records a deletion's rule hides count as deleted; the test per row only while the tenant has a rule.
        hidden = RecordHide.objects.filter(tenant_id=tenant_id).exists()
        status = f"CASE WHEN {HIDDEN_SQL.format(t='r')} THEN 'deleted' ELSE status END" if hidden else "status"
        cursor.execute(
            f"""
            INSERT INTO memory_recordcount (tenant_id, status, verified, due_day, n)
            SELECT tenant_id, {status}, last_verified_at IS NOT NULL, {_due_day_sql("recheck_after")}, count(*)
            FROM memory_memoryrecord r WHERE tenant_id = %s GROUP BY 1, 2, 3, 4
            RETURNING n
            """,
            [tenant_id],
        )
        return sum(int(n) for (n,) in cursor.fetchall())


# --- Large UPDATEs, counted once per statement (migration 0012) ------------------------------------------

# The columns of the counters' key; an UPDATE that sets none of them moves no count.
KEY_COLUMNS = frozenset({"tenant_id", "status", "last_verified_at", "recheck_after"})
_ROW_COLUMNS = ("id", "tenant_id", "status", "last_verified_at", "recheck_after")


def _key(alias: str, prefix: str) -> str:
    """The counters' key of the record row `alias` (migration 0009's KEY), as columns named `prefix`_*."""
    return (
        f"{alias}.tenant_id AS {prefix}_tenant, {alias}.status AS {prefix}_status, "
        f"({alias}.last_verified_at IS NOT NULL) AS {prefix}_verified, "
        f"{_due_day_sql(f'{alias}.recheck_after')} AS {prefix}_day"
    )


# The counter deltas of the rows of the CTE `moved` (old_* and new_* keys), grouped: -1 from each old key, +1 to
# each new one. Shared by the counted UPDATE and by `count_as_deleted`.
_MOVED_COUNTED = """
    counted AS (
        INSERT INTO memory_recordcountdelta (tenant_id, status, verified, due_day, delta)
        SELECT tenant_id, status, verified, due_day, sum(delta) FROM (
            SELECT old_tenant, old_status, old_verified, old_day, -1 FROM moved
            UNION ALL
            SELECT new_tenant, new_status, new_verified, new_day, 1 FROM moved
        ) AS m (tenant_id, status, verified, due_day, delta)
        GROUP BY 1, 2, 3, 4 HAVING sum(delta) <> 0
    )
    SELECT count(*) FROM moved
"""

_COUNTED_UPDATE = (
    """
    WITH moved AS (
        UPDATE memory_memoryrecord AS t SET {sets}
        FROM ({rows}) AS o (id, tenant_id, status, last_verified_at, recheck_after){source}
        WHERE t.id = o.id{match}
        RETURNING {old_key}, {new_key}
    ),"""
    + _MOVED_COUNTED
)


def _update_counted(sets: str, locked: str, params: Sequence[Any], *, source: str = "", match: str = "") -> int:
    """One UPDATE of the records `locked` (a SELECT ... FOR UPDATE of _ROW_COLUMNS: their values before it, locked)
    and, in the same statement, the counter deltas of every row whose key it moved, grouped. The row trigger
    skips this statement's rows (memory.record_counts = by_statement, reset at once). Called in an atomic block
    of its own, so that a failure rolls the setting back with it. `params` in the order of the text: sets,
    locked, source."""
    sql = _COUNTED_UPDATE.format(
        sets=sets,
        rows=locked,
        source=f", {source}" if source else "",
        match=f" AND {match}" if match else "",
        old_key=_key("o", "old"),
        new_key=_key("t", "new"),
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('memory.record_counts', 'by_statement', true)")
        cursor.execute(sql, params)
        moved = int(cursor.fetchone()[0])
        cursor.execute("SELECT set_config('memory.record_counts', '', true)")
    return moved


def update_counted(records: QuerySet[MemoryRecord], **values: Any) -> int:
    """`records.update(**values)` (constant values, by attname) for a large set of records: on PostgreSQL the
    counter deltas are written by the same statement, grouped, instead of by the row trigger once per row
    (a deletion's 10,000 records: one grouped INSERT instead of 10,000 trigger calls). Returns the rows updated."""
    fields = {f.attname: f for f in MemoryRecord._meta.concrete_fields}
    for attname, value in values.items():
        if attname not in fields:
            raise ValueError(f"MemoryRecord has no column {attname!r}.")
        if hasattr(value, "resolve_expression"):  # refused on every backend, so that callers stay portable
            raise TypeError(f"update_counted takes plain values, not expressions ({attname}).")
    if connection.vendor != "postgresql" or not KEY_COLUMNS & values.keys():
        return records.update(**values)
    sets, set_params = [], []
    for attname, value in values.items():
        field = fields[attname]
        sets.append(f"{connection.ops.quote_name(cast(str, field.column))} = %s")
        set_params.append(field.get_db_prep_save(value, connection))
    query = records.order_by().select_for_update(of=("self",)).values_list(*_ROW_COLUMNS).query
    with transaction.atomic():  # also what a query with FOR UPDATE is compiled in
        try:
            locked, locked_params = query.get_compiler(using=records.db).as_sql()
        except EmptyResultSet:  # a condition that matches nothing (`pk__in=[]`): no statement at all
            return 0
        return _update_counted(", ".join(sets), locked, [*set_params, *locked_params])


def update_objects_counted(records: Sequence[MemoryRecord], attnames: Sequence[str]) -> int:
    """`rows.update_objects(records, attnames)` (PostgreSQL: each record its own values, one statement) with
    the counter deltas written by the same statement, grouped, instead of by the row trigger once per row."""
    if not records:
        return 0
    if not KEY_COLUMNS & set(attnames):
        return update_objects(records, attnames)
    u = unnested(records, attnames)
    locked = (
        "SELECT r.id, r.tenant_id, r.status, r.last_verified_at, r.recheck_after FROM memory_memoryrecord AS r "
        "WHERE r.id = ANY(%s::bigint[]) FOR UPDATE"
    )
    with transaction.atomic():
        return _update_counted(u.assignments, locked, [u.params[0], *u.params], source=u.source, match="o.id = v.pk")


# --- A deletion's hiding rule (memory.models.RecordHide): counted at acceptance, marked at the purge ----------


def count_as_deleted(records: QuerySet[MemoryRecord]) -> int:
    """Move the counters of `records` (live ones, about to be hidden by a `RecordHide`) to "deleted", rows left
    as they are: one grouped INSERT of deltas (PostgreSQL; elsewhere there are no counters). Answers how many
    records were counted. Their purge then marks them with `update_uncounted`, which moves no counter again."""
    if connection.vendor != "postgresql":
        return records.count()
    # Locked, as an UPDATE would lock them: a write that changes one of them meanwhile (its own counter move)
    # waits for this transaction, whose tombstones then refuse it, or commits first and is counted as it left it.
    query = records.order_by().select_for_update(of=("self",)).values_list(*_ROW_COLUMNS).query
    with transaction.atomic(), connection.cursor() as cursor:
        try:
            rows, params = query.get_compiler(using=records.db).as_sql()
        except EmptyResultSet:
            return 0
        # Each row's key moves to the same key with the status "deleted".
        moved = (
            f"SELECT {_key('o', 'old')}, o.tenant_id AS new_tenant, %s AS new_status, "
            f"(o.last_verified_at IS NOT NULL) AS new_verified, {_due_day_sql('o.recheck_after')} AS new_day "
            f"FROM ({rows}) AS o (id, tenant_id, status, last_verified_at, recheck_after)"
        )
        cursor.execute(f"WITH moved AS ({moved}),{_MOVED_COUNTED}", [Status.DELETED.value, *params])
        return int(cursor.fetchone()[0])


def update_uncounted(records: QuerySet[MemoryRecord], **values: Any) -> int:
    """`records.update(**values)` for records whose counters `count_as_deleted` has already moved: on PostgreSQL
    the row trigger skips the statement (memory.record_counts = by_statement) and no delta is written."""
    if connection.vendor != "postgresql":
        return records.update(**values)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('memory.record_counts', 'by_statement', true)")
        updated = records.update(**values)
        cursor.execute("SELECT set_config('memory.record_counts', '', true)")
    return updated
