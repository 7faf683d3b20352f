"""Compaction (table versions 6 and 8) chooses its executor by plan size: plans reading at most
``spark_threshold_mb`` MB merge in the worker (no JVM), larger ones run ``spark_jobs/compact.py``
through ``spark-submit``; the threshold and the choice are logged, and both give the same rows (ours
and hudi-rs)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from dag_helpers import new_trips_table, upsert_trips
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.services.compaction.operation import load_plan
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.operators.compaction import RunCompactionOperator

pytestmark = pytest.mark.airflow


class _TaskInstance:
    def __init__(self) -> None:
        self.pushed: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.pushed[key] = value


@pytest.fixture(params=[6, 8], ids=["v6", "v8"])
def table_version(request: pytest.FixtureRequest) -> int:
    return request.param


def _planned(path: Path, table_version: int) -> tuple[LakeTable, str, float, list[tuple]]:
    """A MOR table with a requested compaction plan: the table, the instant, the plan's IO in MB, the rows."""
    table, ids = new_trips_table(path, rows=200, per_file=50, width=3, table_version=table_version)
    upsert_trips(table, ids[::4])
    c = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"}).instant
    assert c is not None
    io_mb = round(load_plan(table.timeline(), c).total_io_mb, 3)
    return table, c, io_mb, _rows(read_snapshot(table))


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(n).to_pylist() for n in ("_hoodie_record_key", "ts", "v")), strict=True))


def _hudi_rs(table: LakeTable) -> list[tuple]:
    return _rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(table.uri).build().read()))


def _check_compacted(table: LakeTable, c: str, expected: list[tuple]) -> None:
    done = table.timeline().get(c)
    assert done is not None and done.is_completed and table.timeline().is_compaction(done)
    slices = [g.latest_slice for g in table.file_system_view().file_groups()]
    # Partition a's two groups had log files and are merged at c; b's two are left as they were.
    assert (
        sorted((s.base_instant == c, bool(s.log_files)) for s in slices)
        == [(False, False)] * 2 + [(True, False)] * 2
    )
    assert _rows(read_snapshot(table)) == expected == _hudi_rs(table)


def test_a_plan_at_the_threshold_merges_in_the_worker_and_logs_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, table_version: int
) -> None:
    table, c, io_mb, expected = _planned(tmp_path / "trips", table_version)
    # No Spark connection at all: the worker branch must not need one.
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    ti = _TaskInstance()
    op = RunCompactionOperator(task_id="compact", table_path=table.uri, spark_threshold_mb=str(io_mb))
    result = op.execute({"ti": ti})  # type: ignore[arg-type]
    log = capsys.readouterr().out  # the task log (Airflow's task loggers write through structlog)
    assert result["outcome"] == "COMPLETED" and result["executor"] == "local" and result["instant"] == c
    assert result["operations"] == 2 and result["records_written"] == 100 and result["total_io_mb"] == io_mb
    assert ti.pushed == {"compaction_instant": c}
    assert f"{io_mb} MB to read (<= spark_threshold_mb {float(io_mb)}): merging in the worker" in log
    assert "partition | base files written" in log
    _check_compacted(table, c, expected)


@pytest.mark.spark
def test_a_plan_above_the_threshold_runs_on_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table_version: int
) -> None:
    """Through the real ``spark-submit`` (the session's ``spark_default``: local[2]); the driver's
    start-up INFO lines and PySpark's pandas FutureWarning stay out of the task log."""
    table, c, io_mb, expected = _planned(tmp_path / "trips", table_version)
    op = RunCompactionOperator(task_id="compact", table_path=table.uri, spark_threshold_mb=io_mb - 0.001)
    result = op.execute({"ti": _TaskInstance()})  # type: ignore[arg-type]
    log = capsys.readouterr().out
    assert result["outcome"] == "COMPLETED" and result["executor"] == "spark" and result["operations"] == 2
    assert f"{io_mb} MB to read (> spark_threshold_mb {io_mb - 0.001}): executing on Spark" in log
    assert "lake.compact" in log  # the job's own progress lines reach the task log
    assert "INFO SparkContext" not in log and "FutureWarning" not in log
    _check_compacted(table, c, expected)
