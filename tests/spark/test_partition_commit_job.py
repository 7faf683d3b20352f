"""The ``metastore`` policy through Spark SQL (embedded Derby metastore): the table definition is
created once, partitions are added once, and ``SHOW PARTITIONS`` lists exactly the committed ones."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.services.partition_commit.executor import commit_partitions
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.spark_jobs.partition_commit import SparkMetastorePolicy, parse_args, run

pytestmark = pytest.mark.spark

H03 = "year=2024/month=01/day=05/hour=03"
H04 = "year=2024/month=01/day=05/hour=04"


def _table(path: Path, name: str) -> LakeTable:
    table = LakeTable.create(
        path,
        name=name,
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("year", "month", "day", "hour"),
        hive_style=True,
    )
    write(
        table,
        pa.table(
            {
                "id": ["a", "b", "c"],
                "ts": pa.array([1, 2, 3], pa.int64()),
                "v": [1.5, 2.5, 3.5],
                "year": ["2024"] * 3,
                "month": ["01"] * 3,
                "day": ["05"] * 3,
                "hour": ["03", "03", "04"],
            }
        ),
        "insert",
    )
    return table


def _partitions(spark: Any, qualified: str) -> list[str]:
    return sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {qualified}").collect())


def test_metastore_policy_defines_the_table_and_adds_partitions_once(spark: Any, tmp_path: Path) -> None:
    table = _table(tmp_path / "events", "pc_events")
    policy = SparkMetastorePolicy(spark, table, {"hoodie.datasource.hive_sync.database": "lake_pc"})
    opts = {"sink.partition-commit.policy.kind": "metastore,success-file"}
    result = commit_partitions(table, [H03], opts, metastore=policy)
    assert result.committed == (H03,)
    assert _partitions(spark, "lake_pc.pc_events") == [H03]
    described = {r[0]: r[1] for r in spark.sql("DESCRIBE lake_pc.pc_events").collect()}
    assert described["v"] == "double" and described["_hoodie_record_key"] == "string"
    props = {r[0]: r[1] for r in spark.sql("SHOW TBLPROPERTIES lake_pc.pc_events").collect()}
    assert props["last_commit_time_sync"] == table.timeline().completed_commits[-1].timestamp
    assert props["primaryKey"] == "id" and props["preCombineField"] == "ts"
    # Through the job's entry point (as spark-submit runs it): H03 is not added twice, H04 is added.
    args = parse_args(
        ["--table", str(table.base_path), "--partition", H03, "--partition", H04]
        + ["--option", "sink.partition-commit.policy.kind=metastore,success-file"]
        + ["--option", "hoodie.datasource.hive_sync.database=lake_pc"]
    )
    summary = run(args, spark)
    assert summary["committed"] == [H04] and summary["already_committed"] == [H03]
    assert _partitions(spark, "lake_pc.pc_events") == [H03, H04]
    assert run(args, spark)["outcome"] == "NO_WORK"
    location = spark.sql(
        "DESCRIBE FORMATTED lake_pc.pc_events PARTITION (year='2024', month='01', day='05', hour='04')"
    )
    assert any(str(table.base_path / H04) in str(r[1]) for r in location.collect() if r[0] == "Location")
    rows = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
    assert sorted(rows.column("id").to_pylist()) == ["a", "b", "c"]


def test_cli_with_the_metastore_policy_runs_the_job_through_spark_submit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from airflow_lake_provider.lake.cli import main

    table = _table(tmp_path / "events", "cli_events")
    metastore = tmp_path / "metastore"
    args = ["partition-commit", str(table.base_path), "--partition", H03, "--partition", H04]
    args += ["--policy", "metastore,success-file", "--metastore-dir", str(metastore)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "COMMITTED" and out["committed"] == [H03, H04]
    assert out["policies"] == ["metastore", "success-file"]
    assert (table.base_path / H04 / "_SUCCESS").exists()
    assert (metastore / "metastore_db").is_dir()  # the embedded Derby metastore the job used
    assert (metastore / "derby.log").is_file()  # beside it, not in the working folder
    state = json.loads(
        (table.base_path / ".hoodie/.aux/lake-partition-commit")
        .joinpath("p-year=2024%2Fmonth=01%2Fday=05%2Fhour=04.json")
        .read_text()
    )
    assert state["status"] == "COMMITTED" and state["applied"] == ["metastore", "success-file"]


def test_metastore_policy_leaves_no_derby_files_in_the_working_folder_and_logs_spark_at_info(
    tmp_path: Path,
) -> None:
    """``lake -v partition-commit`` without ``--metastore-dir``, run from an empty folder: Derby's
    ``metastore_db/`` and ``derby.log`` and Spark's ``spark-warehouse/`` go to a temporary folder,
    not the working one; Spark's own log is relayed at INFO (not ERROR) since the job succeeded."""
    import json
    import subprocess
    import sys

    table = _table(tmp_path / "events", "cwd_events")
    work = tmp_path / "work"
    work.mkdir()
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "airflow_lake_provider.lake.cli", "partition-commit", str(table.base_path),
         "--partition", H03, "--policy", "metastore,success-file", "-v"],
        cwd=work, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["committed"] == [H03]
    assert sorted(os.listdir(work)) == []
    assert " INFO airflow_lake_provider.lake.spark_submit.partition_commit: " in done.stderr
    # Python log records: "<date> <time> <LEVEL> <logger>: ..." (Hive's own ERROR lines are relayed at INFO)
    assert {line.split(" ")[2] for line in done.stderr.splitlines() if line[:2] == "20"} == {"INFO"}


def test_a_failed_metastore_job_repeats_its_log_tail_at_error_level(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job that fails (a partition with no data: outcome FAILED) logs its last lines at ERROR."""
    import logging

    from airflow_lake_provider.lake import spark_submit

    table = _table(tmp_path / "events", "failed_events")
    metastore = tmp_path / "metastore"
    args = ["--table", str(table.base_path), "--partition", "year=2024/month=01/day=05/hour=09"]
    args += ["--option", "sink.partition-commit.policy.kind=metastore", "--metastore-dir", str(metastore)]
    with caplog.at_level(logging.INFO, logger="airflow_lake_provider.lake.spark_submit"):
        result = spark_submit.submit("partition_commit.py", args)
    assert result["outcome"] == "FAILED" and "hour=09" in result["error"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].getMessage().startswith("spark job partition_commit.py failed (exit 1); the last ")
    relayed = [
        r for r in caplog.records if r.name == "airflow_lake_provider.lake.spark_submit.partition_commit"
    ]
    assert relayed and all(r.levelno == logging.INFO for r in relayed)
