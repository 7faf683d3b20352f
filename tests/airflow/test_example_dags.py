"""The example DAGs in ``dags/``: they import without errors (and without any connection), and the
pipeline examples run green as shipped under ``dag.test()`` on embedded defaults (SQLite, Spark
local mode, local disk), leaving tables that hudi-rs reads with exactly the expected rows.

"As shipped": the tests trigger them without any ``run_conf``; only ``LAKE_EXAMPLES_ROOT`` (where
the DAGs' default params put their tables) points into the test's temporary folder.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
import pyarrow as pa
import pytest
from dag_helpers import expected_pipeline_trips, load_example_dag, task_states, xcom_value
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


@pytest.mark.spark
@pytest.mark.slow
def test_mor_pipeline_runs_green_as_shipped(repo_root: Path, airflow_db: Path, examples_root: Path) -> None:
    dag_id = "example_lake_mor_pipeline"
    dr = load_example_dag(repo_root, dag_id).test()
    assert dr.state == "success", task_states(dag_id, dr.run_id)
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


@pytest.mark.spark
@pytest.mark.slow
def test_recovery_rolls_back_the_killed_write_then_writes_and_compacts(
    repo_root: Path, airflow_db: Path, examples_root: Path
) -> None:
    dag_id = "example_lake_recovery"
    dr = load_example_dag(repo_root, dag_id).test()
    states = task_states(dag_id, dr.run_id)
    assert dr.state == "success", states
    assert states["external_write"] == "failed" and states["compact"] == "success"
    path = examples_root / "recovery"
    rolled = xcom_value(dag_id, dr.run_id, "rollback_failed_writes")
    assert rolled["outcome"] == "ROLLED_BACK" and len(rolled["rollbacks"]) == 1
    killed = rolled["rollbacks"][0]["rolled_back"]
    assert rolled["rollbacks"][0]["action"] == "deltacommit" and len(rolled["rollbacks"][0]["deleted"]) == 1
    # The killed writer's rows (tag "lost") never show; ids 5-14 come from the write.
    expected = sorted(
        [(f"id-{i:02d}", 1, f"seed-{i}") for i in range(5)]
        + [(f"id-{i:02d}", 2, f"new-{i}") for i in range(5, 15)]
    )
    assert _hudi_rs(path, ("id", "ts", "v")) == expected
    timeline = LakeTable.open(path).timeline()
    assert timeline.get(killed) is None and not timeline.pending
    assert [(i.action.value, i.state.name) for i in timeline.instants] == [
        ("deltacommit", "COMPLETED"),
        ("rollback", "COMPLETED"),
        ("deltacommit", "COMPLETED"),
        ("commit", "COMPLETED"),
    ]
    assert xcom_value(dag_id, dr.run_id, "compact")["outcome"] == "COMPLETED"


@pytest.mark.spark
@pytest.mark.slow
def test_hourly_partitions_commit_with_success_file_and_metastore(
    repo_root: Path, airflow_db: Path, examples_root: Path, tmp_path: Path
) -> None:
    dag_id = "example_lake_partition_commit"
    part = "year=2024/month=01/day=05/hour=03"
    # A run at 04:00 covers the hour 03:00-04:00 of 2024-01-05.
    dr = load_example_dag(repo_root, dag_id).test(logical_date=pendulum.datetime(2024, 1, 5, 4, tz="UTC"))
    assert dr.state == "success", task_states(dag_id, dr.run_id)
    committed = xcom_value(dag_id, dr.run_id, "commit_hour")
    assert committed["outcome"] == "COMMITTED" and committed["committed"] == [part]
    assert committed["policies"] == ["metastore", "success-file"]
    path = examples_root / "events"
    assert (path / part / "_SUCCESS").read_bytes() == b""
    assert (tmp_path / "metastore" / "metastore_db").is_dir()  # the Derby metastore the Spark job used
    assert _hudi_rs(path, ("event_id", "value", "hour")) == [
        ("2024010503-0", 1.0, "03"),
        ("2024010503-1", 2.0, "03"),
        ("2024010503-2", 3.0, "03"),
    ]
