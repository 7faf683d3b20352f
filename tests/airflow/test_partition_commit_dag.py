"""Partition commit from Airflow: the sensor's poke and trigger, the operator, and light imports
(the hourly example DAG runs in ``test_example_dags.py``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import jinja2
import pendulum
import pyarrow as pa
import pytest
from dag_helpers import sync_dags_folder, task_states, xcom_value

from airflow_lake_provider.hooks.errors import LakeConfigError
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.operators.partition_commit import PartitionCommitOperator
from airflow_lake_provider.sensors.partition_commit import PartitionCommitSensor
from airflow_lake_provider.triggers.partition_commit import PartitionCommitTrigger

pytestmark = pytest.mark.airflow

DAG_ID = "example_lake_partition_commit"
PART = "year=2024/month=01/day=05/hour=03"
OPTIONS = {
    "sink.partition-commit.trigger": "partition-time",
    "partition.time-extractor.timestamp-pattern": "$year-$month-$day $hour:00:00",
}


def _hourly_table(path: Path, hours: tuple[str, ...] = ("03",), version: int = 6) -> LakeTable:
    table = LakeTable.create(
        path,
        name="events",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("year", "month", "day", "hour"),
        hive_style=True,
        table_version=version,
    )
    n = len(hours)
    write(
        table,
        pa.table(
            {
                "id": [f"e{h}" for h in hours],
                "ts": pa.array([1] * n, pa.int64()),
                "year": ["2024"] * n,
                "month": ["01"] * n,
                "day": ["05"] * n,
                "hour": list(hours),
            }
        ),
        "insert",
    )
    return table


@pytest.mark.parametrize("version", [6, 8])
def test_sensor_waits_for_the_watermark_then_commits_once(tmp_path: Path, version: int) -> None:
    table = _hourly_table(tmp_path / "t", version=version)
    early = PartitionCommitSensor(
        task_id="w",
        table_path=str(table.base_path),
        partitions=PART,
        options=OPTIONS,
        watermark="2024-01-05T04:00:00Z",
        delay="1 h",
    )
    assert early.poke({}).is_done is False  # type: ignore[arg-type]
    assert not (table.base_path / PART / "_SUCCESS").exists()
    due = PartitionCommitSensor(
        task_id="w",
        table_path=str(table.base_path),
        partitions=[PART],
        options=OPTIONS,
        watermark="2024-01-05T04:00:01Z",
        delay="1 h",
    )
    done = due.poke({})  # type: ignore[arg-type]
    assert done.is_done is True and done.xcom_value["committed"] == [PART]
    assert (table.base_path / PART / "_SUCCESS").exists()
    again = due.poke({})  # type: ignore[arg-type]
    assert again.is_done is True and again.xcom_value["committed"] == []
    assert again.xcom_value["already_committed"] == [PART]


def test_sensor_waits_for_a_partition_not_written_yet(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t")
    sensor = PartitionCommitSensor(
        task_id="w",
        table_path=str(table.base_path),
        partitions="year=2024/month=01/day=05/hour=09",
        options=OPTIONS,
        watermark="2030-01-01T00:00:00Z",
    )
    assert sensor.poke({}).is_done is False  # type: ignore[arg-type]


def test_trigger_fires_when_ready_round_trips_and_times_out(tmp_path: Path) -> None:
    table = _hourly_table(tmp_path / "t")
    trigger = PartitionCommitTrigger(
        str(table.base_path), [PART], OPTIONS, "2024-01-05T04:00:00Z", poll_interval=0.1
    )
    path, kwargs = trigger.serialize()
    assert path == "airflow_lake_provider.triggers.partition_commit.PartitionCommitTrigger"
    assert PartitionCommitTrigger(**kwargs).serialize() == (path, kwargs)

    async def first_event(t: PartitionCommitTrigger) -> Any:
        async for event in t.run():
            return event.payload

    payload = asyncio.run(first_event(trigger))
    assert payload["status"] == "ready" and payload["summary"]["partitions"][PART]["decision"] == "DUE"
    assert not (table.base_path / PART / "_SUCCESS").exists()  # the trigger never commits
    waiting = PartitionCommitTrigger(
        str(table.base_path),
        [PART],
        {**OPTIONS, "sink.partition-commit.delay": "2 h"},
        "2024-01-05T04:00:00Z",
        poll_interval=0.1,
        timeout_at=time.time() + 0.3,
    )
    assert asyncio.run(first_event(waiting)) == {"status": "timeout"}
    sensor = PartitionCommitSensor(
        task_id="w",
        table_path=str(table.base_path),
        partitions=PART,
        options=OPTIONS,
        watermark="2024-01-05T04:00:00Z",
        deferrable=True,
    )
    result = sensor.execute_complete({}, {"status": "ready", "summary": payload["summary"]})  # type: ignore[arg-type]
    assert result["committed"] == [PART]


@pytest.mark.parametrize("version", [6, 8])
def test_operator_commits_at_once_and_refuses_a_missing_partition(tmp_path: Path, version: int) -> None:
    table = _hourly_table(tmp_path / "t", hours=("03", "04"), version=version)
    calls: list[Any] = []
    op = PartitionCommitOperator(
        task_id="c",
        table_path=str(table.base_path),
        partitions=[PART, "year=2024/month=01/day=05/hour=04"],
        options={**OPTIONS, "sink.partition-commit.delay": "100 d"},
        policies="success-file,custom",
        custom_policy=calls.append,
    )
    result = op.execute({})  # type: ignore[arg-type]
    assert result["committed"] == [PART, "year=2024/month=01/day=05/hour=04"]
    assert [c.partition_path for c in calls] == result["committed"]
    assert op.execute({})["committed"] == [] and len(calls) == 2  # type: ignore[arg-type]
    bad = PartitionCommitOperator(
        task_id="c", table_path=str(table.base_path), partitions=["year=2024/month=01/day=05/hour=09"]
    )
    with pytest.raises(LakeConfigError, match="hour=09"):
        bad.execute({})  # type: ignore[arg-type]


def test_operator_sensor_and_trigger_modules_import_no_table_core() -> None:
    code = (
        "import sys\n"
        "import airflow_lake_provider.sensors.partition_commit\n"
        "import airflow_lake_provider.operators.partition_commit\n"
        "import airflow_lake_provider.triggers.partition_commit\n"
        "print([m for m in ('pyarrow', 'polars', 'fastavro', 'pyspark') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_sensor_commits_a_plain_parquet_directory_once(tmp_path: Path) -> None:
    """A folder without .hoodie/ (parquet files another engine wrote): the sensor plans by the files'
    modification times, then merges and marks the partition once."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    folder = tmp_path / "events" / "dt=2024-01-05"
    folder.mkdir(parents=True)
    for k in range(4):
        pq.write_table(pa.table({"id": list(range(k * 3, k * 3 + 3))}), folder / f"part-{k}.parquet")
    sensor = PartitionCommitSensor(
        task_id="s",
        table_path=str(tmp_path / "events"),
        partitions="dt=2024-01-05",
        policies="merge-small-files,success-file",
        options={"compaction.file-size": "1mb"},
        poke_interval=0.1,
        timeout=30,
    )
    done = sensor.poke({})  # type: ignore[arg-type]
    assert done.is_done and done.xcom_value["committed"] == ["dt=2024-01-05"]
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith((".", "_"))) == [
        next(p.name for p in folder.iterdir() if p.name.startswith("part-merged-"))
    ]
    assert (folder / "_SUCCESS").read_bytes() == b""
    rows = ds.dataset(tmp_path / "events", format="parquet", partitioning="hive").to_table()
    assert sorted(rows.column("id").to_pylist()) == list(range(12))
    again = sensor.poke({})  # type: ignore[arg-type]
    assert again.is_done and again.xcom_value["committed"] == [] and again.xcom_value["outcome"] == "NO_WORK"


def test_manual_run_data_interval_template_fails_at_once_and_the_fallback_commits(
    airflow_db: Path, tmp_path: Path
) -> None:
    """A manual run has no data interval: a bare ``{{ data_interval_end }}`` watermark fails at once
    (no retry) naming the fallback, and ``{{ data_interval_end | default(dag_run.run_after) }}``
    commits with the time the run was triggered as the watermark."""
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    table = _hourly_table(tmp_path / "t")
    folder = tmp_path / "dags"
    folder.mkdir()
    dag_id = "lake_manual_watermark"
    (folder / "manual.py").write_text(
        textwrap.dedent(
            f"""
            import datetime as dt
            import pendulum
            from airflow.sdk import DAG
            from airflow_lake_provider.sensors.partition_commit import PartitionCommitSensor

            with DAG("{dag_id}", schedule="@hourly", start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
                     catchup=False, default_args={{"retries": 3, "retry_delay": dt.timedelta(seconds=1)}}):
                for task_id, watermark in (
                    ("bare", "{{{{ data_interval_end }}}}"),
                    ("fallback", "{{{{ data_interval_end | default(dag_run.run_after) }}}}"),
                ):
                    PartitionCommitSensor(
                        task_id=task_id, table_path={str(table.base_path)!r}, partitions={PART!r},
                        options={OPTIONS!r}, watermark=watermark, policies="success-file",
                        poke_interval=1, timeout=30,
                    )
            """
        )
    )
    dag = sync_dags_folder(folder).dags[dag_id]
    dr = dag.test(logical_date=None, run_after=pendulum.datetime(2024, 1, 5, 6, 17, 33, tz="UTC"))
    assert task_states(dag_id, dr.run_id) == {"bare": "failed", "fallback": "success"}
    with create_session() as session:
        bare = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=dr.run_id, task_id="bare").one()
        assert bare.try_number == 1  # failed for good, not retried 3 times
    # The message the bare template's task failed with:
    with pytest.raises(LakeConfigError) as failed:
        dag.get_task("bare").render_template_fields(
            {"dag_run": dr}, jinja2.Environment(undefined=jinja2.StrictUndefined)
        )
    assert str(failed.value) == (
        "task bare: a template names data_interval_end, which this run does not have (a manual run has "
        "no logical date); use e.g. '{{ data_interval_end | default(dag_run.run_after) }}' to fall back "
        "to the time the run was triggered"
    )
    committed = xcom_value(dag_id, dr.run_id, "fallback")
    assert committed["outcome"] == "COMMITTED" and committed["committed"] == [PART]
    assert (table.base_path / PART / "_SUCCESS").exists()


# -- failures a retry cannot change fail at once, also through the triggerer -----------------------
# A pattern that does not fit the table's partitions: every retry would read the same folders.
UNREADABLE = {**OPTIONS, "partition.time-extractor.timestamp-pattern": "$year-$month"}
UNREADABLE_MESSAGE = (
    f"partition {PART!r}: time '2024-01' cannot be read (expected yyyy-MM-dd[ HH:mm[:ss]]); "
    "check partition.time-extractor.timestamp-pattern"
)


def test_a_partition_time_the_pattern_cannot_read_fails_at_once_poked_or_deferred(tmp_path: Path) -> None:
    from airflow_lake_provider.hooks.errors import LakeHookError

    table = _hourly_table(tmp_path / "t")
    sensor = PartitionCommitSensor(
        task_id="w", table_path=str(table.base_path), partitions=PART, options=UNREADABLE, watermark="2030"
    )
    with pytest.raises(LakeConfigError) as poked:
        sensor.poke({})  # type: ignore[arg-type]
    assert str(poked.value).endswith(UNREADABLE_MESSAGE)

    async def first_event(t: PartitionCommitTrigger) -> Any:
        async for event in t.run():
            return event.payload

    trigger = PartitionCommitTrigger(str(table.base_path), [PART], UNREADABLE, "2030-01-01T00:00:00Z")
    payload = asyncio.run(first_event(trigger))
    assert (payload["status"], payload["fail_now"]) == ("error", True)
    assert payload["message"].endswith(UNREADABLE_MESSAGE)
    with pytest.raises(LakeConfigError, match="^waiting for partitions of .* failed: partition"):
        sensor.execute_complete({}, payload)  # type: ignore[arg-type]
    # A failure a retry may get past (the store, a policy's own error) stays retryable.
    with pytest.raises(LakeHookError) as retried:
        sensor.execute_complete({}, {"status": "error", "message": "503 SlowDown", "fail_now": False})  # type: ignore[arg-type]
    assert not isinstance(retried.value, LakeConfigError)


@pytest.mark.parametrize(
    ("options", "arguments", "message"),
    [
        (
            {"sink.partition-commit.policy.kind": "metastore"},
            {"policies": "success-file"},
            "partition commit: policies='success-file' and option "
            "sink.partition-commit.policy.kind='metastore' disagree: give one of them",
        ),
        (
            {"sink.partition-commit.delay": "1 h"},
            {"delay": "2 h"},
            "partition commit: delay='2 h' and option sink.partition-commit.delay='1 h' disagree: "
            "give one of them",
        ),
        (
            {"sink.partition-commit.trigger": "process-time"},
            {"trigger": "partition-time"},
            "partition commit: trigger='partition-time' and option "
            "sink.partition-commit.trigger='process-time' disagree: give one of them",
        ),
        ({5: "x"}, {}, "partition commit: option names are strings: 5"),
    ],
    ids=["policies", "delay", "trigger", "key-not-a-string"],
)
def test_commit_arguments_at_odds_with_the_options_fail_at_once(
    options: dict[Any, str], arguments: dict[str, str], message: str
) -> None:
    from airflow_lake_provider.hooks.partition_commit import commit_options

    with pytest.raises(LakeConfigError) as refused:
        commit_options(options, **arguments)
    assert str(refused.value) == message


def test_commit_arguments_that_agree_with_the_options_are_taken_once() -> None:
    from airflow_lake_provider.hooks.partition_commit import commit_options

    options = {"sink.partition-commit.delay": "60 min", "sink.partition-commit.trigger": "partition-time"}
    assert commit_options(options, ["success-file"], "PARTITION-TIME", "1 h") == {
        "sink.partition-commit.delay": "1 h",
        "sink.partition-commit.trigger": "PARTITION-TIME",
        "sink.partition-commit.policy.kind": "success-file",
    }


@pytest.mark.parametrize(("raw", "expected"), [("false", False), ("True", True), (False, False)])
def test_the_sensors_commit_flag_is_read_by_the_boolean_parser(raw: str | bool, expected: bool) -> None:
    """``commit="false"`` (from a config file) once was a truthy string: the sensor committed."""
    sensor = PartitionCommitSensor(task_id="s", table_path="/t", partitions="dt=1", commit=raw)  # type: ignore[arg-type]
    assert sensor.commit is expected
    assert bool(sensor.outlets) is expected  # the table's asset only when it commits


def test_the_sensors_commit_flag_other_than_true_or_false_is_refused_at_parse() -> None:
    with pytest.raises(LakeConfigError, match="^commit='yes' is not true or false$"):
        PartitionCommitSensor(task_id="s", table_path="/t", partitions="dt=1", commit="yes")  # type: ignore[arg-type]
