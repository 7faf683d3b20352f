"""The ``files`` partition records of a data instant: for every commit, deltacommit, compaction
commit and replacecommit (clustering, insert overwrite) of the Spark-written 1.x tables with an MDT,
ours from the instant's commit metadata equal, field for field, the records of the HFILE_DATA block
Hudi's Java writer wrote for that instant."""

from __future__ import annotations

import json

import pytest

from airflow_lake_provider.lake.log_file.hfile_block import decode_hfile_block
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.table.metadata.records import (
    FilesChange,
    PartitionChange,
    change_of_commit,
    file_group_index,
    files_records,
)
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action

WRITES = (Action.COMMIT, Action.DELTACOMMIT, Action.REPLACECOMMIT)


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("mor_avro_v9_txns_simple_meta", 13),  # deltacommits, compaction, clustering, a COW-like commit
        ("cow_v9_txns_simple_meta", 12),
        ("mor_avro_v9_txns_simple_overwrite", 3),  # insert overwrite (replacecommit)
        ("mdt_basic_mor_avro_v8_nonpartitioned", 7),  # Hudi 1.0, non-partitioned: key "."
        ("mor_avro_v9_nonpartitioned_rollback", 2),
    ],
)
def test_records_of_every_write_equal_the_java_writers(hudi_table_zip, name: str, count: int) -> None:
    path = hudi_table_zip(name)
    timeline = LakeTable.open(path).timeline()
    compared = 0
    for instant in timeline.instants:
        if not instant.is_completed or instant.action not in WRITES:
            continue
        (log,) = (path / ".hoodie/metadata/files").glob(f".files-0000-0_{instant.timestamp}.log.*")
        (block,) = parse_log_bytes(log.read_bytes(), str(log))
        schema = json.loads(block.header[HeaderKey.SCHEMA])
        theirs = dict(decode_hfile_block(block))
        ours = dict(files_records(change_of_commit(timeline.commit_metadata(instant)), schema))
        assert ours == theirs, instant
        compared += 1
    assert compared == count


SCHEMA = {
    "type": "record",
    "name": "HoodieMetadataRecord",
    "fields": [{"name": n} for n in ("_hoodie_commit_time", "key", "type", "filesystemMetadata", "x")],
}


def test_a_files_size_is_the_largest_reported_and_a_stat_without_path_is_skipped() -> None:
    stats = (
        WriteStat("f1", "p", "p/.f1_1.log.1_0-0-0", file_size_in_bytes=10),
        WriteStat("f1", "p", "p/.f1_1.log.1_0-0-0", file_size_in_bytes=30),
        WriteStat("f1", "p", "p/.f1_1.log.1_0-0-0", file_size_in_bytes=20),
        WriteStat("f2", "p", "", file_size_in_bytes=5),
    )
    change = change_of_commit(CommitMetadata("UPSERT", {"p": stats, "": ()}))
    assert change == FilesChange(
        {"p": PartitionChange({".f1_1.log.1_0-0-0": 30}), "": PartitionChange()}, ("p", "")
    )
    blank = {"_hoodie_commit_time": None, "key": "", "x": None}
    assert sorted(files_records(change, SCHEMA)) == [
        (".", {**blank, "type": 2, "filesystemMetadata": {}}),
        (
            "__all_partitions__",
            {
                **blank,
                "type": 1,
                "filesystemMetadata": {
                    "p": {"size": 0, "isDeleted": False},
                    ".": {"size": 0, "isDeleted": False},
                },
            },
        ),
        (
            "p",
            {
                **blank,
                "type": 2,
                "filesystemMetadata": {".f1_1.log.1_0-0-0": {"size": 30, "isDeleted": False}},
            },
        ),
    ]


def test_deleted_files_are_tombstones_and_no_partition_list_without_one() -> None:
    change = FilesChange({"p": PartitionChange({"b.parquet": 7}, ("a.parquet",))})
    ((key, record),) = files_records(change, SCHEMA)
    assert key == "p"
    assert record["filesystemMetadata"] == {
        "b.parquet": {"size": 7, "isDeleted": False},
        "a.parquet": {"size": 0, "isDeleted": True},
    }


@pytest.mark.parametrize("name", ["mor_avro_v9_txns_simple_meta", "cow_v9_txns_simple_meta"])
def test_every_column_stats_key_is_in_the_file_group_java_routed_it_to(hudi_table_zip, name: str) -> None:
    folder = hudi_table_zip(name) / ".hoodie/metadata/column_stats"
    groups = sorted({p.name.split("_")[0].lstrip(".") for p in folder.glob("*col-stats-*")})
    assert groups == ["col-stats-0000-0", "col-stats-0001-0"]
    seen = 0
    for log in folder.glob(".col-stats-*.log.*"):
        index = int(log.name.split("-")[2])
        for block in parse_log_bytes(log.read_bytes(), str(log)):
            if block.block_type is BlockType.HFILE_DATA:
                for key, _ in decode_hfile_block(block):
                    assert file_group_index(key, 2) == index, (log.name, key)
                    seen += 1
    assert seen > 100


def test_file_group_index_is_javas_string_hash_code() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Math.abs keeps it negative in Java.
    assert file_group_index("polygenelubricants", 3) == 2  # |-2147483648 % 3| in Java: 2
    assert file_group_index("", 5) == 0
    assert file_group_index("a", 2) == 97 % 2
