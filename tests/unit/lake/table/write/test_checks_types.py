"""Column types and record keys on write: exact casts or refusal, nested columns end to end, Hudi's keys.

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

from airflow_lake_provider.lake.errors import LakeError, SchemaError
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import InstantClock

FROZEN = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


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


# -- 3: lossy casts are refused -------------------------------------------------------------------
FLOAT_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.int64()),
        ("f", pa.float32()),
        ("st", pa.struct([("g", pa.float32())])),
    ]
)


def _float_table(path: Path, kind: str) -> LakeTable:
    table = LakeTable.create(
        path,
        name="floats",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        clock=InstantClock(now=lambda: FROZEN),
    )
    first = pa.table(
        {"id": [1, 2], "ts": [1, 1], "f": [1.5, -2.0], "st": [{"g": 0.25}, None]}, schema=FLOAT_SCHEMA
    )
    write(table, first, "insert")
    return table


def _float64_batch(f: list[float | None], g: list[float | None], ts: int = 2) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(1, len(f) + 1), pa.int64()),
            "ts": pa.array([ts] * len(f), pa.int64()),
            "f": pa.array(f, pa.float64()),
            "st": pa.array([{"g": v} for v in g], pa.struct([("g", pa.float64())])),
        }
    )


LOSSY = {
    "overflow-to-inf": ([1e300, 0.5], [0.5, 0.5], r"column 'f': value 1e\+300 does not fit float exactly"),
    "rounded": ([0.5, 0.1], [0.5, 0.5], r"column 'f': value 0.1 does not fit float exactly"),
    "nested-leaf": ([0.5, 0.5], [0.5, 0.1], r"column 'st.g': value 0.1 does not fit float exactly"),
}


@pytest.mark.parametrize("case", sorted(LOSSY))
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_float64_into_float32_lossy_value_refused_and_nothing_written(
    tmp_path: Path, kind: str, case: str
) -> None:
    path = tmp_path / "t"
    table = _float_table(path, kind)
    before = _tree(path)
    f, g, message = LOSSY[case]
    for operation in ("insert", "upsert"):
        with pytest.raises(SchemaError, match=message) as info:
            write(table, _float64_batch(f, g), operation)
        assert isinstance(info.value, LakeError)
        assert _tree(path) == before  # no instant, no marker, no data file
    assert len(table.timeline().completed_commits) == 1 and not table.timeline().pending
    _assert_both_read(
        path,
        [
            {"_hoodie_record_key": "1", "f": 1.5, "st": {"g": 0.25}},
            {"_hoodie_record_key": "2", "f": -2.0, "st": None},
        ],
    )


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_float64_values_exact_in_float32_are_written(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "t"
    table = _float_table(path, kind)
    write(table, _float64_batch([0.1875, float("inf")], [None, -3.5]), "upsert")
    _assert_both_read(
        path,
        [
            {"_hoodie_record_key": "1", "f": 0.1875, "st": {"g": None}},
            {"_hoodie_record_key": "2", "f": float("inf"), "st": {"g": -3.5}},
        ],
    )
    assert read_snapshot(table).schema.field("f").type == pa.float32()


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


# -- 5: record keys as Hudi's key generators write them ---------------------------------------------
def _keyed(path: Path, keys: tuple[str, ...], partitions: tuple[str, ...] = ("city",)) -> LakeTable:
    return LakeTable.create(
        path,
        name="keys",
        table_type="mor",
        record_key_fields=keys,
        precombine_field="ts",
        partition_fields=partitions,
        hive_style=True,
        clock=InstantClock(now=lambda: FROZEN),
    )


def _key_batch(a: list[str | None], b: list[str | None], ts: int, v: list[str]) -> pa.Table:
    n = len(a)
    return pa.table(
        {
            "a": pa.array(a, pa.string()),
            "b": pa.array(b, pa.string()),
            "ts": pa.array([ts] * n, pa.int64()),
            "city": pa.array(["c"] * n),
            "v": pa.array(v),
        }
    )


def test_composite_key_null_and_empty_parts_use_hudi_placeholders(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _keyed(path, ("a", "b"))
    write(
        table, _key_batch(["x", "", None, "y"], ["1", "x", "2", "2"], 1, ["v1", "v2", "v3", "v4"]), "insert"
    )
    expected = [
        {"_hoodie_record_key": "a:__empty__,b:x", "v": "v2"},
        {"_hoodie_record_key": "a:__null__,b:2", "v": "v3"},
        {"_hoodie_record_key": "a:x,b:1", "v": "v1"},
        {"_hoodie_record_key": "a:y,b:2", "v": "v4"},
    ]
    _assert_both_read(path, expected)
    # The same keys are found again: updates, no duplicates; then one is deleted.
    write(table, _key_batch(["", None], ["x", "2"], 2, ["w2", "w3"]), "upsert")
    expected[0]["v"], expected[1]["v"] = "w2", "w3"
    _assert_both_read(path, expected)
    write(table, _key_batch([""], ["x"], 3, ["-"]), "delete")
    _assert_both_read(path, expected[1:])


def test_complex_key_generator_with_one_key_field_prefixes_the_field(tmp_path: Path) -> None:
    # Two partition fields need ComplexKeyGenerator, which writes "a:x" even for one key field.
    path = tmp_path / "t"
    table = _keyed(path, ("a",), ("city", "b"))
    assert table.config.keygen_class == "org.apache.hudi.keygen.ComplexKeyGenerator"
    write(table, _key_batch(["x"], ["1"], 1, ["v1"]), "insert")
    write(table, _key_batch(["x"], ["1"], 2, ["v2"]), "upsert")
    _assert_both_read(
        path, [{"_hoodie_record_key": "a:x", "_hoodie_partition_path": "city=c/b=1", "v": "v2"}]
    )


def test_complex_key_generator_bare_single_key_when_the_table_says_new_encoding(tmp_path: Path) -> None:
    # Hudi 0.14.0-0.15.0 wrote a single field's bare value; such a table declares it in its properties.
    path = tmp_path / "t"
    table = _keyed(path, ("a",), ("city", "b"))
    table.store.update_properties(
        {**table.config.properties, "hoodie.write.complex.keygen.new.encoding": "true"}
    )
    table = LakeTable.open(path)
    write(table, _key_batch(["x"], ["1"], 1, ["v1"]), "insert")
    write(table, _key_batch(["x"], ["1"], 2, ["v2"]), "upsert")
    _assert_both_read(path, [{"_hoodie_record_key": "x", "_hoodie_partition_path": "city=c/b=1", "v": "v2"}])


BAD_KEYS = {
    "simple-empty": (("a",), [""], ["1"], r"record key field 'a' has an empty value \(row 0\)"),
    "simple-null": (("a",), ["x", None], ["1", "2"], r"record key field 'a' has null values \(row 1\)"),
    "composite-all-null-or-empty": (
        ("a", "b"),
        ["x", None],
        ["1", ""],
        r"record key fields \['a', 'b'\] are all null or empty \(row 1\)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_keys_hudi_refuses_are_refused_and_nothing_written(tmp_path: Path, case: str) -> None:
    keys, a, b, message = BAD_KEYS[case]
    path = tmp_path / "t"
    table = _keyed(path, keys)
    write(table, _key_batch(["k"], ["k"], 1, ["v"]), "insert")
    before = _tree(path)
    for operation in ("insert", "upsert", "delete"):
        with pytest.raises(SchemaError, match=message):
            write(table, _key_batch(a, b, 2, ["v"] * len(a)), operation)
        assert _tree(path) == before
