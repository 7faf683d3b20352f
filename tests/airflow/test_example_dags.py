"""The example DAGs in ``dags/``: they import without errors (and without any connection), and every
one runs green as shipped under ``dag.test()`` on embedded defaults (SQLite, Spark local mode, local
disk), leaving tables that hudi-rs reads with exactly the expected rows.

Each DAG runs twice on the same table: once scheduled (a run with a logical date and data interval,
as the scheduler makes) and once triggered by hand (no logical date: the UI's Trigger button, or the
REST API with ``logical_date: null``, Airflow 3's default). ``dag.test(logical_date=None)`` makes the
latter: its context has no ``logical_date`` or ``data_interval_*``, only ``dag_run.run_after``.

"As shipped": the tests trigger them without any ``run_conf``; only ``LAKE_EXAMPLES_ROOT`` (where
the DAGs' default params put their tables) points into the test's temporary folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
import pyarrow as pa
import pytest
from dag_helpers import (
    expected_pipeline_trips,
    load_example_dag,
    new_trips_table,
    task_states,
    upsert_trips,
    xcom_value,
)
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.table.table import LakeTable

pytestmark = pytest.mark.airflow

EXAMPLE_DAGS = {
    "example_lake_clean",
    "example_lake_compaction",
    "example_lake_mor_pipeline",
    "example_lake_partition_commit",
    "example_lake_recovery",
    "example_lake_rollback",
    "example_smoke",
}


def test_example_dags_import_without_errors(repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    # Parsing must not need connections: drop the Spark one the test session defines.
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    bag = DagBag(dag_folder=str(repo_root / "dags"))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == EXAMPLE_DAGS
    clean = bag.dags["example_lake_clean"]  # get_dag() would query the metadata DB
    assert [t.task_id for t in clean.topological_sort()] == ["preview_clean", "clean"]
    assert set(clean.params.keys()) >= {"table_path", "spark_threshold"}
    pipeline = bag.dags["example_lake_mor_pipeline"]
    assert [t.task_id for t in pipeline.topological_sort()] == [
        "prepare",
        "insert_trips",
        "update_trips",
        "delete_trips",
        "schedule_compaction",
        "wait_for_plan",
        "compact",
        "clean",
        "report",
    ]
    assert pipeline.params["table_path"] == "/tmp/lake-examples/trips"
    assert bag.dags["example_lake_recovery"].params["table_path"] == "/tmp/lake-examples/recovery"
    assert bag.dags["example_lake_partition_commit"].params["table_path"] == "/tmp/lake-examples/events"
    assert bag.dags["example_lake_rollback"].params["table_path"] == "/tmp/lake-examples/rollback"
    # The UI's Trigger form refuses a required string param left empty: every string param has a
    # value, and optional ones (lake_conn_id) are null.
    for dag in bag.dags.values():
        for name, param in dag.params.items():
            if param.schema.get("type") == "string":
                assert param.value, f"{dag.dag_id}: param {name} defaults to an empty string"
        if "lake_conn_id" in dag.params:
            assert dag.params["lake_conn_id"] is None, dag.dag_id


def _hudi_rs(path: Path, columns: tuple[str, ...]) -> list[tuple]:
    table = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


@pytest.fixture
def examples_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the example DAGs' default params put their tables and staged batches (read at parse)."""
    monkeypatch.setenv("LAKE_EXAMPLES_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("LAKE_EXAMPLES_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("LAKE_EXAMPLES_METASTORE", str(tmp_path / "metastore"))
    return tmp_path / "lake"


# A scheduled run's logical date (an hourly DAG's run at 04:00 covers 03:00-04:00), and when a
# manual run is triggered.
SCHEDULED = pendulum.datetime(2024, 1, 5, 4, tz="UTC")
TRIGGERED = pendulum.datetime(2024, 1, 5, 6, 17, 33, tz="UTC")


def _scheduled(dag: Any, **kwargs: Any) -> Any:
    dr = dag.test(logical_date=SCHEDULED, **kwargs)
    assert dr.logical_date == SCHEDULED and dr.data_interval_end is not None
    assert dr.state == "success", task_states(dag.dag_id, dr.run_id)
    return dr


def _manual(dag: Any, **kwargs: Any) -> Any:
    dr = dag.test(logical_date=None, run_after=TRIGGERED, **kwargs)
    assert dr.logical_date is None and dr.data_interval_end is None and dr.run_after == TRIGGERED
    assert dr.state == "success", task_states(dag.dag_id, dr.run_id)
    return dr


def test_smoke_runs_scheduled_and_manual(repo_root: Path, airflow_db: Path) -> None:
    dag = load_example_dag(repo_root, "example_smoke")
    for dr in (_scheduled(dag), _manual(dag)):
        assert xcom_value(dag.dag_id, dr.run_id, "double") == 42


@pytest.mark.spark
@pytest.mark.slow
def test_mor_pipeline_runs_green_as_shipped_scheduled_then_manual(
    repo_root: Path, airflow_db: Path, examples_root: Path
) -> None:
    dag_id = "example_lake_mor_pipeline"
    dag = load_example_dag(repo_root, dag_id)
    dr = _scheduled(dag)
    path = examples_root / "trips"
    expected = expected_pipeline_trips()
    assert _hudi_rs(path, ("uuid", "ts", "fare", "city")) == expected and len(expected) == 40

    x = {
        t: xcom_value(dag_id, dr.run_id, t)
        for t in ("update_trips", "schedule_compaction", "compact", "clean")
    }
    assert (x["update_trips"]["inserted"], x["update_trips"]["updated"]) == (5, 10)
    c = x["schedule_compaction"]["instant"]
    assert x["schedule_compaction"]["outcome"] == "SCHEDULED" and x["schedule_compaction"]["operations"] == 3
    assert str(xcom_value(dag_id, dr.run_id, "wait_for_plan")) == c
    assert x["compact"]["outcome"] == "COMPLETED" and x["compact"]["instant"] == c
    assert (x["compact"]["operations"], x["compact"]["records_written"]) == (3, 35)
    # Each compacted group's old slice (its base file and two log files) is cleaned: 9 files.
    assert x["clean"]["outcome"] == "CLEANED" and x["clean"]["deleted_files"] == 9
    table = LakeTable.open(path)
    assert [(i.action.value, i.state.name) for i in table.timeline().instants] == [
        ("deltacommit", "COMPLETED")
    ] * 3 + [("commit", "COMPLETED"), ("clean", "COMPLETED")]
    groups = table.file_system_view().file_groups()
    assert len(groups) == 6 and all(not g.latest_slice.log_files for g in groups)
    data_files = [
        f
        for f in path.rglob("*")
        if f.is_file() and ".hoodie" not in f.parts and not f.name.startswith(".hoodie_partition_metadata")
    ]
    assert len(data_files) == 6 and all(f.suffix == ".parquet" for f in data_files)
    report = xcom_value(dag_id, dr.run_id, "report")
    assert report["rows"] == 40 and report["compaction"]["instant"] == c

    # Triggered by hand on the same table: the same batches again, the same rows, compacted again.
    again = _manual(dag)
    assert _hudi_rs(path, ("uuid", "ts", "fare", "city")) == expected
    assert xcom_value(dag_id, again.run_id, "compact")["outcome"] == "COMPLETED"
    assert xcom_value(dag_id, again.run_id, "clean")["outcome"] == "CLEANED"
    assert xcom_value(dag_id, again.run_id, "report")["rows"] == 40


@pytest.mark.slow
def test_clean_and_compaction_run_on_the_default_table_scheduled_and_manual(
    repo_root: Path, airflow_db: Path, examples_root: Path
) -> None:
    """Both default to the pipeline's table (``trips``), here a merge-on-read table with 5 delta
    commits: the scheduled compaction run compacts it; the manual one finds nothing due and ends at
    once (its sensor and compaction skipped). The clean keeps 10 commits: nothing to clean yet."""
    table, ids = new_trips_table(examples_root / "trips")
    for ts in range(1, 5):
        upsert_trips(table, ids[ts::4], ts=ts, value=ts)
    before = _hudi_rs(table.base_path, ("id", "ts", "v"))

    compaction = load_example_dag(repo_root, "example_lake_compaction")
    dr = _scheduled(compaction)
    assert xcom_value(compaction.dag_id, dr.run_id, "compact")["outcome"] == "COMPLETED"
    idle = _manual(compaction)
    assert xcom_value(compaction.dag_id, idle.run_id, "schedule")["outcome"] == "NO_WORK"
    assert task_states(compaction.dag_id, idle.run_id) == {
        "schedule": "success",
        "wait_for_plan": "skipped",
        "compact": "skipped",
    }

    clean = load_example_dag(repo_root, "example_lake_clean")
    for run in (_scheduled(clean), _manual(clean)):
        assert xcom_value(clean.dag_id, run.run_id, "preview_clean")["outcome"] == "NO_WORK"
        assert xcom_value(clean.dag_id, run.run_id, "clean")["outcome"] == "NO_WORK"
    assert _hudi_rs(table.base_path, ("id", "ts", "v")) == before
    assert [i.action.value for i in LakeTable.open(table.base_path).timeline().instants] == [
        "deltacommit"
    ] * 5 + ["commit"]


def test_rollback_example_creates_its_table_and_writes_scheduled_then_manual(
    repo_root: Path, airflow_db: Path, examples_root: Path
) -> None:
    dag = load_example_dag(repo_root, "example_lake_rollback")
    path = examples_root / "rollback"
    expected = [(f"id-{i:02d}", 1, f"row-{i}") for i in range(10)]
    for dr in (_scheduled(dag), _manual(dag)):
        assert xcom_value(dag.dag_id, dr.run_id, "rollback_failed_writes") == {
            "outcome": "NO_WORK",
            "instant": None,
            "rollbacks": [],
        }
        assert _hudi_rs(path, ("id", "ts", "v")) == expected
    assert [i.action.value for i in LakeTable.open(path).timeline().instants] == ["deltacommit"] * 2


@pytest.mark.spark
@pytest.mark.slow
def test_recovery_rolls_back_the_killed_write_then_writes_and_compacts_scheduled_then_manual(
    repo_root: Path, airflow_db: Path, examples_root: Path
) -> None:
    dag_id = "example_lake_recovery"
    dag = load_example_dag(repo_root, dag_id)
    path = examples_root / "recovery"
    # The killed writer's rows (tag "lost") never show; ids 5-14 come from the write.
    expected = sorted(
        [(f"id-{i:02d}", 1, f"seed-{i}") for i in range(5)]
        + [(f"id-{i:02d}", 2, f"new-{i}") for i in range(5, 15)]
    )
    for run in (_scheduled, _manual):
        dr = run(dag)
        states = task_states(dag_id, dr.run_id)
        assert states["external_write"] == "failed" and states["compact"] == "success"
        rolled = xcom_value(dag_id, dr.run_id, "rollback_failed_writes")
        assert rolled["outcome"] == "ROLLED_BACK"
        [one] = rolled["rollbacks"]
        assert one["action"] == "deltacommit" and len(one["deleted"]) == 1
        assert _hudi_rs(path, ("id", "ts", "v")) == expected
        timeline = LakeTable.open(path).timeline()
        assert timeline.get(one["rolled_back"]) is None and not timeline.pending
        assert xcom_value(dag_id, dr.run_id, "compact")["outcome"] == "COMPLETED"
    # seed, then per run: rollback, write, compaction.
    assert [(i.action.value, i.state.name) for i in timeline.instants] == [("deltacommit", "COMPLETED")] + [
        ("rollback", "COMPLETED"),
        ("deltacommit", "COMPLETED"),
        ("commit", "COMPLETED"),
    ] * 2


@pytest.mark.spark
@pytest.mark.slow
def test_hourly_partitions_commit_scheduled_and_manual(
    repo_root: Path, airflow_db: Path, examples_root: Path, tmp_path: Path
) -> None:
    """A scheduled run at 04:00 covers the hour 03:00-04:00 (``data_interval_end``). A manual run has
    no data interval: triggered at 06:17:33, it covers the hour before, 05:00-06:00, with the trigger
    time (``dag_run.run_after``) as the watermark."""
    dag_id = "example_lake_partition_commit"
    dag = load_example_dag(repo_root, dag_id)
    path = examples_root / "events"
    rows = []
    for run, hour in ((_scheduled, "03"), (_manual, "05")):
        part = f"year=2024/month=01/day=05/hour={hour}"
        dr = run(dag)
        committed = xcom_value(dag_id, dr.run_id, "commit_hour")
        assert committed["outcome"] == "COMMITTED" and committed["committed"] == [part]
        assert committed["policies"] == ["metastore", "success-file"]
        assert (path / part / "_SUCCESS").read_bytes() == b""
        rows += [(f"2024010{5}{hour}-{i}", float(i + 1), hour) for i in range(3)]
        assert _hudi_rs(path, ("event_id", "value", "hour")) == sorted(rows)
    assert (tmp_path / "metastore" / "metastore_db").is_dir()  # the Derby metastore the Spark job used
