"""The ``merge-small-files`` policy: a clustering ``replacecommit`` that leaves rows unchanged for us
and for hudi-rs, writes ceil(total / target) files, whose replaced files the next clean removes, and
from whose every crash point the next run recovers."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.partition_commit.executor import commit_partitions
from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State


def _table(path: Path, table_type: str = "cow", batches: int = 6) -> LakeTable:
    table = LakeTable.create(
        path,
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    for i in range(batches):
        ids = [f"k{i}_{j:02d}" for j in range(40)]
        write(
            table,
            pa.table(
                {"id": ids, "ts": pa.array([i] * 40, pa.int64()), "p": ["x"] * 40, "v": list(range(40))}
            ),
            "insert",
        )
    write(table, pa.table({"id": ["y0"], "ts": pa.array([0], pa.int64()), "p": ["y"], "v": [0]}), "insert")
    return table


def _rows(rows: pa.Table) -> list[tuple]:
    cols = (
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "v",
    )
    return sorted(zip(*(rows.column(c).to_pylist() for c in cols), strict=True))


def _hudi_rs(path: Path) -> list[tuple]:
    return _rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read()))


def _parquet(path: Path) -> dict[str, int]:
    return {n: (path / n).stat().st_size for n in os.listdir(path) if n.endswith(".parquet")}


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_merge_rewrites_small_files_into_ceil_total_over_target_and_rows_stay(
    tmp_path: Path, table_type: str
) -> None:
    table = _table(tmp_path / "t", table_type)
    before = _rows(read_snapshot(table))
    assert before == _hudi_rs(table.base_path) and len(before) == 241
    files = _parquet(table.base_path / "x")
    assert len(files) == 6
    total = sum(files.values())
    target = total // 3 + 1  # -> 3 output files
    result = merge_small_files(table, "x", target)
    assert result.instant is not None and len(result.written) == math.ceil(total / target) == 3
    assert set(result.replaced) == {n.split("_")[0] for n in files}
    assert _rows(read_snapshot(table)) == before == _hudi_rs(table.base_path)
    timeline = table.timeline()
    done = timeline.get(result.instant)
    assert done is not None and done.action is Action.REPLACECOMMIT and done.is_completed
    meta = timeline.commit_metadata(done)
    assert meta.operation_type == "CLUSTER"
    assert set(meta.partition_to_replace_file_ids["x"]) == set(result.replaced)
    assert sum(s.num_writes for s in meta.partition_to_write_stats["x"]) == 240
    plan = timeline.avro_record(Instant(result.instant, State.REQUESTED, Action.REPLACECOMMIT))
    assert plan["operationType"] == "CLUSTER"
    assert {s["fileId"] for s in plan["clusteringPlan"]["inputGroups"][0]["slices"]} == set(result.replaced)
    assert plan["clusteringPlan"]["inputGroups"][0]["numOutputFileGroups"] == 3
    # The replaced files stay until a clean whose retained commits no longer need them.
    assert len(_parquet(table.base_path / "x")) == 9
    write(table, pa.table({"id": ["y1"], "ts": pa.array([1], pa.int64()), "p": ["y"], "v": [1]}), "insert")
    cleaned = run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    assert cleaned.deleted_files >= 6
    assert sorted(_parquet(table.base_path / "x")) == sorted(Path(p).name for p in result.written)
    assert _rows(read_snapshot(table)) == _hudi_rs(table.base_path)
    assert len(_rows(read_snapshot(table))) == 242


def test_nothing_to_merge_below_two_small_files(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", batches=1)
    assert merge_small_files(table, "x", 10**9).instant is None
    table2 = _table(tmp_path / "t2", batches=3)
    assert merge_small_files(table2, "x", 1).instant is None  # no file is under one byte
    assert not table2.timeline().filter([Action.REPLACECOMMIT])


@pytest.mark.parametrize("point", ["requested", "inflight", "file", "commit"])
def test_every_crash_point_recovers(tmp_path: Path, point: str) -> None:
    table = _table(tmp_path / "t")
    before = _rows(read_snapshot(table))
    files = _parquet(table.base_path / "x")

    def crash(at: str) -> None:
        if at == point:
            raise KeyboardInterrupt(at)

    with pytest.raises(KeyboardInterrupt):
        merge_small_files(table, "x", sum(files.values()) // 2 + 1, fault=crash)
    # Readers see the table as before while the merge is pending.
    assert _rows(read_snapshot(table)) == before == _hudi_rs(table.base_path)
    pending = table.timeline().filter([Action.REPLACECOMMIT], [State.REQUESTED, State.INFLIGHT])
    assert len(pending) == 1
    result = merge_small_files(table, "x", sum(files.values()) // 2 + 1)
    assert result.rolled_back == (pending[0].timestamp,) and result.instant is not None
    assert len(result.written) == 2
    assert _rows(read_snapshot(table)) == before == _hudi_rs(table.base_path)
    # Only the old files and the new merge's remain: the crashed merge's partial output is gone.
    assert set(_parquet(table.base_path / "x")) == set(files) | {Path(p).name for p in result.written}
    assert not (table.base_path / ".hoodie/.temp" / pending[0].timestamp).exists()
    replaces = table.timeline().filter([Action.REPLACECOMMIT])
    assert [i.timestamp for i in replaces] == [result.instant]


def test_merge_small_files_as_a_commit_policy_is_not_late_data(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    before = _rows(read_snapshot(table))
    options = {
        "sink.partition-commit.policy.kind": "merge-small-files,success-file",
        # Six files of ~436 KB (a footer bloom filter of Hudi's default size is 431 KB of them).
        "compaction.file-size": "4mb",
    }
    result = commit_partitions(table, ["x"], options)
    assert result.committed == ("x",)
    assert len(_parquet(table.base_path / "x")) == 7  # six small ones and the merged one
    assert (table.base_path / "x" / "_SUCCESS").exists()
    assert _rows(read_snapshot(table)) == before == _hudi_rs(table.base_path)
    again = commit_partitions(table, ["x"], options)
    assert again.to_dict()["late_data"] == {} and again.to_dict()["already_committed"] == ["x"]


def test_a_foreign_parquet_file_among_the_inputs_is_refused_before_the_plan_exists(tmp_path: Path) -> None:
    # It was read as rows of nulls: the merge wrote its plan, then failed on the null keys with a
    # ValueError and left the replacecommit pending.
    table = _table(tmp_path / "t")
    foreign = sorted((table.base_path / "x").glob("*.parquet"))[2]
    pq.write_table(pa.table({"id": ["z"], "other": [1]}), foreign)
    before = _tree(table.base_path)
    with pytest.raises(CorruptDataFileError) as refused:
        merge_small_files(table, "x", 10**9)
    assert str(refused.value) == (
        f"{foreign} is not a base file of {table.base_path}: it lacks column(s) _hoodie_commit_time, "
        "_hoodie_commit_seqno, _hoodie_record_key, _hoodie_partition_path, _hoodie_file_name "
        "(its columns: id, other)"
    )
    assert _tree(table.base_path) == before


def _tree(base: Path) -> dict[str, bytes]:
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_a_plan_file_of_another_writer_is_not_rolled_back(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    foreign = {"operationType": "CLUSTER", "clusteringPlan": None, "extraMetadata": {}, "version": 1}
    body = timeline_avro.write_avro(timeline_avro.REQUESTED_REPLACE_METADATA, foreign)
    table.store.create_requested("20990101000000000", Action.REPLACECOMMIT, body)
    merge_small_files(table, "x", 10**9)
    assert table.timeline().get("20990101000000000") is not None


def test_a_merge_that_would_not_lower_the_file_count_does_nothing(tmp_path: Path) -> None:
    # Two files of 0.6 x target each merge into ceil(1.2) = 2 files of 0.6 x target: each later
    # commit (late data, a commit resumed after a crash) rewrote the partition again, 2 -> 2.
    table = _table(tmp_path / "t", batches=2)
    files = _parquet(table.base_path / "x")
    target = int(max(files.values()) / 0.6)
    assert len(files) == 2 and math.ceil(sum(files.values()) / target) == 2
    tree = {
        n: (table.base_path / ".hoodie" / n).stat().st_size for n in os.listdir(table.base_path / ".hoodie")
    }
    assert merge_small_files(table, "x", target).instant is None
    assert _parquet(table.base_path / "x") == files
    assert {
        n: (table.base_path / ".hoodie" / n).stat().st_size for n in os.listdir(table.base_path / ".hoodie")
    } == tree
