"""A typo in an option fails the task at once, without a retry, naming the key and the value: every
option family through its operator under ``dag.test()`` (each task has ``retries=1``, so a retryable
error would show as a second try)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dag_helpers import new_trips_table, sync_dags_folder, task_states
from tree_digest import tree_digest

from airflow_lake_provider.hooks.errors import LakeConfigError, as_bool
from airflow_lake_provider.lake import errors

pytestmark = pytest.mark.airflow
DAG_ID = "lake_config_typos"
POLICIES = "KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS, KEEP_LATEST_BY_HOURS"

# task id -> (operator call, the message the failure must carry).
TASKS = {
    "clean": (
        'ScheduleCleanOperator(task_id="clean", table_path=TABLE, '
        'options={"hoodie.cleaner.policy": "KEEP_LATEST_COMMIT"})',
        f"clean of {{table}}: hoodie.cleaner.policy='KEEP_LATEST_COMMIT' is not one of {POLICIES}",
    ),
    "clean_unknown_key": (
        'ScheduleCleanOperator(task_id="clean_unknown_key", table_path=TABLE, '
        'options={"hoodie.cleaner.comits.retained": "3"})',
        "clean of {table}: unknown option hoodie.cleaner.comits.retained='3'; "
        "did you mean hoodie.cleaner.commits.retained?",
    ),
    "clean_flink_conflict": (
        'ScheduleCleanOperator(task_id="clean_flink_conflict", table_path=TABLE, '
        'options={"hoodie.cleaner.commits.retained": "3", "clean.retain_commits": "4"})',
        "clean of {table}: hoodie.cleaner.commits.retained='3' and clean.retain_commits='4' set the "
        "same option to different values: give one",
    ),
    "schedule_compaction": (
        'ScheduleCompactionOperator(task_id="schedule_compaction", table_path=TABLE, '
        'options={"compaction.trigger.strategy": "num_commit"})',
        "compaction scheduling of {table}: compaction.trigger.strategy='num_commit' is not one of "
        "NUM_COMMITS, NUM_COMMITS_AFTER_LAST_REQUEST, TIME_ELAPSED, NUM_AND_TIME, NUM_OR_TIME",
    ),
    "run_compaction": (
        'RunCompactionOperator(task_id="run_compaction", table_path=TABLE, '
        'options={"hoodie.compaction.target.io": "lots"})',
        "compaction of {table}: hoodie.compaction.target.io='lots' is not a number",
    ),
    "rollback": (
        'RollbackFailedWritesOperator(task_id="rollback", table_path=TABLE, '
        'options={"hoodie.cleaner.policy.failed.writes": "EAGERLY"})',
        "rollback of failed writes in {table}: hoodie.cleaner.policy.failed.writes='EAGERLY' is not "
        "one of EAGER, LAZY, NEVER",
    ),
    "archival": (
        'ScheduleCleanOperator(task_id="archival", table_path=TABLE, '
        'options={"archive.max_commits": "thirty"})',
        "archival of {table}: archive.max_commits='thirty' is not a whole number",
    ),
    "write": (
        'LakeWriteOperator(task_id="write", table_path=TABLE, input_path=INPUT, '
        'options={"hoodie.archive.automatic": "yes"})',
        "write of {input} into {table}: hoodie.archive.automatic='yes' is not true or false",
    ),
    "partition_commit": (
        'PartitionCommitOperator(task_id="partition_commit", table_path=TABLE, partitions=["a"], '
        'options={"sink.partition-commit.trigger": "event-time"})',
        "partition commit of {table}: sink.partition-commit.trigger='event-time' is not process-time "
        "or partition-time",
    ),
    "metadata_table": (
        'ScheduleCompactionOperator(task_id="metadata_table", table_path=TABLE, '
        'options={"hoodie.metadata.enable": "1"})',
        "compaction scheduling of {table}: hoodie.metadata.enable='1' is not true or false",
    ),
}


def _tries(run_id: str, task_id: str) -> list[tuple[int, str]]:
    """(try number, state) of every try of one task instance: earlier tries, then the last."""
    from airflow.models import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session

    with create_session() as session:
        earlier = [
            (h.try_number, str(h.state))
            for h in session.query(TaskInstanceHistory).filter_by(
                dag_id=DAG_ID, run_id=run_id, task_id=task_id
            )
        ]
        ti = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run_id, task_id=task_id).one()
        return sorted(earlier) + [(ti.try_number, str(ti.state))]


def test_a_typo_in_any_option_family_fails_at_once_naming_key_and_value(
    airflow_db: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    table, _ = new_trips_table(tmp_path / "trips")
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["k00"], "ts": pa.array([9], pa.int64()), "p": ["a"], "v": [1]}), source)
    folder = tmp_path / "dags"
    folder.mkdir()
    operators = "\n".join(f"    {call}" for call, _ in TASKS.values())
    (folder / "typos.py").write_text(
        textwrap.dedent(
            f"""
            import datetime as dt

            import pendulum
            from airflow.sdk import DAG

            from airflow_lake_provider.operators.clean import ScheduleCleanOperator
            from airflow_lake_provider.operators.compaction import (
                RunCompactionOperator,
                ScheduleCompactionOperator,
            )
            from airflow_lake_provider.operators.partition_commit import PartitionCommitOperator
            from airflow_lake_provider.operators.rollback import (
                LakeWriteOperator,
                RollbackFailedWritesOperator,
            )

            TABLE = {str(table.uri)!r}
            INPUT = {str(source)!r}
            ARGS = {{"retries": 1, "retry_delay": dt.timedelta(0)}}

            with DAG(
                "{DAG_ID}",
                schedule=None,
                start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
                catchup=False,
                default_args=ARGS,
            ):
            """
        )
        + operators
        + "\n"
    )
    dag = sync_dags_folder(folder).dags[DAG_ID]
    before = tree_digest(tmp_path / "trips")

    dr = dag.test()

    assert task_states(DAG_ID, dr.run_id) == dict.fromkeys(TASKS, "failed")
    assert {task: _tries(dr.run_id, task) for task in TASKS} == dict.fromkeys(TASKS, [(1, "failed")])
    out = "".join(capfd.readouterr())
    for _, message in TASKS.values():
        assert message.format(table=table.uri, input=source) in out
    assert tree_digest(tmp_path / "trips") == before  # every refusal came before any change


@pytest.mark.parametrize("key", [3, None])
def test_an_option_name_that_is_not_a_string_fails_at_once(key: object) -> None:
    """Before, ``options={3: "x"}`` became the name "3", which no option reads: the value was
    dropped without a word and the task ran on defaults."""
    from airflow_lake_provider.hooks.errors import LakeConfigError, check_options

    with pytest.raises(LakeConfigError, match=f"clean of t: option names are strings: {key!r}"):
        check_options({"hoodie.cleaner.commits.retained": "1", key: "x"}, "clean of t")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("raw", "expected"), [("True", True), (" false ", False), ("TRUE", True), (False, False)]
)
def test_an_operator_flag_is_read_as_the_options_booleans_are(raw: str | bool, expected: bool) -> None:
    assert as_bool(raw, "dry_run") is expected


@pytest.mark.parametrize("raw", ["1", "yes", "", "0", "no", "None"])
def test_an_operator_flag_other_than_true_or_false_fails_at_once(raw: str) -> None:
    with pytest.raises(LakeConfigError, match=f"^dry_run={raw!r} is not true or false$"):
        as_bool(raw, "dry_run")


def test_a_bad_value_in_a_connections_extra_names_the_connection(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_lake_provider.hooks.lake import LakeHook

    table, _ = new_trips_table(tmp_path / "trips")
    extra = {"hoodie.metadata.enable": "yes", "lake.metadata-table.maintain": "true"}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_BAD", json.dumps({"conn_type": "lake", "extra": extra}))
    extra = {"lake.metadata-table.maintain": "true"}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_KEEP", json.dumps({"conn_type": "lake", "extra": extra}))
    before = tree_digest(tmp_path / "trips")
    with pytest.raises(LakeConfigError) as bad:
        LakeHook(lake_conn_id="lake_bad").clean(str(table.uri))
    with pytest.raises(LakeConfigError) as both:
        LakeHook(lake_conn_id="lake_keep").clean(str(table.uri), {"hoodie.metadata.enable": "false"})
    assert str(bad.value) == (
        f"clean of {table.uri}: the extra of lake connection 'lake_bad': "
        "hoodie.metadata.enable='yes' is not true or false"
    )
    assert str(both.value) == (
        f"clean of {table.uri}: hoodie.metadata.enable=false drops the metadata table, "
        "lake.metadata-table.maintain=true (in the extra of lake connection 'lake_keep') keeps it up "
        "to date: give one of them, not both"
    )
    assert tree_digest(tmp_path / "trips") == before


def _raised_through_opening(error: Exception) -> Exception:
    from airflow_lake_provider.hooks.errors import opening_errors

    with pytest.raises(Exception) as raised, opening_errors():
        raise error
    return raised.value


@pytest.mark.parametrize(
    ("error", "fails_at_once"),
    [
        (errors.StorageError("s3://b/t/.hoodie/hoodie.properties: cannot read (503 SlowDown)"), False),
        (errors.StorageUnavailableError("cannot reach the S3 endpoint"), False),
        (errors.CorruptTimelineFileError("torn"), True),
        (errors.TableNotFoundError("/t is not a Hudi table"), True),
        (errors.TableConfigError("hoodie.table.type=X"), True),
        (errors.StorageAccessError("access denied"), True),
        (errors.MissingExtraError("pip install airflow-lake-provider[s3]"), True),
    ],
    ids=["throttled", "unreachable", "corrupt-file", "no-table", "bad-properties", "denied", "missing-extra"],
)
def test_opening_a_table_retries_only_what_a_retry_may_change(error: Exception, fails_at_once: bool) -> None:
    from airflow_lake_provider.hooks.errors import LakeHookError

    raised = _raised_through_opening(error)
    assert isinstance(raised, LakeHookError) and str(raised) == str(error) and raised.__cause__ is error
    assert isinstance(raised, LakeConfigError) is fails_at_once


@pytest.mark.parametrize(
    ("error", "fails_at_once"),
    [
        (LakeConfigError("partition commit of t: a bad pattern"), True),
        (errors.PartitionCommitConfigError("sink.partition-commit.delay='x'"), True),
        (errors.TableNotFoundError("/t is not a Hudi table"), True),
        (errors.StorageAccessError("access denied"), True),
        (ValueError("bad input"), True),
        (errors.StorageError("503 SlowDown"), False),
        (errors.CorruptTimelineFileError("a timeline file being written"), False),
        (RuntimeError("anything else"), False),
    ],
)
def test_a_trigger_tells_its_sensor_to_fail_at_once_only_what_a_retry_cannot_change(
    error: Exception, fails_at_once: bool
) -> None:
    from airflow_lake_provider.hooks.errors import fails_now

    assert fails_now(error) is fails_at_once


@pytest.mark.parametrize(
    ("partitions", "message"),
    [
        (["../x"], "partition '../x' is not a partition folder of the directory"),
        ([".hoodie/x"], "partition '.hoodie/x' is not a partition folder of the directory"),
        (["_tmp"], "partition '_tmp' is hidden"),
    ],
    ids=["parent", "hoodie", "hidden"],
)
def test_a_partition_argument_naming_no_partition_fails_at_once(
    tmp_path: Path, partitions: list[str], message: str
) -> None:
    """A retry reads the same argument: once retried as any other partition-commit failure."""
    from airflow_lake_provider.hooks.partition_commit import run_partition_commit

    (tmp_path / "plain" / "dt=1").mkdir(parents=True)
    before = tree_digest(tmp_path)
    with pytest.raises(LakeConfigError) as caught:
        run_partition_commit(str(tmp_path / "plain"), partitions, {}, dry_run=True)
    assert str(caught.value).startswith(f"partition commit of {tmp_path / 'plain'}: {message}")
    assert tree_digest(tmp_path) == before


def test_partition_commit_of_a_location_not_there_yet_is_retried(tmp_path: Path) -> None:
    """A sensor started before the upstream job's first write waits: on S3 a directory exists only
    once its first file lands, so this is no bad argument (a bad partition name is, above)."""
    from airflow_lake_provider.hooks.errors import LakeHookError
    from airflow_lake_provider.hooks.partition_commit import run_partition_commit

    missing = tmp_path / "nope"
    with pytest.raises(LakeHookError) as commit:
        run_partition_commit(str(missing), ["dt=1"], {}, dry_run=True)
    assert not isinstance(commit.value, LakeConfigError)
    assert str(commit.value).startswith(
        f"partition commit of {missing} failed: {missing} does not exist: "
        "neither a Hudi table nor a parquet directory"
    )
    assert not missing.exists()


def test_options_that_are_not_a_mapping_fail_at_once() -> None:
    from airflow_lake_provider.hooks.errors import check_options

    with pytest.raises(
        LakeConfigError, match="^clean of t: options must map option names to values, not a str$"
    ):
        check_options("{'hoodie.cleaner.commits.retained': 1}", "clean of t")  # type: ignore[arg-type]
