"""ScheduleCleanOperator and LakeHook.clean end to end: the example DAG under ``dag.test()``.

``dag.test()`` only runs DAGs from the DAGs folder, so the tests drive ``dags/example_lake_clean.py``
and pick the table (and the Spark threshold) per run through ``run_conf``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dag_helpers import load_example_dag, task_states, xcom_value

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.active import HOODIE_DIR
from airflow_lake_provider.lake.timeline.instant import Action, State

pytestmark = pytest.mark.airflow

DAG_ID = "example_lake_clean"
PARTITIONS = ("a", "b")


# -- table helpers --------------------------------------------------------------------------------
# Table-version neutral tests run on version 6 and on Hudi 1.x's version 8 (timeline layout 2).
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


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
            {
                "id": ["k1", "k2", "k3", "k4"],
                "ts": pa.array([ts] * 4, pa.int64()),
                "p": ["a", "a", "b", "b"],
            }
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
    """Base files written by ``instant`` (``<fileId>_<token>_<instant>.parquet``)."""
    return {f for f in files if f.rsplit("_", 1)[1].removesuffix(".parquet") == instant}


def _clean_instants(base: Path) -> list[str]:
    """The clean files of the timeline (in layout 2 a completed one is ``<t>_<completion>.clean``)."""
    folder = LakeTable.open(base).layout.folder
    return sorted(f for f in os.listdir(base / folder) if ".clean" in f)


# -- DAG helpers ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def example_dag(repo_root: Path, airflow_db: Path) -> Any:
    return load_example_dag(repo_root, DAG_ID)


def _task_states(run_id: str) -> dict[str, str]:
    return task_states(DAG_ID, run_id)


def _xcom(run_id: str, task_id: str, key: str = "return_value") -> Any:
    return xcom_value(DAG_ID, run_id, task_id, key)


def _run(dag: Any, mark_success_pattern: str | None = None, **conf: Any) -> Any:
    """One run of the DAG with ``conf`` as params; it returns the DagRun without raising on failure."""
    return dag.test(run_conf=conf, mark_success_pattern=mark_success_pattern)


# -- tests ----------------------------------------------------------------------------------------
@VERSIONS
def test_example_dag_cleans_oldest_slices_then_second_run_is_no_work(
    example_dag: Any, tmp_path: Path, version: int
) -> None:
    table, commits = _build_table(tmp_path / "trips", version=version)
    before = _data_files(table.base_path)
    expected_deleted = _written_at(before, commits[0])
    assert len(expected_deleted) == 2  # the oldest slice of each partition's file group

    dr = _run(example_dag, table_path=str(table.base_path))
    assert dr.state == "success", _task_states(dr.run_id)
    assert before - _data_files(table.base_path) == expected_deleted
    assert not (_data_files(table.base_path) - before)

    preview = _xcom(dr.run_id, "preview_clean")
    assert preview["outcome"] == "PLANNED" and preview["instant"] is None
    assert {p: v["files"] for p, v in preview["partitions"].items()} == {"a": 1, "b": 1}

    result = _xcom(dr.run_id, "clean")
    completed = table.timeline().filter([Action.CLEAN], [State.COMPLETED])
    assert [i.timestamp for i in completed] == [result["instant"]]
    assert _xcom(dr.run_id, "clean", "clean_instant") == result["instant"]
    assert result["outcome"] == "CLEANED" and result["executor"] == "local"
    assert result["earliest_commit_to_retain"] == commits[2]
    assert result["deleted_files"] == 2 and result["failed_files"] == 0
    assert sorted(result["partitions"]) == list(PARTITIONS)
    assert result["partitions"] == preview["partitions"]  # the plan the dry run reported
    assert all(v["files"] == 1 and v["bytes"] > 0 for v in result["partitions"].values())

    after_first = _data_files(table.base_path)
    dr2 = _run(example_dag, table_path=str(table.base_path))
    assert dr2.state == "success", _task_states(dr2.run_id)
    second = _xcom(dr2.run_id, "clean")
    assert second["outcome"] == "NO_WORK" and second["instant"] is None
    assert _xcom(dr2.run_id, "clean", "clean_instant") is None
    assert _data_files(table.base_path) == after_first
    assert len(table.timeline().filter([Action.CLEAN])) == 1


def test_dry_run_deletes_nothing_and_writes_no_instant(example_dag: Any, tmp_path: Path) -> None:
    table, commits = _build_table(tmp_path / "trips")
    before = _data_files(table.base_path)
    hoodie_before = sorted(os.listdir(table.base_path / HOODIE_DIR))

    # Only the dry-run task runs; "clean" is marked success without running.
    dr = _run(example_dag, table_path=str(table.base_path), mark_success_pattern="clean")
    assert dr.state == "success", _task_states(dr.run_id)
    assert _data_files(table.base_path) == before
    assert _clean_instants(table.base_path) == []
    assert sorted(os.listdir(table.base_path / HOODIE_DIR)) == hoodie_before

    preview = _xcom(dr.run_id, "preview_clean")
    assert preview["outcome"] == "PLANNED" and preview["executor"] == "none"
    assert preview["files_planned"] == 2 and preview["deleted_files"] == 0
    assert preview["earliest_commit_to_retain"] == commits[2]
    assert _xcom(dr.run_id, "preview_clean", "clean_instant") is None


@pytest.mark.spark
@pytest.mark.slow
def test_threshold_zero_executes_on_spark_through_spark_submit_hook(example_dag: Any, tmp_path: Path) -> None:
    table, commits = _build_table(tmp_path / "trips")
    before = _data_files(table.base_path)
    expected_deleted = _written_at(before, commits[0])

    dr = _run(example_dag, table_path=str(table.base_path), spark_threshold=0)
    assert dr.state == "success", _task_states(dr.run_id)
    result = _xcom(dr.run_id, "clean")
    assert result["executor"] == "spark" and result["outcome"] == "CLEANED"
    # Judged from the timeline: requested, inflight and completed files of one clean instant.
    completed = table.timeline().filter([Action.CLEAN], [State.COMPLETED])
    assert [i.timestamp for i in completed] == [result["instant"]]
    assert _clean_instants(table.base_path) == sorted(
        f"{result['instant']}.clean{suffix}" for suffix in ("", ".inflight", ".requested")
    )
    assert before - _data_files(table.base_path) == expected_deleted
    assert result["deleted_files"] == 2 and result["files_planned"] == 2
    assert _xcom(dr.run_id, "clean", "clean_instant") == result["instant"]


# -- hook and operator, without a DAG run ---------------------------------------------------------
@VERSIONS
def test_hook_clean_surfaces_a_held_lock_as_service_busy(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.hooks.lake import LakeHook, LakeServiceBusyError

    table, _ = _build_table(tmp_path / "trips", version=version)
    before = _data_files(table.base_path)
    with (
        table.store.exclusive("clean"),
        pytest.raises(LakeServiceBusyError, match="another clean is running"),
    ):
        LakeHook().clean(str(table.base_path))
    assert _data_files(table.base_path) == before
    assert _clean_instants(table.base_path) == []


@VERSIONS
def test_hook_clean_nothing_to_clean_is_no_work(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.hooks.lake import LakeHook

    table, _ = _build_table(tmp_path / "trips", upserts=3, version=version)
    result = LakeHook().clean(str(table.base_path), mode="schedule_and_execute")
    assert result["outcome"] == "NO_WORK" and result["instant"] is None and result["partitions"] == {}
    assert _clean_instants(table.base_path) == []


@VERSIONS
def test_hook_schedule_mode_writes_only_the_requested_plan(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.hooks.lake import LakeHook

    table, _ = _build_table(tmp_path / "trips", version=version)
    before = _data_files(table.base_path)
    result = LakeHook().clean(str(table.base_path), mode="schedule")
    assert result["outcome"] == "SCHEDULED"
    assert _clean_instants(table.base_path) == [f"{result['instant']}.clean.requested"]
    assert _data_files(table.base_path) == before
    done = LakeHook().clean(str(table.base_path), mode="execute")
    assert done["outcome"] == "CLEANED" and done["instant"] == result["instant"]
    assert len(before - _data_files(table.base_path)) == 2


def test_hook_rejects_bad_options_and_paths_outside_base_path(tmp_path: Path, monkeypatch) -> None:
    from airflow_lake_provider.hooks.lake import LakeConfigError, LakeHook

    table, _ = _build_table(tmp_path / "trips", upserts=1)
    with pytest.raises(LakeConfigError, match="hoodie.cleaner.policy"):
        LakeHook().clean(str(table.base_path), {"hoodie.cleaner.policy": "KEEP_NOTHING"})
    with pytest.raises(LakeConfigError, match="mode"):
        LakeHook().clean(str(table.base_path), mode="vacuum")
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_TEST", f'{{"conn_type": "lake", "extra": {{"base_path": "{tmp_path}"}}}}'
    )
    hook = LakeHook(lake_conn_id="lake_test")
    assert hook.resolve_table_path("trips") == str(table.base_path)
    with pytest.raises(LakeConfigError, match="outside"):
        hook.resolve_table_path("../elsewhere")
    with pytest.raises(LakeConfigError, match="outside"):
        hook.resolve_table_path("/etc")


def test_operator_validates_mode_without_io() -> None:
    from airflow_lake_provider.operators.clean import ScheduleCleanOperator

    with pytest.raises(ValueError, match="mode='vacuum'"):
        ScheduleCleanOperator(task_id="c", table_path="/nowhere", mode="vacuum")
    op = ScheduleCleanOperator(task_id="c", table_path="/nowhere", mode="{{ params.mode }}")
    assert op.mode == "{{ params.mode }}"
    assert set(ScheduleCleanOperator.template_fields) >= {"table_path", "options", "mode"}


def test_format_plan_table_lists_partitions_and_total() -> None:
    from airflow_lake_provider.operators.clean import format_plan_table

    text = format_plan_table({"p=a": {"files": 1, "bytes": 100}, "": {"files": 2, "bytes": 5}})
    lines = text.splitlines()
    assert lines[0].split(" | ") == ["partition", "files", "bytes"]
    assert [line.split("|")[0].strip() for line in lines[2:]] == ["p=a", "<root>", "total"]
    assert lines[-1].replace(" ", "") == "total|3|105"


def test_hook_spark_path_is_judged_from_the_timeline_not_the_exit_code(tmp_path: Path, monkeypatch) -> None:
    """spark-submit failing after the clean completed is a success; exiting 0 without it is a failure."""
    from airflow_lake_provider.hooks.lake import LakeHook, LakeSparkJobError, SparkSubmission
    from airflow_lake_provider.lake.services.clean.executor import run_clean

    table, _ = _build_table(tmp_path / "trips")
    calls: list[list[str]] = []

    def finishes_then_fails(self, script, args, **kwargs):
        calls.append([script, *args])
        run_clean(LakeTable.open(args[1]), mode="execute", instant=args[args.index("--instant") + 1])
        return SparkSubmission(tuple(args), False, "exit code 1")

    monkeypatch.setattr(LakeHook, "submit_spark_job", finishes_then_fails)
    result = LakeHook().clean(str(table.base_path), spark_threshold=0)
    assert result["outcome"] == "CLEANED" and result["executor"] == "spark" and result["deleted_files"] == 2
    assert calls[0][:5] == ["clean.py", "--table", str(table.base_path), "--mode", "execute"]
    assert calls[0][-2:] == ["--instant", result["instant"]]

    table2, _ = _build_table(tmp_path / "trips2")
    monkeypatch.setattr(
        LakeHook, "submit_spark_job", lambda self, s, a, **kw: SparkSubmission(tuple(a), True)
    )
    with pytest.raises(LakeSparkJobError, match="did not complete on Spark"):
        LakeHook().clean(str(table2.base_path), spark_threshold=0)
    # The plan stays requested: the next clean finishes it.
    assert [f.rsplit(".", 1)[-1] for f in _clean_instants(table2.base_path)] == ["requested"]


@VERSIONS
def test_clean_task_archives_the_timeline_after_cleaning(
    example_dag: Any, tmp_path: Path, version: int
) -> None:
    table, commits = _build_table(tmp_path / "trips", version=version)
    # Archival keys from the table's own properties (the example DAG passes only cleaner options).
    table.store.update_properties(
        {**table.config.properties, "hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "5"}
    )
    dr = _run(example_dag, table_path=str(table.base_path))
    assert dr.state == "success", _task_states(dr.run_id)
    result = _xcom(dr.run_id, "clean")
    archival = _xcom(dr.run_id, "clean", "archival")
    # Bounded by the commit the clean just retained: everything before it is archived.
    assert result["earliest_commit_to_retain"] == commits[2]
    assert archival["outcome"] == "ARCHIVED"
    assert (archival["first_archived"], archival["last_archived"]) == (commits[0], commits[1])
    assert archival["limited_by"] == "the earliest commit the last clean retained"
    assert archival["active_timeline_starts_at"] == commits[2]
    with pytest.raises(AssertionError, match="no XCom 'archival' from preview_clean"):
        _xcom(dr.run_id, "preview_clean", "archival")  # a dry run archives nothing
    assert not any(n.startswith((commits[0], commits[1])) for n in os.listdir(table.base_path / HOODIE_DIR))


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        (
            {"hoodie.keep.min.commits": "40"},
            "hoodie.keep.max.commits=30 must be greater than hoodie.keep.min.commits=40 (in {props})",
        ),
        (
            {"archive.max_commits": "thirty"},
            "{props}: archive.max_commits='thirty' is not a whole number",
        ),
    ],
    ids=["min-over-max", "not-a-number"],
)
def test_bad_archival_settings_fail_the_clean_task_before_it_deletes_anything(
    example_dag: Any, tmp_path: Path, properties: dict[str, str], message: str
) -> None:
    """The clean task archives after cleaning: archival settings it would refuse (here the table's
    own) fail it at once, before the clean. The clean used to run, delete its files and complete
    its instant, and only the archival after it failed the task."""
    from tree_digest import tree_digest

    table, _ = _build_table(tmp_path / "trips")
    table.store.update_properties({**table.config.properties, **properties})
    before = tree_digest(tmp_path / "trips")
    dr = _run(example_dag, table_path=str(table.base_path))
    assert _task_states(dr.run_id) == {"preview_clean": "success", "clean": "failed"}
    assert tree_digest(tmp_path / "trips") == before
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=dr.run_id, task_id="clean").one()
        assert ti.try_number == 1
    with pytest.raises(Exception) as refused:
        from airflow_lake_provider.hooks.lake import LakeHook

        LakeHook().check_archival(str(table.base_path))
    assert type(refused.value).__name__ == "LakeConfigError"
    props = table.storage.uri(".hoodie/hoodie.properties")
    assert str(refused.value) == f"archival of {table.uri}: {message.format(props=props)}"
