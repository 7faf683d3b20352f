"""Compaction cost, against baselines measured in the same run.

(a) One MOR file slice, as in ``read_slice.py`` (1,000,000-row base file + one log file with 200,000
    updates in one Avro data block): our compaction of it (read + merge + write the new parquet
    base file, ``execute_operation``) vs hudi-rs merely reading it. Each in its own process (so the
    peak RSS is its own), median of ``--runs``. Target (issue 31): ratio <= 1.0, RSS <= 1.2x.
(b) ``spark_jobs/compact.py`` over 8 equal file groups, ``--master local[1]`` vs ``local[2]``: the
    job's work as it reports it in its JSON result (``work_seconds``: pick, inflight, the Spark stage
    of the merges, commit), after its warm-up (JVM's first job, Python workers, their imports and a
    priming merge), which is reported apart, like the JVM start. ``--spark-runs`` pairs alternate
    local[1] and local[2] on fresh, synced copies; the speedup is the ratio of the medians, and
    each pair's ratio is printed. Target: speedup >= 1.7x. Per-operation wall and CPU seconds and
    the Python worker's peak RSS are reported too (``ru_maxrss``; a reused worker keeps its peak).
    Before each pair, ``parallel_ceiling.py`` measures what two processes gain over one on this
    machine at that moment, on pyarrow work like a merge's and on a pure interpreter loop (none of
    it ours): a speedup above the first is not to be expected.

(c) ``--scaling MB,MB``: peak RSS of compacting slices whose base files are about those sizes
    (20% of the rows updated in the log, or ``--scaling-updates`` in each), each in a fresh
    process: memory is bounded by design (row groups stream through the merge) when the larger
    stays under 2x the smaller's peak. The log's merged records are held whole: with a log that
    grows with the base file, so does that part.

Every process reports its peak RSS (``VmHWM``), CPU seconds and Arrow's memory pool: its peak
(``max_memory``) and what is still allocated after the runs (``total_allocated_bytes``).

    python benchmarks/compaction.py [--rows 1000000] [--updates 200000] [--runs 3] [--skip-spark]
                                    [--skip-slice] [--spark-runs 3] [--scaling 128,512]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import parallel_ceiling  # noqa: E402  (the machine's own two-process speedup, measured beside)
import read_slice  # noqa: E402  (the same slice builder)

FORCE = {"hoodie.compact.inline.max.delta.commits": "1"}


def _vm_hwm_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _time_ours(path: str, runs: int, conn) -> None:  # noqa: ANN001
    from airflow_lake_provider.lake.services.compaction.operation import (
        execute_operation,
        load_plan,
        output_schema,
    )
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(path)
    timeline = table.timeline()
    (c,) = [i.timestamp for i in timeline.pending_compactions()]
    (op,) = load_plan(timeline, c).operations
    schema = output_schema(table, timeline)
    times, cpu, rows = [], [], 0
    for run in range(runs + 1):  # the first run warms caches and imports
        start, cpu0 = time.perf_counter(), time.process_time()
        stat = execute_operation(table, timeline, schema, c, op, token=f"{run}-9-0")
        elapsed = time.perf_counter() - start
        rows = stat.num_writes
        (table.base_path / stat.path).unlink()
        table.store.markers.delete(c)
        if run:
            times.append(elapsed)
            cpu.append(time.process_time() - cpu0)
    conn.send({"times": times, "cpu": cpu, "rows": rows, "peak_mb": _vm_hwm_mb(), **_arrow_pool()})


def _arrow_pool() -> dict[str, float]:
    """Arrow's default memory pool: its peak and what it still holds (MB)."""
    import pyarrow as pa

    pool = pa.default_memory_pool()
    return {
        "pool": pool.backend_name,
        "pool_peak_mb": (pool.max_memory() or 0) / 2**20,
        "pool_now_mb": pa.total_allocated_bytes() / 2**20,
    }


def _time_hudi_rs(path: str, runs: int, conn) -> None:  # noqa: ANN001
    from hudi import HudiTableBuilder

    times, cpu, rows = [], [], 0
    for run in range(runs + 1):
        start, cpu0 = time.perf_counter(), time.process_time()
        batches = HudiTableBuilder.from_base_uri(path).build().read()
        elapsed = time.perf_counter() - start
        rows = sum(b.num_rows for b in batches)
        del batches
        if run:
            times.append(elapsed)
            cpu.append(time.process_time() - cpu0)
    conn.send({"times": times, "cpu": cpu, "rows": rows, "peak_mb": _vm_hwm_mb(), **_arrow_pool()})


def in_child(fn, path: Path, runs: int) -> dict:  # noqa: ANN001
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=fn, args=(str(path), runs, child))
    proc.start()
    child.close()  # the child's end lives on in the child only: its death ends recv() with EOFError
    try:
        result = parent.recv()
    except EOFError:
        proc.join()
        raise SystemExit(f"{fn.__name__} died (exit code {proc.exitcode})") from None
    proc.join()
    return result


def part_a(work: Path, rows: int, updates: int, runs: int) -> None:
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.table import LakeTable

    path = work / "slice"
    t0 = time.perf_counter()
    read_slice.build_table(path, rows, updates)
    print(f"(a) built a {rows:,}-row base + {updates:,}-update log slice in {time.perf_counter() - t0:.1f} s")
    # hudi-rs reads before the plan exists (a pending compaction would hide nothing here: no logs at c).
    theirs = in_child(_time_hudi_rs, path, runs)
    schedule_compaction(LakeTable.open(path), FORCE)
    ours = in_child(_time_ours, path, runs)
    if ours["rows"] != theirs["rows"] or ours["rows"] != rows:
        raise SystemExit(f"row counts differ: ours {ours['rows']}, hudi-rs {theirs['rows']}, expected {rows}")
    o, h = statistics.median(ours["times"]), statistics.median(theirs["times"])
    oc, hc = statistics.median(ours["cpu"]), statistics.median(theirs["cpu"])
    print(f"{'':4}{'measure':<46}{'median s':>9}{'CPU s':>7}{'peak RSS':>11}{'Arrow pool peak':>17}   runs")
    for label, got, med, med_cpu in (
        ("ours: compact the slice (read+merge+write)", ours, o, oc),
        ("hudi-rs: read the slice", theirs, h, hc),
    ):
        print(
            f"{'':4}{label:<46}{med:>9.3f}{med_cpu:>7.2f}{got['peak_mb']:>8.0f} MB"
            f"{got['pool_peak_mb']:>11.0f} MB ({got['pool']}, {got['pool_now_mb']:.0f} MB left)"
            f"   {' / '.join(f'{t:.2f}' for t in got['times'])}"
        )
    print(
        f"    ratio ours/hudi-rs = {o / h:.2f} wall, {oc / hc:.2f} CPU (target <= 1.0); "
        f"peak RSS {ours['peak_mb'] / theirs['peak_mb']:.2f}x (target <= 1.2x)"
    )


def part_c(work: Path, sizes_mb: list[int], runs: int, updates: int | None = None) -> None:
    """Peak RSS of compacting a slice per base file size: bounded memory does not grow with it."""
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.table import LakeTable

    bytes_per_row = 70.1e6 / 1_000_000  # the base file of read_slice.py's rows, snappy parquet
    peaks = {}
    for size in sizes_mb:
        rows = int(size * 1e6 / bytes_per_row)
        logged = updates if updates is not None else rows // 5
        path = work / f"scale-{size}"
        t0 = time.perf_counter()
        read_slice.build_table(path, rows, logged)
        base = sum(p.stat().st_size for p in path.glob("*.parquet")) / 1e6
        schedule_compaction(LakeTable.open(path), FORCE)
        got = in_child(_time_ours, path, runs)
        peaks[size] = got["peak_mb"]
        print(
            f"(c) base file {base:.0f} MB ({rows:,} rows, {logged:,} updates, built in "
            f"{time.perf_counter() - t0:.0f} s): compaction {statistics.median(got['times']):.2f} s, "
            f"peak RSS {got['peak_mb']:.0f} MB, Arrow pool peak {got['pool_peak_mb']:.0f} MB"
        )
        shutil.rmtree(path)
    small, large = min(sizes_mb), max(sizes_mb)
    print(
        f"    peak RSS {large} MB base / {small} MB base = {peaks[large] / peaks[small]:.2f}x for "
        f"{large / small:.0f}x the data (target < 2x)"
    )


def build_groups(path: Path, groups: int, rows_per_group: int, updates_per_group: int) -> None:
    import numpy as np
    import pyarrow as pa

    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import writer

    rng = np.random.default_rng(read_slice.SEED)
    n = groups * rows_per_group
    ids = pa.array([f"key{i:09d}" for i in range(n)], pa.string())
    table = LakeTable.create(
        path, name="compact_bench", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    base = read_slice._make_rows(n, ids, rng.integers(1, 1_000_000, n), rng)
    writer.write(table, base, "insert", max_rows_per_file=rows_per_group)
    picked = np.sort(rng.choice(n, size=groups * updates_per_group, replace=False))
    upd_ts = base.column("ts").to_numpy()[picked] + 1000
    upd = read_slice._make_rows(len(picked), ids.take(pa.array(picked)), upd_ts, rng)
    writer.write(table, upd, "upsert", max_rows_per_file=rows_per_group)
    scheduled = schedule_compaction(table, FORCE)
    if scheduled.plan is None or len(scheduled.plan.operations) != groups:
        raise SystemExit(f"expected a plan of {groups} operations, got {scheduled}")


def run_job(path: Path, master: str) -> dict:
    from airflow_lake_provider.lake import spark_submit

    env = {"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "SPARK_LOCAL_IP": "127.0.0.1"}
    return spark_submit.submit(
        "compact.py",
        ["--table", str(path), "--parallelism", "8"],
        master=master,
        env=env,
        conf={"spark.python.worker.reuse": "true"},
    )


def _job_line(master: str, result: dict, wall: float) -> str:
    ops = [t["seconds"] for t in result["tasks"]]
    cpu = sum(t["cpu_seconds"] for t in result["tasks"])
    return (
        f"    {master:<9} work {result['work_seconds']:>5.2f} s (warm-up {result['warmup_seconds']:.2f} s, "
        f"job {result['job_seconds']:.2f} s, spark-submit wall {wall:.1f} s); per operation "
        f"{min(ops):.2f}-{max(ops):.2f} s, sum {sum(ops):.2f} s wall / {cpu:.2f} s CPU; "
        f"worker peak RSS max {result['peak_task_rss_mb']:.0f} MB"
    )


def part_b(work: Path, groups: int, rows_per_group: int, updates_per_group: int, runs: int) -> None:
    source = work / "groups"
    t0 = time.perf_counter()
    build_groups(source, groups, rows_per_group, updates_per_group)
    print(
        f"\n(b) built {groups} file groups of {rows_per_group:,} rows + {updates_per_group:,} updates "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    measured: dict[str, dict[str, list[float]]] = {}
    ceilings: dict[str, list[float]] = {kind: [] for kind in parallel_ceiling.KINDS}
    for run in range(runs):
        for kind, got in ceilings.items():
            got.append(parallel_ceiling.measure(kind))
        print(
            "    machine now, two processes vs one (parallel_ceiling.py): "
            + ", ".join(f"{kind} work {got[-1]:.2f}x" for kind, got in ceilings.items())
        )
        for master in ("local[1]", "local[2]"):  # alternating, so drift hits both alike
            copy = work / f"{master.replace('[', '_').replace(']', '')}-{run}"
            shutil.copytree(source, copy)
            # Write the copy back now: left dirty, the job's first fsync would wait for all of it.
            os.sync()
            start = time.perf_counter()
            result = run_job(copy, master)
            wall = time.perf_counter() - start
            expected = groups * rows_per_group
            if result.get("outcome") != "COMPLETED" or result.get("records_written") != expected:
                raise SystemExit(f"{master}: {json.dumps(result)[:500]}")
            shutil.rmtree(copy)
            print(_job_line(master, result, wall))
            got = measured.setdefault(master, {"work": [], "job": [], "wall": []})
            got["work"].append(result["work_seconds"])
            got["job"].append(result["job_seconds"])
            got["wall"].append(wall)
    one, two = measured["local[1]"], measured["local[2]"]

    def ratio(key: str) -> str:
        return f"{statistics.median(one[key]) / statistics.median(two[key]):.2f}x"

    per_run = " / ".join(f"{a / b:.2f}" for a, b in zip(one["work"], two["work"], strict=True))
    print(
        f"    speedup local[2] vs local[1] (medians of {runs}): work {ratio('work')} (target >= 1.7x; "
        f"runs {per_run}), job after JVM start {ratio('job')}, spark-submit wall {ratio('wall')}, "
        f"on {os.cpu_count()} cores"
    )
    speedup = statistics.median(one["work"]) / statistics.median(two["work"])
    for kind, got in ceilings.items():
        ceiling = statistics.median(got)
        print(
            f"    machine, {kind} work: {ceiling:.2f}x (medians of {runs}); "
            f"compaction work speedup / that = {speedup / ceiling:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--group-rows", type=int, default=250_000)
    parser.add_argument("--group-updates", type=int, default=50_000)
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--skip-slice", action="store_true", help="run (b) only")
    parser.add_argument("--spark-runs", type=int, default=3, help="(b) runs of local[1] then local[2]")
    parser.add_argument("--scaling", help="(c) base file sizes in MB, e.g. 256,1024")
    parser.add_argument(
        "--scaling-updates", type=int, help="(c) updates in every log (default: 20%% of the base rows)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lake-compaction-bench-"))
    try:
        if not args.skip_slice:
            part_a(work, args.rows, args.updates, args.runs)
        if args.scaling:
            part_c(work, [int(x) for x in args.scaling.split(",")], 1, args.scaling_updates)
        if not args.skip_spark:
            part_b(work, 8, args.group_rows, args.group_updates, args.spark_runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
