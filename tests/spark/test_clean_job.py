"""``spark_jobs/clean.py`` on a real table: in the session's SparkSession, and through ``spark-submit``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.spark_submit import job_script, parse_result, spark_submit_binary
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.active import HOODIE_DIR
from airflow_lake_provider.lake.timeline.instant import Action, State

pytestmark = pytest.mark.spark


def _build_table(path: Path, upserts: int = 12, version: int = 6) -> tuple[LakeTable, list[str]]:
    """A COW table with two partitions; every upsert rewrites both file groups (one new slice each)."""
    table = LakeTable.create(
        path,
        name="trips",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
    )
    commits = []
    for ts in range(upserts):
        batch = pa.table(
            {"id": ["k1", "k2", "k3"], "ts": pa.array([ts] * 3, pa.int64()), "p": ["a", "a", "b"]}
        )
        commits.append(write(table, batch, "upsert").instant)
    return table, commits


def _data_files(base: Path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != HOODIE_DIR]
        out |= {os.path.relpath(os.path.join(root, f), base) for f in files if f.endswith(".parquet")}
    return out


def _written_at(files: set[str], instant: str) -> set[str]:
    return {f for f in files if f.rsplit("_", 1)[1].removesuffix(".parquet") == instant}


@pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])
def test_run_in_local_session_deletes_exactly_the_oldest_slices(spark, tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.spark_jobs.clean import parse_args, run

    table, commits = _build_table(tmp_path / "trips", version=version)
    before = _data_files(table.base_path)
    expected = _written_at(before, commits[0])
    assert len(expected) == 2

    result = run(
        parse_args(["--table", str(table.base_path), "--option", "hoodie.cleaner.commits.retained=10"]), spark
    )
    assert before - _data_files(table.base_path) == expected
    assert result["outcome"] == "CLEANED" and result["deleted_files"] == 2 and result["failed_files"] == 0
    assert {p: v["files"] for p, v in result["partitions"].items()} == {"a": 1, "b": 1}
    assert result["earliest_commit_to_retain"] == commits[2]
    completed = table.timeline().filter([Action.CLEAN], [State.COMPLETED])
    assert [i.timestamp for i in completed] == [result["instant"]]

    again = run(parse_args(["--table", str(table.base_path)]), spark)
    assert again["outcome"] == "NO_WORK"


@pytest.mark.slow
def test_spark_submit_local_executes_a_scheduled_clean(tmp_path: Path) -> None:
    """The hook's Spark path by hand: schedule in-process, ``spark-submit --mode execute --instant``."""
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.services.clean.result import Outcome

    table, commits = _build_table(tmp_path / "trips")
    before = _data_files(table.base_path)
    scheduled = run_clean(table, mode="schedule")
    assert scheduled.outcome is Outcome.SCHEDULED and scheduled.instant

    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    command = [
        spark_submit_binary(),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        str(job_script("clean.py")),
        "--table",
        str(table.base_path),
        "--mode",
        "execute",
        "--instant",
        scheduled.instant,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240, check=False)
    result = parse_result(proc.stdout)
    assert proc.returncode == 0 and result is not None, proc.stderr[-3000:]
    assert result["outcome"] == "CLEANED" and result["instant"] == scheduled.instant
    assert result["deleted_files"] == 2
    assert before - _data_files(table.base_path) == _written_at(before, commits[0])
    completed = table.timeline().filter([Action.CLEAN], [State.COMPLETED])
    assert [i.timestamp for i in completed] == [scheduled.instant]
