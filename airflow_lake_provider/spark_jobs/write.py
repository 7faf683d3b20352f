"""Spark entry script of a write (insert, upsert or delete) of a large input as ONE instant.

The driver holds the table's write lock, reads the input (a parquet file or a folder of them),
checks and routes the batch, rolls back failed writes as the table's policy says, creates the
instant and assigns the records to file groups with the core's key lookup. Each Spark task then
writes its file groups through the core (marker, then the new base file, rewritten base file or
log file) and returns their write stats; the driver commits with the instant's extra metadata.
An error after the instant exists (a failed task included) rolls it back before the job fails.

    spark-submit spark_jobs/write.py --table PATH --input FILE_OR_FOLDER --operation OP
        [--option k=v ...] [--meta k=v ...] [--max-rows-per-file N] [--parallelism N]

Tests only: ``LAKE_TEST_KILL_WRITE_AT=<point>`` (``inflight`` or ``commit``: the instant is inflight,
after the executors wrote their files) makes the driver SIGKILL itself there, once per
``LAKE_TEST_KILL_ONCE_FILE`` (created on the first kill), to stand in for a job that died.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.errors import LakeError, WriteInputError
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import (
    DEFAULT_MAX_ROWS_PER_FILE,
    FileGroupResult,
    FileGroupWrite,
    GroupRunner,
    Operation,
    WriteContext,
    write,
    write_file_group,
)
from airflow_lake_provider.lake.table.write.input import find_input, read_input
from airflow_lake_provider.spark_jobs._common import key_values, option_values, run_job

log = logging.getLogger("lake.write")
KILL_AT_ENV = "LAKE_TEST_KILL_WRITE_AT"
KILL_ONCE_ENV = "LAKE_TEST_KILL_ONCE_FILE"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="write.py", description=__doc__)
    parser.add_argument("--table", required=True, help="table base path")
    parser.add_argument("--input", required=True, help="a parquet file or a folder of parquet files")
    parser.add_argument("--operation", required=True, choices=[o.value for o in Operation])
    parser.add_argument("--option", action="append", default=[], metavar="K=V", help="write option")
    parser.add_argument(
        "--meta", action="append", default=[], metavar="K=V", help="extra metadata of the instant"
    )
    parser.add_argument("--max-rows-per-file", type=int, default=DEFAULT_MAX_ROWS_PER_FILE)
    parser.add_argument("--parallelism", type=int, default=0, help="tasks (default: the cluster's)")
    return parser.parse_args(argv)


def _write_groups(base: str, context: WriteContext, items: Any) -> Any:
    """Executor side: write each (index, file group) of this task through the core."""
    table = LakeTable.open(base)
    for index, unit in items:
        # The driver reads the new logs' column stats back rather than be sent every row.
        yield index, dataclasses.replace(write_file_group(table, context, unit), log_rows=None)


def spark_runner(sc: Any, base: str, parallelism: int = 0) -> GroupRunner:
    """A :data:`GroupRunner` that writes the file groups in Spark tasks (contiguous runs of groups)."""

    def run(
        table: LakeTable, context: WriteContext, units: Sequence[FileGroupWrite]
    ) -> list[FileGroupResult]:
        if not units:
            return []
        tasks = max(1, min(len(units), parallelism or sc.defaultParallelism * 2))
        log.info("write %s: %d file groups in %d Spark tasks", context.instant, len(units), tasks)
        rdd = sc.parallelize(list(enumerate(units)), tasks)
        try:
            done = dict(rdd.mapPartitions(lambda items: _write_groups(base, context, items)).collect())
        except Exception as exc:  # Py4J wraps the executor's error: one line of it, the write rolls back
            first = next((line for line in str(exc).splitlines() if "Error" in line), str(exc)[:300])
            raise LakeError(
                f"write {context.instant} of {base}: a Spark task failed: {first.strip()}"
            ) from exc
        return [done[i] for i in range(len(units))]

    return run


def _test_kill_hook() -> Callable[[str], None]:
    """The fault hook the write gets: a no-op unless a test set ``LAKE_TEST_KILL_WRITE_AT``."""
    point = os.environ.get(KILL_AT_ENV, "").strip()
    if not point:
        return lambda _point: None

    def hook(at: str) -> None:
        if at != point:
            return
        once = os.environ.get(KILL_ONCE_ENV)
        if once:
            marker = Path(once)
            if marker.exists():
                return
            marker.touch()
        log.warning("%s=%s: killing the driver (tests only)", KILL_AT_ENV, point)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)

    return hook


def run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    if args.max_rows_per_file <= 0:
        raise WriteInputError(f"--max-rows-per-file={args.max_rows_per_file} must be positive")
    table = LakeTable.open(args.table)
    source = find_input(args.input)
    batch = read_input(source)
    log.info(
        "write of %s into %s: %d rows in %d files", args.input, table.uri, batch.num_rows, len(source.files)
    )
    result = write(
        table,
        batch,
        args.operation,
        max_rows_per_file=args.max_rows_per_file,
        options=option_values(args.option, WriteInputError),
        extra_metadata=key_values(args.meta, WriteInputError),
        runner=spark_runner(spark.sparkContext, table.uri, args.parallelism),
        fault=_test_kill_hook(),
    )
    return {
        "outcome": "COMMITTED",
        "instant": result.instant,
        "action": result.action,
        "operation": result.operation.value,
        "inserted": result.inserted,
        "updated": result.updated,
        "deleted": result.deleted,
        "files": len(result.files),
        "archived": list(result.archived),  # the automatic archival after the commit (driver side)
        "input_rows": batch.num_rows,
        "input_files": len(source.files),
    }


def main(argv: Sequence[str] | None = None) -> int:
    return run_job("lake-write", sys.argv[1:] if argv is None else argv, parse_args, run)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
