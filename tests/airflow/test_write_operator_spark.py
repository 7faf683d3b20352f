"""LakeWriteOperator's Spark path under ``dag.test()``: the first try's ``spark-submit`` write is
SIGKILLed once its instant is inflight and its executors wrote their files; the second try rolls
that instant back and writes exactly once."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dag_helpers import load_example_dag, task_states, xcom_value
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action, State
from airflow_lake_provider.spark_jobs.write import KILL_AT_ENV, KILL_ONCE_ENV

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]


def _batch(ids: list[int], ts: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "p": pa.array(["x" if i % 2 else "y" for i in ids]),
            "v": pa.array([f"{tag}{i}" for i in ids]),
        }
    )


def _rows(table: pa.Table) -> dict[int, str]:
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


@pytest.mark.parametrize("kind", ["mor", "cow"])
def test_killed_spark_write_is_rolled_back_by_the_retry_and_written_once(
    repo_root: Path, tmp_path: Path, airflow_db: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    path = tmp_path / "t"
    table = LakeTable.create(
        path,
        name="t",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    first = write(table, _batch(list(range(40)), 1, "a"), "insert").instant
    # NEVER: only the task's own retry logic may roll back what its killed try left.
    with (path / ".hoodie" / "hoodie.properties").open("a") as props:
        props.write("hoodie.cleaner.policy.failed.writes=NEVER\n")
    source = tmp_path / "in"
    source.mkdir()
    pq.write_table(_batch(list(range(0, 60, 2)), 2, "b"), source / "part-0.parquet")
    pq.write_table(_batch(list(range(1, 60, 2)), 2, "b"), source / "part-1.parquet")
    killed_marker = tmp_path / "killed-once"
    monkeypatch.setenv(KILL_AT_ENV, "commit")  # honoured by spark_jobs/write.py, tests only
    monkeypatch.setenv(KILL_ONCE_ENV, str(killed_marker))

    dag = load_example_dag(repo_root, "example_lake_rollback")
    conf = {"table_path": str(path), "input_path": str(source), "spark_threshold": 0}
    dr = dag.test(run_conf=conf)
    assert killed_marker.exists(), "the first try was not killed"
    assert dr.state == "success", task_states(dag.dag_id, dr.run_id)

    timeline = LakeTable.open(path).timeline()
    assert not timeline.pending
    [rollback] = timeline.filter([Action.ROLLBACK], [State.COMPLETED])
    record = timeline.avro_record(rollback)
    [killed] = record["commitsRollback"]
    deleted = [f for p in record["partitionMetadata"].values() for f in p["successDeleteFiles"]]
    assert deleted, "the killed try had written files on its executors"
    written = xcom_value(dag.dag_id, dr.run_id, "write")
    assert written["rolled_back"] == [killed]
    assert (written["inserted"], written["updated"], written["deleted"]) == (20, 40, 0)
    commits = [i.timestamp for i in timeline.completed_commits]
    assert commits == [first, written["instant"]] and killed not in commits
    meta = timeline.commit_metadata(timeline.get(written["instant"])).extra_metadata
    assert meta["lake.airflow.task_id"] == "write" and meta["lake.airflow.try_number"] == "2"

    expected = {i: f"b{i}" for i in range(60)}
    assert _rows(read_snapshot(LakeTable.open(path))) == expected
    assert _rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())) == expected
    assert not (path / ".hoodie" / ".temp" / killed).exists()
