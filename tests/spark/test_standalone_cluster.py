"""The clean job on a real standalone Spark cluster (master + worker from the pyspark install, loopback)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake import spark_submit
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _table(tmp_path: Path, table_type: str) -> LakeTable:
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark master and one worker on 127.0.0.1, stopped by their own process groups afterwards."""
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    logs = tmp_path_factory.mktemp("standalone")
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_WORKER_DIR=str(logs / "work"),
        PYSPARK_PYTHON=sys.executable,
    )
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    master_log = open(logs / "master.log", "w")  # noqa: SIM115 - closed below
    worker_log = open(logs / "worker.log", "w")  # noqa: SIM115
    master = subprocess.Popen(
        [
            str(spark_class),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        ],
        env=env,
        stdout=master_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"spark://127.0.0.1:{port}"
    worker = None
    try:
        _wait_for(lambda: _port_open(port), 90, "the Spark master")
        worker = subprocess.Popen(
            [
                str(spark_class),
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(worker_ui),
                "--cores",
                "2",
                "--memory",
                "2g",
            ],
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_for(
            lambda: "Successfully registered with master" in (logs / "worker.log").read_text(),
            90,
            "the Spark worker to register",
        )
        yield url
    finally:
        for proc in (worker, master):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        master_log.close()
        worker_log.close()


def test_clean_job_on_standalone_cluster_deletes_exactly_the_old_slices(
    standalone_master: str, tmp_path: Path
) -> None:
    table = _table(tmp_path, "cow")
    commits = []
    for i in range(4):
        batch = pa.table({"id": ["a", "b"], "ts": pa.array([i, i], pa.int64()), "p": ["x", "y"]})
        commits.append(write(table, batch, "upsert").instant)
    result = spark_submit.submit(
        "clean.py",
        ["--table", str(table.base_path), "--option", "hoodie.cleaner.commits.retained=1"],
        master=standalone_master,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert result["outcome"] == "CLEANED"
    assert result["deleted_files"] == 4 and result["failed_files"] == 0
    left = sorted(p.name.rsplit("_", 1)[1][:17] for p in table.base_path.glob("*/*.parquet"))
    assert left == sorted([commits[2], commits[3]] * 2)
    clean = table.timeline().last_completed(Action.CLEAN)
    assert clean is not None and clean.timestamp == result["instant"]


def test_compaction_job_on_standalone_cluster_merges_and_prepares_its_workers(
    standalone_master: str, tmp_path: Path
) -> None:
    table = _table(tmp_path, "mor")
    ids = [f"k{i}" for i in range(6)]
    write(table, pa.table({"id": ids, "ts": pa.array([0] * 6, pa.int64()), "p": ["x", "y"] * 3}), "insert")
    write(table, pa.table({"id": ids[:2], "ts": pa.array([1, 1], pa.int64()), "p": ["x", "y"]}), "upsert")
    write(table, pa.table({"id": ["k5"], "ts": pa.array([2], pa.int64()), "p": ["y"]}), "delete")
    c = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"}).instant
    result = spark_submit.submit(
        "compact.py",
        ["--table", str(table.base_path)],
        master=standalone_master,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert result["outcome"] == "COMPLETED" and result["instant"] == c and result["operations"] == 2
    # spark.executorEnv reached the executors' Python workers before their allocators started.
    assert result["workers"] and all(w["allocator_env"] and w["pid"] > 0 for w in result["workers"])
    expected = [("k0", 1), ("k1", 1), ("k2", 0), ("k3", 0), ("k4", 0)]
    assert (
        sorted(zip(*(read_snapshot(table).column(n).to_pylist() for n in ("id", "ts")), strict=True))
        == expected
    )
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
    assert (
        sorted(zip(theirs.column("id").to_pylist(), theirs.column("ts").to_pylist(), strict=True)) == expected
    )
    assert all(not s.log_files for s in table.file_system_view().latest_slices())
