"""spark_jobs/compact.py in a local Spark session: one task per operation, recovery of a crashed run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.errors import CompactionConfigError, CompactionError
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.spark_jobs import compact

pytestmark = pytest.mark.spark
DUE = {"hoodie.compact.inline.max.delta.commits": "1"}


@pytest.fixture(params=[6, 8], ids=["v6", "v8"])
def table_version(request: pytest.FixtureRequest) -> int:
    """The job runs on table version 6 and on 8 (Hudi 1.x: its executors' tasks run in the
    compaction's scope, the driver commits Avro metadata)."""
    return request.param


def _table(path: Path, table_version: int = 6) -> LakeTable:
    table = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=table_version,
    )
    ids = [f"k{i:02d}" for i in range(48)]
    write(
        table,
        pa.table(
            {"id": ids, "ts": pa.array([0] * 48, pa.int64()), "p": ["a", "b"] * 24, "v": list(range(48))}
        ),
        "insert",
        max_rows_per_file=6,
    )
    write(
        table,
        pa.table({"id": ids[::2], "ts": pa.array([1] * 24, pa.int64()), "p": ["a"] * 24, "v": [-1] * 24}),
        "upsert",
    )
    write(table, pa.table({"id": ids[1::6], "ts": pa.array([2] * 8, pa.int64()), "p": ["b"] * 8}), "delete")
    return table


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("_hoodie_record_key", "ts", "v")), strict=True))


def _args(table: LakeTable, *extra: str) -> Any:
    return compact.parse_args(["--table", str(table.base_path), *extra])


def test_job_compacts_every_group_in_its_own_task(spark: Any, tmp_path: Path, table_version: int) -> None:
    table = _table(tmp_path / "t", table_version)
    expected = _rows(read_snapshot(table))
    c = schedule_compaction(table, DUE).instant
    result = compact.run(_args(table, "--parallelism", "8"), spark)
    assert result["outcome"] == "COMPLETED" and result["instant"] == c
    assert result["operations"] == 8 and len(result["tasks"]) == 8 and all(t["ok"] for t in result["tasks"])
    assert result["records_written"] == len(expected) == 40
    assert result["peak_task_rss_mb"] > 0
    assert all(t["cpu_seconds"] > 0 and t["worker"] > 0 for t in result["tasks"])
    assert 0 < result["work_seconds"] <= result["job_seconds"] and result["warmup_seconds"] > 0
    assert result["workers"] and all(w["pid"] > 0 and w["prime_seconds"] >= 0 for w in result["workers"])
    assert _rows(read_snapshot(table)) == expected
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
    assert _rows(theirs) == expected
    assert compact.run(_args(table), spark)["outcome"] == "NO_WORK"


def test_job_recovers_a_crashed_inflight_compaction(spark: Any, tmp_path: Path, table_version: int) -> None:
    table = _table(tmp_path / "t", table_version)
    expected = _rows(read_snapshot(table))
    c = schedule_compaction(table, DUE).instant
    calls = []

    def crash_after_first_file(point: str) -> None:
        calls.append(point)
        if point == "file":
            raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError):
        execute_compaction(table, c, fault=crash_after_first_file)
    partial = sorted(p.name for p in table.base_path.glob(f"*/*_{c}.parquet"))
    assert len(partial) == 1  # the crashed attempt's output, invisible to readers
    assert _rows(read_snapshot(table)) == expected
    result = compact.run(_args(table), spark)
    assert result["outcome"] == "COMPLETED" and result["recovered"] is True
    assert [Path(f).name for f in result["removed_files"]] == partial
    assert len(list(table.base_path.glob(f"*/*_{c}.parquet"))) == 8
    assert _rows(read_snapshot(table)) == expected


def test_job_failed_task_leaves_instant_inflight_and_rerun_recovers(
    spark: Any, tmp_path: Path, table_version: int
) -> None:
    table = _table(tmp_path / "t", table_version)
    expected = _rows(read_snapshot(table))
    c = schedule_compaction(table, DUE).instant
    assert c is not None
    # One executor task fails for real: a planned log file is gone when the task reads its slice.
    victim = next(table.base_path.glob("a/.*.log.*"))
    hidden = victim.with_name("hidden")
    victim.rename(hidden)
    with pytest.raises(CompactionError, match="1 of 8 operations failed"):
        compact.run(_args(table), spark)
    timeline = table.timeline()
    assert timeline.get(c) is not None and timeline.get(c).is_inflight  # type: ignore[union-attr]
    written = sorted(p.name for p in table.base_path.glob(f"*/*_{c}.parquet"))
    assert len(written) == 7  # the other tasks' output, invisible to readers
    hidden.rename(victim)
    assert _rows(read_snapshot(table)) == expected
    result = compact.run(_args(table, "--parallelism", "3"), spark)  # the retry, bin-packed
    assert result["outcome"] == "COMPLETED" and result["instant"] == c and result["recovered"] is True
    assert sorted(Path(f).name for f in result["removed_files"]) == written
    assert len(result["tasks"]) == 8 and len(list(table.base_path.glob(f"*/*_{c}.parquet"))) == 8
    assert _rows(read_snapshot(table)) == expected
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
    assert _rows(theirs) == expected


def test_job_options_are_validated() -> None:
    assert compact.options_of(["hoodie.compaction.strategy=log_file_size"]) == {
        "hoodie.compaction.strategy": "log_file_size"
    }
    with pytest.raises(CompactionConfigError):
        compact.options_of(["no-equals-sign"])
    with pytest.raises(CompactionConfigError):
        compact.options_of(["hoodie.compact.inline.trigger.strategy=SOMETIMES"])


def test_bins_spread_operations_by_io() -> None:
    from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation

    sizes = [50.0, 10.0, 40.0, 30.0, 20.0]
    ops = [
        CompactionOperation("a", f"f{i}", "20240101000000000", None, (), {"TOTAL_IO_MB": size})
        for i, size in enumerate(sizes)
    ]
    packed = compact.bins(ops, 2)
    assert sorted(sum(sizes[i] for i, _ in b) for b in packed) == [70.0, 80.0]
    assert sorted(i for b in packed for i, _ in b) == [0, 1, 2, 3, 4]
    assert len(compact.bins(ops, 8)) == 5  # never more tasks than operations
