"""Column types on write: nested columns end to end.

Every state is read by our reader and by hudi-rs, and both must give exactly the expected rows.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.format.instant import InstantClock
from airflow_lake_provider.lake.services.compaction.executor import Outcome, run_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

FROZEN = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
META = ("_hoodie_commit_seqno", "_hoodie_file_name")


def _tree(path: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), path) + "/"] = -1
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, path)] = os.path.getsize(p)
    return out


def _hudi(path: Path) -> pa.Table:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _rows(table: pa.Table, columns: list[str]) -> list[dict[str, Any]]:
    if table.num_rows == 0:
        return []
    return sorted(table.select(columns).to_pylist(), key=lambda r: r["_hoodie_record_key"])


def _assert_both_read(path: Path, expected: list[dict[str, Any]]) -> None:
    columns = list(expected[0]) if expected else ["_hoodie_record_key"]
    ours = read_snapshot(LakeTable.open(path))
    assert _rows(ours, columns) == expected
    assert _rows(_hudi(path), columns) == expected


# -- 4: struct, list and map columns ---------------------------------------------------------------
NESTED = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.int64()),
        ("city", pa.string()),
        ("st", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int64())),
        ("f", pa.float32()),
    ]
)
COLUMNS = ["_hoodie_record_key", "_hoodie_partition_path", "id", "st", "tags", "attrs", "f"]


def _nested(rows: list[tuple]) -> pa.Table:
    """Rows of (id, ts, st, tags, attrs, f); odd ids live in city a, even ones in b."""
    cols = list(zip(*rows, strict=True))
    return pa.table(
        {
            "id": cols[0],
            "ts": cols[1],
            "city": ["a" if i % 2 else "b" for i in cols[0]],
            "st": cols[2],
            "tags": cols[3],
            "attrs": cols[4],
            "f": cols[5],
        },
        schema=NESTED,
    )


def _row(i: int, st: Any, tags: Any, attrs: Any, f: Any) -> dict[str, Any]:
    return {
        "_hoodie_record_key": str(i),
        "_hoodie_partition_path": "city=a" if i % 2 else "city=b",
        "id": i,
        "st": st,
        "tags": tags,
        "attrs": attrs,
        "f": f,
    }


NESTED_INSERT = _nested(
    [
        (1, 1, {"a": 1, "b": "x"}, ["p", "q"], [("k", 1)], 0.5),
        (2, 1, None, None, None, None),
        (3, 1, {"a": None, "b": "z"}, [], [], 1.25),
        (4, 1, {"a": 4, "b": None}, [None, "r"], [("n", None)], -2.0),
    ]
)
NESTED_UPSERT = _nested(
    [
        (1, 2, None, [], None, 0.75),  # values to null / empty
        (2, 2, {"a": 2, "b": "y"}, ["new"], [("a", 1), ("b", 2)], 3.0),  # nulls to values
        (3, 2, {"a": 3, "b": "z"}, None, [("c", 3)], None),
        (5, 2, {"a": 5, "b": "five"}, ["e"], [], 5.0),  # a new key
    ]
)
AFTER_INSERT = [
    _row(1, {"a": 1, "b": "x"}, ["p", "q"], [("k", 1)], 0.5),
    _row(2, None, None, None, None),
    _row(3, {"a": None, "b": "z"}, [], [], 1.25),
    _row(4, {"a": 4, "b": None}, [None, "r"], [("n", None)], -2.0),
]
AFTER_UPSERT = [
    _row(1, None, [], None, 0.75),
    _row(2, {"a": 2, "b": "y"}, ["new"], [("a", 1), ("b", 2)], 3.0),
    _row(3, {"a": 3, "b": "z"}, None, [("c", 3)], None),
    AFTER_INSERT[3],
    _row(5, {"a": 5, "b": "five"}, ["e"], [], 5.0),
]
AFTER_DELETE = [r for r in AFTER_UPSERT if r["id"] != 4]


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_nested_columns_insert_upsert_delete_compact_exact_rows(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nested"
    table = LakeTable.create(
        path,
        name="nested",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
        clock=InstantClock(now=lambda: FROZEN),
    )
    write(table, NESTED_INSERT, "insert")
    _assert_both_read(path, AFTER_INSERT)
    write(table, NESTED_UPSERT, "upsert")
    _assert_both_read(path, AFTER_UPSERT)
    write(table, _nested([(4, 3, None, None, None, None)]), "delete")
    _assert_both_read(path, AFTER_DELETE)
    if kind == "mor":
        logs = [p for p in _tree(path) if ".log." in p]
        assert logs  # updates and the delete went to log files (Avro data and delete blocks)
        _, result = run_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
        assert result.outcome is Outcome.COMPLETED
        _assert_both_read(path, AFTER_DELETE)
    # The latest base files store the nested types themselves.
    snapshot = read_snapshot(table)
    for name in sorted(set(snapshot.column("_hoodie_file_name").to_pylist())):
        part = next(p for p in _tree(path) if p.endswith(name))
        stored = pq.read_schema(path / part)
        assert pa.types.is_struct(stored.field("st").type) and pa.types.is_map(stored.field("attrs").type)
    # Writes after compaction go on the new slices.
    write(table, _nested([(3, 9, {"a": None, "b": None}, ["z"], [("q", None)], 9.5)]), "upsert")
    expected = [
        r if r["id"] != 3 else _row(3, {"a": None, "b": None}, ["z"], [("q", None)], 9.5)
        for r in AFTER_DELETE
    ]
    _assert_both_read(path, expected)


SPARK_NESTED_TABLES = ["cow_v6_nonpartitioned", "morparquet_v6_nonpartitioned"]


@pytest.mark.parametrize("name", SPARK_NESTED_TABLES)
def test_upsert_nested_values_into_spark_written_table(hudi_table_zip, name: str) -> None:
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    before = read_snapshot(table)
    data = [c for c in before.column_names if not c.startswith("_hoodie_")]
    current = before.filter(pc.is_in(before.column("id"), pa.array([1, 2], pa.int32())))
    current = current.sort_by("id").select(data)
    # id 1: empty array, null map, null child struct; id 2: one array element and a map entry changed.
    array_type = current.schema.field("arrayField").type
    map_type = current.schema.field("mapField").type
    struct_type = current.schema.field("structField").type
    batch = (
        current.set_column(data.index("longField"), "longField", pa.array([2**40, 2**40], pa.int64()))
        .set_column(
            data.index("arrayField"),
            "arrayField",
            pa.array([[], [{"arr_struct_f1": "teal", "arr_struct_f2": None}]], array_type),
        )
        .set_column(
            data.index("mapField"),
            "mapField",
            pa.array(
                [None, [("key9", {"map_field_value_struct_f1": 0.5, "map_field_value_struct_f2": None})]],
                map_type,
            ),
        )
        .set_column(
            data.index("structField"),
            "structField",
            pa.array(
                [
                    {"field1": "Alice", "field2": 31, "child_struct": None},
                    None,
                ],
                struct_type,
            ),
        )
    )
    write(table, batch, "upsert")
    nested = ["_hoodie_record_key", "arrayField", "mapField", "structField", "longField"]
    changed = [
        {
            "_hoodie_record_key": "1",
            "arrayField": [],
            "mapField": None,
            "structField": {"field1": "Alice", "field2": 31, "child_struct": None},
            "longField": 2**40,
        },
        {
            "_hoodie_record_key": "2",
            "arrayField": [{"arr_struct_f1": "teal", "arr_struct_f2": None}],
            "mapField": [("key9", {"map_field_value_struct_f1": 0.5, "map_field_value_struct_f2": None})],
            "structField": None,
            "longField": 2**40,
        },
    ]
    untouched = [r for r in _rows(before, nested) if r["_hoodie_record_key"] in ("3", "4")]
    _assert_both_read(path, changed + untouched)
    if table.config.is_mor:
        _, result = run_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
        assert result.outcome is Outcome.COMPLETED
        _assert_both_read(path, changed + untouched)
    # Every other column of the changed rows is as written.
    ours = read_snapshot(table).sort_by("id").select(data)
    assert ours.filter(pc.is_in(ours.column("id"), pa.array([1, 2], pa.int32()))).equals(batch)
