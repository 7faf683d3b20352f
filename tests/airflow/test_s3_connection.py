"""s3:// tables from Airflow: the ``lake`` connection holds the S3 settings, and they never leak.

The process running the hooks has no ``AWS_*`` variables here: the table opens only because the
connection's login, password and extras reach the core. The secret key must not appear in a
spark-submit command line, a log line or an XCom; spark-submit gets it in its environment.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from dag_helpers import load_example_dag, task_states, xcom_value
from s3_helpers import S3_KEYS, s3_environ, s3_objects

from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action, State

pytestmark = pytest.mark.airflow

SECRET = S3_KEYS["AWS_SECRET_ACCESS_KEY"]
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP")


@pytest.fixture
def lake_conn(s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Connection ``lake_s3`` with moto's settings; the process itself has no AWS_* variables."""
    conn = {
        "conn_type": "lake",
        "login": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "password": SECRET,
        "extra": {"endpoint": s3_endpoint, "region": "us-east-1", "allow_http": True},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps(conn))
    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    yield "lake_s3"


def _table(uri: str, endpoint: str, upserts: int = 12) -> tuple[LakeTable, list[str]]:
    """A COW table on S3 (opened with explicit settings, not the process environment)."""
    storage = open_storage(uri, environ=s3_environ(endpoint))
    table = LakeTable.create(
        storage, name="trips", table_type="cow", record_key_fields=("id",), precombine_field="ts",
        partition_fields=("p",),
    )  # fmt: skip
    commits = []
    for ts in range(upserts):
        batch = pa.table(
            {"id": ["k1", "k2", "k3"], "ts": pa.array([ts] * 3, pa.int64()), "p": ["a", "a", "b"]}
        )
        commits.append(write(table, batch, "upsert").instant)
    return table, commits


def test_connection_settings_become_the_standard_variables(lake_conn: str, s3_endpoint: str) -> None:
    from airflow_lake_provider.hooks.lake import LakeHook

    assert LakeHook(lake_conn_id=lake_conn).storage_env() == s3_environ(s3_endpoint)
    assert LakeHook().storage_env() == {} and LakeHook(lake_conn_id="").storage_env() == {}


def test_hook_cleans_an_s3_table_with_the_connection_only(
    lake_conn: str, s3_bucket: str, s3_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow_lake_provider.hooks.lake import LakeConfigError, LakeHook

    uri = f"s3://{s3_bucket}/trips"
    table, _ = _table(uri, s3_endpoint)
    with pytest.raises(LakeConfigError):  # without the connection there is no endpoint to reach
        LakeHook().clean(uri)
    caplog.set_level("DEBUG")
    result = LakeHook(lake_conn_id=lake_conn).clean(uri)
    assert result["outcome"] == "CLEANED" and result["executor"] == "local" and result["table_path"] == uri
    assert result["deleted_files"] == 2  # the oldest slice of each partition
    assert SECRET not in json.dumps(result) and SECRET not in caplog.text
    assert len(table.timeline().filter([Action.CLEAN], [State.COMPLETED])) == 1


def test_spark_submit_gets_the_credentials_in_its_environment_not_its_command(
    lake_conn: str, s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submission runs the clean in-process with spark-submit's environment (no JVM here)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_lake_provider.hooks.lake import LakeHook

    uri = f"s3://{s3_bucket}/trips"
    table, _ = _table(uri, s3_endpoint)
    seen: dict[str, Any] = {}

    def fake_submit(self: SparkSubmitHook, application: str = "", **kwargs: Any) -> None:
        seen["command"] = self._build_spark_submit_command(application)
        seen["env"] = dict(self._env or {})
        # What spark_jobs/clean.py does in the driver: open the table from its environment.
        run_clean(LakeTable.open(open_storage(uri, environ=seen["env"])), mode="execute")

    monkeypatch.setattr(SparkSubmitHook, "submit", fake_submit)
    result = LakeHook(lake_conn_id=lake_conn).clean(uri, spark_threshold=0)
    assert result["outcome"] == "CLEANED" and result["executor"] == "spark" and result["deleted_files"] == 2
    assert SECRET not in " ".join(seen["command"])
    assert {k: seen["env"][k] for k in AWS_VARS} == s3_environ(s3_endpoint)
    assert len(table.timeline().filter([Action.CLEAN], [State.COMPLETED])) == 1


def test_yarn_submission_with_connection_credentials_is_refused(
    lake_conn: str, s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_lake_provider.hooks.lake import LakeConfigError, LakeHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", '{"conn_type": "spark", "host": "yarn"}')
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))  # a configured YARN client: past the set-up checks
    monkeypatch.setattr(SparkSubmitHook, "submit", lambda *a, **k: pytest.fail("submitted"))
    with pytest.raises(LakeConfigError, match="cannot be passed to a YARN or Kubernetes spark-submit"):
        LakeHook(lake_conn_id=lake_conn).submit_spark_job("clean.py", ["--table", "x"], conn_id="spark_yarn")


@pytest.fixture(scope="module")
def clean_dag(repo_root: Any, airflow_db: Any) -> Any:
    return load_example_dag(repo_root, "example_lake_clean")


def test_example_clean_dag_on_an_s3_table(
    clean_dag: Any, lake_conn: str, s3_bucket: str, s3_endpoint: str
) -> None:
    uri = f"s3://{s3_bucket}/trips"
    table, commits = _table(uri, s3_endpoint)
    before = set(s3_objects(s3_endpoint, s3_bucket, "trips/"))
    dr = clean_dag.test(run_conf={"table_path": uri, "lake_conn_id": lake_conn})
    assert dr.state == "success", task_states("example_lake_clean", dr.run_id)
    result = xcom_value("example_lake_clean", dr.run_id, "clean")
    preview = xcom_value("example_lake_clean", dr.run_id, "preview_clean")
    assert result["outcome"] == "CLEANED" and result["deleted_files"] == 2
    assert preview["outcome"] == "PLANNED" and preview["files_planned"] == 2
    assert SECRET not in json.dumps([result, preview])
    gone = before - set(s3_objects(s3_endpoint, s3_bucket, "trips/"))
    assert {f.rsplit("_", 1)[1] for f in gone if f.endswith(".parquet")} == {f"{commits[0]}.parquet"}


@pytest.fixture(scope="module")
def compaction_dag(repo_root: Any, airflow_db: Any) -> Any:
    return load_example_dag(repo_root, "example_lake_compaction")


@pytest.mark.spark
@pytest.mark.slow
def test_example_compaction_dag_on_an_s3_table_runs_spark_with_connection_credentials(
    compaction_dag: Any, lake_conn: str, s3_bucket: str, s3_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """spark-submit (local[2]) reads and writes the s3:// table with credentials from its environment."""
    from hudi import HudiTableBuilder
    from s3_helpers import hudi_s3_options
    from test_compaction_dag import _mor_table, _rows

    from airflow_lake_provider.lake.table.reader import read_snapshot

    uri = f"s3://{s3_bucket}/trips"
    table = _mor_table(open_storage(uri, environ=s3_environ(s3_endpoint)))  # type: ignore[arg-type]
    expected = _rows(read_snapshot(table))
    caplog.set_level("DEBUG")
    dr = compaction_dag.test(run_conf={"table_path": uri, "lake_conn_id": lake_conn})
    assert dr.state == "success", task_states("example_lake_compaction", dr.run_id)
    result = xcom_value("example_lake_compaction", dr.run_id, "compact")
    assert result["outcome"] == "COMPLETED" and result["operations"] == 4 and result["records_written"] == 35
    done = table.timeline().get(result["instant"])
    assert done is not None and done.is_completed
    hudi = HudiTableBuilder.from_base_uri(uri).with_storage_options(hudi_s3_options(s3_endpoint)).build()
    assert _rows(read_snapshot(table)) == expected == _rows(pa.Table.from_batches(hudi.read()))
    assert SECRET not in caplog.text and SECRET not in json.dumps(result)


@pytest.mark.parametrize(
    ("base", "path", "resolved"),
    [
        ("s3://b/lake", "trips", "s3://b/lake/trips"),
        ("s3://b/lake/", "a/./trips/", "s3://b/lake/a/trips"),
        ("s3://b/lake", "s3://b/lake/trips", "s3://b/lake/trips"),
        ("s3://b/lake", "../other", None),
        ("s3://b/lake", "/data/trips", None),
        ("s3://b/lake", "s3://b/lakeside/t", None),
        ("s3://b/lake", "s3://b/lake/../x", None),
        ("/data/lake", "s3://b/lake/t", None),
    ],
)
def test_table_paths_resolve_under_an_s3_base_path(
    monkeypatch: pytest.MonkeyPatch, base: str, path: str, resolved: str | None
) -> None:
    from airflow_lake_provider.hooks.lake import LakeConfigError, LakeHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_BASE", json.dumps({"conn_type": "lake", "extra": {"base_path": base}})
    )
    hook = LakeHook(lake_conn_id="lake_base")
    if resolved is None:
        with pytest.raises(LakeConfigError, match="lies outside the connection's base_path"):
            hook.resolve_table_path(path)
    else:
        assert hook.resolve_table_path(path) == resolved


def test_partition_commit_and_its_trigger_open_an_s3_table_with_the_connection_only(
    lake_conn: str, s3_bucket: str, s3_endpoint: str
) -> None:
    import asyncio

    from airflow_lake_provider.hooks.partition_commit import run_partition_commit
    from airflow_lake_provider.triggers.partition_commit import PartitionCommitTrigger

    uri = f"s3://{s3_bucket}/trips"
    _table(uri, s3_endpoint, upserts=1)
    trigger = PartitionCommitTrigger(uri, ["a"], {}, poll_interval=0.1, lake_conn_id=lake_conn)
    path, kwargs = trigger.serialize()
    assert kwargs["lake_conn_id"] == lake_conn and SECRET not in json.dumps(kwargs)

    async def first_event() -> Any:
        return await anext(PartitionCommitTrigger(**kwargs).run())

    event = asyncio.run(first_event())
    assert event.payload["status"] == "ready", event.payload
    result = run_partition_commit(uri, ["a"], {}, lake_conn_id=lake_conn)
    assert result["committed"] == ["a"]
    assert s3_objects(s3_endpoint, s3_bucket, "trips/a/_SUCCESS") == {"": b""}


def test_metastore_policy_on_s3_fails_the_task_at_once_before_spark_starts(
    lake_conn: str, s3_bucket: str, s3_endpoint: str
) -> None:
    """The metastore policy's Spark job has no S3 file system (pyspark ships no hadoop-aws): on an
    s3:// table the operator fails with LakeConfigError (no retry) before anything is submitted or
    written, in well under a second (the job used to fail after ~19 s with a Java trace)."""
    import time

    from airflow_lake_provider.hooks.errors import LakeConfigError
    from airflow_lake_provider.operators.partition_commit import PartitionCommitOperator

    uri = f"s3://{s3_bucket}/trips"
    _table(uri, s3_endpoint, upserts=1)
    objects = s3_objects(s3_endpoint, s3_bucket)
    op = PartitionCommitOperator(
        task_id="c",
        table_path=uri,
        partitions="a",
        policies="metastore,success-file",
        force=False,  # force is refused with the metastore policy anyway: this is the Spark path
        lake_conn_id=lake_conn,
    )
    started = time.monotonic()
    with pytest.raises(LakeConfigError) as raised:
        op.execute({})  # type: ignore[arg-type]
    assert time.monotonic() - started < 1.0
    assert str(raised.value) == (
        f"partition commit of {uri}: {uri}: the metastore policy works on local tables only (its Spark "
        "job has no s3:// file system: pyspark ships no hadoop-aws connector); commit with "
        "sink.partition-commit.policy.kind=success-file, or register the partitions in your catalog "
        "with a custom policy"
    )
    assert s3_objects(s3_endpoint, s3_bucket) == objects  # no _SUCCESS, no commit state


def test_operator_merges_a_plain_parquet_directory_on_s3_with_the_connection_only(
    lake_conn: str, s3_bucket: str, s3_endpoint: str
) -> None:
    """No .hoodie/: the operator takes the plain-directory path (in-progress -> pending -> finished)."""
    import pyarrow.parquet as pq

    from airflow_lake_provider.operators.partition_commit import PartitionCommitOperator

    uri = f"s3://{s3_bucket}/events"
    storage = open_storage(uri, environ=s3_environ(s3_endpoint))
    for k in range(5):
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": list(range(k * 10, k * 10 + 10))}), sink)
        storage.write(f"dt=2024-01-05/part-{k}.parquet", sink.getvalue().to_pybytes())
    op = PartitionCommitOperator(
        task_id="c",
        table_path=uri,
        partitions="dt=2024-01-05",
        policies="merge-small-files,success-file",
        options={"compaction.file-size": "1mb"},
        lake_conn_id=lake_conn,
    )
    result = op.execute({})  # type: ignore[arg-type]
    assert result["committed"] == ["dt=2024-01-05"]
    objects = s3_objects(s3_endpoint, s3_bucket, "events/dt=2024-01-05/")
    merged = [k for k in objects if not k.startswith(("_", "."))]
    assert len(merged) == 1 and objects["_SUCCESS"] == b""
    rows = pq.read_table(pa.BufferReader(objects[merged[0]])).column("id").to_pylist()
    assert rows == list(range(50))


def test_a_refused_key_fails_a_partition_commit_at_once_as_it_fails_every_other_task(
    lake_conn: str, refusing_s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the table goes through the hooks' one translation: a refused key (no retry can pass)
    fails the task at once in partition commit too, also when its trigger meets it."""
    import asyncio

    from airflow_lake_provider.hooks.errors import LakeConfigError
    from airflow_lake_provider.hooks.lake import LakeHook
    from airflow_lake_provider.hooks.partition_commit import run_partition_commit
    from airflow_lake_provider.triggers.partition_commit import PartitionCommitTrigger

    conn = json.loads(os.environ["AIRFLOW_CONN_LAKE_S3"])
    extra = {**conn["extra"], "endpoint": refusing_s3_endpoint}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({**conn, "login": "AKIAWRONG", "extra": extra}))
    uri = "s3://bucket/trips"
    with pytest.raises(LakeConfigError, match="access denied") as opened:
        LakeHook(lake_conn_id=lake_conn).open_table(uri)
    denied = f"^{uri}/.*: access denied while trying to "
    with pytest.raises(LakeConfigError, match=denied):
        run_partition_commit(uri, ["a"], {}, lake_conn_id=lake_conn, dry_run=True)

    async def first_event() -> Any:
        trigger = PartitionCommitTrigger(uri, ["a"], {}, poll_interval=0.1, lake_conn_id=lake_conn)
        return await anext(trigger.run())

    event = asyncio.run(first_event())
    assert (event.payload["status"], event.payload["fail_now"]) == ("error", True)
    assert re.match(denied, event.payload["message"]) and SECRET not in event.payload["message"]
    assert SECRET not in str(opened.value)
