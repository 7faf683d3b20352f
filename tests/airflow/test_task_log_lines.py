"""What the task log says: the clean's partition scan once, the archival summary as one sentence,
and the partition-commit example on ``s3://`` (the docker-compose stack) committing without the
``metastore`` policy, which is refused there."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dag_helpers import load_example_dag, task_states, xcom_value
from s3_helpers import s3_objects

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

pytestmark = pytest.mark.airflow


def test_hook_clean_logs_its_partition_scan_once(tmp_path: Path) -> None:
    """The hook previews the plan (to pick the worker or Spark), then cleans: one scan line, not two."""
    from airflow_lake_provider.hooks.lake import LakeHook

    table = LakeTable.create(
        tmp_path / "trips", name="trips", table_type="cow", record_key_fields=("id",),
        precombine_field="ts", partition_fields=("p",),
    )  # fmt: skip
    for ts in range(4):
        write(
            table,
            pa.table({"id": ["k1", "k2"], "ts": pa.array([ts] * 2, pa.int64()), "p": ["a", "b"]}),
            "upsert",
        )
    # Airflow's logging set-up keeps these records from pytest's caplog: a handler on the logger itself.
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("airflow_lake_provider.lake.services.clean.executor")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        result = LakeHook().clean(str(table.base_path), {"hoodie.cleaner.commits.retained": "1"})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert result["outcome"] == "CLEANED"
    scans = [r for r in records if ": scanned " in r.getMessage() and r.levelno >= logging.INFO]
    # The preview's scan is at debug level; the clean's own at info.
    assert [r.getMessage() for r in scans] == [f"clean of {table.uri}: scanned 2 partitions, 2 file groups"]


def test_archival_summary_is_one_readable_line() -> None:
    from airflow_lake_provider.operators.summary import archival_line

    archived = {
        "outcome": "ARCHIVED",
        "archived_instants": 3,
        "first_archived": "20240105010000000",
        "last_archived": "20240105030000000",
        "actions": {"commit": 2, "clean": 1},
        "archive_file": ".hoodie/archived/.commits_.archive.1_1-0-1",
        "active_timeline_starts_at": "20240105040000000",
        "limited_by": "the earliest commit the last clean retained",
        "duration_seconds": 0.042,
        "reason": "",
    }
    assert archival_line(archived) == (
        "ARCHIVED 3 instants 20240105010000000..20240105030000000 (1 clean, 2 commit) into "
        ".hoodie/archived/.commits_.archive.1_1-0-1; active timeline starts at 20240105040000000; "
        "limited by the earliest commit the last clean retained in 0.042 s"
    )
    idle = {"outcome": "NO_WORK", "reason": "6 completed instants, at most hoodie.keep.max.commits=30"}
    assert archival_line(idle) == "NO_WORK (6 completed instants, at most hoodie.keep.max.commits=30)"


def test_hourly_partition_commit_example_on_s3_commits_with_the_success_file(
    repo_root: Path,
    airflow_db: Path,
    s3_bucket: str,
    s3_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``LAKE_EXAMPLES_ROOT`` on S3 (as in the docker-compose stack) the hourly example commits
    with ``success-file`` only: the ``metastore`` policy would be refused there every hour."""
    import pendulum

    monkeypatch.setenv("LAKE_EXAMPLES_ROOT", f"s3://{s3_bucket}/examples")
    monkeypatch.setenv("LAKE_EXAMPLES_METASTORE", str(tmp_path / "metastore"))
    dag_id = "example_lake_partition_commit"
    dag = load_example_dag(repo_root, dag_id)
    dr = dag.test(logical_date=pendulum.datetime(2024, 1, 5, 4, tz="UTC"))
    assert dr.state == "success", task_states(dag_id, dr.run_id)
    part = "year=2024/month=01/day=05/hour=03"
    committed: Any = xcom_value(dag_id, dr.run_id, "commit_hour")
    assert (committed["outcome"], committed["committed"], committed["policies"]) == (
        "COMMITTED", [part], ["success-file"]
    )  # fmt: skip
    assert s3_objects(s3_endpoint, s3_bucket, f"examples/events/{part}/_SUCCESS") == {"": b""}
    assert not (tmp_path / "metastore").exists()  # no Spark job ran
