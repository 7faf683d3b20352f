"""Spark entry script of the compaction service: one task per operation (or per bin of them).

The driver picks the instant (a crashed, inflight one first: its partial output is removed), moves it
to inflight, and commits; executors merge file slices with the table core (log blocks decoded there:
the pip pyspark has no Avro data source). A line per finished operation reports progress.

    spark-submit spark_jobs/compact.py --table PATH [--instant T] [--parallelism N]
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.commit_metadata import WriteStat
from airflow_lake_provider.lake.compaction import Outcome, execute_compaction, run_operation
from airflow_lake_provider.lake.compaction_plan import CompactionOperation
from airflow_lake_provider.lake.table import LakeTable
from airflow_lake_provider.lake.timeline import Timeline
from spark_jobs._common import run_job

log = logging.getLogger("lake.compact")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compact.py", description=__doc__)
    parser.add_argument("--table", required=True, help="table base path")
    parser.add_argument("--instant", help="the compaction to execute (default: inflight, else earliest)")
    parser.add_argument(
        "--parallelism", type=int, default=0, help="tasks (default: the cluster's parallelism)"
    )
    return parser.parse_args(argv)


def bins(ops: Sequence[CompactionOperation], count: int) -> list[list[tuple[int, CompactionOperation]]]:
    """Spread operations over ``count`` tasks, largest IO first onto the least loaded (greedy packing)."""
    count = max(1, min(count, len(ops)))
    loads = [0.0] * count
    packed: list[list[tuple[int, CompactionOperation]]] = [[] for _ in range(count)]
    for index, op in sorted(enumerate(ops), key=lambda item: -item[1].io_mb):
        target = loads.index(min(loads))
        packed[target].append((index, op))
        loads[target] += op.io_mb or 1.0
    return [b for b in packed if b]


def _task(items: Any, base: str, timeline: Timeline, schema: Any, instant: str) -> Any:
    """Executor side: merge each operation of the bin; yield (status, payload, seconds, peak RSS MB)."""
    import resource

    import pyarrow as pa
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    # Use the cores Spark gave this task, no more: Arrow's pool defaults to every core of the host,
    # and concurrent tasks would fight over them (polars is capped by POLARS_MAX_THREADS, see main).
    pa.set_cpu_count(max(1, context.cpus() if context is not None else 1))
    table = LakeTable.open(base)
    for index, op in items:
        started = time.monotonic()
        outcome = run_operation(table, timeline, schema, instant, index, op, attempt=attempt)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        yield (f"{op.partition}/{op.file_id}", outcome, time.monotonic() - started, peak_mb)


def _watch(sc: Any, instant: str, total: int, done: threading.Event) -> None:
    """Log the running compaction's finished tasks whenever the count changes."""
    tracker = sc.statusTracker()
    reported = -1
    while not done.wait(1.0):
        finished = sum(
            info.numCompletedTasks
            for info in (tracker.getStageInfo(s) for s in tracker.getActiveStageIds())
            if info is not None
        )
        if finished != reported:
            log.info("compaction %s: %d/%d tasks finished", instant, finished, total)
            reported = finished


def _report(
    instant: str,
    done: int,
    total: int,
    group: str,
    outcome: Any,
    seconds: float,
    peak_mb: float,
    metrics: list[dict[str, Any]],
) -> None:
    ok = isinstance(outcome, WriteStat)
    metrics.append(
        {"file_group": group, "ok": ok, "seconds": round(seconds, 3), "peak_rss_mb": round(peak_mb, 1)}
    )
    log.info(
        "compaction %s: operation %d/%d %s %s in %.1f s (worker peak RSS %.0f MB)",
        instant,
        done,
        total,
        group,
        "ok" if ok else f"FAILED: {outcome}",
        seconds,
        peak_mb,
    )


def run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    sc = spark.sparkContext
    table = LakeTable.open(args.table)
    base = str(table.base_path)
    task_metrics: list[dict[str, Any]] = []

    def spark_runner(
        tbl: LakeTable, timeline: Timeline, schema: Any, instant: str, ops: Sequence[CompactionOperation]
    ) -> list[WriteStat | str]:
        packed = bins(ops, args.parallelism or len(ops))
        rdd = sc.parallelize(packed, len(packed)).flatMap(lambda b: _task(b, base, timeline, schema, instant))
        # One job; while it runs, a driver thread reports finished tasks as they come.
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(sc, instant, len(packed), done), daemon=True)
        watcher.start()
        try:
            results = rdd.collect()
        finally:
            done.set()
            watcher.join()
        outcomes: list[WriteStat | str] = []
        for group, outcome, seconds, peak_mb in results:
            outcomes.append(outcome)
            _report(instant, len(outcomes), len(ops), group, outcome, seconds, peak_mb, task_metrics)
        return outcomes

    started = time.monotonic()
    result = execute_compaction(table, args.instant, runner=spark_runner)
    out = result.to_json()
    out["job_seconds"] = round(time.monotonic() - started, 3)
    out["tasks"] = task_metrics
    out["peak_task_rss_mb"] = max((m["peak_rss_mb"] for m in task_metrics), default=0.0)
    if result.outcome is Outcome.NO_WORK:
        out["reason"] = "no requested or inflight compaction"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    return run_job(
        "lake-compact", sys.argv[1:] if argv is None else argv, parse_args, run, ("POLARS_MAX_THREADS",)
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
