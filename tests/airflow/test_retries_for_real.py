"""Airflow retries against a real killed ``spark-submit``: no in-process simulation of the failure.

Each test runs an example DAG under ``dag.test()`` with the test-only switch
``LAKE_TEST_KILL_JOB_ONCE`` set (``spark_jobs/_common.py``): the first Spark task that has written
(compaction) or deleted (clean) files, with the instant inflight, SIGKILLs the whole job (JVM, Python
driver, Python workers) once. The task's first try fails on the timeline's verdict, Airflow retries
it (try 2 of the same task instance) and the retry's job finishes the same instant. An
``on_retry_callback`` photographs the table between the tries.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import airflow
import pyarrow as pa
import pytest
from dag_helpers import load_example_dag, new_trips_table, task_states, upsert_trips, xcom_value
from hudi import HudiTableBuilder
from packaging.version import Version

from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.active import HOODIE_DIR
from airflow_lake_provider.lake.timeline.instant import Action, State
from airflow_lake_provider.spark_jobs._common import KILL_ONCE_ENV

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]
# The failed try's exception in on_retry_callback's context: Airflow 3.3 passes it, 3.2.0 passes
# none (the lowest supported Airflow, scripts/airflow-range-check.sh).
RETRY_CALLBACK_GETS_EXCEPTION = Version(airflow.__version__) >= Version("3.3")


def _data_files(base: Path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != HOODIE_DIR]
        out |= {os.path.relpath(os.path.join(root, f), base) for f in files if f.endswith(".parquet")}
    return out


def _written_at(files: set[str], instant: str) -> set[str]:
    """Base files named with ``instant`` (``<fileId>_<token>_<instant>.parquet``)."""
    return {f for f in files if f.rsplit("_", 1)[1].removesuffix(".parquet") == instant}


def _timeline_files(base: Path, action: str) -> list[str]:
    return sorted(f for f in os.listdir(base / HOODIE_DIR) if f".{action}" in f)


def _tries(dag_id: str, run_id: str, task_id: str) -> list[tuple[int, str]]:
    """(try number, state) of every try of one task instance: finished earlier tries, then the last."""
    from airflow.models import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session

    with create_session() as session:
        tries = [
            (h.try_number, str(h.state))
            for h in session.query(TaskInstanceHistory).filter_by(
                dag_id=dag_id, run_id=run_id, task_id=task_id
            )
        ]
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id).one()
        return sorted(tries) + [(ti.try_number, str(ti.state))]


def _retry_now(dag: Any, task_id: str, seen: dict[str, Any], photograph: Any) -> None:
    """One retry, right away, with ``photograph(context)`` stored in ``seen`` between the tries.

    ``dag.test()`` runs the operators of this in-memory DAG (callbacks included) and retries a task
    once its ``retry_delay`` has passed.
    """
    task = dag.get_task(task_id)
    task.retries = 1
    task.retry_delay = dt.timedelta(0)

    def on_retry(context: Any) -> None:
        seen["try_number"] = context["ti"].try_number
        seen["error"] = str(context.get("exception"))
        seen.update(photograph())

    task.on_retry_callback = [on_retry]  # set after construction: the Task SDK wants a list


# -- compaction -----------------------------------------------------------------------------------
def _mor_table(path: Path) -> LakeTable:
    """4 file groups of 10 rows in partitions a and b, then 4 upserts and a delete as log files."""
    table, ids = new_trips_table(path)
    for d in range(1, 6):
        upsert_trips(table, ids[d::7], ts=d, value=1000 * d, op="delete" if d == 5 else "upsert")
    return table


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("_hoodie_record_key", "ts", "v")), strict=True))


def _expected_rows() -> list[tuple]:
    """The rows of ``_mor_table``, computed from its batches: the last version of each key, deletes out."""
    rows = {f"k{i:02d}": (0, i) for i in range(40)}
    for d in range(1, 6):
        for k in [f"k{i:02d}" for i in range(40)][d::7]:
            if d == 5:
                rows.pop(k, None)
            else:
                rows[k] = (d, 1000 * d)
    return sorted((k, ts, v) for k, (ts, v) in rows.items())


def test_run_compaction_retry_recovers_the_instant_a_killed_spark_submit_left(
    repo_root: Path, airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _mor_table(tmp_path / "trips")
    expected = _expected_rows()
    assert len(expected) == 35 and _rows(read_snapshot(table)) == expected
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, str(marker))
    dag = load_example_dag(repo_root, "example_lake_compaction")
    seen: dict[str, Any] = {}

    def photograph() -> dict[str, Any]:
        [c] = table.timeline().filter([Action.COMPACTION])
        return {
            "instant": c.timestamp,
            "state": c.state,
            "compaction_files": _timeline_files(table.base_path, "compaction"),
            "commit_files": _timeline_files(table.base_path, "commit"),
            "written": _written_at(_data_files(table.base_path), c.timestamp),
        }

    _retry_now(dag, "compact", seen, photograph)
    # A plan this small merges in the worker by default: 0 MB sends it to Spark, whose job is killed.
    dr = dag.test(run_conf={"table_path": str(table.base_path), "spark_threshold_mb": 0})
    assert dr.state == "success", task_states(dag.dag_id, dr.run_id)
    assert marker.exists()  # the job was killed once
    # Try 1's history row says failed; on_retry_callback (below: seen) shows it went to retry.
    assert _tries(dag.dag_id, dr.run_id, "compact") == [(1, "failed"), (2, "success")]

    # Between the tries: the plan inflight, some of its base files written, no commit.
    c = xcom_value(dag.dag_id, dr.run_id, "schedule")["instant"]
    assert seen["try_number"] == 1 and seen["instant"] == c and seen["state"] is State.INFLIGHT
    assert seen["compaction_files"] == [f"{c}.compaction.inflight", f"{c}.compaction.requested"]
    assert seen["commit_files"] == []
    assert seen["written"]
    if RETRY_CALLBACK_GETS_EXCEPTION:
        assert f"compaction {c} of {table.uri} did not complete on Spark" in seen["error"]
        assert "a retry recovers it" in seen["error"]

    # Try 2 completed the same instant: one base file per file group at c, rows unchanged.
    result = xcom_value(dag.dag_id, dr.run_id, "compact")
    assert result["outcome"] == "COMPLETED" and result["instant"] == c
    assert result["operations"] == 4 and result["records_written"] == 35
    timeline = table.timeline()
    assert [(i.timestamp, i.state) for i in timeline.filter([Action.COMPACTION, Action.COMMIT])] == [
        (c, State.COMPLETED)
    ]
    assert sorted(result["files"]) == sorted(_written_at(_data_files(table.base_path), c))
    assert len(result["files"]) == 4
    groups = table.file_system_view().file_groups()
    assert len(groups) == 4
    assert all(g.latest_slice.base_instant == c and not g.latest_slice.log_files for g in groups)
    assert _rows(read_snapshot(table)) == expected
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
    assert _rows(theirs) == expected
    assert not (table.base_path / HOODIE_DIR / ".temp" / c).exists()  # markers gone with the commit


# -- clean ----------------------------------------------------------------------------------------
def _cow_table(path: Path, upserts: int = 12) -> tuple[LakeTable, list[str]]:
    """COW, partitions a and b; every upsert rewrites both file groups (one new slice each)."""
    table = LakeTable.create(
        path,
        name="trips",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    commits = []
    for ts in range(upserts):
        batch = pa.table(
            {"id": ["k1", "k2", "k3", "k4"], "ts": pa.array([ts] * 4, pa.int64()), "p": ["a", "a", "b", "b"]}
        )
        commits.append(write(table, batch, "upsert").instant)
    return table, commits


def test_clean_retry_on_spark_finishes_the_instant_a_killed_spark_submit_left(
    repo_root: Path, airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, commits = _cow_table(tmp_path / "trips")
    before = _data_files(table.base_path)
    # commits.retained=10 of 12: the earliest commit to retain is commits[2], so each file group
    # loses its slice of commits[0] (commits[1]'s is the last one before commits[2]).
    expected_deleted = _written_at(before, commits[0])
    assert sorted(f.split("/")[0] for f in expected_deleted) == ["a", "b"]
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, str(marker))
    dag = load_example_dag(repo_root, "example_lake_clean")
    seen: dict[str, Any] = {}

    def photograph() -> dict[str, Any]:
        return {
            "clean_files": _timeline_files(table.base_path, "clean"),
            "deleted": before - _data_files(table.base_path),
        }

    _retry_now(dag, "clean", seen, photograph)
    dr = dag.test(run_conf={"table_path": str(table.base_path), "spark_threshold": 0})
    assert dr.state == "success", task_states(dag.dag_id, dr.run_id)
    assert marker.exists()
    assert _tries(dag.dag_id, dr.run_id, "clean") == [(1, "failed"), (2, "success")]

    result = xcom_value(dag.dag_id, dr.run_id, "clean")
    t = result["instant"]
    # Between the tries: the clean inflight, at least one partition's file deleted, no completed clean.
    assert seen["try_number"] == 1
    assert seen["clean_files"] == [f"{t}.clean.inflight", f"{t}.clean.requested"]
    assert seen["deleted"] and seen["deleted"] <= expected_deleted
    if RETRY_CALLBACK_GETS_EXCEPTION:
        assert f"clean {t} of {table.uri} did not complete on Spark" in seen["error"]

    # Try 2 finished the same instant from its stored plan; no second clean was planned.
    assert result["outcome"] == "CLEANED" and result["executor"] == "spark"
    assert result["finished_pending"] == [t]
    assert result["deleted_files"] == 2 and result["failed_files"] == 0  # already gone counts as deleted
    assert _timeline_files(table.base_path, "clean") == [
        f"{t}.clean",
        f"{t}.clean.inflight",
        f"{t}.clean.requested",
    ]
    assert before - _data_files(table.base_path) == expected_deleted
    assert not (_data_files(table.base_path) - before)
    metadata = table.timeline().avro_record(table.timeline().filter([Action.CLEAN])[0])
    assert metadata["earliestCommitToRetain"] == commits[2]
    assert sorted(
        f"{p}/{name.rsplit('/', 1)[-1]}"
        for p, entry in metadata["partitionMetadata"].items()
        for name in entry["successDeleteFiles"]
    ) == sorted(expected_deleted)
