"""Clean planning cost on a large synthetic table, against a bare listing measured in the same run.

Table: 500 partitions x 20 file groups x 10 slices (100,000 small base files), 100 commits. Commits
0..89 each rewrite every group of ~56 partitions (partition p is rewritten by commits k with
k % 9 == p % 9); commits 90..99 rewrite the groups of one hot partition. Measured:
  - a bare recursive listing of the tree: names and sizes (os.scandir + stat, what a planner that
    reports bytes must do; object stores and HDFS return sizes with the listing), and names only,
  - a full plan (KEEP_LATEST_COMMITS, 10 retained, incremental mode off),
  - an incremental plan after one new commit touching one partition (following a completed clean),
  - a no-op clean through the operator's code path (LakeHook.clean in a process that has imported
    Airflow, as a worker has; no JVM): in a fresh process (the hook's and the core's imports
    included), their import share, and the no-op itself once they are imported (target < 20 ms),
  - a SparkSession start (local[2]) in a fresh process.
Targets: full plan <= 2x listing; incremental <= 5% of full; no-op clean < 10% of the Spark start.

    python benchmarks/clean_plan.py [--partitions 500] [--groups 20] [--runs 3] [--skip-spark]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.services.clean.config import CleanConfig  # noqa: E402
from airflow_lake_provider.lake.services.clean.executor import plan, run_clean  # noqa: E402
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat  # noqa: E402
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock  # noqa: E402

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "b_record",
        "namespace": "hoodie.b",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "ts", "type": "long"},
            {"name": "p", "type": "string"},
        ],
    }
)


def commit(table: LakeTable, partitions: list[str], groups: int) -> str:
    """One synthetic COW commit rewriting every file group of ``partitions`` (empty base files)."""
    t = table.clock.next(after=table.timeline().latest_time)
    requested = table.store.create_requested(t, Action.COMMIT)
    inflight = table.store.transition_to_inflight(requested)
    stats: dict[str, tuple[WriteStat, ...]] = {}
    for part in partitions:
        folder = table.base_path / part
        folder.mkdir(parents=True, exist_ok=True)
        part_stats = []
        for g in range(groups):
            fid = f"{int(part.split('=')[1]):08d}-0000-0000-0000-{g:012d}-0"
            name = f"{fid}_0-1-0_{t}.parquet"
            (folder / name).touch()
            part_stats.append(WriteStat(fid, part, f"{part}/{name}", num_writes=1, total_write_bytes=0))
        stats[part] = tuple(part_stats)
    meta = CommitMetadata("UPSERT", stats, {"schema": SCHEMA})
    table.store.transition_to_completed(inflight, meta.to_json_bytes())
    return t


def build(path: Path, partitions: int, groups: int) -> LakeTable:
    table = LakeTable.create(
        path,
        name="b",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        hive_style=True,
        clock=InstantClock(),
    )
    names = [f"p={i}" for i in range(partitions)]
    for k in range(90):
        commit(table, [n for i, n in enumerate(names) if i % 9 == k % 9], groups)
    for _ in range(10):
        commit(table, [names[0]], groups)
    return table


def median_time(fn, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bare_listing(root: Path) -> int:
    """Names only."""
    return sum(len(files) for _d, _s, files in os.walk(root))


def sized_listing(root: str) -> int:
    """Names and sizes: every file's size needs a stat on a local file system."""
    count = 0
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                count += sized_listing(entry.path)
            else:
                entry.stat()
                count += 1
    return count


def spark_start() -> float:
    code = (
        "import time; t=time.perf_counter(); from pyspark.sql import SparkSession; "
        "s=SparkSession.builder.master('local[2]').config('spark.ui.enabled','false').getOrCreate(); "
        "print(time.perf_counter()-t); s.stop()"
    )
    env = dict(
        os.environ, SPARK_LOCAL_IP="127.0.0.1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def noop_clean_via_hook(path: Path) -> tuple[float, float, float]:
    """LakeHook.clean on a table with nothing to clean, in a fresh process that imported the hook
    (and Airflow), as a worker has: (seconds of the first call, which imports the core; seconds of
    those imports; median seconds of later calls, imports done)."""
    code = (
        "import sys, time, statistics; from airflow_lake_provider.hooks.lake import LakeHook; "
        "t=time.perf_counter(); r=LakeHook().clean(sys.argv[1]); assert r['outcome']=='NO_WORK', r; "
        "first=time.perf_counter()-t; "
        "later=[]\n"
        "for _ in range(5):\n"
        "    t=time.perf_counter(); LakeHook().clean(sys.argv[1]); later.append(time.perf_counter()-t)\n"
        "print(first, statistics.median(later))"
    )
    env = dict(
        os.environ,
        PYTHONPATH=str(Path(__file__).resolve().parent.parent),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"no-op clean failed: {out.stderr[-2000:]}")
    first, later = (float(x) for x in out.stdout.strip().splitlines()[-1].split())
    return first, first - later, later


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=500)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lake-clean-bench-"))
    try:
        t0 = time.perf_counter()
        table = build(work / "t", args.partitions, args.groups)
        files = bare_listing(table.base_path)
        print(
            f"built {files} files, {len(table.timeline().completed_commits)} commits in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        names_only, _ = median_time(lambda: bare_listing(table.base_path), args.runs)
        listing, _ = median_time(lambda: sized_listing(str(table.base_path)), args.runs)
        full_cfg = CleanConfig(incremental=False)
        full, full_plan = median_time(lambda: plan(table, full_cfg), args.runs)
        print(f"full plan: {full_plan.file_count} files in {len(full_plan.files_per_partition)} partitions")
        cleaned = run_clean(table)
        print(f"clean {cleaned.instant}: {cleaned.deleted_files} files deleted")
        commit(table, ["p=1"], args.groups)
        inc, inc_plan = median_time(lambda: plan(table, CleanConfig()), args.runs)
        print(
            f"incremental plan: {inc_plan.file_count if inc_plan else 0} files in "
            f"{len(inc_plan.files_per_partition) if inc_plan else 0} partitions"
        )
        run_clean(table)  # leave nothing to clean for the no-op measurement
        noops = [noop_clean_via_hook(table.base_path) for _ in range(args.runs)]
        noop, imports, warm = (statistics.median(n[i] for n in noops) for i in range(3))
        spark = (
            None
            if args.skip_spark
            else statistics.median(spark_start() for _ in range(max(1, args.runs - 1)))
        )
        print()
        print(f"{'measure':<38}{'median s':>10}{'ratio':>10}  target")
        print(f"{'bare listing, names only (os.walk)':<38}{names_only:>10.3f}{names_only / listing:>10.2f}")
        print(f"{'bare listing, names + sizes':<38}{listing:>10.3f}{1.0:>10.2f}  (baseline)")
        print(f"{'full plan':<38}{full:>10.3f}{full / listing:>10.2f}  <= 2.0 x listing")
        print(f"{'incremental plan (1 new commit)':<38}{inc:>10.3f}{inc / full:>10.3f}  <= 0.05 x full plan")
        if spark is not None:
            print(f"{'SparkSession start (local[2])':<38}{spark:>10.3f}{1.0:>10.2f}")
            print(
                f"{'no-op clean via LakeHook (no JVM)':<38}{noop:>10.3f}{noop / spark:>10.3f}"
                "  < 0.10 x Spark start"
            )
        else:
            print(f"{'no-op clean via LakeHook (no JVM)':<38}{noop:>10.3f}")
        print(
            f"{'  of which imports (first call - later)':<38}{imports:>10.3f}{imports / noop:>10.2f}  (share)"
        )
        print(f"{'  no-op clean, imports done':<38}{warm:>10.3f}{'':>10}  < 0.020 s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
