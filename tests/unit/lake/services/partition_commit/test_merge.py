"""The ``merge-small-files`` policy: a clustering ``replacecommit`` that leaves rows unchanged for us
and for hudi-rs, writes ceil(total / target) files, whose replaced files the next clean removes, and
from whose every crash point the next run recovers."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

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

# Table versions 6 and 8: on 8 a merge is a Hudi 1.x clustering (``clustering`` pending action).
VERSIONS = pytest.mark.parametrize("version", [6, 8])


def _table(path: Path, table_type: str = "cow", batches: int = 6, version: int = 6) -> LakeTable:
    table = LakeTable.create(
        path,
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
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


def _pending_action(table: LakeTable) -> Action:
    """The action of a pending merge: ``clustering`` on versions 8 and 9, else ``replacecommit``."""
    return Action.CLUSTERING if table.layout.has_completion_times else Action.REPLACECOMMIT


def _parquet(path: Path) -> dict[str, int]:
    return {n: (path / n).stat().st_size for n in os.listdir(path) if n.endswith(".parquet")}


@VERSIONS
@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_merge_rewrites_small_files_into_ceil_total_over_target_and_rows_stay(
    tmp_path: Path, table_type: str, version: int
) -> None:
    table = _table(tmp_path / "t", table_type, version=version)
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
    plan = timeline.avro_record(Instant(result.instant, State.REQUESTED, _pending_action(table)))
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


@VERSIONS
def test_nothing_to_merge_below_two_small_files(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", batches=1, version=version)
    assert merge_small_files(table, "x", 10**9).instant is None
    table2 = _table(tmp_path / "t2", batches=3, version=version)
    assert merge_small_files(table2, "x", 1).instant is None  # no file is under one byte
    assert not table2.timeline().filter([Action.REPLACECOMMIT, Action.CLUSTERING])


@VERSIONS
@pytest.mark.parametrize("point", ["requested", "inflight", "file", "commit"])
def test_every_crash_point_recovers(tmp_path: Path, point: str, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    before = _rows(read_snapshot(table))
    files = _parquet(table.base_path / "x")

    def crash(at: str) -> None:
        if at == point:
            raise KeyboardInterrupt(at)

    with pytest.raises(KeyboardInterrupt):
        merge_small_files(table, "x", sum(files.values()) // 2 + 1, fault=crash)
    # Readers see the table as before while the merge is pending.
    assert _rows(read_snapshot(table)) == before == _hudi_rs(table.base_path)
    pending = table.timeline().filter([_pending_action(table)], [State.REQUESTED, State.INFLIGHT])
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


@VERSIONS
def test_merge_small_files_as_a_commit_policy_is_not_late_data(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
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


@VERSIONS
def test_a_foreign_parquet_file_among_the_inputs_is_refused_before_the_plan_exists(
    tmp_path: Path, version: int
) -> None:
    # It was read as rows of nulls: the merge wrote its plan, then failed on the null keys with a
    # ValueError and left the replacecommit pending.
    table = _table(tmp_path / "t", version=version)
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


@VERSIONS
def test_a_plan_file_of_another_writer_is_not_rolled_back(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    foreign = {"operationType": "CLUSTER", "clusteringPlan": None, "extraMetadata": {}, "version": 1}
    body = timeline_avro.write_avro(timeline_avro.REQUESTED_REPLACE_METADATA, foreign)
    # another writer's pending clustering
    table.store.create_requested("20990101000000000", _pending_action(table), body)
    merge_small_files(table, "x", 10**9)
    assert table.timeline().get("20990101000000000") is not None


@VERSIONS
def test_a_merge_that_would_not_lower_the_file_count_does_nothing(tmp_path: Path, version: int) -> None:
    # Two files of 0.6 x target each merge into ceil(1.2) = 2 files of 0.6 x target: each later
    # commit (late data, a commit resumed after a crash) rewrote the partition again, 2 -> 2.
    table = _table(tmp_path / "t", batches=2, version=version)
    files = _parquet(table.base_path / "x")
    target = int(max(files.values()) / 0.6)
    assert len(files) == 2 and math.ceil(sum(files.values()) / target) == 2
    folder = table.base_path / table.layout.folder
    tree = {n: (folder / n).stat().st_size for n in os.listdir(folder)}
    assert merge_small_files(table, "x", target).instant is None
    assert _parquet(table.base_path / "x") == files
    assert {n: (folder / n).stat().st_size for n in os.listdir(folder)} == tree


def test_a_v8_merge_is_written_as_hudi_1x_writes_a_clustering(tmp_path: Path) -> None:
    """Pending ``clustering`` files (the plan in Hudi 1.x's schema, an empty inflight file), then a
    completed ``<t>_<completion>.replacecommit`` holding Avro replace commit metadata: each decodes
    with the 1.x schemas Hudi 1.x reads them with."""
    import fastavro

    table = _table(tmp_path / "t", version=8)
    result = merge_small_files(table, "x", sum(_parquet(table.base_path / "x").values()) // 2 + 1)
    assert result.instant is not None
    folder = table.base_path / ".hoodie" / "timeline"
    (completed,) = [n for n in os.listdir(folder) if n.startswith(f"{result.instant}_")]
    completion = table.timeline().get(result.instant).completion_time  # type: ignore[union-attr]
    assert completed == f"{result.instant}_{completion}.replacecommit"
    assert (folder / f"{result.instant}.clustering.inflight").read_bytes() == b""
    with (folder / f"{result.instant}.clustering.requested").open("rb") as plan_file:
        reader = fastavro.reader(
            plan_file, reader_schema=timeline_avro.schema_1x(timeline_avro.REQUESTED_REPLACE_METADATA)
        )
        (plan,) = list(reader)
    assert plan["clusteringPlan"]["inputGroups"][0]["numOutputFileGroups"] == 2
    assert plan["extraMetadata"] == {"lake.strategy": "lake.merge-small-files"}
    with (folder / completed).open("rb") as commit_file:
        reader = fastavro.reader(
            commit_file, reader_schema=timeline_avro.schema_1x(timeline_avro.REPLACE_COMMIT_METADATA)
        )
        (metadata,) = list(reader)
    assert sorted(metadata["partitionToReplaceFileIds"]["x"]) == sorted(result.replaced)
    assert metadata["operationType"] == "CLUSTER"


@pytest.mark.parametrize("name", ["cow_v9_txns_simple_nometa", "cow_v9_txns_complex_nometa"])
def test_merge_of_a_spark_written_v9_table_reads_as_hudi_rs_reads_it(
    name: str, hudi_table_zip: Callable[[str], Path]
) -> None:
    from tests.unit.lake.table.test_reader_1x import _assert_same
    from tests.unit.lake.table.test_reader_1x import _hudi_rs as hudi_rs_1x

    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    before = read_snapshot(table)
    _assert_same(before, hudi_rs_1x(path, None), name, table, None)
    merged = []
    for partition in sorted({p for p, _ in _partition_files(path)}):
        if len([f for p, f in _partition_files(path) if p == partition]) >= 2:
            merged.append(merge_small_files(table, partition, 10**9).instant)
    assert [m for m in merged if m is not None], merged
    after = LakeTable.open(path)
    assert {i.timestamp for i in after.timeline().completed_commits} >= {m for m in merged if m}
    _assert_same(read_snapshot(after), hudi_rs_1x(path, None), name, after, None)
    # Rows unchanged but for the file that holds them.
    drop = "_hoodie_file_name"
    _assert_same(read_snapshot(after).drop_columns([drop]), before.drop_columns([drop]), name, after, None)


def _partition_files(path: Path) -> list[tuple[str, str]]:
    """(partition, base file name) of every parquet file outside ``.hoodie``."""
    return [
        (str(p.parent.relative_to(path)), p.name) for p in path.rglob("*.parquet") if ".hoodie" not in p.parts
    ]


def test_java_avro_reads_a_v8_merges_plan_and_metadata_under_hudi_1x_schemas(
    tmp_path: Path, spark: Any
) -> None:
    """Java's Avro (in Spark's JVM) opens the clustering plan and the completed replacecommit of a
    v8 merge, resolving each to the shipped Hudi 1.x schema, and reads what we wrote."""
    import json

    table = _table(tmp_path / "t", version=8)
    result = merge_small_files(table, "x", sum(_parquet(table.base_path / "x").values()) // 2 + 1)
    assert result.instant is not None
    completed = table.timeline().get(result.instant)
    assert completed is not None and completed.completion_time is not None
    folder = table.base_path / ".hoodie" / "timeline"
    jvm = spark.sparkContext._jvm
    read: dict[str, Any] = {}
    for what, name, stem in (
        ("plan", f"{result.instant}.clustering.requested", "HoodieRequestedReplaceMetadata.1x"),
        (
            "metadata",
            f"{result.instant}_{completed.completion_time}.replacecommit",
            "HoodieReplaceCommitMetadata.1x",
        ),
    ):
        shipped = jvm.org.apache.avro.Schema.Parser().parse(json.dumps(timeline_avro.load_schema_text(stem)))
        reader = jvm.org.apache.avro.file.DataFileReader(
            jvm.java.io.File(str(folder / name)),
            jvm.org.apache.avro.generic.GenericDatumReader(None, shipped),
        )
        record = reader.next()
        assert not reader.hasNext()
        reader.close()
        read[what] = json.loads(record.toString())
    (group,) = read["plan"]["clusteringPlan"]["inputGroups"]
    assert sorted(s["fileId"] for s in group["slices"]) == sorted(result.replaced)
    assert read["plan"]["extraMetadata"] == {"lake.strategy": "lake.merge-small-files"}
    assert sorted(read["metadata"]["partitionToReplaceFileIds"]["x"]) == sorted(result.replaced)
    assert sorted(s["path"] for s in read["metadata"]["partitionToWriteStats"]["x"]) == sorted(result.written)
    assert read["metadata"]["operationType"] == "CLUSTER"
