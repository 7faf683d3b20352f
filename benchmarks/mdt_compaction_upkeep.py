"""Benchmark (issue 28): what keeping Hudi's metadata table (MDT) costs a compaction of a large slice.

A copy of the Spark-written v9 MOR table ``mor_avro_v9_txns_simple_meta`` with ``files``,
``column_stats`` and ``partition_stats`` kept gets ``--rows`` rows inserted into one new file group
(one partition, one base file), then an upsert of 100 of them (a log file on that slice), and a
compaction scheduled for it. Each round copies that table twice: one copy's compaction runs with
``lake.metadata-table.maintain=true`` (its MDT deltacommit: the new base file, its column stats, the
partition's stats), the other's MDT is dropped first (the baseline). Only ``execute_compaction`` is
timed, alternating which copy goes first; prints the medians and the ratio maintained/plain
(issue 28's target: <= 1.10 for a 1M-row slice).

The MDT is compacted while the table is prepared, so the timed compaction's MDT deltacommit leaves
its own compaction not due, as 9 in 10 are (``hoodie.metadata.compact.max.delta.commits``, 10 by
default). A third copy runs with that option at 1, so its MDT compaction (and clean) follows, as
every tenth does: its ratio, and the ratio over ten (nine of the first, one of it), are printed too.

    PYTHONPATH=. .venv/bin/python benchmarks/mdt_compaction_upkeep.py [--rows 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pyarrow as pa  # noqa: E402
from mdt_tables import keep_files_partition_only  # noqa: E402
from mdt_upkeep import _unzip  # noqa: E402

from airflow_lake_provider.lake.services.compaction.executor import execute_compaction  # noqa: E402
from airflow_lake_provider.lake.services.compaction.result import Outcome  # noqa: E402
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction  # noqa: E402
from airflow_lake_provider.lake.table.metadata.policy import drop_metadata_table  # noqa: E402
from airflow_lake_provider.lake.table.metadata.services import run_metadata_table_services  # noqa: E402
from airflow_lake_provider.lake.table.reader import read_snapshot  # noqa: E402
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402
from airflow_lake_provider.lake.table.write.writer import write  # noqa: E402

MAINTAIN = {"lake.metadata-table.maintain": "true", "hoodie.cleaner.policy.failed.writes": "NEVER"}
PLAIN = {"hoodie.cleaner.policy.failed.writes": "NEVER"}
DUE = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}  # its MDT compaction follows
PARTITION = "bench"


def _rows(template: pa.Table, count: int, start: int = 0) -> pa.Table:
    """``count`` rows shaped as the table's, keys ``big-<n>``, in partition ``bench``."""
    row = template.slice(0, 1)
    data = {name: pa.repeat(row.column(name)[0], count) for name in row.column_names}
    data["txn_id"] = pa.array([f"big-{n:08d}" for n in range(start, start + count)])
    data["region"] = pa.repeat(pa.scalar(PARTITION), count)
    data["txn_ts"] = pa.array(range(start, start + count), pa.int64())
    return pa.table({name: data[name].cast(row.schema.field(name).type) for name in row.column_names})


def _prepare(workdir: Path, rows: int) -> tuple[Path, str]:
    table = keep_files_partition_only(_unzip(workdir / "template"), ("column_stats", "partition_stats"))
    snapshot = read_snapshot(LakeTable.open(table))
    template = snapshot.drop_columns([c for c in snapshot.column_names if c.startswith("_hoodie_")])
    write(LakeTable.open(table), _rows(template, rows), "insert", options=MAINTAIN, max_rows_per_file=rows)
    updates = _rows(template, 100)
    updates = updates.set_column(updates.column_names.index("txn_ts"), "txn_ts", pa.array([rows] * 100))
    write(LakeTable.open(table), updates, "upsert", options=MAINTAIN)
    # The Spark-written slices have no logs left (Spark compacted them): the plan is the new group.
    scheduled = schedule_compaction(LakeTable.open(table), MAINTAIN, force=True)
    assert scheduled.instant is not None, scheduled
    assert run_metadata_table_services(LakeTable.open(table), DUE) is not None  # the MDT compacted now
    return table, scheduled.instant


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="mdt_compaction_upkeep_"))
    try:
        template, instant = _prepare(workdir, args.rows)
        cases = {"maintained": MAINTAIN, "plain": PLAIN, "mdt-compacted": DUE}
        times: dict[str, list[float]] = {name: [] for name in cases}
        for round_no in range(args.runs):
            order = list(cases)[round_no % 3 :] + list(cases)[: round_no % 3]
            for name in order:
                path = workdir / f"{name}-{round_no}"
                shutil.copytree(template, path)
                if name == "plain":
                    drop_metadata_table(LakeTable.open(path))
                table = LakeTable.open(path)
                start = time.perf_counter()
                done = execute_compaction(table, instant, options=cases[name])
                times[name].append(time.perf_counter() - start)
                assert done.outcome is Outcome.COMPLETED and done.records_written >= args.rows, done
                shutil.rmtree(path)
        medians = {name: statistics.median(t) for name, t in times.items()}
        for name, value in medians.items():
            print(f"{name:>13}: median {value:.2f} s over {args.runs} compactions of a {args.rows}-row slice")
        plain = medians["plain"]
        print(f"ratio maintained/plain: {medians['maintained'] / plain:.3f} (target <= 1.10)")
        print(f"ratio with the MDT's compaction after it (1 in 10): {medians['mdt-compacted'] / plain:.3f}")
        over_ten = (9 * medians["maintained"] + medians["mdt-compacted"]) / (10 * plain)
        print(f"ratio over ten compactions (9 + 1): {over_ten:.3f}")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
