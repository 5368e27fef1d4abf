"""Benchmark of vector search at scale: the ANN index (IVF_SQ by default, or IVF_PQ) against the exact scan.

Run (no database; the index lives in a fresh folder under var/bench-vectors-ann/, removed at the end
unless --keep):

    .venv/bin/python bench/vectors.py [--vectors 1000000] [--queries 1000] [--quick]
    .venv/bin/python bench/vectors.py --vectors 100000 1000000   # make bench-retrieval-scale: sizes in turn

1. Loads N vectors of the project's embedding dimension (`get_embedder().dim`) with
   `VectorIndex.bulk_add`, in the index's own schema: 95% in the measured tenant, 5% in another one
   (so the tenant filter has work to do). The vectors are unit vectors drawn around random cluster
   centres (`--data clustered`, the shape real embeddings have) or uniformly (`--data uniform`, the
   worst case for any ANN index: no neighbourhood structure at all).
2. Builds the ANN index with `VectorIndex.build_ann_index` (the code path of the Celery task
   `build_vector_ann_index`: the vector index of `--index-type`, default `VECTOR_ANN_INDEX_TYPE`, and
   the scalar indexes of the filter columns) and times it; prints its size on disk.
3. Runs Q queries (k=10, drawn like the data) through `VectorIndex.search_vector` exactly as retrieval
   does (tenant prefilter, kind = record): with the index for each (nprobes, refine_factor) pair of the
   grid, and exact (`exact=True`, bypassing the index) for the first `--exact-queries` queries.
   recall@10 is measured against the exact top 10 of every query (computed with numpy over the same
   rows; the Lance exact scan is checked to agree with it on the timed queries).

Prints p50/p95 ms per configuration, recall@10 (over all Q queries), the speed-up over the exact scan
in the same run, and the load average before and after. Nothing is asserted. `--quick` means 100k
vectors and 200 queries. `make bench-stores` runs it at 250k vectors (`--only vectors`). Several `--vectors` sizes
run one after the other and end with a table of the exact scan beside the configuration the settings search with.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
ROOT = REPO_ROOT / "var" / "bench-vectors-ann"
TENANT = 1
OTHER_TENANT = 2
K = 10


def say(text: str) -> None:
    print(text, flush=True)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


def configure() -> None:
    if str(REPO_ROOT) not in sys.path:  # `python bench/vectors.py` puts bench/ first, not the repository
        sys.path.insert(0, str(REPO_ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_admin.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ.setdefault("LANCEDB_LOG", "error")
    import django

    django.setup()


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[rank]


@dataclass
class Timing:
    label: str
    times_ms: list[float]
    recall: float | None
    cpu_ms: list[float]

    @property
    def cpu_p50(self) -> float:
        """CPU time of this process per query (all its threads): the work, whatever the machine's load."""
        return statistics.median(self.cpu_ms)

    @property
    def p50(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p95(self) -> float:
        return percentile(self.times_ms, 0.95)


def make_vectors(rng: Any, n: int, dim: int, data: str, centres: Any) -> Any:
    import numpy as np

    # Filled in chunks, so a million 896-dimension vectors (3.6 GB) never need two or three temporary copies.
    vectors = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 50_000):
        count = min(50_000, n - start)
        if data == "uniform":
            chunk = rng.standard_normal((count, dim), dtype=np.float32)
        else:
            # Each vector is a cluster centre plus noise of 0.6x its length: neighbours share a cluster,
            # yet within-cluster distances vary as they do for real embeddings.
            picks = rng.integers(0, len(centres), size=count)
            noise = rng.standard_normal((count, dim), dtype=np.float32) * np.float32(0.6 / np.sqrt(dim))
            chunk = centres[picks] + noise
        chunk /= np.linalg.norm(chunk, axis=1, keepdims=True)
        vectors[start : start + count] = chunk
    return vectors


def load(index: Any, vectors: Any, tenants: Any, batch: int) -> None:
    import numpy as np
    import pyarrow as pa

    dim = vectors.shape[1]
    for start in range(0, len(vectors), batch):
        stop = min(start + batch, len(vectors))
        ids = [f"mem-{i:08d}" for i in range(start, stop)]
        count = stop - start
        table = pa.table(
            {
                "entry_id": [f"record:{i}" for i in ids],
                "tenant_id": pa.array(tenants[start:stop], pa.int64()),
                "project_id": [f"p{i % 10}" for i in range(start, stop)],
                "kind": ["record"] * count,
                "object_id": ids,
                "revision": pa.array(np.ones(count, dtype=np.int64)),
                "text": [f"bench vector {i}" for i in range(start, stop)],
                "usable": pa.array(np.ones(count, dtype=bool)),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors[start:stop].ravel()), dim),
            }
        )
        index.bulk_add(table)


def exact_top_k(vectors: Any, mask: Any, queries: Any, k: int) -> list[set[str]]:
    """The exact top k object ids of every query among the masked rows (cosine = dot on unit vectors)."""
    import numpy as np

    # Rows outside the mask score -inf rather than being copied out: no second copy of the vectors.
    excluded = np.where(mask, np.float32(0), np.float32(-np.inf))
    truth: list[set[str]] = []
    for start in range(0, len(queries), 50):
        scores = queries[start : start + 50] @ vectors.T + excluded
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        truth.extend({f"mem-{j:08d}" for j in line} for line in top)
    return truth


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One size (`args.vectors`): prints its figures; returns the exact scan's and the product configuration's
    (`VECTOR_ANN_NPROBES`, `VECTOR_ANN_REFINE_FACTOR`, when in the grid) for the summary of several sizes."""
    configure()
    import numpy as np

    from memory_admin.derived.embedding import get_embedder
    from memory_admin.derived.vectors import VectorIndex

    embedder = get_embedder()
    dim = embedder.dim
    n = args.vectors
    say("# Vector search at scale: ANN index vs exact scan")
    say(f"{load_average()} at start")
    say(f"{n:,} vectors, dimension {dim} ({embedder.name}), data {args.data}, {args.queries:,} queries, k={K}")

    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((args.clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    started = time.perf_counter()
    vectors = make_vectors(rng, n, dim, args.data, centres)
    tenants = np.where(rng.random(n) < 0.95, TENANT, OTHER_TENANT).astype(np.int64)
    queries = make_vectors(rng, args.queries, dim, args.data, centres)
    say(f"generated in {time.perf_counter() - started:.1f} s")

    ROOT.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"ann-{os.getpid()}-", dir=ROOT))
    try:
        index = VectorIndex(workdir / "vectors", embedder=embedder)
        started = time.perf_counter()
        load(index, vectors, tenants, args.batch)
        say(f"loaded {index.count():,} rows in {time.perf_counter() - started:.1f} s (bulk_add, {args.batch:,}/batch)")

        started = time.perf_counter()
        truth = exact_top_k(vectors, tenants == TENANT, queries, K)
        say(f"exact top {K} of {len(queries):,} queries with numpy in {time.perf_counter() - started:.1f} s")

        def measure(label: str, count: int, **options: Any) -> Timing:
            times: list[float] = []
            cpu: list[float] = []
            found = 0
            for i in range(count):
                begin, cpu_begin = time.perf_counter(), time.process_time()
                hits = index.search_vector(
                    queries[i], tenant_id=TENANT, project_id=None, k=K, usable_only=False, kind="record", **options
                )
                times.append((time.perf_counter() - begin) * 1000)
                cpu.append((time.process_time() - cpu_begin) * 1000)
                found += len({h.object_id for h in hits} & truth[i])
            return Timing(label, times, found / (K * count), cpu)

        exact = measure(f"exact scan ({args.exact_queries} queries)", args.exact_queries, exact=True)
        say(
            f"{exact.label}: p50 {exact.p50:.1f} ms, p95 {exact.p95:.1f} ms, CPU p50 {exact.cpu_p50:.1f} ms, "
            f"agreement with numpy {exact.recall:.3f}"
        )

        index.compact_and_cleanup(rebuild_ann=False)  # one fragment set, as a maintained table would be
        partitions = args.partitions or None
        started = time.perf_counter()
        cpu_started = time.process_time()
        info = index.build_ann_index(
            num_partitions=partitions, num_sub_vectors=args.sub_vectors or None, index_type=args.index_type or None
        )
        build_s = time.perf_counter() - started
        build_cpu = time.process_time() - cpu_started
        say(
            f"ANN index built in {build_s:.1f} s ({build_cpu:.1f} s CPU in this process; {load_average()}): "
            f"{info['index_type']}, {info['indexed_rows']:,} rows indexed, partitions "
            f"{partitions or 'default'}, sub-vectors {args.sub_vectors or 'default (PQ only)'}; "
            f"scalar indexes on {', '.join(index.filter_indexes())}"
        )
        folder = workdir / "vectors"
        disk = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        in_indexes = sum(f.stat().st_size for f in (folder / "entries.lance" / "_indices").rglob("*") if f.is_file())
        say(f"on disk: {disk / 1e6:.0f} MB, of which index files {in_indexes / 1e6:.0f} MB")

        # Warm the index once (first query loads it), then the grid.
        index.search_vector(queries[0], tenant_id=TENANT, project_id=None, k=K, usable_only=False, kind="record")
        results: list[Timing] = []
        for nprobes in args.nprobes:
            for refine in args.refine:
                timing = measure(
                    f"ANN nprobes={nprobes} refine_factor={refine}",
                    len(queries),
                    nprobes=nprobes,
                    refine_factor=refine,
                )
                results.append(timing)
                say(
                    f"{timing.label}: p50 {timing.p50:.1f} ms, p95 {timing.p95:.1f} ms, CPU p50 {timing.cpu_p50:.1f} ms, "
                    f"recall@{K} {timing.recall:.3f}, {exact.p50 / timing.p50:.0f}x faster than exact (p50); "
                    f"{load_average()}"
                )

        say("")
        say(f"| configuration | p50 ms | p95 ms | CPU p50 ms | recall@{K} ({len(queries):,} queries) | vs exact p50 |")
        say("|---|---|---|---|---|---|")
        say(f"| {exact.label} | {exact.p50:.1f} | {exact.p95:.1f} | {exact.cpu_p50:.1f} | 1 (reference) | 1x |")
        for timing in results:
            say(
                f"| {timing.label} | {timing.p50:.1f} | {timing.p95:.1f} | {timing.cpu_p50:.1f} | {timing.recall:.3f} | "
                f"{exact.p50 / timing.p50:.0f}x |"
            )
        good = [t for t in results if (t.recall or 0) >= 0.95]
        if good:
            best = min(good, key=lambda t: t.p95)
            met = "met" if best.p95 <= 20 else "not met"
            say(
                f"\nbest with recall >= 0.95: {best.label}: p95 {best.p95:.1f} ms, recall {best.recall:.3f} "
                f"(target p95 <= 20 ms at 1,000,000 vectors; at {n:,}: {met})"
            )
        else:
            say("\nno configuration reached recall 0.95")
        say(f"index build {build_s:.1f} s for {n:,} vectors")
        say(f"{load_average()} at end")
        from django.conf import settings

        product = f"ANN nprobes={settings.VECTOR_ANN_NPROBES} refine_factor={settings.VECTOR_ANN_REFINE_FACTOR}"
        return {
            "vectors": n,
            "dim": dim,
            "exact": exact,
            "product": next((t for t in results if t.label == product), None),
            "ann_min_rows": int(settings.VECTOR_ANN_MIN_ROWS),
        }
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def print_summary(summaries: list[dict[str, Any]]) -> None:
    """Several sizes side by side: the exact scan and the configuration the product searches with."""
    say("\n# Summary: the product's search path (VectorIndex.search_vector, tenant prefilter, k=10)")
    say("| vectors | dim | exact scan p50 / p95 ms | ANN (settings) p50 / p95 ms | recall@10 | a search there uses |")
    say("|---|---|---|---|---|---|")
    for row in summaries:
        exact, product = row["exact"], row["product"]
        ann = f"{product.p50:.1f} / {product.p95:.1f}" if product else "(not in the grid)"
        recall = f"{product.recall:.3f}" if product else "-"
        uses = (
            "the ANN index" if row["vectors"] >= row["ann_min_rows"] else "the exact scan (below VECTOR_ANN_MIN_ROWS)"
        )
        say(f"| {row['vectors']:,} | {row['dim']} | {exact.p50:.1f} / {exact.p95:.1f} | {ann} | {recall} | {uses} |")


def bench_vectors(vectors: int, queries: int) -> int:
    """The benchmark at a modest size with the default grid (`make bench-stores`, `--only vectors`)."""
    return main(["--vectors", str(vectors), "--queries", str(queries), "--exact-queries", str(min(queries, 50))])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, nargs="+", default=[1_000_000], help="one or more sizes, run in turn")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--exact-queries", type=int, default=100, help="queries timed with the exact scan")
    parser.add_argument("--data", choices=["clustered", "uniform"], default="clustered")
    parser.add_argument("--clusters", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=0, help="IVF partitions (0: the index's default)")
    parser.add_argument("--sub-vectors", type=int, default=0, help="PQ sub-vectors (0: the index's default)")
    parser.add_argument(
        "--index-type", choices=["IVF_SQ", "IVF_PQ"], default="", help="ANN index type (default: settings)"
    )
    parser.add_argument("--nprobes", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--refine", type=int, nargs="+", default=[10, 20])
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--keep", action="store_true", help="keep the index folder")
    parser.add_argument("--quick", action="store_true", help="100k vectors, 200 queries")
    args = parser.parse_args(argv)
    if args.quick:
        args.vectors, args.queries, args.exact_queries = [100_000], 200, 50
    args.exact_queries = min(args.exact_queries, args.queries)
    sizes = list(args.vectors)
    summaries = []
    for n in sizes:
        args.vectors = n
        summaries.append(run(args))
        say("")
    if len(sizes) > 1:
        print_summary(summaries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
