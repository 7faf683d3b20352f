"""Spark entry script of the clean service, for large tables.

Partition listing and deletes are spread over the executors, one task per partition; planning and
every timeline transition stay on the driver, in the table core.

    spark-submit spark_jobs/clean.py --table PATH [--option k=v ...] [--mode M] [--dry-run] [--instant T]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.services.clean.executor import delete_files, run_clean
from airflow_lake_provider.lake.services.clean.plan import CleanPlan
from airflow_lake_provider.lake.services.clean.result import DeleteOutcome
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.spark_jobs._common import (
    KillSwitch,
    kill_point,
    kill_switch,
    option_values,
    run_job,
)


def _delete(base: str, paths: Sequence[str], switch: KillSwitch | None) -> DeleteOutcome:
    """Executor side: delete one partition's planned files."""
    outcome = delete_files(open_storage(base), paths)
    kill_point(switch)  # test-only: the job dies here once, this partition's files deleted
    return outcome


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="clean.py", description=__doc__)
    parser.add_argument("--table", required=True, help="table base path")
    parser.add_argument("--option", action="append", default=[], help="cleaner option k=v (repeatable)")
    parser.add_argument(
        "--mode", default="schedule_and_execute", choices=["schedule", "execute", "schedule_and_execute"]
    )
    parser.add_argument("--instant", help="with --mode execute: the pending clean to finish")
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args(argv)


def options_of(pairs: Sequence[str]) -> dict[str, str]:
    return option_values(pairs)


def run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    sc = spark.sparkContext
    table = LakeTable.open(args.table)
    base = table.uri  # executors open their own storage from the URI
    switch = kill_switch()

    def lister(partitions: Sequence[str]) -> Mapping[str, Sequence[tuple[str, int]]]:
        if not partitions:
            return {}
        rdd = sc.parallelize(list(partitions), min(len(partitions), sc.defaultParallelism * 4))
        return dict(rdd.map(lambda p: (p, open_storage(base).list(p))).collect())

    def deleter(tbl: LakeTable, plan: CleanPlan) -> dict[str, DeleteOutcome]:
        items = list(plan.files_per_partition.items())
        if not items:
            return {}
        rdd = sc.parallelize(items, min(len(items), sc.defaultParallelism * 4))
        return dict(rdd.map(lambda kv: (kv[0], _delete(base, kv[1], switch))).collect())

    result = run_clean(
        table,
        options_of(args.option),
        mode=args.mode,
        dry_run=args.dry_run,
        instant=args.instant,
        deleter=deleter,
        lister=lister,
    )
    return result.to_dict()


def main(argv: Sequence[str] | None = None) -> int:
    return run_job("lake-clean", sys.argv[1:] if argv is None else argv, parse_args, run, ())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
