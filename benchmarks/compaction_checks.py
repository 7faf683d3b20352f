"""What checking the planned base files costs compaction (issue 30, item 7), against baselines
measured in the same run.

Scheduling and execution read the footer of every planned base file before they write anything (a
foreign parquet file in a base file's place is refused by name, changing nothing). On a MOR table of
``--groups`` file groups (``--rows`` rows each, ``--updates`` of them updated into a log file):

* scheduling (``schedule_compaction(..., dry_run=True)``: timeline, file system view, plan) with the
  check (planned once before the write lock to read the footers there, then again under it) vs as
  before (no check, planned under the lock only): the total and the time the write lock is held;
* the check alone vs executing the plan (``execute_compaction``, once, on the same table): the share
  of an execution the second check costs;
* with ``--s3`` the same on a local S3 server (moto), plus the S3 requests the check makes.

    PYTHONPATH=. python benchmarks/compaction_checks.py [--groups 200] [--rows 2000] [--updates 20]
        [--runs 5] [--s3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402

from airflow_lake_provider.lake.services.compaction import executor, scheduler  # noqa: E402
from airflow_lake_provider.lake.table.reader import check_base_files  # noqa: E402
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402
from airflow_lake_provider.lake.table.write import write  # noqa: E402
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition  # noqa: E402

FORCE = {"hoodie.compact.inline.max.delta.commits": "1"}


def build(uri: str, groups: int, rows: int, updates: int) -> LakeTable:
    table = LakeTable.create(
        uri, name="cc", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    n = groups * rows
    ids = [f"key{i:09d}" for i in range(n)]
    write(
        table,
        pa.table({"id": ids, "ts": pa.array([1] * n, pa.int64()), "v": [f"v{i}" for i in range(n)]}),
        "insert",
        max_rows_per_file=rows,
    )
    picked = [ids[g * rows + k] for g in range(groups) for k in range(updates)]
    write(
        table,
        pa.table({"id": picked, "ts": pa.array([2] * len(picked), pa.int64()), "v": ["u"] * len(picked)}),
        "upsert",
    )
    return table


def median(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(
    label: str, table: LakeTable, runs: int, requests: Callable[[Callable[[], Any]], Any] | None
) -> None:
    locked: list[float] = []  # seconds inside the write lock, per schedule
    real_locked = scheduler._schedule_locked

    def timed_locked(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return real_locked(*args)
        finally:
            locked.append(time.perf_counter() - start)

    def schedule() -> Any:
        return scheduler.schedule_compaction(table, FORCE, dry_run=True, force=True)

    scheduler._schedule_locked = timed_locked
    try:
        plan = schedule().plan
        rels = [
            join_partition(op.partition, op.data_file_name) for op in plan.operations if op.data_file_name
        ]
        # The baseline is scheduling as it was: no check, and no planning before the write lock.
        real_check, real_unlocked = scheduler.check_base_files, scheduler._check_base_files_unlocked
        scheduler.check_base_files = lambda *_args, **_kwargs: None
        scheduler._check_base_files_unlocked = lambda *_args, **_kwargs: set()
        try:
            locked.clear()
            bare = median(schedule, runs)
            bare_locked = statistics.median(locked)
        finally:
            scheduler.check_base_files, scheduler._check_base_files_unlocked = real_check, real_unlocked
        locked.clear()
        checked = median(schedule, runs)
        checked_locked = statistics.median(locked)
    finally:
        scheduler._schedule_locked = real_locked
    alone = median(lambda: check_base_files(table, rels), runs)
    scheduled = scheduler.schedule_compaction(table, FORCE, force=True)
    start = time.perf_counter()
    done = executor.execute_compaction(table, scheduled.instant)
    execute = time.perf_counter() - start
    assert done.operations == len(plan.operations)
    print(f"{label}: {len(plan.operations)} planned file groups, {len(rels)} base files, median of {runs}")
    print(f"    {'':34}{'total':>8}  {'write lock held':>15}")
    print(f"    {'schedule as before (no check)':<34}{bare:>7.3f}s  {bare_locked:>14.3f}s")
    print(
        f"    {'schedule with the check':<34}{checked:>7.3f}s  {checked_locked:>14.3f}s"
        f"   ratios {checked / bare:.2f} / {checked_locked / bare_locked:.2f}"
    )
    print(f"    {'the check alone':<34}{alone:>7.3f}s   {alone / execute:.1%} of executing the plan")
    print(f"    {'execute the plan (once)':<34}{execute:>7.3f}s")
    if requests is not None:
        _, counted = requests(lambda: check_base_files(table, rels))
        print(f"    S3 requests of the check: {dict(sorted(counted.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--rows", type=int, default=2000, help="rows per file group")
    parser.add_argument("--updates", type=int, default=20, help="updated rows per file group")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--s3", action="store_true", help="also on a local S3 server (moto)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compaction-checks-"))
    try:
        table = build(str(work / "t"), args.groups, args.rows, args.updates)
        measure("local disk", table, args.runs, None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.s3:
        import s3  # the S3 benchmark's moto server and request counting

        server, endpoint = s3.start_server()
        try:
            s3.make_bucket(endpoint, "bench")
            s3.count_requests()
            table = build("s3://bench/cc", args.groups, args.rows, args.updates)
            measure("S3 (moto)", table, args.runs, s3.requests_of)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
