"""The vector index used for retrieval: LanceDB, embedded on local disk.

One LanceDB table, ``entries``, holds one row per indexed object (a memory record or a summary) with
its text and embedding. Several processes (web workers, Celery workers) open the same directory:

* Reads see other processes' writes because the connection checks for a newer table version on every
  read (``read_consistency_interval=0``); writes are always made against the latest version, and a
  commit conflict is retried.
* Every LanceDB write creates a new table *version*, and old versions keep the old data files, so a
  deleted row is still on disk until `compact_and_cleanup` rewrites the data and removes every old
  version. A deletion that must be provable runs `delete...`, then `compact_and_cleanup`, then checks
  `rows_in_any_version` / `contains_text` / `files_contain`.
* Removing old versions while another process reads or commits against one of them breaks that
  process, so operations hold a shared `flock` on ``<path>/.lock`` and `compact_and_cleanup` takes it
  exclusively.
* Exact (flat) search is fine up to a few hundred thousand rows. Past `settings.VECTOR_ANN_MIN_ROWS`
  the Celery task `build_vector_ann_index` builds an ANN index (`VECTOR_ANN_INDEX_TYPE`: IVF_SQ by
  default, or IVF_PQ; cosine) with `build_ann_index`, and scalar indexes on the filter columns
  (`FILTER_INDEXES`), so the prefilter reads indexes instead of scanning every row. Searches then
  probe exactly `VECTOR_ANN_NPROBES` partitions (all of them, in a second search, when a narrow filter
  leaves fewer than k rows in those) and re-rank `VECTOR_ANN_REFINE_FACTOR` x k candidates by their
  exact distance, so scores stay exact cosine similarities and the filter (tenant, project, usable,
  kind) is applied before the search, as without the index.
* Index files hold the indexed rows' ids and quantised vectors. A provable deletion therefore also
  rewrites the data fragments that still carry soft-deleted rows (Lance keeps them in the data file
  behind a deletion file until the fragment is rewritten) and rebuilds the ANN index from the live rows
  only, before removing old versions: see `compact_and_cleanup` and `disk_check`.

Values interpolated into LanceDB's SQL filter strings go through `sql_str` / `sql_int`: object ids
come from users.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import lancedb
import pyarrow as pa
import pyarrow.compute as pc
from django.conf import settings

from memory_admin.derived.embedding import Embedder, get_embedder, query_vector
from memory_admin.lib.errors import DomainError

logger = logging.getLogger(__name__)

__all__ = [
    "ANN_INDEX_NAME",
    "FILTER_INDEXES",
    "KINDS",
    "EmbedderMismatchError",
    "Hit",
    "VectorEntry",
    "VectorIndex",
    "clear_index_cache",
    "get_index",
    "sql_int",
    "sql_str",
    "where_objects",
]

TABLE_NAME = "entries"
KINDS = ("record", "summary")
# Schema metadata key naming the embedder that produced the stored vectors.
_EMBEDDER_KEY = b"memory_admin.embedder"
# Filter strings stay short: IN-lists are split into chunks of this many values.
_CHUNK = 500
_WRITE_ATTEMPTS = 6
_T = TypeVar("_T")
# LanceDB's name for an index on the ``vector`` column.
ANN_INDEX_NAME = "vector_idx"
# IVF_SQ: each vector kept at one byte per dimension (1/4 of its size); IVF_PQ: compressed to one byte per
# sub-vector (smaller, slower to train, coarser distances, so it needs a larger refine factor).
ANN_INDEX_TYPES = ("IVF_SQ", "IVF_PQ")
# Lance row ids are row addresses when stable row ids are off: fragment id in the high 32 bits.
_FRAGMENT_SHIFT = 32
# Scalar indexes on the columns every search filters on, built with the ANN index: the prefilter then
# reads these instead of scanning the columns of every row. Bitmaps for the tenant (few values, and a
# tenant holding most rows costs one bitmap where a B-tree lists every row: 0.3 ms against 19 ms at a
# million rows) and the two-valued columns; a B-tree for the open-ended project ids. Rows appended
# since the build are scanned, as for the ANN index, until `optimize` adds them.
FILTER_INDEXES = (("tenant_id", "Bitmap"), ("project_id", "BTree"), ("kind", "Bitmap"), ("usable", "Bitmap"))


class EmbedderMismatchError(DomainError, RuntimeError):
    """The table on disk was built by a different embedder; its vectors are not comparable. A door answers 503
    with what to run (`manage.py reindex_vectors --rebuild`), never a 500."""

    code = "index_rebuild_needed"
    status = 503


@dataclass(frozen=True)
class VectorEntry:
    """One indexed object. `entry_id` is unique across the index, e.g. ``record:mem-…``."""

    entry_id: str
    tenant_id: int
    project_id: str
    kind: str
    object_id: str
    revision: int
    text: str
    usable: bool = True


@dataclass(frozen=True)
class Hit:
    """A search result; `score` is cosine similarity in [-1, 1], higher is closer: LanceDB's cosine metric
    answers the distance 1 - cos (0 to 2), turned back here."""

    entry_id: str
    kind: str
    object_id: str
    revision: int
    score: float
    usable: bool
    text: str


# --- SQL filter helpers ---------------------------------------------------------------------------


def sql_str(value: str) -> str:
    """A string literal for a LanceDB (DataFusion) filter: single-quoted, quotes doubled.

    Backslashes are not escape characters there, so doubling quotes is the whole job. NUL cannot
    be represented and is rejected rather than silently truncating the literal.
    """
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError("NUL character in filter value")
    return "'" + value.replace("'", "''") + "'"


def sql_int(value: int) -> str:
    """An integer literal; anything that is not an int (bools included) is refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected int, got {type(value).__name__}")
    return str(int(value))


def _in(column: str, values: Iterable[str]) -> str:
    return f"{column} IN ({', '.join(sql_str(v) for v in values)})"


def where_objects(tenant_id: int, object_ids: Sequence[str]) -> str:
    """Filter matching a tenant's rows for these object ids (for `rows_in_any_version`)."""
    if not object_ids:
        return "false"
    return f"tenant_id = {sql_int(tenant_id)} AND {_in('object_id', object_ids)}"


def _chunks(values: Sequence[str]) -> Iterator[list[str]]:
    unique = list(dict.fromkeys(values))
    for start in range(0, len(unique), _CHUNK):
        yield unique[start : start + _CHUNK]


def _is_conflict(exc: BaseException) -> bool:
    message = str(exc).lower()
    return "conflict" in message or "retryable" in message


# --- The index ------------------------------------------------------------------------------------


def _default_path() -> Path:
    configured = getattr(settings, "VECTOR_INDEX_PATH", None)
    if configured:
        return Path(configured)
    return Path(settings.VAR_DIR) / "vectors"


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


def _default_partitions(rows: int) -> int:
    """IVF partitions for `rows` rows: about the square root (1,000 of 1,000 rows at a million), 1 to 4,096."""
    return max(1, min(4096, math.isqrt(max(0, rows))))


def _default_sub_vectors(dim: int) -> int:
    """PQ sub-vectors of 8 dimensions each (32 for 256), or the nearest split `dim` divides into."""
    for width in (8, 4, 2, 1):
        if dim % width == 0:
            return dim // width
    return 1  # pragma: no cover - width 1 always divides


_ENTRY_COLUMNS = ["entry_id", "tenant_id", "project_id", "kind", "object_id", "revision", "text", "usable"]


def _entry_from_row(row: dict[str, Any]) -> VectorEntry:
    return VectorEntry(
        entry_id=row["entry_id"],
        tenant_id=int(row["tenant_id"]),
        project_id=row["project_id"],
        kind=row["kind"],
        object_id=row["object_id"],
        revision=int(row["revision"]),
        text=row["text"],
        usable=bool(row["usable"]),
    )


class VectorIndex:
    """The ``entries`` table at `path`, embedding texts with `embedder`.

    Safe to share between threads; each process should have its own instance (`get_index` does this).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, embedder: Embedder | None = None) -> None:
        self.path = Path(path) if path is not None else _default_path()
        self.embedder: Embedder = embedder if embedder is not None else get_embedder()
        self._mutex = threading.Lock()
        self._table: Any = None  # lancedb.table.Table, opened lazily
        self.schema = pa.schema(
            [
                pa.field("entry_id", pa.string(), nullable=False),
                pa.field("tenant_id", pa.int64(), nullable=False),
                pa.field("project_id", pa.string(), nullable=False),
                pa.field("kind", pa.string(), nullable=False),
                pa.field("object_id", pa.string(), nullable=False),
                pa.field("revision", pa.int64(), nullable=False),
                pa.field("text", pa.string(), nullable=False),
                pa.field("usable", pa.bool_(), nullable=False),
                pa.field("vector", pa.list_(pa.float32(), self.embedder.dim), nullable=False),
            ],
            metadata={_EMBEDDER_KEY: self.embedder.name.encode()},
        )

    def __repr__(self) -> str:
        return f"VectorIndex({str(self.path)!r}, embedder={self.embedder.name!r})"

    # --- plumbing ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _flock(self, exclusive: bool) -> Iterator[None]:
        """Cross-process lock: shared for normal work, exclusive while old versions are removed."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _connect(self) -> Any:
        # Zero interval: every read checks for a newer version, so other processes' writes show up.
        return lancedb.connect(str(self.path), read_consistency_interval=timedelta(0))

    def _open_table(self) -> Any:
        with self._mutex:
            if self._table is None:
                db = self._connect()
                try:
                    table = db.open_table(TABLE_NAME)
                except (ValueError, FileNotFoundError):
                    # Create under the exclusive lock so two processes don't race to create it.
                    with self._flock(exclusive=True):
                        table = db.create_table(TABLE_NAME, schema=self.schema, exist_ok=True)
                self._check_schema(table.schema)
                self._table = table
            return self._table

    def stored_embedder(self) -> str | None:
        """The embedder the table on disk was built by (None: no table yet)."""
        try:
            table = self._connect().open_table(TABLE_NAME)
        except (ValueError, FileNotFoundError):
            return None
        stored = (table.schema.metadata or {}).get(_EMBEDDER_KEY, b"").decode()
        return stored or "an unknown embedder"

    def recreate(self) -> None:
        """Drop the table and create it empty for the current embedder (`reindex_vectors --rebuild` then fills it).
        Under the exclusive lock: no other process of this index reads or writes meanwhile."""
        with self._mutex, self._flock(exclusive=True):
            db = self._connect()
            with contextlib.suppress(ValueError, FileNotFoundError):
                db.drop_table(TABLE_NAME)
            self._table = db.create_table(TABLE_NAME, schema=self.schema, exist_ok=False)

    def _check_schema(self, schema: pa.Schema) -> None:
        vector_type = schema.field("vector").type
        stored_dim = getattr(vector_type, "list_size", None)
        stored_name = (schema.metadata or {}).get(_EMBEDDER_KEY, b"").decode()
        if stored_dim != self.embedder.dim or (stored_name and stored_name != self.embedder.name):
            raise EmbedderMismatchError(
                f"The search index was built by {stored_name or 'an unknown embedder'} (dim {stored_dim}); this "
                f"server embeds with {self.embedder.name} (dim {self.embedder.dim}), and the two are not comparable. "
                "Run `manage.py reindex_vectors --rebuild` (or restore the old EMBEDDER setting)."
            )

    def _read(self, op: Callable[[Any], _T]) -> _T:
        table = self._open_table()
        with self._flock(exclusive=False):
            return op(table)

    def _write(self, op: Callable[[Any], _T]) -> _T:
        """Run a write, retrying commit conflicts with other writers (LanceDB retries some itself)."""
        table = self._open_table()
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                with self._flock(exclusive=False):
                    return op(table)
            except Exception as exc:
                if attempt == _WRITE_ATTEMPTS or not _is_conflict(exc):
                    raise
                logger.info("vector index commit conflict (attempt %d): %s", attempt, exc)
                time.sleep(0.02 * 2**attempt)
        raise AssertionError("unreachable")

    # --- writes -----------------------------------------------------------------------------------

    def upsert(self, entries: list[VectorEntry]) -> None:
        """Insert or replace rows by `entry_id`; re-embedding a memory replaces its row."""
        if not entries:
            return
        latest = {entry.entry_id: entry for entry in entries}  # last one wins within a batch
        batch = list(latest.values())
        for entry in batch:
            if entry.kind not in KINDS:
                raise ValueError(f"unknown kind {entry.kind!r} (expected one of {KINDS})")
        vectors = self.embedder.embed([entry.text for entry in batch])
        if len(vectors) != len(batch) or any(len(v) != self.embedder.dim for v in vectors):
            raise ValueError(f"{self.embedder.name} returned vectors of the wrong shape")
        data = pa.Table.from_pylist(
            [
                {
                    "entry_id": e.entry_id,
                    "tenant_id": e.tenant_id,
                    "project_id": e.project_id,
                    "kind": e.kind,
                    "object_id": e.object_id,
                    "revision": e.revision,
                    "text": e.text,
                    "usable": e.usable,
                    "vector": v,
                }
                for e, v in zip(batch, vectors, strict=True)
            ],
            schema=self.schema,
        )
        self._refuse_cross_tenant(batch)

        def merge(table: Any) -> Any:
            return (
                table.merge_insert("entry_id")
                # Backstop for a race with the check above: never rewrite another tenant's row.
                .when_matched_update_all(where="target.tenant_id = source.tenant_id")
                .when_not_matched_insert_all()
                .execute(data)
            )

        result = self._write(merge)
        written = int(result.num_updated_rows) + int(result.num_inserted_rows)
        if written != len(batch):
            raise ValueError(f"{len(batch) - written} entry id(s) belong to another tenant; they were not written")

    def bulk_add(self, rows: pa.Table) -> None:
        """Append rows already in the table's schema, vectors included (benchmarks, bulk loads).

        No embedding and no de-duplication by `entry_id`: the caller guarantees new, unique ids.
        """
        data = rows.cast(self.schema) if rows.schema != self.schema else rows
        self._write(lambda t: t.add(data))

    def _refuse_cross_tenant(self, batch: list[VectorEntry]) -> None:
        """entry_id is unique across the whole index: refuse to move a row from one tenant to another."""
        tenant_of = {entry.entry_id: entry.tenant_id for entry in batch}
        for chunk in _chunks(list(tenant_of)):
            where = _in("entry_id", chunk)
            existing = self._rows_where(where, ["entry_id", "tenant_id"])
            clashes = sorted(row["entry_id"] for row in existing if row["tenant_id"] != tenant_of[row["entry_id"]])
            if clashes:
                raise ValueError(f"entry ids already indexed for another tenant: {clashes[:5]}")

    def set_usable(self, entry_ids: list[str], usable: bool) -> int:
        """Flag rows usable or not; returns how many rows actually changed."""
        changed = 0
        for chunk in _chunks(entry_ids):
            # Only rows whose flag differs: the count is "changed", and no empty version is written.
            where = f"{_in('entry_id', chunk)} AND usable = {'false' if usable else 'true'}"
            if self._count_where(where) == 0:
                continue
            changed += self._update_where(where, {"usable": usable})
        return changed

    # One filter per call: a lambda made in a caller's loop would have to bind the loop's filter itself.
    def _rows_where(self, where: str, columns: list[str]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._read(
            lambda t: t.search().where(where).select(columns).limit(None).to_arrow()
        ).to_pylist()
        return rows

    def _count_where(self, where: str) -> int:
        return int(self._read(lambda t: t.count_rows(where)))

    def _update_where(self, where: str, values: dict[str, Any]) -> int:
        result = self._write(lambda t: t.update(where=where, values=values))
        return int(result.rows_updated)

    def _delete_where(self, where: str) -> int:
        # LanceDB commits a new (empty) version even when nothing matches; skip those.
        if self._count_where(where) == 0:
            return 0
        result = self._write(lambda t: t.delete(where))
        return int(result.num_deleted_rows)

    def delete(self, entry_ids: list[str]) -> int:
        """Delete rows by `entry_id` from the current version (old versions keep them: see module doc)."""
        return sum(self._delete_where(_in("entry_id", chunk)) for chunk in _chunks(entry_ids))

    def delete_where_object(self, tenant_id: int, object_ids: list[str]) -> int:
        """Delete a tenant's rows for these objects, whatever their kind."""
        return sum(self._delete_where(where_objects(tenant_id, chunk)) for chunk in _chunks(object_ids))

    # --- reads ------------------------------------------------------------------------------------

    def search(
        self,
        *,
        tenant_id: int,
        project_id: str | None,
        text: str,
        k: int,
        usable_only: bool = True,
        kind: str | None = None,
        object_ids: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Top-`k` rows by cosine similarity to `text`, among the tenant's (and project's) rows, and only
        the rows of `object_ids` when given (search's subject and predicate filters, resolved in the database).

        The filter is applied before the nearest-neighbour search (prefilter), so `k` hits come back
        whenever `k` rows match the filter, with or without the ANN index (see `search_vector`).
        """
        if k <= 0:
            return []
        return self.search_vector(
            query_vector(self.embedder, text),
            tenant_id=tenant_id,
            project_id=project_id,
            k=k,
            usable_only=usable_only,
            kind=kind,
            object_ids=object_ids,
        )

    def search_vector(
        self,
        vector: Sequence[float],
        *,
        tenant_id: int,
        project_id: str | None,
        k: int,
        usable_only: bool = True,
        kind: str | None = None,
        object_ids: Sequence[str] | None = None,
        exact: bool = False,
        nprobes: int | None = None,
        refine_factor: int | None = None,
    ) -> list[Hit]:
        """`search` for an already embedded query.

        With an ANN index on the table (and `exact` false) the index proposes candidates: at least
        `nprobes` partitions are probed, and more (up to all) while the prefiltered candidates are fewer
        than `k`, so a small tenant in a large table still gets its `k` nearest rows; then
        `refine_factor` x `k` candidates are re-ranked by their exact distance. Scores are exact cosine
        similarities either way. Rows added since the index was built are searched exactly and merged
        in. `exact` bypasses the index (the reference the benchmark measures recall against).
        """
        if k <= 0:
            return []
        conditions = [f"tenant_id = {sql_int(tenant_id)}"]
        if project_id is not None:
            conditions.append(f"project_id = {sql_str(project_id)}")
        if usable_only:
            conditions.append("usable = true")
        if kind is not None:
            conditions.append(f"kind = {sql_str(kind)}")
        if object_ids is not None:
            if not object_ids:
                return []
            conditions.append(_in("object_id", dict.fromkeys(object_ids)))
        where = " AND ".join(conditions)
        probes = int(nprobes if nprobes is not None else _setting("VECTOR_ANN_NPROBES", 10))
        refine = int(refine_factor if refine_factor is not None else _setting("VECTOR_ANN_REFINE_FACTOR", 10))
        query_vector = [float(x) for x in vector]
        # Columns the filter fixes are not read back: every column fetched for the hits costs a few
        # milliseconds at a million rows (Lance decodes a whole page of a constant-ish column per take).
        columns = ["entry_id", "object_id", "revision", "text", "_distance"]
        if kind is None:
            columns.append("kind")
        if not usable_only:
            columns.append("usable")

        def run(table: Any, *, widen: bool = False) -> pa.Table:
            query = (
                table.search(query_vector, vector_column_name="vector")
                .distance_type("cosine")
                .where(where, prefilter=True)
                .select(columns)
                .limit(k)
            )
            if exact:
                query = query.bypass_vector_index()
            else:
                # Ignored by a flat scan (no index yet). Exactly `probes` partitions: Lance searches
                # every partition up to maximum_nprobes whether or not the first ones sufficed, so an
                # uncapped maximum (0) is a scan of the whole index; it is kept for `widen`.
                query = query.nprobes(max(1, probes))
                if widen:
                    query = query.maximum_nprobes(0)
                if refine > 0:
                    query = query.refine_factor(refine)
            return query.to_arrow()

        found = self._read(run)
        if not exact and found.num_rows < k:
            # A narrow filter (a small tenant in a large table) can leave fewer than k matching rows in
            # the probed partitions: search the others too, so the answer is what the exact scan gives.
            found = self._read(lambda table: run(table, widen=True))
        rows = found.to_pylist()
        hits = [
            Hit(
                entry_id=row["entry_id"],
                kind=row["kind"] if kind is None else kind,
                object_id=row["object_id"],
                revision=int(row["revision"]),
                score=1.0 - float(row["_distance"]),
                usable=bool(row["usable"]) if not usable_only else True,
                text=row["text"],
            )
            for row in rows
        ]
        hits.sort(key=lambda h: (-h.score, h.entry_id))  # stable order for equal scores
        return hits

    def find(self, *, tenant_id: int, object_ids: list[str]) -> list[VectorEntry]:
        """Exact lookup of a tenant's rows by object id (no vector search), ordered by entry_id."""
        found: list[VectorEntry] = []
        for chunk in _chunks(object_ids):
            where = where_objects(tenant_id, chunk)
            found.extend(_entry_from_row(row) for row in self._rows_where(where, _ENTRY_COLUMNS))
        return sorted(found, key=lambda e: e.entry_id)

    def count(self, *, tenant_id: int | None = None) -> int:
        where = None if tenant_id is None else f"tenant_id = {sql_int(tenant_id)}"
        return int(self._read(lambda t: t.count_rows(where)))

    def versions(self) -> int:
        """Number of table versions on disk (1 right after `compact_and_cleanup`)."""
        return len(self._read(lambda t: t.list_versions()))

    # --- maintenance and deletion verification ----------------------------------------------------

    def compact_and_cleanup(self, *, rebuild_ann: bool = True) -> dict[str, Any]:
        """Physically remove deleted rows: from the data files, the ANN index and every old version.

        1. `optimize`: compaction merges small fragments (dropping their deleted rows) and remaps the
           indexes; old versions are removed.
        2. A fragment that still carries a deletion file keeps its deleted rows in its data file (Lance
           only rewrites fragments past a deleted fraction); its live rows are rewritten into a new
           fragment, which drops the old one whole.
        3. If there is an ANN index, it is rebuilt from the live rows (when `rebuild_ann`, the default,
           or when rows were rewritten), so no index file holds a deleted row's id or quantised vector;
           the scalar indexes of the filter columns are rebuilt with it.
           At a million rows this is the slow step (see bench/vectors.py for the build time).
        4. Old versions (and the files only they referenced: data, deletion and index files) are removed.

        Afterwards only the latest version exists. Takes the exclusive lock: other processes'
        operations on this index wait until it is done.
        """
        table = self._open_table()
        with self._flock(exclusive=True):
            before = len(table.list_versions())
            self._optimize_all(table)
            rewritten = self._rewrite_fragments_with_deletions(table)
            ann = self._ann_info(table)
            rebuilt = False
            if ann is not None and (rebuild_ann or rewritten):
                self._create_ann(table, rows=int(table.count_rows()))
                rebuilt = True
            if rewritten or rebuilt:
                self._optimize_all(table)
            after = len(table.list_versions())
            return {
                "versions_before": before,
                "versions_after": after,
                "version": int(table.version),
                "rows_rewritten": rewritten,
                "ann_index_rebuilt": rebuilt,
            }

    def _optimize_all(self, table: Any) -> None:
        """`optimize` with every old version removed; repeated because optimize's own index update
        commits after its cleanup step (leaving one older version behind)."""
        with warnings.catch_warnings():
            # LanceDB warns that cleanup_older_than=0 breaks concurrent users; the lock covers that.
            warnings.filterwarnings("ignore", message=r".*cleanup_older_than.*")
            for _ in range(3):
                # delete_unverified: no transaction can be in flight under the exclusive lock, so
                # files of crashed writes can go too.
                table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
                if len(table.list_versions()) == 1:
                    return

    def _deletion_files(self) -> list[Path]:
        folder = self.path / f"{TABLE_NAME}.lance" / "_deletions"
        return sorted(f for f in folder.iterdir() if f.is_file()) if folder.is_dir() else []

    def _rewrite_fragments_with_deletions(self, table: Any) -> int:
        """Rewrite the live rows of every fragment that has a deletion file; returns the rows rewritten.

        The fragment id is the first field of a deletion file's name (``<fragment>-<version>-<id>``); a
        no-op update of the fragment's row-address range moves its live rows into a new fragment.
        """
        fragments = set()
        for file in self._deletion_files():
            head = file.name.split("-", 1)[0]
            if head.isdigit():
                fragments.add(int(head))
        rewritten = 0
        for fragment in sorted(fragments):
            low, high = fragment << _FRAGMENT_SHIFT, (fragment + 1) << _FRAGMENT_SHIFT
            where = f"_rowid >= {low} AND _rowid < {high}"
            if table.count_rows(where) == 0:
                continue
            result = table.update(where=where, values_sql={"revision": "revision"})
            rewritten += int(result.rows_updated)
        return rewritten

    # --- the ANN index ----------------------------------------------------------------------------

    def _ann_info(self, table: Any) -> dict[str, Any] | None:
        for config in table.list_indices():
            if list(config.columns) == ["vector"]:
                return {
                    "name": config.name,
                    "index_type": str(config.index_type),
                    "uuid": str(config.index_uuid),
                    "created_at": _iso(getattr(config, "created_at", None)),
                    "indexed_rows": int(config.num_indexed_rows or 0),
                    "unindexed_rows": int(config.num_unindexed_rows or 0),
                    "segments": int(getattr(config, "num_segments", 1) or 1),
                }
        return None

    @contextlib.contextmanager
    def ann_build_lock(self) -> Iterator[bool]:
        """Non-blocking lock for one ANN build at a time per index folder; yields False if taken."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / ".ann-build.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def ann_index(self) -> dict[str, Any] | None:
        """The ANN index on ``vector`` (name, type, uuid, indexed and unindexed rows), or None."""
        return self._read(self._ann_info)

    def needs_ann_index(self, min_rows: int | None = None) -> bool:
        """Whether the table has reached `min_rows` (default `VECTOR_ANN_MIN_ROWS`) without an index,
        or has an index and as many unindexed rows again as a tenth of the indexed ones."""
        threshold = int(min_rows if min_rows is not None else _setting("VECTOR_ANN_MIN_ROWS", 250_000))

        def check(table: Any) -> bool:
            rows = int(table.count_rows())
            if rows < max(1, threshold):
                return False
            ann = self._ann_info(table)
            if ann is None or len(self._filter_index_columns(table)) < len(FILTER_INDEXES):
                return True
            return bool(ann["unindexed_rows"] >= max(1, ann["indexed_rows"] // 10))

        return self._read(check)

    def _create_ann(
        self,
        table: Any,
        *,
        rows: int,
        num_partitions: int | None = None,
        num_sub_vectors: int | None = None,
        index_type: str | None = None,
    ) -> None:
        from lancedb.index import IvfPq, IvfSq

        kind = (index_type or str(getattr(settings, "VECTOR_ANN_INDEX_TYPE", "IVF_SQ"))).upper()
        if kind not in ANN_INDEX_TYPES:
            raise ValueError(f"unknown ANN index type {kind!r} (expected one of {ANN_INDEX_TYPES})")
        partitions = num_partitions or int(_setting("VECTOR_ANN_PARTITIONS", 0)) or _default_partitions(rows)
        config: Any
        if kind == "IVF_PQ":
            sub_vectors = (
                num_sub_vectors or int(_setting("VECTOR_ANN_SUB_VECTORS", 0)) or _default_sub_vectors(self.embedder.dim)
            )
            config = IvfPq(distance_type="cosine", num_partitions=partitions, num_sub_vectors=sub_vectors)
        else:
            config = IvfSq(distance_type="cosine", num_partitions=partitions)
        table.create_index("vector", config=config, replace=True, name=ANN_INDEX_NAME)
        self._create_filter_indexes(table, only_missing=False)

    @staticmethod
    def _filter_index_columns(table: Any) -> set[str]:
        wanted = {column for column, _ in FILTER_INDEXES}
        return {config.columns[0] for config in table.list_indices() if len(config.columns) == 1} & wanted

    def _create_filter_indexes(self, table: Any, *, only_missing: bool) -> None:
        """(Re)build the scalar indexes of `FILTER_INDEXES` (only the absent ones if `only_missing`)."""
        import lancedb.index

        present = self._filter_index_columns(table) if only_missing else set()
        for column, kind in FILTER_INDEXES:
            if column not in present:
                config = getattr(lancedb.index, kind)()
                table.create_index(column, config=config, replace=True, name=f"{column}_idx")

    def filter_indexes(self) -> list[str]:
        """The columns of `FILTER_INDEXES` that have their scalar index."""
        return sorted(self._read(self._filter_index_columns))

    def build_ann_index(
        self,
        *,
        num_partitions: int | None = None,
        num_sub_vectors: int | None = None,
        index_type: str | None = None,
    ) -> dict[str, Any]:
        """(Re)build the ANN index (`VECTOR_ANN_INDEX_TYPE` unless `index_type`) over every row, and the
        scalar indexes of the filter columns; searches keep working during the build (they use the
        previous index, or scan) and switch when it commits. Returns `ann_index()` after it."""

        def build(table: Any) -> dict[str, Any] | None:
            self._create_ann(
                table,
                rows=int(table.count_rows()),
                num_partitions=num_partitions,
                num_sub_vectors=num_sub_vectors,
                index_type=index_type,
            )
            return self._ann_info(table)

        info = self._write(build)
        if info is None:  # pragma: no cover - create_index raises instead
            raise RuntimeError("the ANN index was not created")
        return info

    def update_ann_index(self) -> dict[str, Any] | None:
        """Add rows written since the index was built to it (`optimize`; old versions younger than
        LanceDB's default retention are kept, so concurrent readers are safe)."""

        def update(table: Any) -> dict[str, Any] | None:
            self._create_filter_indexes(table, only_missing=True)  # an index built before they existed
            table.optimize()  # also adds the new rows to the scalar indexes
            return self._ann_info(table)

        return self._write(update)

    def disk_check(self) -> dict[str, Any]:
        """What the index directory holds beyond the live rows of the latest version.

        * ``versions``: table versions on disk (each can bring back rows it saw);
        * ``deletion_files``: fragments whose data file still holds soft-deleted rows;
        * ``unreferenced_index_dirs``: index folders no retained version uses (stale index files);
        * ``ann_index``: the ANN index of the latest version (uuid, build time, row counts), or None.
        """

        def scan(table: Any) -> dict[str, Any]:
            pinned = self._connect().open_table(TABLE_NAME)
            versions = table.list_versions()
            referenced: set[str] = set()
            for info in versions:
                pinned.checkout(info["version"])
                referenced.update(str(config.index_uuid) for config in pinned.list_indices())
            folder = self.path / f"{TABLE_NAME}.lance" / "_indices"
            on_disk = sorted(d.name for d in folder.iterdir() if d.is_dir()) if folder.is_dir() else []
            return {
                "versions": len(versions),
                "live_rows": int(table.count_rows()),
                "deletion_files": len(self._deletion_files()),
                "index_dirs": len(on_disk),
                "unreferenced_index_dirs": [d for d in on_disk if d not in referenced],
                "ann_index": self._ann_info(table),
            }

        return self._read(scan)

    def contains_text(self, fragment: str) -> bool:
        """Whether any row of the current version has `fragment` in its text."""

        def scan(table: Any) -> bool:
            texts = table.search().select(["text"]).limit(None).to_arrow().column("text")
            return bool(len(texts)) and bool(pc.any(pc.match_substring(texts, fragment)).as_py())

        return self._read(scan)

    def rows_in_any_version(self, where: str) -> int:
        """Rows matching `where`, summed over every version still on disk.

        0 means no retained version can bring the rows back. Build `where` with `where_objects`,
        `sql_str` and `sql_int`; it is passed to LanceDB verbatim.
        """

        def scan(table: Any) -> int:
            # A separate handle: checkout() pins a handle to a version, and the shared one must not be.
            pinned = self._connect().open_table(TABLE_NAME)
            total = 0
            for info in table.list_versions():
                pinned.checkout(info["version"])
                total += int(pinned.count_rows(where))
            return total

        return self._read(scan)

    def files_contain(self, fragment: str | bytes) -> bool:
        """Whether any file under the index directory contains `fragment`'s UTF-8 bytes (or these bytes).

        Best effort: Lance may compress or dictionary-encode strings, so False is only conclusive
        together with `rows_in_any_version`; True means some file (data, old version, transaction
        log) still holds the bytes.
        """
        needle = fragment.encode() if isinstance(fragment, str) else fragment
        with self._flock(exclusive=False):
            for file in self.path.rglob("*"):
                if file.is_file() and file.name != ".lock" and needle in file.read_bytes():
                    return True
        return False


_indexes: dict[tuple[int, Path], VectorIndex] = {}
_indexes_lock = threading.Lock()


def get_index(path: str | os.PathLike[str] | None = None) -> VectorIndex:
    """The process-wide `VectorIndex` for `path` (default: settings), using `get_embedder()`.

    Keyed by process id as well, so a forked Celery child opens its own handle instead of reusing
    the parent's.
    """
    resolved = (Path(path) if path is not None else _default_path()).resolve()
    key = (os.getpid(), resolved)
    with _indexes_lock:
        index = _indexes.get(key)
        if index is None:
            index = _indexes[key] = VectorIndex(resolved)
        return index


def clear_index_cache() -> None:
    """Forget the cached indexes (tests, settings changes)."""
    with _indexes_lock:
        _indexes.clear()
