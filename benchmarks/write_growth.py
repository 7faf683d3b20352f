"""Write cost as a table grows: late writes vs early writes, and a small upsert into a large file group.

(a) ``--writes`` small upserts (20 rows over 20 partitions) into a MOR table, each write archiving
    the timeline at its end as Hudi does (``hoodie.archive.automatic``, keep 20-30 commits), and
    every ``--compact-every`` writes (default 10) a compaction then a clean, as a MOR table is run:
    the average time of the last 20 writes over the average of the first 20 (target <= 1.3; the
    cost must not grow with the history). ``--compact-every 0`` never compacts: then every write
    adds 20 log files that every later write lists (5,800 files by write 300), so some growth
    remains there: listing and grouping the uncompacted files, not the timeline or the merge.
(b) A 2-row upsert into a file group of ``--big`` rows vs the same upsert into one of 1,000 rows,
    in process (target <= 2.0): locating keys reads the record-key column (keys found in base
    files need no log; benchmarks/key_lookup_logs.py measures the log search).

The machine's own drift is measured in the same run: beside each of the first and last 20 writes
(and each (b) sample) a reference write of the same size into a table with no history (created
fresh each time) is timed; its late/early ratio is what the machine alone gives, and the writes'
ratio divided by it is the growth that is ours. On a shared VM whose load changes minute to minute
that is the number to read.

    PYTHONPATH=. .venv/bin/python benchmarks/write_growth.py [--writes 300] [--compact-every 10]
        [--big 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake import LakeTable, write  # noqa: E402
from airflow_lake_provider.lake.services.clean.executor import run_clean  # noqa: E402
from airflow_lake_provider.lake.services.compaction.executor import run_compaction  # noqa: E402

KEEP = {"hoodie.keep.min.commits": "20", "hoodie.keep.max.commits": "30"}


def _table(path: Path, partitioned: bool = True) -> LakeTable:
    return LakeTable.create(
        path,
        name="bench",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",) if partitioned else (),
    )


def _growth_batch(n: int) -> pa.Table:
    ids = [f"k{(n * 7 + i) % 400}" for i in range(20)]
    return pa.table(
        {
            "id": ids,
            "ts": pa.array([n] * 20, pa.int64()),
            "p": [f"p{int(k[1:]) % 20:02d}" for k in ids],
            "v": pa.array(range(20), pa.int64()),
        }
    )


Timing = tuple[float, float]  # (wall seconds, CPU seconds of this process)


def _timed(table: LakeTable, batch: pa.Table) -> tuple[Timing, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = write(table, batch, "upsert", options=KEEP)  # archival included, as in Hudi
    return (time.perf_counter() - wall, time.process_time() - cpu), len(result.archived)


def reference(root: Path, n: int) -> Timing:
    """The machine's speed now: an insert then the same-size upsert into a fresh table (no history)."""
    table = _table(root / f"reference{n}")
    write(table, _growth_batch(0), "upsert", options=KEEP)
    return _timed(table, _growth_batch(1))[0]


def growth(root: Path, writes: int, compact_every: int) -> tuple[list[Timing], list[Timing], int]:
    reference(root, -1)  # warm imports and caches: the first measured write must not pay for them
    table = _table(root / "growth")
    times, references = [], []
    archived = 0
    for n in range(writes):
        if n < 20 or n >= writes - 20:
            references.append(reference(root, n))
        timing, count = _timed(table, _growth_batch(n))
        times.append(timing)
        archived += count
        if compact_every and (n + 1) % compact_every == 0:
            # As a MOR table is run: compaction, then a clean (Hudi's default policy, keep the
            # slices of the last 10 commits) that removes the slices compaction replaced.
            run_compaction(table, force=True)
            run_clean(table, KEEP)
    return times, references, archived


def _ratios(times: list[Timing], references: list[Timing], which: int, average: Callable) -> str:
    first, last = average([t[which] for t in times[:20]]), average([t[which] for t in times[-20:]])
    ref_first = average([t[which] for t in references[:20]])
    ref_last = average([t[which] for t in references[-20:]])
    drift = ref_last / ref_first
    return (
        f"{first * 1000:.1f} -> {last * 1000:.1f} ms, ratio {last / first:.2f}; machine alone "
        f"{ref_first * 1000:.1f} -> {ref_last * 1000:.1f} ms, ratio {drift:.2f}; "
        f"ours = {last / first / drift:.2f}"
    )


def _big_table(root: Path, rows: int) -> LakeTable:
    table = _table(root / f"big{rows}", partitioned=False)
    base = pa.table(
        {
            "id": [f"k{i:08d}" for i in range(rows)],
            "ts": pa.array([0] * rows, pa.int64()),
            "p": ["x"] * rows,
            "v": pa.array(range(rows), pa.int64()),
        }
    )
    write(table, base, "insert", max_rows_per_file=rows)
    return table


def _two_row_upsert(table: LakeTable, rows: int, run: int) -> float:
    batch = pa.table(
        {
            "id": ["k00000001", f"k{rows - 2:08d}"],
            "ts": pa.array([run + 1] * 2, pa.int64()),
            "p": ["x", "x"],
            "v": pa.array([run, run], pa.int64()),
        }
    )
    started = time.perf_counter()
    write(table, batch, "upsert")
    return time.perf_counter() - started


def small_upserts(root: Path, big: int, runs: int) -> tuple[float, float]:
    """Median 2-row upsert into 1,000 rows and into ``big`` rows, alternating so load drift hits both."""
    small_table, big_table = _big_table(root, 1_000), _big_table(root, big)
    small, large = [], []
    for run in range(runs + 1):
        s, b = _two_row_upsert(small_table, 1_000, run), _two_row_upsert(big_table, big, run)
        if run:  # the first ones warm imports and caches
            small.append(s)
            large.append(b)
    return statistics.median(small), statistics.median(large)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument(
        "--compact-every",
        type=int,
        default=10,
        help="compact then clean every N writes (0: never; slices keep growing)",
    )
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="write_growth_") as tmp:
        root = Path(tmp)
        times, references, archived = growth(root, args.writes, args.compact_every)
        every = args.compact_every
        compacted = f", compacted and cleaned every {every}" if every else ", never compacted"
        print(f"(a) {args.writes} upserts of 20 rows over 20 partitions", end="")
        print(f", {archived} instants archived{compacted}; writes 1-20 -> {args.writes - 19}-{args.writes}")
        print("    (target <= 1.3; 'machine alone' is the reference write with no history)")
        print(f"    wall, mean:   {_ratios(times, references, 0, statistics.mean)}")
        print(f"    wall, median: {_ratios(times, references, 0, statistics.median)}")
        print(f"    CPU, mean:    {_ratios(times, references, 1, statistics.mean)}")
        small, big = small_upserts(root, args.big, args.runs)
        print(f"(b) 2-row upsert: into 1,000 rows {small * 1000:.1f} ms, ", end="")
        print(f"into {args.big:,} rows {big * 1000:.1f} ms")
        print(f"    ratio = {big / small:.2f} (target <= 2.0)")


if __name__ == "__main__":
    main()
