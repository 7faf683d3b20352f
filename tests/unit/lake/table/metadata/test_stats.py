"""``column_stats`` and ``partition_stats`` records computed as Hudi 1.x computes them, compared by
key with every record Hudi wrote in the MDT test tables (``tests/data/hudi-tables-1x``): for each
parquet base file and log file the ``column_stats`` partition lists (and storage still holds), and
for each partition the ``partition_stats`` partition holds (over the partition's latest slices as
the last writer of the partition saw them, from our own file records)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from mdt_tables import MDT_TABLES

from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS, arrow_to_avro, with_meta_fields
from airflow_lake_provider.lake.log_file.data_block import encode_avro_data_block
from airflow_lake_provider.lake.storage import Storage, open_storage
from airflow_lake_provider.lake.table.metadata.columns import columns_to_index
from airflow_lake_provider.lake.table.metadata.files import read_partition_records
from airflow_lake_provider.lake.table.metadata.listing import list_table_files
from airflow_lake_provider.lake.table.metadata.stats import (
    _java_big_integer_bytes,
    log_column_stats,
    parquet_column_stats,
    partition_stats,
    rows_column_stats,
    slices_seen_by,
)
from airflow_lake_provider.lake.table.table import LakeTable

# Lance base files are not parquet; these tables' MDTs have no column_stats or partition_stats.
WITH_STATS = [n for n in MDT_TABLES if "_lance_" not in n]
NO_PARTITION_STATS = {
    "cow_v9_txns_nonpart_meta",
    "mdt_basic_mor_avro_v8_nonpartitioned",
    "mor_avro_v9_nonpartitioned_rollback",
    "mor_avro_v9_txns_nonpart_meta",
}


def _by_file(storage: Storage) -> dict[str, dict[str, dict]]:
    """file name -> key -> Hudi's ``HoodieMetadataColumnStats``."""
    out: dict[str, dict[str, dict]] = {}
    for key, record in read_partition_records(storage, "column_stats").items():
        stats = record["ColumnStatsMetadata"]
        assert record["type"] == 3
        out.setdefault(stats["fileName"], {})[key] = stats
    return out


# MOR tables whose column_stats list log files still in storage, and how many.
LOGS_LISTED = {
    "mdt_basic_mor_avro_v8_nonpartitioned": 5,
    "mor_avro_v9_txns_complex_meta": 5,
    "mor_avro_v9_txns_nonpart_meta": 5,
    "mor_avro_v9_txns_simple_meta": 5,
    # Its column_stats groups hold only logs; the records of the MDT's initialisation log
    # (00000000000000001) are read with the later ones since a group's logs form one slice.
    "mor_avro_v9_timebasedkeygen_nonhivestyle": 2,
}


def _file_stats(storage: Storage, partition: str, file: str) -> dict[str, dict]:
    rel = "" if partition == "." else partition
    if file.endswith(".parquet"):
        return parquet_column_stats(storage, rel, file)
    return log_column_stats(storage, rel, file)


@pytest.mark.parametrize("name", WITH_STATS)
def test_column_stats_of_every_base_and_log_file_equal_hudis(hudi_table_zip, name: str) -> None:
    storage = open_storage(hudi_table_zip(name))
    where = {file: part for part, files in list_table_files(storage).items() for file in files}
    checked = {"base": 0, "log": 0}
    for file, theirs in _by_file(storage).items():
        if file not in where:
            continue  # a file a clean or rollback removed since
        assert _file_stats(storage, where[file], file) == theirs, file
        checked["base" if file.endswith(".parquet") else "log"] += 1
    assert checked["base"] >= 1
    assert checked["log"] == LOGS_LISTED.get(name, 0)


@pytest.mark.parametrize("name", sorted(set(WITH_STATS) - NO_PARTITION_STATS))
def test_partition_stats_equal_hudis(hudi_table_zip, name: str) -> None:
    path: Path = hudi_table_zip(name)
    storage = open_storage(path)
    theirs = {
        k: r["ColumnStatsMetadata"] for k, r in read_partition_records(storage, "partition_stats").items()
    }
    table = LakeTable.open(path)
    timeline = table.timeline()
    view = FileSystemView.build(table.config, timeline)
    last_write = {
        p: i.timestamp for i in timeline.completed_commits for p in timeline.commit_metadata(i).partitions
    }
    # Java left some partitions' records as an earlier write computed them: in the timebasedkeygen
    # tables the later commits added no partition_stats log. Those are compared only where the
    # partition's last write wrote one (Hudi's record is then of the slices that write saw).
    stats_written = {
        name.split("_", 1)[1].split(".log", 1)[0]
        for name in os.listdir(path / ".hoodie/metadata/partition_stats")
        if ".log." in name
    }
    compared = {
        stats["fileName"]
        for stats in theirs.values()
        if last_write.get("" if stats["fileName"] == "." else stats["fileName"]) in stats_written
    }
    assert compared, "no partition to compare"
    theirs = {k: v for k, v in theirs.items() if v["fileName"] in compared}
    ours = {}
    for partition in compared:
        rel = "" if partition == "." else partition
        files = []
        for piece in slices_seen_by(view, rel, last_write.get(rel)):
            for file in piece.files:
                files += _file_stats(storage, partition, file.file_name).values()
        ours.update(partition_stats(partition, files))
    assert ours == theirs


def test_decimals_are_stored_as_javas_shortest_unscaled_bytes() -> None:
    cases = {
        0: b"\x00",
        1: b"\x01",
        127: b"\x7f",
        128: b"\x00\x80",
        19999: b"N\x1f",
        -1: b"\xff",
        -128: b"\x80",
    }
    assert {v: _java_big_integer_bytes(v) for v in cases} == cases


def test_columns_to_index_without_an_index_definition(tmp_path: Path) -> None:
    """Hudi 1.x's index definition names the columns; without one (Hudi 1.0 tables written before
    it), the meta columns Hudi always indexes, then the configured list or the first 32 others."""
    storage = open_storage(tmp_path)
    data = [f"c{i}" for i in range(40)]
    schema = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", *data]
    meta = ("_hoodie_commit_time", "_hoodie_record_key")
    assert columns_to_index(storage, schema) == (*meta, *data[:32])
    assert columns_to_index(storage, schema, ["c7", "c3"]) == (*meta, "c7", "c3")
    (tmp_path / ".hoodie" / ".index_defs").mkdir(parents=True)
    defs = {"indexDefinitions": {"column_stats": {"sourceFields": ["c1"], "version": "V2"}}}
    (tmp_path / ".hoodie" / ".index_defs" / "index.json").write_text(json.dumps(defs))
    assert columns_to_index(storage, schema) == ("c1",)


_UTC = dt.timezone.utc
# Odd values of every primitive kind a log holds: nulls, empty and non-ASCII strings, negative
# decimals, dates and timestamps before 1970, NaN, an all-null column; and a nested column.
_ODD = pa.table(
    {
        "s": pa.array(["b", "", None, "é", "\U0001f600", "a"]),
        "i": pa.array([3, None, -7, 0, 2**31 - 1, -(2**31)], pa.int32()),
        "l": pa.array([None, 2**62, -1, 0, 5, -(2**63)], pa.int64()),
        "f": pa.array([1.5, float("nan"), None, -0.0, 0.0, -3.25], pa.float32()),
        "d": pa.array([float("-inf"), 2.5, None, float("nan"), 1e300, -0.0]),
        "b": pa.array([True, None, False, True, False, None]),
        "dec": pa.array(
            [decimal.Decimal(v) if v else None for v in ("-128.00", "0.01", None, "999.99", "-0.50", "0")],
            pa.decimal128(5, 2),
        ),
        "day": pa.array([dt.date(1969, 12, 31), None, dt.date(2026, 11, 27), dt.date(1, 1, 1), None, None]),
        "ts": pa.array(
            [dt.datetime(1969, 7, 20, 20, 17, 40, 1, _UTC), None, dt.datetime(2026, 11, 27, 6, tzinfo=_UTC)]
            * 2,
            pa.timestamp("us", "UTC"),
        ),
        "ms": pa.array([0, -1, None, 1, 86_400_000, 2], pa.timestamp("ms")),
        "raw": pa.array([b"\xff", b"", None, b"\x00\x01", b"a", b"\x80"]),
        "none": pa.array([None] * 6, pa.string()),
        "nested": pa.array(
            [{"a": 1}, None, {"a": 2}, {"a": None}, None, {"a": 0}], pa.struct([("a", pa.int64())])
        ),
    }
)


@pytest.mark.parametrize("version", ["V1", "V2"])
def test_log_stats_from_the_writers_rows_equal_those_read_back(tmp_path: Path, version: str) -> None:
    """A write computes its new log files' stats from the rows it encoded (``BlockRows``): the same
    records as decoding the block back gives, for every indexed column of odd values (the nested
    column is not indexed: Hudi 1.x's index definitions name primitive columns only)."""
    meta = {m: pa.array([f"{m}-{i}" for i in range(_ODD.num_rows)]) for m in META_FIELDS}
    rows = pa.table({**meta, **{c: _ODD.column(c) for c in _ODD.column_names}})
    avro = with_meta_fields(arrow_to_avro(_ODD.schema, "odd_record", "hoodie.odd"))
    block, held = encode_avro_data_block(rows, avro, "20261127060000000")
    indexed = [*META_FIELDS[:3], *(c for c in _ODD.column_names if c != "nested"), "absent"]
    defs = {"indexDefinitions": {"column_stats": {"sourceFields": indexed, "version": version}}}
    (tmp_path / ".hoodie" / ".index_defs").mkdir(parents=True)
    (tmp_path / ".hoodie" / ".index_defs" / "index.json").write_text(json.dumps(defs))
    storage = open_storage(tmp_path)
    name = ".f1-0_20261127060000000.log.1_1-0-1"
    storage.create(f"p/{name}", block)
    read_back = log_column_stats(storage, "p", name)
    assert rows_column_stats(storage, "p", name, held.rows, held.schema) == read_back
    by_column = {s["columnName"]: s for s in read_back.values()}
    assert list(by_column) == indexed[:-1]  # "absent" is in no row
    assert (by_column["s"]["minValue"][1], by_column["s"]["maxValue"][1]) == (
        {"value": ""},
        {"value": "\U0001f600"},
    )
    assert (
        by_column["none"]["minValue"],
        by_column["none"]["nullCount"],
        by_column["none"]["valueCount"],
    ) == (
        None,
        6,
        6,
    )
