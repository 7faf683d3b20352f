"""The ``files`` partition records of a data instant: for every commit, deltacommit, compaction
commit and replacecommit (clustering, insert overwrite) of the Spark-written 1.x tables with an MDT,
ours from the instant's commit metadata equal, field for field, the records of the HFILE_DATA block
Hudi's Java writer wrote for that instant."""

from __future__ import annotations

import json

import pytest

from airflow_lake_provider.lake.log_file.hfile_block import decode_hfile_block
from airflow_lake_provider.lake.log_file.log_format import HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.table.metadata_records import (
    FilesChange,
    PartitionChange,
    change_of_commit,
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
