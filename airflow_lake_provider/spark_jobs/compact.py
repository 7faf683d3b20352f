"""Spark entry script of the compaction service: one task per operation (or per bin of them).

The driver picks the instant (a crashed, inflight one first: its partial output is removed), moves it
to inflight, and commits; executors merge file slices with the table core (log blocks decoded there:
the pip pyspark has no Avro data source). While the tasks run, the driver logs a line whenever
more operations have finished (``compaction <c>: 3/8 operations done``), then one line per operation.

    spark-submit spark_jobs/compact.py --table PATH [--instant T] [--option k=v ...] [--parallelism N]

The plan fixes the work; of the ``--option`` values execution reads only the metadata-table policy
(``hoodie.metadata.enable``, ``lake.metadata-table.maintain``: under maintain the driver writes the
MDT deltacommit when it commits). All are validated like the scheduler's so that a typo fails the
job instead of being ignored.
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

from airflow_lake_provider.lake.errors import CompactionConfigError
from airflow_lake_provider.lake.services.compaction.config import CompactionConfig
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.operation import run_operation
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import WriteStat
from airflow_lake_provider.spark_jobs._common import (
    KillSwitch,
    kill_point,
    kill_switch,
    option_values,
    run_job,
)
from airflow_lake_provider.spark_jobs.worker_process import WORKER_ENV

log = logging.getLogger("lake.compact")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compact.py", description=__doc__)
    parser.add_argument("--table", required=True, help="table base path")
    parser.add_argument("--instant", help="the compaction to execute (default: inflight, else earliest)")
    parser.add_argument(
        "--option", action="append", default=[], metavar="K=V", help="compaction option (repeatable)"
    )
    parser.add_argument(
        "--parallelism", type=int, default=0, help="tasks (default: the cluster's parallelism)"
    )
    return parser.parse_args(argv)


def options_of(pairs: Sequence[str]) -> dict[str, str]:
    """``k=v`` pairs as a dict, validated as compaction options (``CompactionConfigError`` if not)."""
    options = option_values(pairs, CompactionConfigError)
    CompactionConfig.from_options(options)
    return options


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


def _prepare_worker(context: Any) -> float:
    """Executor side: fit the Python worker to merges (see ``spark_jobs.worker_process``); idempotent.

    Arrow (and polars, through POLARS_MAX_THREADS, see main) get the task's cores, no more.
    """
    from airflow_lake_provider.spark_jobs.worker_process import prepare_merge_worker

    return prepare_merge_worker(context.cpus() if context is not None else 1)


def _task(
    items: Any,
    base: str,
    timeline: Timeline,
    schema: Any,
    instant: str,
    finished: Any,
    switch: KillSwitch | None = None,
) -> Any:
    """Executor side: merge each operation of the bin; yield (file group, outcome, metrics).

    The metrics are the operation's wall and CPU seconds, the worker's peak RSS so far and its
    process id (a worker serves many tasks when ``spark.python.worker.reuse`` is on).

    ``finished`` is an accumulator counting finished operations; Spark merges a task's updates into
    the driver's value when the task ends, which the driver's watcher logs.
    """
    import os
    import resource

    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    _prepare_worker(context)
    table = LakeTable.open(base)
    for index, op in items:
        started, cpu_started = time.monotonic(), time.process_time()
        outcome = run_operation(table, timeline, schema, instant, index, op, attempt=attempt)
        if isinstance(outcome, WriteStat):
            kill_point(switch)  # test-only: the job dies here once, its first base file written
        metrics = {
            "seconds": round(time.monotonic() - started, 3),
            "cpu_seconds": round(time.process_time() - cpu_started, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),  # KiB
            "worker": os.getpid(),
        }
        finished.add(1)
        yield (f"{op.partition}/{op.file_id}", outcome, metrics)


def _warm_worker(_slot: int) -> dict[str, Any]:
    """Executor side: prepare this Python worker; return its process id, priming seconds and
    whether it started with the allocator settings of ``WORKER_ENV``."""
    import os

    from pyspark import TaskContext

    from airflow_lake_provider.spark_jobs.worker_process import worker_env_in_effect

    seconds = _prepare_worker(TaskContext.get())
    return {"pid": os.getpid(), "prime_seconds": round(seconds, 3), "allocator_env": worker_env_in_effect()}


def warm_up(sc: Any) -> tuple[float, list[dict[str, Any]]]:
    """Start a Python worker per task slot, prepared for merges; return the seconds it took and
    what each warm-up task reported (see ``_warm_worker``).

    Done before the instant goes inflight, so executors that cannot import the package fail the job
    while the plan is still only requested. It also pays the session's one-off costs (first job,
    Python worker start, imports, the priming merge) up front, so the compaction is the work itself.
    """
    started = time.monotonic()
    slots = max(1, int(sc.defaultParallelism))
    workers = sc.parallelize(range(slots), slots).map(_warm_worker).collect()
    log.info(
        "primed Python workers %s",
        ", ".join(
            f"{w['pid']} ({w['prime_seconds']:.2f} s{'' if w['allocator_env'] else ', default allocators'})"
            for w in workers
        ),
    )
    return time.monotonic() - started, workers


def _watch(instant: str, total: int, finished: Any, done: threading.Event) -> None:
    """Log the number of finished operations whenever it changes (until ``done`` is set)."""
    started = time.monotonic()
    reported = 0
    stopping = False
    while not stopping:
        stopping = done.wait(0.5)  # one last look after the job ended: its last tasks' updates
        count = int(finished.value)
        if count != reported:
            log.info(
                "compaction %s: %d/%d operations done (%.1f s)",
                instant,
                count,
                total,
                time.monotonic() - started,
            )
            reported = count


def _report(
    instant: str,
    done: int,
    total: int,
    group: str,
    outcome: Any,
    task: dict[str, Any],
    metrics: list[dict[str, Any]],
) -> None:
    ok = isinstance(outcome, WriteStat)
    metrics.append({"file_group": group, "ok": ok, **task})
    log.info(
        "compaction %s: operation %d/%d %s %s in %.1f s (worker %d, peak RSS %.0f MB)",
        instant,
        done,
        total,
        group,
        "ok" if ok else f"FAILED: {outcome}",
        task["seconds"],
        task["worker"],
        task["peak_rss_mb"],
    )


def run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    sc = spark.sparkContext
    options = options_of(args.option)
    table = LakeTable.open(args.table)
    base = table.uri
    task_metrics: list[dict[str, Any]] = []
    switch = kill_switch()

    def spark_runner(
        tbl: LakeTable, timeline: Timeline, schema: Any, instant: str, ops: Sequence[CompactionOperation]
    ) -> list[WriteStat | str]:
        packed = bins(ops, args.parallelism or len(ops))
        log.info("compaction %s: %d operations in %d tasks", instant, len(ops), len(packed))
        finished = sc.accumulator(0)
        rdd = sc.parallelize(packed, len(packed)).flatMap(
            lambda b: _task(b, base, timeline, schema, instant, finished, switch)
        )
        # One Spark job; while it runs, a driver thread reports finished operations as they come.
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(instant, len(ops), finished, done), daemon=True)
        watcher.start()
        try:
            results = rdd.collect()
        finally:
            done.set()
            watcher.join()
        outcomes: list[WriteStat | str] = []
        for group, outcome, task in results:
            outcomes.append(outcome)
            _report(instant, len(outcomes), len(ops), group, outcome, task, task_metrics)
        return outcomes

    started = time.monotonic()
    warmup = 0.0
    workers: list[dict[str, Any]] = []
    if args.instant or table.timeline().pending_compactions():
        warmup, workers = warm_up(sc)
        log.info("Python workers ready in %.1f s", warmup)
    work_started = time.monotonic()
    result = execute_compaction(table, args.instant, runner=spark_runner, options=options)
    out = result.to_json()
    out["warmup_seconds"] = round(warmup, 3)
    out["workers"] = workers
    out["work_seconds"] = round(time.monotonic() - work_started, 3)  # pick, run, commit
    out["job_seconds"] = round(time.monotonic() - started, 3)
    out["tasks"] = task_metrics
    out["peak_task_rss_mb"] = max((m["peak_rss_mb"] for m in task_metrics), default=0.0)
    out["options"] = options
    if result.outcome is Outcome.NO_WORK:
        out["reason"] = "no requested or inflight compaction"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    return run_job(
        "lake-compact",
        sys.argv[1:] if argv is None else argv,
        parse_args,
        run,
        ("POLARS_MAX_THREADS",),
        WORKER_ENV,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
