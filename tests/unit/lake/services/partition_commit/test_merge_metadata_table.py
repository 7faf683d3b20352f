"""Partition commit's ``merge-small-files`` under ``lake.metadata-table.maintain`` on v8/v9 tables
whose MDT keeps ``files``, ``column_stats`` and ``partition_stats``.

On copies of Spark-written tables (v9 COW and MOR, partitioned; v8 MOR, non-partitioned, through the
merge itself: a partition commit needs partitions): three maintained inserts of one new key each
make three small base files in a partition, then the merge rewrites the partition's small files as
one clustering replacecommit. Its MDT deltacommit is Java's for a clustering commit: at its instant
time, completed before it, the new base file in ``files`` (the replaced ones stay listed until a
clean deletes them), its column stats, the partition's stats. hudi-rs, listing through the MDT,
reads our rows (the same as before the merge); ``--check`` finds no difference; the stats equal a
recomputation. A crash at any durable step leaves both readers agreeing, and the next run rolls the
pending merge back (its MDT deltacommit included) and merges again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing, steps_of
from mdt_tables import keep_files_partition_only, mdt_digest, mdt_files_of
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.log_file.hfile_block import decode_hfile_block
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes
from airflow_lake_provider.lake.services.partition_commit.executor import commit_partitions
from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from airflow_lake_provider.lake.timeline.instant import Action
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    TABLES,
    _batch,
    _rows,
    assert_consistent,
    assert_index_consistent,
    hudi_rs,
)

MERGE = {**MAINTAIN, "sink.partition-commit.policy.kind": "merge-small-files", "compaction.file-size": "4mb"}
TARGET = 4 * 1024 * 1024


def _content(rows: pa.Table) -> list[str]:
    """The rows but for ``_hoodie_file_name``, which a merge changes (it keeps every other field)."""
    return _rows(rows.drop_columns(["_hoodie_file_name"]))


def _small_files(path: Path, name: str, options: Mapping[str, str] = MAINTAIN) -> tuple[str, list[str]]:
    """Three maintained inserts of one new key each into the partition of the first row (each a new
    file group of one base file): that partition and the rows then."""
    key, ordering, _partition, new_keys = TABLES[name]
    snapshot = read_snapshot(LakeTable.open(path))
    for k in new_keys:
        write(LakeTable.open(path), _batch(snapshot, key, ordering, [0], [k]), "insert", options=options)
    return snapshot.column("_hoodie_partition_path")[0].as_py(), _content(assert_consistent(path))


def _assert_kept(path: Path, instant: str, partition: str, written: tuple[str, ...], rows: list[str]) -> None:
    """The merge's MDT deltacommit: timeline files and one log file per MDT partition (the v8 table
    has no ``partition_stats``); its ``files``
    records name the new base files with their sizes; both readers read ``rows``."""
    mdt_timeline = [n for n in mdt_files_of(path, instant) if n.startswith(".hoodie/")]
    assert sorted(n.rsplit(".", 1)[-1] for n in mdt_timeline) == ["deltacommit", "inflight", "requested"]
    logs = [n for n in mdt_files_of(path, instant) if not n.startswith(".hoodie/")]
    kept = LakeTable.open(path).config.properties["hoodie.table.metadata.partitions"].split(",")
    assert sorted({n.split("/")[0] for n in logs}) == sorted(kept)
    (files_log,) = [n for n in logs if n.startswith("files/")]
    (block,) = parse_log_bytes((path / ".hoodie/metadata" / files_log).read_bytes(), files_log)
    records = dict(decode_hfile_block(block))
    key = partition or "."
    assert records[key]["filesystemMetadata"] == {
        w.rsplit("/", 1)[-1]: {"size": (path / w).stat().st_size, "isDeleted": False} for w in written
    }
    assert records["__all_partitions__"]["filesystemMetadata"] == {key: {"size": 0, "isDeleted": False}}
    assert _content(assert_consistent(path)) == rows  # hudi-rs through the MDT, and --check
    assert_index_consistent(path)


@pytest.mark.parametrize("name", ["cow_v9_txns_simple_meta", "mor_avro_v9_txns_simple_meta"])
def test_partition_commit_merge_keeps_the_metadata_table(hudi_table_zip, capsys, name: str) -> None:
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    partition, rows = _small_files(path, name)
    spark = {i.timestamp for i in LakeTable.open(path).timeline().instants}
    mdt_before = mdt_digest(path)
    # The MDT's own services held off (not due; an MDT clean keeping 20 commits finds nothing): the
    # merge's deltacommit is the only change there (services after a merge: tested below).
    held_off = {
        **MERGE,
        "hoodie.metadata.compact.max.delta.commits": "100",
        "hoodie.cleaner.commits.retained": "20",
    }
    result = commit_partitions(LakeTable.open(path), [partition], held_off)
    assert result.committed == (partition,)
    timeline = LakeTable.open(path).timeline()
    (merge,) = [i for i in timeline.completed_commits if i.timestamp not in spark]
    assert merge.action is Action.REPLACECOMMIT
    meta = timeline.commit_metadata(merge)
    written = tuple(s.path for s in meta.write_stats())
    replaced = meta.partition_to_replace_file_ids[partition]
    assert len(written) == 1 and len(replaced) >= 3
    assert pq.read_metadata(path / written[0]).num_rows >= 3
    _assert_kept(path, merge.timestamp, partition, written, rows)
    # The MDT gained the merge's deltacommit and nothing else changed there.
    after = mdt_digest(path)
    assert sorted(set(after) - set(mdt_before)) == mdt_files_of(path, merge.timestamp)
    assert {k: after[k] for k in mdt_before} == mdt_before
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True


def test_a_merge_of_a_v8_table_keeps_the_metadata_table(hudi_table_zip) -> None:
    name = "mdt_basic_mor_avro_v8_nonpartitioned"
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    partition, rows = _small_files(path, name)
    assert partition == ""
    result = merge_small_files(LakeTable.open(path), partition, TARGET)
    assert result.instant is not None and len(result.replaced) >= 3
    _assert_kept(path, result.instant, partition, result.written, rows)


def test_the_merge_refuses_under_maintain_false_and_with_a_record_index(hudi_table_zip, capsys) -> None:
    path = keep_files_partition_only(hudi_table_zip("cow_v9_txns_simple_meta"), INDEXES)
    partition, _rows_ = _small_files(path, "cow_v9_txns_simple_meta")
    before = tree_digest(path)
    args = ["partition-commit", str(path), "--partition", partition, "--policy", "merge-small-files"]
    assert main([*args, "--option", "lake.metadata-table.maintain=false"]) == 1
    assert "partition commit (merge-small-files) refused" in capsys.readouterr().err
    assert tree_digest(path) == before
    # A record index (which a merge would have to move keys in) is refused under maintain too.
    props = path / ".hoodie/hoodie.properties"
    text = props.read_text()
    key = "hoodie.table.metadata.partitions="
    assert f"\n{key}column_stats," in text
    props.write_text(text.replace(f"\n{key}", f"\n{key}record_index,"))
    before = tree_digest(path)
    assert main([*args, "--option", "lake.metadata-table.maintain=true"]) == 1
    err = capsys.readouterr().err
    assert "partition commit (merge-small-files) refused" in err
    why = "lake.metadata-table.maintain=true cannot keep it for this action: partitions [record_index, "
    assert why in err
    assert (
        "(only [column_stats, files, partition_stats] are kept so far; record_index and "
        "secondary_index_* only by the actions that move no key (compaction, clean, archival))"
    ) in err
    assert tree_digest(path) == before


@pytest.mark.parametrize("name", ["cow_v9_txns_simple_meta", "mor_avro_v9_txns_simple_meta"])
def test_a_crash_at_every_durable_step_of_the_merge_leaves_both_readers_agreeing(
    hudi_table_zip, tmp_path: Path, name: str
) -> None:
    """A crash after any durable step of the merge (its plan, inflight, marker, new file, its MDT
    deltacommit's timeline and log files, the replacecommit, the markers' removal): hudi-rs, listing
    through the MDT, reads our rows, the files partition equals the listing; the next merge rolls a
    pending one back, its MDT deltacommit first removed, and merges again, to the same state."""
    template = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    partition, rows = _small_files(template, name)
    spark = {i.timestamp for i in LakeTable.open(template).timeline().instants}
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    merge_small_files(counting, partition, TARGET)
    steps = steps_of(counting)
    assert any(s.endswith(".deltacommit") for s in steps) and any(s.endswith(".replacecommit") for s in steps)
    for step in range(1, len(steps) + 1):
        where = (step, steps[step - 1])
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            merge_small_files(crashing(LakeTable.open(path), step), partition, TARGET)
        assert _content(assert_consistent(path)) == rows, where
        timeline = LakeTable.open(path).timeline()
        crashed = [i for i in timeline.instants if i.timestamp not in spark]
        again = merge_small_files(LakeTable.open(path), partition, TARGET)
        if crashed and crashed[-1].is_completed:
            assert again.instant is None, where  # the crash came after the merge completed
            continue
        assert again.instant is not None, where
        pending = [i.timestamp for i in crashed]
        assert list(again.rolled_back) == pending, where
        assert [f for t in pending for f in mdt_files_of(path, t)] == [], where
        _assert_kept(path, again.instant, partition, again.written, rows)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_merge_runs_the_metadata_tables_services_after_it(hudi_table_zip, capsys) -> None:
    """Under the default policy, with ``hoodie.metadata.compact.max.delta.commits=1``: once the
    merge's replacecommit completed, the MDT is compacted, as after a write; hudi-rs, listing
    through its new base files, reads the rows we read, and ``--check`` finds no difference."""
    name = "cow_v9_txns_simple_meta"
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    partition, rows = _small_files(path, name)
    args = ["partition-commit", str(path), "--partition", partition, "--policy", "merge-small-files"]
    args += [
        "--option",
        "compaction.file-size=4mb",
        "--option",
        "hoodie.metadata.compact.max.delta.commits=1",
    ]
    spark = set((path / ".hoodie/timeline").glob("*.replacecommit"))
    assert main(args) == 0
    capsys.readouterr()
    (merge,) = set((path / ".hoodie/timeline").glob("*.replacecommit")) - spark
    instant = merge.name.split("_")[0]
    mdt = path / ".hoodie/metadata/.hoodie/timeline"
    assert len([p for p in mdt.glob("*.commit") if p.name.split("_")[0] > instant]) == 1
    assert _content(hudi_rs(path)) == rows
    assert _content(assert_consistent(path)) == rows
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True
