"""Arrow <-> Avro schema conversion: every supported type, Spark-written schemas, errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import LakeError, SchemaError
from airflow_lake_provider.lake.format.avro_schema import (
    META_FIELDS,
    arrow_to_avro,
    avro_to_arrow,
    avro_to_arrow_raw,
    meta_arrow_fields,
    strip_meta_fields,
    with_meta_fields,
)
from airflow_lake_provider.lake.log_file import scanner
from airflow_lake_provider.lake.storage import LocalStorage

UTC_US = pa.timestamp("us", tz="UTC")


def read_log_blocks(path: Path) -> list:
    """Blocks of a log file on the local disk, read through the storage seam as the reader does."""
    return scanner.read_log_blocks(LocalStorage(path.parent), path.name)


def _one(arrow_type: pa.DataType, nullable: bool = True) -> dict:
    avro = arrow_to_avro(pa.schema([pa.field("f", arrow_type, nullable)]), "r", "ns")
    return avro["fields"][0]


def test_meta_fields_are_the_five_hudi_columns_in_order() -> None:
    assert META_FIELDS == (
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    )
    fields = meta_arrow_fields()
    assert [f.name for f in fields] == list(META_FIELDS)
    assert all(f.type == pa.string() and f.nullable for f in fields)


@pytest.mark.parametrize(
    ("arrow_type", "avro_type"),
    [
        (pa.bool_(), "boolean"),
        (pa.int8(), "int"),
        (pa.int16(), "int"),
        (pa.int32(), "int"),
        (pa.int64(), "long"),
        (pa.float32(), "float"),
        (pa.float64(), "double"),
        (pa.string(), "string"),
        (pa.large_string(), "string"),
        (pa.binary(), "bytes"),
        (pa.large_binary(), "bytes"),
        (pa.date32(), {"type": "int", "logicalType": "date"}),
        (pa.timestamp("ms"), {"type": "long", "logicalType": "timestamp-millis"}),
        (pa.timestamp("ms", tz="UTC"), {"type": "long", "logicalType": "timestamp-millis"}),
        (pa.timestamp("us"), {"type": "long", "logicalType": "timestamp-micros"}),
        (pa.timestamp("us", tz="Europe/Paris"), {"type": "long", "logicalType": "timestamp-micros"}),
        (pa.decimal128(10, 5), {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 5}),
        (pa.list_(pa.field("item", pa.int64(), False)), {"type": "array", "items": "long"}),
        (pa.list_(pa.int64()), {"type": "array", "items": ["null", "long"]}),
        (pa.large_list(pa.string()), {"type": "array", "items": ["null", "string"]}),
        (pa.map_(pa.string(), pa.float64()), {"type": "map", "values": ["null", "double"]}),
    ],
)
def test_arrow_types_map_to_avro(arrow_type: pa.DataType, avro_type: object) -> None:
    assert _one(arrow_type, nullable=False) == {"name": "f", "type": avro_type}
    assert _one(arrow_type) == {"name": "f", "type": ["null", avro_type], "default": None}


def test_timestamps_never_use_local_timestamp_types() -> None:
    # hudi-rs panics on local-timestamp-*: naive Arrow timestamps must still map to timestamp-*.
    schema = pa.schema([pa.field(f"t{i}", t) for i, t in enumerate([pa.timestamp("us"), pa.timestamp("ms")])])
    assert "local-timestamp" not in json.dumps(arrow_to_avro(schema, "r", "ns"))


def test_nested_records_get_unique_path_based_names() -> None:
    inner = pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.string())])
    schema = pa.schema(
        [
            pa.field("a", pa.struct([pa.field("inner", inner), pa.field("z", pa.float64())])),
            pa.field("b", inner),
            pa.field("items", pa.list_(inner)),
            pa.field("by_name", pa.map_(pa.string(), inner)),
        ]
    )
    avro = arrow_to_avro(schema, "t_record", "hoodie.t")
    text = json.dumps(avro)
    full_names: list[str] = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") == "record" and "namespace" in node:
                full_names.append(f"{node['namespace']}.{node['name']}")
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(avro["fields"])
    assert sorted(full_names) == sorted(
        [
            "hoodie.t.t_record.a",
            "hoodie.t.t_record.a.inner",
            "hoodie.t.t_record.b",
            "hoodie.t.t_record.items",
            "hoodie.t.t_record.by_name",
        ]
    )
    fastavro.parse_schema(json.loads(text))  # names are unique and valid for a real Avro library
    assert avro_to_arrow(avro) == schema


ROUND_TRIP = pa.schema(
    [
        pa.field("req", pa.string(), nullable=False),
        pa.field("b", pa.bool_()),
        pa.field("i", pa.int32()),
        pa.field("l", pa.int64(), nullable=False),
        pa.field("f", pa.float32()),
        pa.field("d", pa.float64()),
        pa.field("s", pa.string()),
        pa.field("raw", pa.binary()),
        pa.field("fx", pa.binary(16)),
        pa.field("day", pa.date32()),
        pa.field("ms", pa.timestamp("ms", tz="UTC")),
        pa.field("us", UTC_US),
        pa.field("amount", pa.decimal128(38, 10)),
        pa.field("tags", pa.list_(pa.field("item", pa.string(), False))),
        pa.field("nested_list", pa.list_(pa.list_(pa.int64()))),
        pa.field("attrs", pa.map_(pa.string(), pa.field("value", pa.int64(), False))),
        pa.field("struct_map", pa.map_(pa.string(), pa.struct([pa.field("v", pa.float64())]))),
        pa.field(
            "nested",
            pa.struct(
                [
                    pa.field("x", pa.int32(), nullable=False),
                    pa.field("child", pa.struct([pa.field("deep", pa.decimal128(5, 2))])),
                    pa.field("when", UTC_US),
                ]
            ),
        ),
    ]
)


def test_every_supported_type_round_trips_exactly() -> None:
    avro = arrow_to_avro(ROUND_TRIP, "rt_record", "hoodie.rt")
    fastavro.parse_schema(copy.deepcopy(avro))
    assert avro_to_arrow(avro) == ROUND_TRIP
    assert avro_to_arrow(json.dumps(avro)) == ROUND_TRIP


def test_round_trip_normalises_widths_and_timezones() -> None:
    schema = pa.schema(
        [
            pa.field("i8", pa.int8()),
            pa.field("ls", pa.large_string()),
            pa.field("naive", pa.timestamp("us")),
            pa.field("paris", pa.timestamp("ms", tz="Europe/Paris")),
        ]
    )
    back = avro_to_arrow(arrow_to_avro(schema, "r", ""))
    assert back == pa.schema(
        [
            pa.field("i8", pa.int32()),
            pa.field("ls", pa.string()),
            pa.field("naive", UTC_US),
            pa.field("paris", pa.timestamp("ms", tz="UTC")),
        ]
    )


def test_avro_to_arrow_reads_spark_and_hudi_conventions() -> None:
    avro = {
        "type": "record",
        "name": "spark_record",
        "namespace": "hoodie.spark",
        "fields": [
            {"name": "ts", "type": ["long", "null"]},  # Spark puts null second
            {"name": "req", "type": "string"},
            {"name": "single", "type": ["double"]},
            {
                "name": "dec",
                "type": [
                    "null",
                    {
                        "type": "fixed",
                        "name": "fixed",
                        "size": 5,
                        "logicalType": "decimal",
                        "precision": 10,
                        "scale": 5,
                    },
                ],
            },
            {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
            {"name": "color2", "type": ["null", "Color"]},  # reference in the same namespace
            {"name": "color3", "type": "hoodie.spark.Color"},  # reference by full name
            {"name": "fx", "type": {"type": "fixed", "name": "Hash", "size": 8}},
            {"name": "millis", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "nanos", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "odd", "type": {"type": "string", "logicalType": "something-new"}},
            {"name": "big", "type": {"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 2}},
            {
                "name": "point",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "Point",
                        "fields": [
                            {"name": "x", "type": "double"},
                            {"name": "y", "type": ["null", "double"]},
                        ],
                    },
                ],
                "default": None,
            },
            {"name": "points", "type": {"type": "array", "items": "Point"}},
            {"name": "by_key", "type": ["null", {"type": "map", "values": ["Point", "null"]}]},
            {"name": "wrapped", "type": {"type": {"type": "array", "items": "int"}}},
        ],
    }
    point = pa.struct([pa.field("x", pa.float64(), False), pa.field("y", pa.float64())])
    expected = pa.schema(
        [
            pa.field("ts", pa.int64()),
            pa.field("req", pa.string(), False),
            pa.field("single", pa.float64(), False),
            pa.field("dec", pa.decimal128(10, 5)),
            pa.field("color", pa.string(), False),
            pa.field("color2", pa.string()),
            pa.field("color3", pa.string(), False),
            pa.field("fx", pa.binary(8), False),
            pa.field("millis", pa.timestamp("ms", tz="UTC"), False),
            pa.field("nanos", pa.timestamp("ns", tz="UTC"), False),
            pa.field("local", pa.timestamp("us"), False),
            pa.field("tm", pa.time32("ms"), False),
            pa.field("tu", pa.time64("us"), False),
            pa.field("id", pa.string(), False),
            pa.field("odd", pa.string(), False),
            pa.field("big", pa.decimal256(50, 2), False),
            pa.field("point", point),
            pa.field("points", pa.list_(pa.field("item", point, False)), False),
            pa.field("by_key", pa.map_(pa.string(), pa.field("value", point, True))),
            pa.field("wrapped", pa.list_(pa.field("item", pa.int32(), False)), False),
        ]
    )
    assert avro_to_arrow(avro) == expected
    raw = avro_to_arrow_raw(avro)
    assert raw.field("millis").type == pa.int64() and raw.field("tm").type == pa.int32()
    assert raw.field("dec").type == pa.decimal128(10, 5)


def test_real_spark_log_schemas_convert(hudi_table_zip) -> None:
    seen = 0
    for name in ("moravro_v6_trips_8i1u", "morparquet_v6_complexkeygen_hivestyle"):
        for log_path in sorted(Path(hudi_table_zip(name)).rglob(".*.log.*")):
            for block in read_log_blocks(log_path):
                schema = block.schema
                assert schema is not None
                arrow = avro_to_arrow(schema)
                assert arrow.names[:5] == list(META_FIELDS)
                if "decimalField" in arrow.names:
                    assert arrow.field("decimalField").type == pa.decimal128(10, 5)
                    assert arrow.field("timestampField").type == UTC_US
                    assert pa.types.is_map(arrow.field("mapField").type)
                    assert pa.types.is_struct(arrow.field("structField").type)
                seen += 1
    assert seen == 2


@pytest.mark.parametrize(
    ("arrow_type", "hint"),
    [
        (pa.uint32(), "uint32"),
        (pa.timestamp("ns"), "timestamp"),
        (pa.timestamp("s"), "timestamp"),
        (pa.time64("us"), "time64"),
        (pa.null(), "null"),
        (pa.decimal256(40, 2), "decimal256"),
        (pa.dictionary(pa.int32(), pa.string()), "dictionary"),
        (pa.map_(pa.int32(), pa.string()), "map key"),
    ],
)
def test_unsupported_arrow_types_raise_naming_the_field(arrow_type: pa.DataType, hint: str) -> None:
    schema = pa.schema([pa.field("ok", pa.int64()), pa.field("bad_col", arrow_type)])
    with pytest.raises(SchemaError, match=rf"bad_col.*{hint}") as info:
        arrow_to_avro(schema, "r", "ns")
    assert isinstance(info.value, LakeError)


def test_unsupported_nested_type_names_the_field_path() -> None:
    schema = pa.schema([pa.field("outer", pa.struct([pa.field("inner", pa.list_(pa.uint8()))]))])
    with pytest.raises(SchemaError, match=r"outer\.inner\[\]"):
        arrow_to_avro(schema, "r", "ns")


@pytest.mark.parametrize("bad", ["has space", "1st", "dash-ed"])
def test_invalid_avro_names_are_rejected(bad: str) -> None:
    with pytest.raises(SchemaError, match=bad):
        arrow_to_avro(pa.schema([pa.field(bad, pa.int64())]), "r", "ns")
    with pytest.raises(SchemaError, match=bad):
        arrow_to_avro(pa.schema([pa.field("ok", pa.int64())]), bad, "ns")


@pytest.mark.parametrize(
    ("avro", "message"),
    [
        ("{not json", "not valid JSON"),
        ({"type": "array", "items": "long"}, "must be a record"),
        ({"type": "record", "name": "r", "fields": [{"name": "u", "type": ["long", "string"]}]}, "u"),
        ({"type": "record", "name": "r", "fields": [{"name": "n", "type": "Nowhere"}]}, "Nowhere"),
        ({"type": "record", "name": "r", "fields": [{"name": "z", "type": "null"}]}, "z"),
        ({"type": "record", "name": "r", "fields": [{"name": "q", "type": "quaternion"}]}, "quaternion"),
        (
            {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
            "recursive",
        ),
        (
            {
                "type": "record",
                "name": "r",
                "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal"}}],
            },
            "d",
        ),
    ],
)
def test_avro_to_arrow_errors(avro: object, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        avro_to_arrow(avro)  # type: ignore[arg-type]


def test_with_and_strip_meta_fields() -> None:
    data = arrow_to_avro(pa.schema([pa.field("id", pa.string()), pa.field("ts", pa.int64())]), "t", "ns")
    original = copy.deepcopy(data)
    full = with_meta_fields(data)
    assert [f["name"] for f in full["fields"]] == [*META_FIELDS, "id", "ts"]
    assert full["fields"][0] == {"name": "_hoodie_commit_time", "type": ["null", "string"], "default": None}
    assert data == original  # inputs are not modified
    assert with_meta_fields(full) == full  # idempotent: present fields are not duplicated
    partial = copy.deepcopy(data)
    partial["fields"].insert(1, {"name": "_hoodie_record_key", "type": "string"})
    names = [f["name"] for f in with_meta_fields(partial)["fields"]]
    assert names.count("_hoodie_record_key") == 1 and len(names) == 7
    assert strip_meta_fields(full) == data
    assert avro_to_arrow(full).names[:5] == list(META_FIELDS)
