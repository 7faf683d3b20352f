"""Compaction and clean of s3:// tables on a standalone Spark cluster, through the operators.

A master and two workers from the pyspark install on 127.0.0.1, each worker with its own work dir
and cwd and an environment without any ``AWS_*`` variable or path to this checkout: executors reach
the table only through S3 (moto), with the credentials the driver passed them, and import the core
from the zip the hook ships with ``--py-files``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest
from s3_helpers import S3_KEYS, hudi_s3_options, s3_environ, s3_objects
from test_standalone_cluster import _free_port, _port_open, _wait_for

from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action

pytestmark = [pytest.mark.spark, pytest.mark.slow]
SECRET = S3_KEYS["AWS_SECRET_ACCESS_KEY"]


def _worker_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "PYTHONPATH"}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(home / "work"), "HOME": str(home)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, list[Path]]]:
    """(master port, the workers' work dirs); every process stopped through its own process group."""
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    root = tmp_path_factory.mktemp("s3-standalone")
    port, ui = _free_port(), _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        master_home = root / "master"
        master_home.mkdir()
        log = open(master_home / "out.log", "w")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                env=_worker_env(master_home),
                cwd=master_home,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        )
        _wait_for(lambda: _port_open(port), 90, "the Spark master")
        homes = []
        for i in range(2):
            home = root / f"worker{i}"
            (home / "work").mkdir(parents=True)
            homes.append(home)
            log = open(home / "out.log", "w")  # noqa: SIM115
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        f"spark://127.0.0.1:{port}",
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(_free_port()),
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                    ],
                    env=_worker_env(home),
                    cwd=home,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            )
        for home in homes:
            _wait_for(
                lambda h=home: "Successfully registered with master" in (h / "out.log").read_text(),
                90,
                f"worker {home.name} to register",
            )
        yield port, [h / "work" for h in homes]
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        for log in logs:
            log.close()


class _TI:
    """The two TaskInstance calls the operators make."""

    def __init__(self, upstream: Any = None) -> None:
        self.pushed: dict[str, Any] = {}
        self.upstream = upstream

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.upstream


@pytest.fixture
def connections(
    cluster: tuple[int, list[Path]], s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _ = cluster
    conn = {
        "conn_type": "lake",
        "login": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "password": SECRET,
        "extra": {"endpoint": s3_endpoint, "region": "us-east-1", "allow_http": True},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps(conn))
    spark = {
        "conn_type": "spark",
        "host": "spark://127.0.0.1",
        "port": port,
        "extra": {"deploy-mode": "client"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", json.dumps(spark))
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)


def _batch(ids: list[str], ts: int, parts: list[str], values: list[int] | None = None) -> pa.Table:
    columns: dict[str, Any] = {"id": ids, "ts": pa.array([ts] * len(ids), pa.int64()), "p": parts}
    if values is not None:
        columns["v"] = values
    return pa.table(columns)


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("id", "ts", "v")), strict=True))


def _executor_dirs(work_dirs: list[Path]) -> list[list[Path]]:
    return [sorted(p for p in w.glob("app-*/*") if p.is_dir()) for w in work_dirs]


def test_compaction_and_clean_of_s3_tables_on_two_workers(
    connections: None, cluster: tuple[int, list[Path]], s3_bucket: str, s3_endpoint: str
) -> None:
    from hudi import HudiTableBuilder

    from airflow_lake_provider.operators.clean import ScheduleCleanOperator
    from airflow_lake_provider.operators.compaction import RunCompactionOperator, ScheduleCompactionOperator

    _, work_dirs = cluster
    env = s3_environ(s3_endpoint)
    uri = f"s3://{s3_bucket}/mor"
    mor = LakeTable.create(
        open_storage(uri, environ=env), name="m", table_type="mor", record_key_fields=("id",),
        precombine_field="ts", partition_fields=("p",),
    )  # fmt: skip
    ids = [f"k{i:02d}" for i in range(12)]
    parts = ["x", "y", "z", "w"] * 3
    write(mor, _batch(ids, 0, parts, list(range(12))), "insert")
    write(mor, _batch(ids[:6], 1, parts[:6], [100] * 6), "upsert")
    expected = _rows(read_snapshot(mor))

    scheduled = ScheduleCompactionOperator(
        task_id="schedule", table_path=uri, lake_conn_id="lake_s3",
        options={"hoodie.compact.inline.max.delta.commits": "1"},
    ).execute({"ti": _TI()})  # fmt: skip
    assert scheduled["outcome"] == "SCHEDULED" and scheduled["plan"]["operations"] == 4
    result = RunCompactionOperator(
        task_id="compact", table_path=uri, lake_conn_id="lake_s3", instant=scheduled["instant"],
        spark_conn_id="spark_standalone", spark_threshold_mb=0,  # small: would merge in the worker
    ).execute({"ti": _TI()})  # fmt: skip
    assert result["outcome"] == "COMPLETED" and result["operations"] == 4, result
    assert result["executor"] == "spark", result
    assert SECRET not in json.dumps(result)
    hudi = HudiTableBuilder.from_base_uri(uri).with_storage_options(hudi_s3_options(s3_endpoint)).build()
    assert _rows(read_snapshot(mor)) == expected == _rows(pa.Table.from_batches(hudi.read()))
    assert all(not s.log_files for s in mor.file_system_view().latest_slices())

    cow_uri = f"s3://{s3_bucket}/cow"
    cow = LakeTable.create(
        open_storage(cow_uri, environ=env), name="c", table_type="cow", record_key_fields=("id",),
        precombine_field="ts", partition_fields=("p",),
    )  # fmt: skip
    commits = [write(cow, _batch(["a", "b"], i, ["x", "y"]), "upsert").instant for i in range(4)]
    ti = _TI()
    cleaned = ScheduleCleanOperator(
        task_id="clean", table_path=cow_uri, lake_conn_id="lake_s3", spark_threshold=0,
        spark_conn_id="spark_standalone", options={"hoodie.cleaner.commits.retained": "1"},
    ).execute({"ti": ti})  # fmt: skip
    assert (
        cleaned["outcome"] == "CLEANED" and cleaned["executor"] == "spark" and cleaned["deleted_files"] == 4
    )
    left = sorted(
        k.rsplit("_", 1)[1][:17] for k in s3_objects(s3_endpoint, s3_bucket, "cow/") if k.endswith(".parquet")
    )
    assert left == sorted([commits[2], commits[3]] * 2)
    assert cow.timeline().last_completed(Action.CLEAN).timestamp == cleaned["instant"]  # type: ignore[union-attr]

    # Both workers ran executors of both jobs from the shipped zip, with no secret on disk logs. (An
    # executor a loaded machine starts late, or again after losing one, may get no task and so fetch
    # no zip: each job needs one executor with the zip per worker, not every executor directory.)
    executors = _executor_dirs(work_dirs)
    assert all(len(dirs) >= 2 for dirs in executors), executors
    for dirs in executors:
        apps = {d.parent for d in dirs}
        assert len(apps) >= 2, dirs
        for app in apps:
            assert any((d / "lake-core.zip").is_file() for d in dirs if d.parent == app), (app, dirs)
        for d in dirs:
            assert SECRET not in (d / "stderr").read_text(errors="replace")
