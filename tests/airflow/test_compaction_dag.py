"""Compaction from Airflow: the example DAG (schedule -> deferrable sensor -> Spark run) under
``dag.test()`` on local Spark, the sensor and its trigger, and the operators' outcomes."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pendulum
import pyarrow as pa
import pytest
from dag_helpers import (
    load_example_dag,
    new_trips_table,
    sync_dags_folder,
    task_states,
    upsert_trips,
    xcom_value,
)
from hudi import HudiTableBuilder

from airflow_lake_provider.hooks.lake import LakeConfigError, LakeHook, LakeSparkJobError, SparkSubmission
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, State
from airflow_lake_provider.operators.compaction import RunCompactionOperator, ScheduleCompactionOperator
from airflow_lake_provider.sensors.compaction import CompactionPlanSensor
from airflow_lake_provider.triggers.compaction import CompactionPlanTrigger

pytestmark = pytest.mark.airflow

DAG_ID = "example_lake_compaction"
DUE = {"hoodie.compact.inline.max.delta.commits": "1"}


@pytest.fixture(params=[6, 8], ids=["v6", "v8"])
def table_version(request: pytest.FixtureRequest) -> int:
    return request.param


def _mor_table(path: Path, deltas: int = 5, table_version: int = 6) -> LakeTable:
    """A MOR table of ``table_version``: 4 file groups of 10 rows, then ``deltas`` upserts/deletes
    as log files."""
    table, ids = new_trips_table(path, table_version=table_version)
    for d in range(1, deltas + 1):
        upsert_trips(table, ids[d::7], ts=d, value=1000 * d, op="delete" if d == deltas else "upsert")
    return table


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("_hoodie_record_key", "ts", "v")), strict=True))


def _hudi_rs(path: Path) -> list[tuple]:
    return _rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read()))


@pytest.fixture(scope="module")
def example_dag(repo_root: Path, airflow_db: Path) -> Any:
    return load_example_dag(repo_root, DAG_ID)


def _states(run_id: str) -> dict[str, str]:
    return task_states(DAG_ID, run_id)


def _xcom(run_id: str, task_id: str, key: str = "return_value") -> Any:
    return xcom_value(DAG_ID, run_id, task_id, key)


@pytest.mark.spark
def test_example_dag_schedules_waits_and_compacts_on_spark(example_dag: Any, tmp_path: Path) -> None:
    table = _mor_table(tmp_path / "trips")
    expected = _rows(read_snapshot(table))
    assert _hudi_rs(table.base_path) == expected and len(expected) == 35
    dr = example_dag.test(run_conf={"table_path": str(table.base_path)})
    assert dr.state == "success", _states(dr.run_id)
    scheduled = _xcom(dr.run_id, "schedule")
    assert scheduled["outcome"] == "SCHEDULED" and scheduled["plan"]["operations"] == 4
    c = scheduled["instant"]
    assert str(_xcom(dr.run_id, "wait_for_plan")) == c
    result = _xcom(dr.run_id, "compact")
    assert result["outcome"] == "COMPLETED" and result["instant"] == c
    assert result["operations"] == 4 and result["records_written"] == 35 and result["bytes_written"] > 0
    timeline = table.timeline()
    done = timeline.get(c)
    assert done is not None and done.is_completed and timeline.is_compaction(done)
    # Every file group now has a base file at c; rows are unchanged for us and for hudi-rs.
    assert all(
        g.latest_slice.base_instant == c and not g.latest_slice.log_files
        for g in table.file_system_view().file_groups()
    )
    assert _rows(read_snapshot(table)) == expected == _hudi_rs(table.base_path)


CHAIN = "lake_hourly_compaction"


def test_hourly_chain_skips_at_once_when_nothing_is_due_and_still_cleans(
    airflow_db: Path, tmp_path: Path
) -> None:
    """docs/operators.md's chain: plan >> wait (``schedule_task_id``) >> compact >> clean (``none_failed``).
    Nothing due: the sensor skips at once (not after its 7-day default timeout), the compaction is
    skipped with it, the clean still runs. Due: the chain runs as before and the clean deletes the
    slices the compaction replaced."""
    table = _mor_table(tmp_path / "trips", deltas=2)
    expected = _rows(read_snapshot(table))
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "chain.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG, Param

            from airflow_lake_provider.operators.clean import ScheduleCleanOperator
            from airflow_lake_provider.operators.compaction import (
                RunCompactionOperator,
                ScheduleCompactionOperator,
            )
            from airflow_lake_provider.sensors.compaction import CompactionPlanSensor

            TABLE = {str(table.base_path)!r}
            with DAG(
                "{CHAIN}",
                schedule="@hourly",
                start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
                catchup=False,
                params={{"delta_commits": Param(10, type="integer")}},
            ):
                plan = ScheduleCompactionOperator(
                    task_id="plan",
                    table_path=TABLE,
                    options={{"hoodie.compact.inline.max.delta.commits": "{{{{ params.delta_commits }}}}"}},
                )
                wait = CompactionPlanSensor(
                    task_id="wait", table_path=TABLE, schedule_task_id="plan", deferrable=True
                )
                run = RunCompactionOperator(task_id="compact", table_path=TABLE, instant_task_id="wait")
                clean = ScheduleCleanOperator(
                    task_id="clean",
                    table_path=TABLE,
                    options={{
                        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                        "hoodie.cleaner.fileversions.retained": "1",
                    }},
                    trigger_rule="none_failed",
                )
                plan >> wait >> run >> clean
            """
        )
    )
    dag = sync_dags_folder(folder).dags[CHAIN]
    assert dag.get_task("wait").timeout == 7 * 24 * 3600  # Airflow's default: what it would wait

    idle = dag.test(logical_date=pendulum.datetime(2024, 1, 5, 4, tz="UTC"))
    assert idle.state == "success", task_states(CHAIN, idle.run_id)
    assert task_states(CHAIN, idle.run_id) == {
        "plan": "success",
        "wait": "skipped",
        "compact": "skipped",
        "clean": "success",
    }
    assert xcom_value(CHAIN, idle.run_id, "plan")["outcome"] == "NO_WORK"
    assert xcom_value(CHAIN, idle.run_id, "clean")["outcome"] == "NO_WORK"
    assert _durations(CHAIN, idle.run_id)["wait"] < 30
    assert [(i.action.value, i.state.name) for i in table.timeline().instants] == [
        ("deltacommit", "COMPLETED")
    ] * 3  # no plan, no clean: the table is as it was

    # The slices a compaction replaces: every file group with log files (a base file and its logs).
    replaced = [s for s in (g.latest_slice for g in table.file_system_view().file_groups()) if s.log_files]
    old_files = [f for s in replaced for f in s.files]
    assert len(replaced) == 4 and len(old_files) > 4

    due = dag.test(logical_date=pendulum.datetime(2024, 1, 5, 5, tz="UTC"), run_conf={"delta_commits": 1})
    assert task_states(CHAIN, due.run_id) == dict.fromkeys(("plan", "wait", "compact", "clean"), "success")
    c = xcom_value(CHAIN, due.run_id, "plan")["instant"]
    assert str(xcom_value(CHAIN, due.run_id, "wait")) == c
    assert xcom_value(CHAIN, due.run_id, "compact")["outcome"] == "COMPLETED"
    assert xcom_value(CHAIN, due.run_id, "clean")["deleted_files"] == len(old_files)
    assert xcom_value(CHAIN, due.run_id, "clean")["outcome"] == "CLEANED"
    assert not [f for f in old_files if (table.base_path / f.relative_path).exists()]
    assert _rows(read_snapshot(table)) == expected == _hudi_rs(table.base_path)


def test_the_readme_first_dag_runs_as_written_on_a_lake_connection(
    airflow_db: Path, tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README, "A first DAG": its DAG, as written, on a table under the ``lake``
    connection's ``base_path``: the due compaction runs, then the clean."""
    section = (repo_root / "README.md").read_text().split("\n## A first DAG\n", 1)[1]
    code = section.split("\n## ", 1)[0].split("```python\n", 1)[1].split("```", 1)[0]
    table = _mor_table(tmp_path / "lake" / "trips")  # 6 delta commits: due at Hudi's default of 5
    expected = _rows(read_snapshot(table))
    base = json.dumps({"conn_type": "lake", "extra": {"base_path": str(tmp_path / "lake")}})
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_DEFAULT", base)
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "trips_maintenance.py").write_text(code)
    dag = sync_dags_folder(folder).dags["trips_maintenance"]
    run = dag.test(logical_date=pendulum.datetime(2025, 1, 5, 4, tz="UTC"))
    assert task_states("trips_maintenance", run.run_id) == dict.fromkeys(
        ("plan", "wait", "compact", "clean"), "success"
    )
    c = xcom_value("trips_maintenance", run.run_id, "plan")["instant"]
    assert xcom_value("trips_maintenance", run.run_id, "compact")["outcome"] == "COMPLETED"
    assert [(str(i.timestamp), i.state.name) for i in table.timeline().filter([Action.COMMIT])] == [
        (c, "COMPLETED")
    ]
    assert _rows(read_snapshot(table)) == expected == _hudi_rs(table.base_path)


def _durations(dag_id: str, run_id: str) -> dict[str, float]:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstance.task_id, TaskInstance.duration).filter(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
        )
        return {task_id: float(duration or 0) for task_id, duration in rows}


def test_sensor_poke_finds_a_plan_an_external_writer_requested(tmp_path: Path, table_version: int) -> None:
    table = _mor_table(tmp_path / "trips", deltas=1, table_version=table_version)
    sensor = CompactionPlanSensor(task_id="wait", table_path=str(table.base_path))
    first = sensor.poke({})  # type: ignore[arg-type]
    assert first.is_done is False and first.xcom_value is None
    # An external writer (e.g. Spark Hudi with inline scheduling) writes a requested plan itself.
    preview = schedule_compaction(table, DUE, dry_run=True)
    assert preview.instant is not None and preview.plan is not None
    # as the table's external writer writes its plan
    body = table.store.encode_plan(timeline_avro.COMPACTION_PLAN, preview.plan.to_avro())
    table.store.create_requested(preview.instant, Action.COMPACTION, body)
    found = sensor.poke({})  # type: ignore[arg-type]
    assert found.is_done is True and found.xcom_value == preview.instant
    assert LakeHook().find_requested_compaction(str(table.base_path)) == preview.instant


def test_trigger_fires_when_a_plan_appears_and_round_trips(tmp_path: Path) -> None:
    table = _mor_table(tmp_path / "trips", deltas=1)
    trigger = CompactionPlanTrigger(str(table.base_path), poll_interval=0.2, timeout_at=time.time() + 30)
    path, kwargs = trigger.serialize()
    assert path == "airflow_lake_provider.triggers.compaction.CompactionPlanTrigger"
    assert CompactionPlanTrigger(**kwargs).serialize() == (path, kwargs)
    scheduled: dict[str, str | None] = {}

    def later() -> None:
        time.sleep(0.6)
        scheduled["c"] = schedule_compaction(table, DUE).instant

    thread = threading.Thread(target=later)
    thread.start()

    async def first_event() -> Any:
        async for event in trigger.run():
            return event.payload

    payload = asyncio.run(first_event())
    thread.join()
    assert payload == {"status": "success", "instant": scheduled["c"]}


def test_trigger_times_out_and_sensor_soft_fail_skips(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

    table = _mor_table(tmp_path / "trips", deltas=1)
    trigger = CompactionPlanTrigger(str(table.base_path), poll_interval=0.1, timeout_at=time.time() + 0.3)

    async def first_event() -> Any:
        async for event in trigger.run():
            return event.payload

    assert asyncio.run(first_event()) == {"status": "timeout"}
    soft = CompactionPlanSensor(task_id="w", table_path=str(table.base_path), deferrable=True, soft_fail=True)
    with pytest.raises(AirflowSkipException):
        soft.execute_complete({}, {"status": "timeout"})
    hard = CompactionPlanSensor(task_id="w", table_path=str(table.base_path), deferrable=True)
    with pytest.raises(AirflowSensorTimeout):
        hard.execute_complete({}, {"status": "timeout"})


def test_schedule_with_nothing_due_is_no_work_and_run_without_plan_is_no_work(
    tmp_path: Path, table_version: int
) -> None:
    table = _mor_table(tmp_path / "trips", deltas=1, table_version=table_version)
    hook = LakeHook()
    scheduled = hook.schedule_compaction(str(table.base_path))  # 1 delta commit < 5 (the default)
    assert scheduled["outcome"] == "NO_WORK" and "not due" in scheduled["reason"]
    assert not table.timeline().filter([Action.COMPACTION])
    ran = hook.run_compaction(str(table.base_path))
    assert ran["outcome"] == "NO_WORK"  # judged before anything is submitted to Spark
    assert not table.timeline().filter([Action.COMPACTION], [State.INFLIGHT])


class _TaskInstance:
    """The two XCom calls the operators make, recorded (a stand-in for the Task SDK's ``ti``)."""

    def __init__(self, pulled: dict[tuple[str, str], Any] | None = None) -> None:
        self.pushed: dict[str, Any] = {}
        self.pulled = pulled or {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.pulled.get((task_ids, key))


def test_schedule_operator_no_work_succeeds_and_due_plan_reports_partitions(
    tmp_path: Path, table_version: int
) -> None:
    table = _mor_table(tmp_path / "trips", deltas=1, table_version=table_version)
    ti = _TaskInstance()
    op = ScheduleCompactionOperator(task_id="schedule", table_path=str(table.base_path))
    result = op.execute({"ti": ti})  # type: ignore[arg-type]
    assert result["outcome"] == "NO_WORK" and result["operations"] == 0 and result["partitions"] == {}
    assert ti.pushed == {"compaction_instant": None}
    due = ScheduleCompactionOperator(task_id="schedule", table_path=str(table.base_path), options=DUE)
    result = due.execute({"ti": ti})  # type: ignore[arg-type]
    assert result["outcome"] == "SCHEDULED" and ti.pushed["compaction_instant"] == result["instant"]
    assert result["operations"] == 4 and len(result["partitions"]) == 2  # partitions a and b
    assert sum(p["file_groups"] for p in result["partitions"].values()) == 4
    assert all(p["io_mb"] > 0 for p in result["partitions"].values())


def test_run_operator_takes_the_instant_from_an_upstream_task(tmp_path: Path, monkeypatch: Any) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_run(self: LakeHook, table_path: str, instant: str | None, options: Any, **kw: Any) -> dict:
        calls.append((table_path, instant, options))
        return {"table_path": table_path, "instant": instant, "outcome": "COMPLETED"}

    monkeypatch.setattr(LakeHook, "run_compaction", fake_run)
    op = RunCompactionOperator(task_id="compact", table_path="/t", instant_task_id="schedule")
    # A ScheduleCompactionOperator's summary (XCom may turn a 17-digit instant into an int).
    ti = _TaskInstance({("schedule", "return_value"): {"instant": 20240101000000000}})
    assert op.execute({"ti": ti})["instant"] == "20240101000000000"  # type: ignore[arg-type]
    ti = _TaskInstance({("schedule", "return_value"): "20240102000000000"})  # a sensor's instant
    op.execute({"ti": ti})  # type: ignore[arg-type]
    op_none = RunCompactionOperator(task_id="compact", table_path="/t", instant="None")
    op_none.execute({"ti": _TaskInstance()})  # type: ignore[arg-type]
    assert [c[1] for c in calls] == ["20240101000000000", "20240102000000000", None]


def test_hook_rejects_an_instant_that_is_not_a_compaction(tmp_path: Path, table_version: int) -> None:
    table = _mor_table(tmp_path / "trips", deltas=1, table_version=table_version)
    delta = table.timeline().instants[-1].timestamp
    with pytest.raises(LakeConfigError, match="no compaction at instant"):
        LakeHook().run_compaction(str(table.base_path), delta)
    with pytest.raises(LakeConfigError):
        LakeHook().run_compaction(
            str(table.base_path), options={"hoodie.compact.inline.trigger.strategy": "x"}
        )


@pytest.mark.spark
def test_hook_raises_on_a_failed_job_and_the_retry_recovers(
    spark: Any, tmp_path: Path, monkeypatch: Any, table_version: int
) -> None:
    """A job that dies mid-way leaves the instant inflight: the task fails (and is retried), the
    retry's job removes the partial output and completes it. Judged from the timeline only."""
    from airflow_lake_provider.spark_jobs import compact

    table = _mor_table(tmp_path / "trips", table_version=table_version)
    expected = _rows(read_snapshot(table))
    c = schedule_compaction(table, DUE).instant

    def dies_after_one_file(self: LakeHook, script: str, args: Any, **kw: Any) -> SparkSubmission:
        def crash(point: str) -> None:
            if point == "file":
                raise SystemExit("executor lost")

        with pytest.raises(SystemExit):
            execute_compaction(table, c, fault=crash)
        return SparkSubmission(("compact.py", *args), False, "exit code 1")

    def runs_in_session(self: LakeHook, script: str, args: Any, **kw: Any) -> SparkSubmission:
        assert script == "compact.py"
        compact.run(compact.parse_args(list(args)), spark)
        return SparkSubmission(("compact.py", *args), True)

    hook = LakeHook()
    monkeypatch.setattr(LakeHook, "submit_spark_job", dies_after_one_file)
    with pytest.raises(LakeSparkJobError, match="a retry recovers it"):
        hook.run_compaction(str(table.base_path), spark_threshold_mb=0)
    assert table.timeline().get(c).is_inflight  # type: ignore[union-attr]
    monkeypatch.setattr(LakeHook, "submit_spark_job", runs_in_session)
    result = hook.run_compaction(str(table.base_path), spark_threshold_mb=0)
    assert result["outcome"] == "COMPLETED" and result["instant"] == c and result["operations"] == 4
    assert result["executor"] == "spark"
    assert result["records_written"] == len(expected) and result["bytes_written"] > 0
    assert _rows(read_snapshot(table)) == expected == _hudi_rs(table.base_path)
    again = hook.run_compaction(str(table.base_path), c)  # a retry after a commit: nothing to redo
    assert again["outcome"] == "ALREADY_COMPLETED" and again["operations"] == 4


def test_a_dry_run_schedule_pushes_no_instant_and_its_sensor_skips_at_once(
    airflow_db: Path, tmp_path: Path
) -> None:
    """A dry run writes no plan and no lock file: its would-be instant is in the summary only (not in
    ``compaction_instant``), the sensor behind it (``schedule_task_id``, 7-day timeout) skips in
    seconds, and a run operator that takes its instant from the schedule task executes nothing."""
    from tree_digest import tree_digest

    table = _mor_table(tmp_path / "trips", deltas=2)
    for lock in (table.base_path / ".hoodie" / ".aux").glob(".lake-*.lock"):
        lock.unlink()  # as a Hudi writer leaves the table
    before = tree_digest(table.base_path)
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "dry.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG

            from airflow_lake_provider.operators.compaction import (
                RunCompactionOperator,
                ScheduleCompactionOperator,
            )
            from airflow_lake_provider.sensors.compaction import CompactionPlanSensor

            TABLE = {str(table.base_path)!r}
            START = pendulum.datetime(2024, 1, 1, tz="UTC")
            with DAG("lake_dry_compaction", schedule=None, start_date=START):
                plan = ScheduleCompactionOperator(
                    task_id="plan", table_path=TABLE, options={DUE!r}, dry_run=True
                )
                wait = CompactionPlanSensor(task_id="wait", table_path=TABLE, schedule_task_id="plan")
                run = RunCompactionOperator(
                    task_id="compact", table_path=TABLE, instant_task_id="plan", trigger_rule="all_done"
                )
                plan >> wait >> run
            """
        )
    )
    dag = sync_dags_folder(folder).dags["lake_dry_compaction"]
    dr = dag.test()
    assert task_states("lake_dry_compaction", dr.run_id) == {
        "plan": "success",
        "wait": "skipped",
        "compact": "success",
    }
    planned = xcom_value("lake_dry_compaction", dr.run_id, "plan")
    assert (planned["outcome"], planned["dry_run"], planned["operations"]) == ("PLANNED", True, 4)
    assert planned["instant"] is not None
    assert xcom_value("lake_dry_compaction", dr.run_id, "plan", key="compaction_instant") is None
    assert _durations("lake_dry_compaction", dr.run_id)["wait"] < 30
    ran = xcom_value("lake_dry_compaction", dr.run_id, "compact")
    assert (ran["outcome"], ran["instant"]) == ("NO_WORK", None)
    after = tree_digest(table.base_path)
    assert {
        k: v for k, v in after.items() if not k.startswith(".hoodie/.aux/.lake-compaction.lock")
    } == before


def test_run_operator_log_reads_well_without_an_instant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _mor_table(tmp_path / "trips", deltas=1)
    op = RunCompactionOperator(task_id="compact", table_path=str(table.base_path))
    capsys.readouterr()
    assert op.execute({"ti": _TaskInstance()})["outcome"] == "NO_WORK"  # type: ignore[arg-type]
    out = capsys.readouterr().out  # where Airflow's structlog logger prints outside a task
    lines = [line for line in out.splitlines() if "] compaction " in line]
    assert len(lines) == 1 and lines[0].split("] ", 1)[1].startswith(
        f"compaction of {table.uri}: NO_WORK (executor none), 0 file groups, 0 records written, "
        "0 log records merged, 0 bytes"
    ), out
