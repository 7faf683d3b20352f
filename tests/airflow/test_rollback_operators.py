"""RollbackFailedWritesOperator and LakeWriteOperator: light imports, a retry that rolls back its
failed attempt, and the example DAG under ``dag.test()``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing, crashing_hook_tables
from dag_helpers import load_example_dag, task_states, xcom_value

from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.operators.rollback import LakeWriteOperator, earlier_attempts

pytestmark = pytest.mark.airflow
NEVER = {"hoodie.cleaner.policy.failed.writes": "NEVER"}


# Table versions these tests run on: 6, and 8 (Hudi 1.x), where a retry's rollback deletes the
# failed attempt's log files.
VERSIONS = [6, 8]


def _table(path: Path, version: int = 6) -> LakeTable:
    table = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
    )
    write(table, _batch([1, 2], 1, "a"), "insert")
    return table


def _batch(ids: list[int], ts: int, v: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "p": pa.array(["x" if i % 2 else "y" for i in ids]),
            "v": pa.array([f"{v}{i}" for i in ids]),
        }
    )


def _rows(path: Path) -> dict[int, str]:
    snap = read_snapshot(LakeTable.open(path))
    return dict(zip(snap.column("id").to_pylist(), snap.column("v").to_pylist(), strict=True))


def test_operator_module_imports_no_pyarrow_or_polars() -> None:
    code = (
        "import sys, airflow_lake_provider.operators.rollback\n"
        "print([m for m in ('pyarrow', 'polars', 'fastavro') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _context(run_id: str, try_number: int) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id="w", run_id=run_id, try_number=try_number)
    return {"ti": ti}


@pytest.mark.parametrize("version", VERSIONS)
def test_write_retry_rolls_back_its_failed_attempt_then_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    path = tmp_path / "t"
    _table(path, version)
    source = tmp_path / "in.parquet"
    pq.write_table(_batch([1, 3], 5, "b"), source)
    op = LakeWriteOperator(task_id="w", table_path=str(path), input_path=str(source), options=NEVER)
    with pytest.raises(SimulatedCrash), crashing_hook_tables(monkeypatch, 5):  # dies after writing files
        op.execute(_context("run-1", 1))
    # Another run's failed write is not this task's to roll back.
    other = LakeWriteOperator(task_id="w", table_path=str(path), input_path=str(source), options=NEVER)
    with pytest.raises(SimulatedCrash), crashing_hook_tables(monkeypatch, 5):
        other.execute(_context("run-2", 1))
    table = LakeTable.open(path)
    mine, theirs = (i.timestamp for i in table.timeline().pending)
    assert earlier_attempts(
        table, {"lake.airflow.dag_id": "d", "lake.airflow.task_id": "w", "lake.airflow.run_id": "run-1"}
    ) == [mine]
    result = op.execute(_context("run-1", 2))
    assert result["rolled_back"] == [mine]
    assert _rows(path) == {1: "b1", 2: "a2", 3: "b3"}
    timeline = LakeTable.open(path).timeline()
    # Every operator's XCom carries outcome and instant (docs/operators.md).
    assert (result["outcome"], result["instant"]) == ("COMMITTED", timeline.last_completed_commit.timestamp)
    assert [i.timestamp for i in timeline.pending] == [theirs]
    meta = timeline.commit_metadata(timeline.last_completed_commit).extra_metadata
    assert {k: meta[k] for k in meta if k.startswith("lake.airflow")} == {
        "lake.airflow.dag_id": "d",
        "lake.airflow.task_id": "w",
        "lake.airflow.run_id": "run-1",
        "lake.airflow.try_number": "2",
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_example_rollback_dag(repo_root: Path, tmp_path: Path, airflow_db: Path, version: int) -> None:
    path = tmp_path / "t"
    table = _table(path, version)
    with pytest.raises(SimulatedCrash):  # its log file written, no commit
        write(crashing(table, 4), _batch([2], 9, "lost"), "upsert")
    [failed] = table.timeline().pending
    source = tmp_path / "in.parquet"
    pq.write_table(_batch([2, 4], 3, "c"), source)
    dag = load_example_dag(repo_root, "example_lake_rollback")
    conf = {"table_path": str(path), "input_path": str(source)}
    dr = dag.test(run_conf=conf)
    assert dr.state == "success", task_states(dag.dag_id, dr.run_id)
    rolled = xcom_value(dag.dag_id, dr.run_id, "rollback_failed_writes")
    assert rolled["outcome"] == "ROLLED_BACK"
    [rollback] = [i for i in LakeTable.open(path).timeline().instants if i.action.value == "rollback"]
    assert rolled["instant"] == rolled["rollbacks"][0]["instant"] == rollback.timestamp
    assert [r["rolled_back"] for r in rolled["rollbacks"]] == [failed.timestamp]
    assert _rows(path) == {1: "a1", 2: "c2", 4: "c4"}
    again = dag.test(run_conf=conf, logical_date=None)
    assert xcom_value(dag.dag_id, again.run_id, "rollback_failed_writes") == {
        "outcome": "NO_WORK",
        "instant": None,
        "rollbacks": [],
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_example_dag_write_task_rolls_back_what_its_earlier_attempt_left(
    repo_root: Path, tmp_path: Path, airflow_db: Path, version: int
) -> None:
    """Under ``dag.test()``: an earlier attempt of ``write`` in this run was killed after writing
    files. The table's policy is NEVER, so only the write task's own retry logic can undo it."""
    import pendulum

    path = tmp_path / "t"
    _table(path, version)
    with (path / ".hoodie" / "hoodie.properties").open("a") as props:
        props.write("hoodie.cleaner.policy.failed.writes=NEVER\n")
    when = pendulum.datetime(2025, 1, 2, tz="UTC")
    run_id = f"manual__{when.isoformat()}"
    attempt = {
        "lake.airflow.dag_id": "example_lake_rollback",
        "lake.airflow.task_id": "write",
        "lake.airflow.run_id": run_id,
        "lake.airflow.try_number": "1",
    }
    with pytest.raises(SimulatedCrash):  # killed after its log file, before its commit
        write(crashing(LakeTable.open(path), 4), _batch([2], 9, "killed"), "upsert", extra_metadata=attempt)
    [killed] = LakeTable.open(path).timeline().pending
    source = tmp_path / "in.parquet"
    pq.write_table(_batch([2, 4], 3, "c"), source)
    dag = load_example_dag(repo_root, "example_lake_rollback")
    dr = dag.test(
        run_after=when, logical_date=when, run_conf={"table_path": str(path), "input_path": str(source)}
    )
    assert dr.run_id == run_id
    assert dr.state == "success", task_states(dag.dag_id, dr.run_id)
    assert xcom_value(dag.dag_id, run_id, "rollback_failed_writes")["outcome"] == "NO_WORK"  # policy NEVER
    written = xcom_value(dag.dag_id, run_id, "write")
    assert written["rolled_back"] == [killed.timestamp]
    assert _rows(path) == {1: "a1", 2: "c2", 4: "c4"}
    assert LakeTable.open(path).timeline().pending == []


@pytest.mark.parametrize("version", VERSIONS)
def test_a_mapped_write_retry_rolls_back_only_its_own_map_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """Instances of a mapped task share DAG, task and run and run side by side: the retry of map
    index 1 must leave map index 0's pending write alone (it may still be running)."""
    path = tmp_path / "t"
    _table(path, version)
    source = tmp_path / "in.parquet"
    pq.write_table(_batch([1, 3], 5, "b"), source)

    def mapped(map_index: int, try_number: int) -> dict[str, Any]:
        ti = SimpleNamespace(dag_id="d", task_id="w", run_id="r", try_number=try_number, map_index=map_index)
        return {"ti": ti}

    op = LakeWriteOperator(task_id="w", table_path=str(path), input_path=str(source), options=NEVER)
    with pytest.raises(SimulatedCrash), crashing_hook_tables(monkeypatch, 5):
        op.execute(mapped(0, 1))
    with pytest.raises(SimulatedCrash), crashing_hook_tables(monkeypatch, 5):
        op.execute(mapped(1, 1))
    sibling, mine = (i.timestamp for i in LakeTable.open(path).timeline().pending)
    result = op.execute(mapped(1, 2))
    assert result["rolled_back"] == [mine]
    timeline = LakeTable.open(path).timeline()
    assert [i.timestamp for i in timeline.pending] == [sibling]
    meta = timeline.commit_metadata(timeline.last_completed_commit).extra_metadata
    assert meta["lake.airflow.map_index"] == "1" and meta["lake.airflow.try_number"] == "2"


def test_write_operator_refuses_an_unknown_operation_when_the_dag_is_parsed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^operation='merge' is not one of insert, upsert, delete$"):
        LakeWriteOperator(task_id="w", table_path=str(tmp_path), input_path="in.parquet", operation="merge")
    for wrong in (None, 1, b"upsert"):  # a clear refusal, not a TypeError from the check itself
        with pytest.raises(ValueError, match=rf"^operation={wrong!r} is not one of insert, upsert, delete$"):
            LakeWriteOperator(task_id="w", table_path=str(tmp_path), input_path="in.parquet", operation=wrong)
    templated = "{{ params.operation }}"  # checked when the task runs, once rendered
    op = LakeWriteOperator(
        task_id="w", table_path=str(tmp_path), input_path="in.parquet", operation=templated
    )
    assert op.operation == templated


def test_write_operator_retry_on_a_v8_table_deletes_the_failed_attempts_log_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Table version 8: a retry whose earlier attempt left its instant pending rolls it back (its
    own log files deleted, no log file marked: v8 logs are one per deltacommit), then writes;
    hudi-rs reads what we read."""
    from hudi import HudiTableBuilder

    path = tmp_path / "t"
    _table(path, 8)
    source = tmp_path / "in.parquet"
    pq.write_table(_batch([1, 3], 5, "b"), source)
    op = LakeWriteOperator(task_id="w", table_path=str(path), input_path=str(source), options=NEVER)
    with pytest.raises(SimulatedCrash), crashing_hook_tables(monkeypatch, 5):  # dies after writing files
        op.execute(_context("run-1", 1))
    (failed,) = (i.timestamp for i in LakeTable.open(path).timeline().pending)
    left = sorted(p.name for p in path.rglob(f".*_{failed}.log.*"))
    assert left, "the killed attempt wrote no log file of its own"
    result = op.execute(_context("run-1", 2))
    assert result["rolled_back"] == [failed] and result["outcome"] == "COMMITTED"
    assert sorted(p.name for p in path.rglob(f".*_{failed}.log.*")) == []
    timeline = LakeTable.open(path).timeline()
    (rb,) = [i for i in timeline.instants if i.action.value == "rollback"]
    assert rb.completion_time is not None and timeline.avro_record(rb)["commitsRollback"] == [failed]
    assert _rows(path) == {1: "b1", 2: "a2", 3: "b3"}
    hudi = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    assert dict(zip(hudi.column("id").to_pylist(), hudi.column("v").to_pylist(), strict=True)) == _rows(path)


@pytest.mark.parametrize(
    ("force", "refusal"), [("false", "completed"), ("maybe", "force='maybe' is not true")]
)
def test_force_given_as_text_is_read_as_a_flag_not_as_truthy_text(
    tmp_path: Path, airflow_db: Path, force: str, refusal: str
) -> None:
    """``force="false"`` (a string, e.g. from a DAG's params) was truthy: the latest completed commit
    was rolled back. It is read as the options' booleans are; other text fails at once."""
    from airflow_lake_provider.hooks.errors import LakeHookError
    from airflow_lake_provider.operators.rollback import RollbackFailedWritesOperator

    table = _table(tmp_path / "t")
    (latest,) = [i.timestamp for i in table.timeline().completed_commits]
    op = RollbackFailedWritesOperator(
        task_id="rb",
        table_path=str(table.base_path),
        instant=latest,
        force=force,  # type: ignore[arg-type]
    )
    with pytest.raises(LakeHookError, match=refusal):
        op.execute({})  # type: ignore[arg-type]
    assert _rows(table.base_path) == {1: "a1", 2: "a2"}
    assert [i.timestamp for i in LakeTable.open(table.base_path).timeline().completed_commits] == [latest]
