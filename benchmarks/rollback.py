"""Rolling back a failed large write, next to the time the write took, in the same run.

A merge-on-read table gets ``--rows`` inserted rows, then an upsert of all of them that dies right
before its commit (the crash hook, as a killed process). Measured: that write up to its death, the
rollback of what it left (target <= 10% of the write), and a rollback with nothing to roll back in
a process that has the core loaded (target <= 50 ms: what a worker pays when there is no work).

    PYTHONPATH=. .venv/bin/python benchmarks/rollback.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake import LakeTable, write  # noqa: E402
from airflow_lake_provider.lake.storage import SimulatedCrash, inject_crash  # noqa: E402
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
        with inject_crash(None) as probe:  # how many durable steps a whole upsert takes
            write(table, upsert, "upsert")
        steps = len(probe.steps)
        last = probe.steps[-1]
        started = time.perf_counter()
        try:  # dies after writing every data file, before the completed instant file
            with inject_crash(steps - 3):
                write(table, _batch(args.rows, 3), "upsert")
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


if __name__ == "__main__":
    main()
