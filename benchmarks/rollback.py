"""Rolling back a failed large write, next to the time the write took, in the same run.

A merge-on-read table gets ``--rows`` inserted rows, then an upsert of all of them that dies right
before its commit (the crash hook, as a killed process). Measured: that write up to its death, the
rollback of what it left (target <= 10% of the write), and a rollback with nothing to roll back in
a process that has the core loaded (target <= 50 ms: what a worker pays when there is no work).

With ``--spark`` the same upsert also runs through ``spark_jobs/write.py``'s runner (file groups
written in local[N] Spark tasks; the session is started before timing), whole and killed before its
commit, and that rollback is timed too: ratios against the in-process upsert of the same run.

    PYTHONPATH=. .venv/bin/python benchmarks/rollback.py [--rows 1000000] [--spark] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake import LakeTable, write  # noqa: E402
from airflow_lake_provider.lake.storage import CrashingStorage, SimulatedCrash  # noqa: E402
from airflow_lake_provider.lake.table.rollback.executor import rollback  # noqa: E402


def _batch(rows: int, ts: int) -> pa.Table:
    return pa.table(
        {
            "id": [f"k{i:08d}" for i in range(rows)],
            "ts": pa.array([ts] * rows, pa.int64()),
            "p": [f"p{i % 10}" for i in range(rows)],
            "v": pa.array(range(rows), pa.int64()),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--spark", action="store_true", help="also time the Spark write path")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollback_") as tmp:
        table = LakeTable.create(
            Path(tmp) / "t",
            name="r",
            table_type="mor",
            record_key_fields=("id",),
            precombine_field="ts",
            partition_fields=("p",),
        )
        write(table, _batch(args.rows, 1), "insert")
        upsert = _batch(args.rows, 2)
        probe = CrashingStorage(table.storage)  # how many durable steps a whole upsert takes
        write(LakeTable(probe, table.config, table.clock), upsert, "upsert")
        steps = len(probe.steps)
        last = probe.steps[-1]
        started = time.perf_counter()
        try:  # dies after writing every data file, before the completed instant file
            crashing = CrashingStorage(table.storage, after=steps - 3)
            write(LakeTable(crashing, table.config, table.clock), _batch(args.rows, 3), "upsert")
        except SimulatedCrash:
            pass
        failed_write = time.perf_counter() - started
        started = time.perf_counter()
        done = rollback(table)
        rolled = time.perf_counter() - started
        started = time.perf_counter()
        nothing = rollback(table)
        idle = time.perf_counter() - started
        print(f"{args.rows:,} rows; a whole upsert takes {steps} durable steps (last: {last})")
        print(f"failed upsert until its death: {failed_write:.2f} s")
        share = rolled / failed_write
        print(f"rollback of it ({len(done)} instant): {rolled:.3f} s = {share:.1%} (target <= 10%)")
        print(
            f"rollback with nothing to do ({len(nothing)} instants): {idle * 1000:.1f} ms (target <= 50 ms)"
        )
        if args.spark:
            _spark_path(table, args.rows, args.master)


def _spark_path(table: LakeTable, rows: int, master: str) -> None:
    """The upsert in process (baseline), then through Spark tasks: whole, and killed before its commit."""
    from pyspark.sql import SparkSession

    from airflow_lake_provider.spark_jobs.write import spark_runner

    # The Python workers must run this interpreter (it has pyarrow), and import this checkout.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.python.unix.domain.socket.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    runner = spark_runner(spark.sparkContext, table.uri)
    spark.sparkContext.parallelize(range(4), 2).count()  # start the Python workers before timing
    started = time.perf_counter()
    write(table, _batch(rows, 4), "upsert")
    local = time.perf_counter() - started
    started = time.perf_counter()
    result = write(table, _batch(rows, 5), "upsert", runner=runner)
    on_spark = time.perf_counter() - started

    def die_before_commit(point: str) -> None:
        if point == "commit":
            raise SimulatedCrash("killed before the commit")

    started = time.perf_counter()
    try:
        write(table, _batch(rows, 6), "upsert", runner=runner, fault=die_before_commit)
    except SimulatedCrash:
        pass
    killed = time.perf_counter() - started
    started = time.perf_counter()
    done = rollback(table)
    rolled = time.perf_counter() - started
    spark.stop()
    print(f"spark ({master}): upsert in process {local:.2f} s (baseline)")
    print(
        f"spark ({master}): upsert through Spark tasks {on_spark:.2f} s = {on_spark / local:.2f}x "
        f"({len(result.files)} file groups)"
    )
    print(
        f"spark ({master}): killed before its commit after {killed:.2f} s; rollback of it "
        f"({len(done)} instant): {rolled:.3f} s = {rolled / killed:.1%} of the killed write"
    )


if __name__ == "__main__":
    main()
