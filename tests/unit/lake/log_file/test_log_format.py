"""Hudi log file codec: real Spark-written logs, exact re-encoding, round trips, damage, hudi-rs."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_lake_provider.lake.errors import CorruptLogBlockError, LakeError, SchemaError
from airflow_lake_provider.lake.format.avro_schema import (
    META_FIELDS,
    arrow_to_avro,
    avro_to_arrow,
    with_meta_fields,
)
from airflow_lake_provider.lake.log_file import scanner
from airflow_lake_provider.lake.log_file.avro_decode import (
    decode_avro_data_block,
    decode_avro_data_block_fastavro,
    polars_can_decode,
)
from airflow_lake_provider.lake.log_file.block_keys import avro_block_record_keys, avro_blocks_record_keys
from airflow_lake_provider.lake.log_file.data_block import avro_data_block, decode_parquet_block
from airflow_lake_provider.lake.log_file.delete_block import (
    DeleteRecord,
    decode_delete_block,
    delete_block,
    encode_delete_content,
    ordering_type_for,
)
from airflow_lake_provider.lake.log_file.log_format import (
    BlockType,
    HeaderKey,
    LogBlock,
    encode_block,
    parse_log_bytes,
    rollback_command_block,
)
from airflow_lake_provider.lake.storage import LocalStorage


def read_log_blocks(path: Path) -> list[LogBlock]:
    """Blocks of a log file on the local disk, read through the storage seam as the reader does."""
    return scanner.read_log_blocks(LocalStorage(path.parent), path.name)


def append_blocks(path: Path, blocks: list[bytes]) -> tuple[int, int]:
    return LocalStorage(path.parent).append(path.name, b"".join(blocks))


LOGGER = "airflow_lake_provider.lake"  # the codec modules log under it


T1, T2, T3 = "20240101000000001", "20240101000100002", "20240101000200003"
UTC = dt.timezone.utc
UTC_US = pa.timestamp("us", tz="UTC")

TABLES_WITH_LOGS = {
    "moravro_v6_trips_8i1u": [BlockType.AVRO_DATA],
    "moravro_v6_trips_8i3d": [BlockType.DELETE],
    "morparquet_v6_complexkeygen_hivestyle": [BlockType.PARQUET_DATA],
    "morparquet_v6_nonpartitioned": [BlockType.PARQUET_DATA],
    "morparquet_v6_nonpartitioned_rollback": [
        BlockType.PARQUET_DATA,
        BlockType.COMMAND,
        BlockType.PARQUET_DATA,
    ],
    "morparquet_v6_simplekeygen_nonhivestyle": [BlockType.PARQUET_DATA],
    "morparquet_v6_simplekeygen_nonhivestyle_overwritetable": [BlockType.PARQUET_DATA],
}
SF = "city=san_francisco"


def _logs(table_dir: Path) -> list[Path]:
    # Sorted by name = by log version for these single-file-group tables.
    return sorted(table_dir.rglob(".*.log.*"))


def _only_block(data: bytes) -> LogBlock:
    (block,) = parse_log_bytes(data, "mem")
    return block


def _with_meta(table: pa.Table, instant: str = T1) -> pa.Table:
    n = table.num_rows
    meta = {
        "_hoodie_commit_time": [instant] * n,
        "_hoodie_commit_seqno": [f"{instant}_0_{i}" for i in range(n)],
        "_hoodie_record_key": [f"key{i}" for i in range(n)],
        "_hoodie_partition_path": ["p"] * n,
        "_hoodie_file_name": ["f1-0"] * n,
    }
    out = pa.table({k: pa.array(v, pa.string()) for k, v in meta.items()})
    for name in table.column_names:
        out = out.append_column(table.schema.field(name), table.column(name))
    return out


def _schema_of(table: pa.Table) -> dict:
    data = table.drop_columns([c for c in table.column_names if c in META_FIELDS])
    return with_meta_fields(arrow_to_avro(data.schema, "t_record", "hoodie.t"))


def _round_trip(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    return decode_avro_data_block(block), decode_avro_data_block_fastavro(block)


# --------------------------------------------------------------------------------------------
# Real Spark-written tables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TABLES_WITH_LOGS))
def test_every_real_log_parses_cleanly_and_decodes(hudi_table_zip, name: str, caplog) -> None:
    kinds: list[BlockType] = []
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for log_path in _logs(hudi_table_zip(name)):
            blocks = read_log_blocks(log_path)
            # The blocks tile the file exactly: nothing skipped, nothing left over.
            assert [b.offset for b in blocks] == [sum(b.size for b in blocks[:i]) for i in range(len(blocks))]
            assert sum(b.size for b in blocks) == log_path.stat().st_size
            for block in blocks:
                kinds.append(block.block_type)
                assert block.instant_time is not None and len(block.instant_time) == 17
                assert block.source == str(log_path) and not block.footer
                # Re-framing the parsed parts reproduces the file's bytes exactly.
                raw = log_path.read_bytes()[block.offset : block.offset + block.size]
                assert encode_block(block.block_type, block.header, block.content) == raw
                if block.block_type is BlockType.AVRO_DATA:
                    assert decode_avro_data_block(block).equals(decode_avro_data_block_fastavro(block))
                elif block.block_type is BlockType.PARQUET_DATA:
                    table = decode_parquet_block(block)
                    assert table.num_rows == 1 and table.schema == avro_to_arrow(block.schema)
                elif block.block_type is BlockType.DELETE:
                    assert decode_delete_block(block)
    assert kinds == TABLES_WITH_LOGS[name]
    assert not caplog.records


def test_real_avro_data_block_holds_the_rider_d_update(hudi_table_zip) -> None:
    (log_path,) = _logs(hudi_table_zip("moravro_v6_trips_8i1u"))
    (block,) = read_log_blocks(log_path)
    assert block.instant_time == "20250331030645735"
    assert polars_can_decode(block.schema)
    table = decode_avro_data_block(block)
    assert table.schema == avro_to_arrow(block.schema)
    assert table.column_names == [*META_FIELDS, "ts", "uuid", "rider", "driver", "fare", "city"]
    assert table.to_pylist() == [
        {
            "_hoodie_commit_time": "20250331030645735",
            "_hoodie_commit_seqno": "20250331030645735_0_1",
            "_hoodie_record_key": "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
            "_hoodie_partition_path": SF,
            "_hoodie_file_name": "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0",  # the file id, not a name
            "ts": 1695046462179,
            "uuid": "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
            "rider": "rider-D",
            "driver": "driver-L",
            "fare": 25.0,
            "city": "san_francisco",
        }
    ]
    assert table.equals(decode_avro_data_block_fastavro(block))
    # Our encoder writes the same record bytes for the decoded row.
    again = _only_block(avro_data_block(table, block.schema, block.instant_time))
    assert again.content == block.content and dict(again.header) == dict(block.header)


def test_real_spark_delete_block_decodes_and_re_encodes_byte_for_byte(hudi_table_zip) -> None:
    (log_path,) = _logs(hudi_table_zip("moravro_v6_trips_8i3d"))
    raw = log_path.read_bytes()
    (block,) = read_log_blocks(log_path)
    # The worked example of the format note: L=1084, DELETE, SCHEMA header before INSTANT_TIME.
    assert raw[:6] == b"#HUDI#" and struct.unpack(">qii", raw[6:22]) == (1084, 1, 1)
    assert list(block.header) == [HeaderKey.SCHEMA, HeaderKey.INSTANT_TIME]
    assert block.instant_time == "20250618054714114" and len(block.content) == 190
    records = decode_delete_block(block)
    assert records == [
        DeleteRecord("e96c4396-3fad-413a-a942-4cb36106d721", SF, 0, "long"),
        DeleteRecord("9909a8b1-2d15-4d3d-8ec9-efc48c536a00", SF, 0, "long"),
        DeleteRecord("334e26e9-8355-45cc-97c6-c31daf0df330", SF, 0, "long"),
    ]
    assert encode_delete_content(records) == block.content
    ours = delete_block(records, block.instant_time, block.schema)
    assert len(ours) == len(raw)
    again = _only_block(ours)
    assert again.content == block.content and dict(again.header) == dict(block.header)
    # With Spark's header order the whole block is identical, byte for byte.
    assert encode_block(BlockType.DELETE, block.header, encode_delete_content(records)) == raw


def test_real_rollback_block_targets_the_first_deltacommit(hudi_table_zip) -> None:
    blocks = [
        b for p in _logs(hudi_table_zip("morparquet_v6_nonpartitioned_rollback")) for b in read_log_blocks(p)
    ]
    first, rollback, last = blocks
    assert rollback.is_rollback and not first.is_rollback
    assert rollback.instant_time == "20250126040936578"
    assert rollback.target_instant_time == first.instant_time == "20250126040826878"
    assert rollback.content == b"" and rollback.schema is None
    assert last.instant_time == "20250126060846931" and last.target_instant_time is None
    ours = _only_block(rollback_command_block(rollback.instant_time, first.instant_time))
    assert dict(ours.header) == dict(rollback.header) and ours.size == rollback.size == 105
    for data_block in (first, last):
        table = decode_parquet_block(data_block)
        assert table.column("_hoodie_commit_time").to_pylist() == [data_block.instant_time]
        assert table.schema.field("timestampField").type == UTC_US
        assert table.schema.field("decimalField").type == pa.decimal128(10, 5)


@pytest.mark.parametrize("name", ["morparquet_v6_complexkeygen_hivestyle", "morparquet_v6_nonpartitioned"])
def test_spark_schemas_with_maps_and_fixed_decimals_round_trip_as_avro_blocks(
    hudi_table_zip, name: str
) -> None:
    # The Spark schemas use fixed decimals, maps of records, arrays of nullable records and nested
    # records: re-encode the parquet block's rows as an Avro block and decode them both ways.
    for log_path in _logs(hudi_table_zip(name)):
        for block in read_log_blocks(log_path):
            rows = decode_parquet_block(block)
            assert polars_can_decode(block.schema)
            again = _only_block(avro_data_block(rows, block.schema, block.instant_time))
            fast = decode_avro_data_block(again)
            assert fast.equals(rows)
            assert fast.equals(decode_avro_data_block_fastavro(again))
            assert fast.column("mapField").type == rows.column("mapField").type


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------


def test_block_framing_follows_the_spec() -> None:
    data = encode_block(BlockType.COMMAND, {HeaderKey.INSTANT_TIME: T2}, b"xyz")
    (length,) = struct.unpack(">q", data[6:14])
    assert data[:6] == b"#HUDI#" and len(data) == 14 + length
    assert struct.unpack(">ii", data[14:22]) == (1, 0)
    assert struct.unpack(">iii", data[22:34]) == (1, 0, len(T2))
    assert data[-12:-8] == b"\x00\x00\x00\x00"  # empty footer
    assert struct.unpack(">q", data[-8:])[0] == len(data) - 8
    block = _only_block(data)
    assert (block.content, block.offset, block.size, block.instant_time) == (b"xyz", 0, len(data), T2)
    assert block.schema is None and not block.is_rollback


def test_append_blocks_creates_then_appends_and_reports_offsets(tmp_path: Path) -> None:
    path = tmp_path / ".f1_20240101000000001.log.1_0-1-0"
    one = rollback_command_block(T2, T1)
    two = rollback_command_block(T3, T2)
    assert append_blocks(path, [one]) == (0, len(one))
    assert append_blocks(path, [two, one]) == (len(one), 2 * len(one) + len(two))
    blocks = read_log_blocks(path)
    assert [b.target_instant_time for b in blocks] == [T1, T2, T1]
    assert [b.offset for b in blocks] == [0, len(one), len(one) + len(two)]


def test_missing_log_file_is_a_lake_error(tmp_path: Path) -> None:
    with pytest.raises(CorruptLogBlockError, match="nope.log") as info:
        read_log_blocks(tmp_path / "nope.log")
    assert isinstance(info.value, LakeError)


def _three_blocks() -> list[bytes]:
    table = _with_meta(pa.table({"id": ["a", "b"], "ts": pa.array([1, 2], pa.int64())}))
    schema = _schema_of(table)
    return [
        avro_data_block(table, schema, T1),
        delete_block([DeleteRecord("key0", "p", 7, "long")], T2, schema),
        rollback_command_block(T3, T1),
    ]


def test_truncated_trailing_block_is_dropped_with_a_warning(tmp_path: Path, caplog) -> None:
    first, second, third = _three_blocks()
    path = tmp_path / ".f_1.log.1_0-0-0"
    for cut in (5, 20, len(third) // 2, len(third) - 1):  # inside the magic, header, body, pointer
        path.write_bytes(first + second + third[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            blocks = read_log_blocks(path)
        assert [b.block_type for b in blocks] == [BlockType.AVRO_DATA, BlockType.DELETE]
        assert str(path) in caplog.text and str(len(first) + len(second)) in caplog.text


@pytest.mark.parametrize(
    ("where", "what"),
    [
        (6, "length"),  # the block length
        (14, "version"),  # format version
        (18, "type"),  # block type 0xFF..
        (26, "header key"),  # first header key ordinal
        (-1, "reverse pointer"),
        (0, "magic"),
    ],
)
def test_corrupt_middle_block_is_skipped_and_later_blocks_survive(
    tmp_path: Path, caplog, where: int, what: str
) -> None:
    first, second, third = _three_blocks()
    damaged = bytearray(second)
    damaged[where] ^= 0x7F
    path = tmp_path / ".f_1.log.1_0-0-0"
    path.write_bytes(first + bytes(damaged) + third)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        blocks = read_log_blocks(path)
    assert [b.block_type for b in blocks] == [BlockType.AVRO_DATA, BlockType.COMMAND], what
    assert blocks[1].offset == len(first) + len(second)
    assert str(path) in caplog.text and f"offset {len(first)}" in caplog.text


def test_garbage_before_and_between_blocks_is_skipped(caplog) -> None:
    first, second, _ = _three_blocks()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        blocks = parse_log_bytes(b"junk" + first + b"#HUDI#\x00\x00" + second, "mem.log")
    assert [(b.block_type, b.offset) for b in blocks] == [
        (BlockType.AVRO_DATA, 4),
        (BlockType.DELETE, 4 + len(first) + 8),
    ]
    assert "mem.log" in caplog.text
    assert parse_log_bytes(b"", "empty") == []


# --------------------------------------------------------------------------------------------
# AVRO_DATA round trips
# --------------------------------------------------------------------------------------------


def _all_types_table(with_maps: bool) -> pa.Table:
    point = pa.struct([pa.field("x", pa.float64(), False), pa.field("label", pa.string())])
    columns: dict[str, pa.Array] = {
        "b": pa.array([True, None, False], pa.bool_()),
        "i8": pa.array([-128, None, 127], pa.int8()),
        "i16": pa.array([-32768, 7, None], pa.int16()),
        "i32": pa.array([-(2**31), 0, 2**31 - 1], pa.int32()),
        "i64": pa.array([-(2**63), None, 2**63 - 1], pa.int64()),
        "f32": pa.array([1.5, None, -0.0], pa.float32()),
        "f64": pa.array([float("inf"), 1e-300, None], pa.float64()),
        "s": pa.array(["", "héllo ✓", None], pa.string()),
        "ls": pa.array(["x" * 1000, None, "z"], pa.large_string()),
        "raw": pa.array([b"", b"\x00\xff", None], pa.binary()),
        "fx": pa.array([b"abcd", None, b"\x00\x00\x00\x00"], pa.binary(4)),
        "day": pa.array([dt.date(1, 1, 1), dt.date(2024, 2, 29), None], pa.date32()),
        "ms": pa.array([0, -86_400_000, None], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        "us": pa.array(
            [
                dt.datetime(2024, 1, 1, 12, 30, 1, 123456, tzinfo=UTC),
                None,
                dt.datetime(1900, 1, 1, tzinfo=UTC),
            ],
            UTC_US,
        ),
        "naive": pa.array([dt.datetime(2024, 1, 1, 1), None, dt.datetime(2262, 1, 1)], pa.timestamp("us")),
        "dec": pa.array(
            [decimal.Decimal("-12345.67890"), None, decimal.Decimal("0.00001")], pa.decimal128(10, 5)
        ),
        "dec38": pa.array(
            [decimal.Decimal("9" * 28 + "." + "9" * 10), decimal.Decimal(0), None], pa.decimal128(38, 10)
        ),
        "tags": pa.array([["a", None], [], None], pa.list_(pa.string())),
        "matrix": pa.array([[[1, 2], [], None], None, [[None]]], pa.list_(pa.list_(pa.int64()))),
        "point": pa.array([{"x": 1.0, "label": "a"}, None, {"x": -2.5, "label": None}], point),
        "points": pa.array([[{"x": 1.0, "label": None}], [None], None], pa.list_(point)),
        "deep": pa.array(
            [
                {"inner": {"when": dt.datetime(2020, 1, 1, tzinfo=UTC), "d": decimal.Decimal("1.50")}},
                {"inner": None},
                None,
            ],
            pa.struct(
                [pa.field("inner", pa.struct([pa.field("when", UTC_US), pa.field("d", pa.decimal128(5, 2))]))]
            ),
        ),
    }
    if with_maps:
        columns["attrs"] = pa.array([[("a", 1), ("b", None)], [], None], pa.map_(pa.string(), pa.int64()))
        columns["by_name"] = pa.array(
            [[("p", {"x": 3.0, "label": "q"})], None, [("n", None)]], pa.map_(pa.string(), point)
        )
    schema = pa.schema([pa.field(k, v.type) for k, v in columns.items()])
    return _with_meta(pa.table(columns, schema=schema))


@pytest.mark.parametrize("with_maps", [False, True], ids=["no-maps", "maps"])
def test_every_supported_type_round_trips_through_a_data_block(with_maps: bool) -> None:
    table = _all_types_table(with_maps)
    schema = _schema_of(table)
    assert polars_can_decode(schema)  # maps are read as arrays of entries
    fast, slow = _round_trip(table)
    expected = table.cast(avro_to_arrow(schema))
    assert fast.schema == slow.schema == expected.schema
    assert fast.equals(slow)
    assert fast.equals(expected)
    assert fast.column("naive").type == UTC_US  # naive input comes back as UTC, like hudi-rs
    assert fast.to_pylist() == expected.to_pylist()


def test_empty_and_large_blocks_decode() -> None:
    empty = _with_meta(pa.table({"v": pa.array([], pa.int64())}))
    fast, slow = _round_trip(empty)
    assert fast.num_rows == 0 and fast.schema == slow.schema == avro_to_arrow(_schema_of(empty))
    big = _with_meta(
        pa.table({"v": pa.array(range(20_000), pa.int64()), "s": [str(i) * 3 for i in range(20_000)]})
    )
    fast, slow = _round_trip(big)
    assert fast.equals(slow) and fast.column("v").to_pylist() == list(range(20_000))


@pytest.mark.parametrize(
    ("avro_type", "polars"),
    [
        ("long", True),
        (["long", "null"], True),
        (["null", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 2}], True),
        ({"type": "bytes", "logicalType": "decimal", "precision": 39, "scale": 2}, False),
        ({"type": "fixed", "name": "h", "size": 3}, True),
        ({"type": "long", "logicalType": "timestamp-micros"}, True),
        ({"type": "long", "logicalType": "timestamp-nanos"}, False),
        ({"type": "string", "logicalType": "uuid"}, True),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, False),
        ({"type": "map", "values": "long"}, True),
        ({"type": "array", "items": {"type": "map", "values": ["null", "long"]}}, True),
        ({"type": "map", "values": {"type": "enum", "name": "E", "symbols": ["A"]}}, False),
        ({"type": "array", "items": "NamedElsewhere"}, False),
        (["null", "long", "string"], False),
        (["long"], False),
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "string"]}]}, True),
    ],
)
def test_polars_path_is_chosen_from_the_schema(avro_type: object, polars: bool) -> None:
    schema = with_meta_fields({"type": "record", "name": "r", "fields": [{"name": "f", "type": avro_type}]})
    assert polars_can_decode(schema) is polars


def test_enum_and_uuid_columns_decode_as_strings() -> None:
    schema = with_meta_fields(
        {
            "type": "record",
            "name": "r",
            "fields": [
                {"name": "e", "type": ["null", {"type": "enum", "name": "E", "symbols": ["RED", "BLUE"]}]},
                {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            ],
        }
    )
    table = _with_meta(pa.table({"e": ["BLUE", None], "u": ["0b6b3e6e-6b0a-4b8e-9f0e-6b0a4b8e9f0e", "x"]}))
    block = _only_block(avro_data_block(table, schema, T1))
    decoded = decode_avro_data_block(block)
    assert decoded.column("e").to_pylist() == ["BLUE", None]
    assert decoded.column("u").to_pylist() == ["0b6b3e6e-6b0a-4b8e-9f0e-6b0a4b8e9f0e", "x"]
    assert decoded.equals(decode_avro_data_block_fastavro(block))


def test_record_lengths_that_do_not_match_the_data_are_reported(caplog) -> None:
    table = _with_meta(pa.table({"v": pa.array([1, 2], pa.int64())}))
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    content = bytearray(block.content)
    (first_len,) = struct.unpack_from(">i", content, 8)
    struct.pack_into(">i", content, 8, first_len + 1)  # lie about the first record's size
    bad = _only_block(encode_block(BlockType.AVRO_DATA, block.header, bytes(content)))
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(CorruptLogBlockError):
        decode_avro_data_block(bad)
    with pytest.raises(CorruptLogBlockError, match="offset 0"):
        decode_avro_data_block(
            _only_block(encode_block(BlockType.AVRO_DATA, block.header, b"\x00\x00\x00\x02"))
        )
    with pytest.raises(CorruptLogBlockError, match="version 2"):
        decode_avro_data_block(
            _only_block(encode_block(BlockType.AVRO_DATA, block.header, b"\x00\x00\x00\x02" * 2))
        )
    with pytest.raises(CorruptLogBlockError, match="DELETE"):
        decode_delete_block(block)


_COLUMN_KINDS: dict[str, tuple[pa.DataType, st.SearchStrategy]] = {
    "bool": (pa.bool_(), st.booleans()),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "string": (pa.string(), st.text(max_size=12)),
    "binary": (pa.binary(), st.binary(max_size=12)),
    "date": (pa.date32(), st.dates()),
    "ts_us": (UTC_US, st.datetimes(timezones=st.just(UTC))),
    "ts_ms": (pa.timestamp("ms", tz="UTC"), st.integers(-(2**45), 2**45)),
    "decimal": (pa.decimal128(12, 3), st.decimals(min_value=-(10**8), max_value=10**8, places=3)),
    "list": (pa.list_(pa.int64()), st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=3)),
    "struct": (
        pa.struct([pa.field("a", pa.string()), pa.field("n", pa.int32())]),
        st.fixed_dictionaries({"a": st.one_of(st.none(), st.text(max_size=4)), "n": st.integers(-9, 9)}),
    ),
    "map": (
        pa.map_(pa.string(), pa.float64()),
        st.dictionaries(st.text(max_size=3), st.floats(allow_nan=False), max_size=3),
    ),
}


@st.composite
def _random_tables(draw: st.DrawFn) -> pa.Table:
    kinds = draw(st.lists(st.sampled_from(sorted(_COLUMN_KINDS)), min_size=1, max_size=6))
    rows = draw(st.integers(0, 25))
    columns = {}
    for i, kind in enumerate(kinds):
        arrow_type, values = _COLUMN_KINDS[kind]
        nullable = draw(st.booleans())
        cells = draw(
            st.lists(st.one_of(st.none(), values) if nullable else values, min_size=rows, max_size=rows)
        )
        if kind == "ts_ms":
            column = pa.array(cells, pa.int64()).cast(arrow_type)
        elif kind == "map":
            column = pa.array([None if c is None else list(c.items()) for c in cells], arrow_type)
        else:
            column = pa.array(cells, arrow_type)
        columns[f"c{i}_{kind}"] = (column, nullable)
    schema = pa.schema([pa.field(n, c.type, nullable) for n, (c, nullable) in columns.items()])
    return _with_meta(pa.table([c for c, _ in columns.values()], schema=schema))


@settings(derandomize=True, deadline=None, max_examples=60)
@given(_random_tables())
def test_random_tables_round_trip_and_both_decoders_agree(table: pa.Table) -> None:
    fast, slow = _round_trip(table)
    assert fast.equals(slow)
    assert fast.equals(table.cast(avro_to_arrow(_schema_of(table))))


# --------------------------------------------------------------------------------------------
# Encoder argument errors
# --------------------------------------------------------------------------------------------


def _base() -> tuple[pa.Table, dict]:
    table = _with_meta(pa.table({"id": ["a"], "ts": pa.array([1], pa.int64())}))
    return table, _schema_of(table)


def test_data_block_rejects_tables_that_do_not_fit_the_schema() -> None:
    table, schema = _base()
    with pytest.raises(SchemaError, match="'ts'.*missing"):
        avro_data_block(table.drop_columns(["ts"]), schema, T1)
    with pytest.raises(SchemaError, match="extra"):
        avro_data_block(table.append_column("extra", pa.array([1])), schema, T1)
    with pytest.raises(SchemaError, match="'ts'.*string"):
        avro_data_block(table.set_column(6, "ts", pa.array(["12"])), schema, T1)
    narrow = dict(schema, fields=[*schema["fields"][:6], {"name": "ts", "type": "int"}])
    with pytest.raises(SchemaError, match="'ts'"):  # 2**40 does not fit an Avro int
        avro_data_block(table.set_column(6, "ts", pa.array([2**40], pa.int64())), narrow, T1)
    nulls = table.set_column(2, "_hoodie_record_key", pa.array([None], pa.string()))
    with pytest.raises(SchemaError, match="_hoodie_record_key"):
        avro_data_block(nulls, schema, T1)
    required = dict(
        schema, fields=[*schema["fields"][:5], {"name": "id", "type": "string"}, schema["fields"][6]]
    )
    with pytest.raises(SchemaError, match="'id'.*not nullable"):
        avro_data_block(table.set_column(5, "id", pa.array([None], pa.string())), required, T1)
    no_meta = arrow_to_avro(table.drop_columns(list(META_FIELDS)).schema, "t", "ns")
    with pytest.raises(SchemaError, match="meta fields"):
        avro_data_block(table.drop_columns(list(META_FIELDS)), no_meta, T1)
    with pytest.raises(SchemaError, match="meta fields"):
        delete_block([], T1, no_meta)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (DeleteRecord("k", "p", 2**31, "int"), "2147483648"),
        (DeleteRecord("k", "p", "5", "long"), "'5'"),
        (DeleteRecord("k", "p", True, "long"), "True"),
        (DeleteRecord("k", "p", 5, "varchar"), "varchar"),
        (DeleteRecord("k", "p", 5, None), "ordering_type"),
        (DeleteRecord("k", "p", decimal.Decimal("1e-16"), "decimal"), "decimal places"),
        (DeleteRecord("k", "p", 1.5, "string"), "1.5"),
    ],
)
def test_bad_delete_ordering_values_raise_schema_error(record: DeleteRecord, message: str) -> None:
    _, schema = _base()
    with pytest.raises(SchemaError, match=message):
        delete_block([record], T1, schema)


# --------------------------------------------------------------------------------------------
# DELETE blocks
# --------------------------------------------------------------------------------------------

ORDERING_SAMPLES: list[tuple[str | None, object, bytes]] = [
    (None, None, b"\x00"),
    ("int", -3, b"\x02\x05"),
    ("long", 0, b"\x04\x00"),
    ("long", 2**63 - 1, b"\x04" + b"\xfe" + b"\xff" * 8 + b"\x01"),
    ("float", 1.5, b"\x06" + struct.pack("<f", 1.5)),
    ("double", -2.25, b"\x08" + struct.pack("<d", -2.25)),
    ("bytes", b"\x01\x02", b"\x0a\x04\x01\x02"),
    ("string", "ü", b"\x0c\x04\xc3\xbc"),
    ("decimal", decimal.Decimal("1.000000000000000"), b"\x0e\x0e" + (10**15).to_bytes(7, "big", signed=True)),
    ("date", dt.date(1970, 1, 2), b"\x10\x02"),
    ("time-millis", dt.time(0, 0, 1), b"\x12" + bytes([0xD0, 0x0F])),
    ("time-micros", dt.time(0, 0, 0, 1), b"\x14\x02"),
    ("timestamp-millis", dt.datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=UTC), b"\x16\x02"),
    ("timestamp-micros", dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), b"\x18\x01"),
]


@pytest.mark.parametrize(("kind", "value", "encoded"), ORDERING_SAMPLES, ids=lambda x: str(x)[:20])
def test_every_ordering_branch_encodes_at_its_union_index(
    kind: str | None, value: object, encoded: bytes
) -> None:
    record = DeleteRecord("k", "p", value, kind)
    content = encode_delete_content([record])
    # version 3, payload length, count 1, "k", "p", orderingVal, end of array
    assert content[:4] == b"\x00\x00\x00\x03"
    assert content[8:] == b"\x02" + b"\x02\x02k" + b"\x02\x02p" + encoded + b"\x00"
    _, schema = _base()
    (decoded,) = decode_delete_block(_only_block(delete_block([record], T1, schema)))
    assert decoded == record


def test_delete_ordering_accepts_raw_integers_for_temporal_types() -> None:
    cases = [
        ("date", 1, dt.date(1970, 1, 2)),
        ("timestamp-micros", 1_000_000, dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
    ]
    _, schema = _base()
    for kind, raw, natural in cases:
        (decoded,) = decode_delete_block(
            _only_block(delete_block([DeleteRecord("k", "p", raw, kind)], T1, schema))
        )
        assert decoded.ordering_value == natural
    naive = DeleteRecord("k", "p", dt.datetime(2024, 1, 1), "timestamp-millis")
    (decoded,) = decode_delete_block(_only_block(delete_block([naive], T1, schema)))
    assert decoded.ordering_value == dt.datetime(2024, 1, 1, tzinfo=UTC)


def test_delete_block_with_many_entries_and_empty_block() -> None:
    _, schema = _base()
    records = [DeleteRecord(f"k{i}", f"p/{i % 3}", i, "long") for i in range(300)]
    assert decode_delete_block(_only_block(delete_block(records, T1, schema))) == records
    assert decode_delete_block(_only_block(delete_block([], T1, schema))) == []


def test_delete_array_in_negative_count_blocks_decodes() -> None:
    # Avro allows array blocks with a negative count followed by their byte size.
    item = b"\x02\x02a\x02\x02p\x04\x00"
    payload = b"\x01" + bytes([len(item)]) + item + b"\x02" + item.replace(b"a", b"b") + b"\x00"
    content = struct.pack(">ii", 3, len(payload)) + payload
    block = _only_block(encode_block(BlockType.DELETE, {HeaderKey.INSTANT_TIME: T1}, content))
    assert [r.record_key for r in decode_delete_block(block)] == ["a", "b"]


@pytest.mark.parametrize(
    ("arrow_type", "kind"),
    [
        (pa.int8(), "int"),
        (pa.int32(), "int"),
        (pa.int64(), "long"),
        (pa.float32(), "float"),
        (pa.float64(), "double"),
        (pa.string(), "string"),
        (pa.large_string(), "string"),
        (pa.binary(), "bytes"),
        (pa.decimal128(10, 2), "decimal"),
        (pa.date32(), "date"),
        (pa.time32("ms"), "time-millis"),
        (pa.time64("us"), "time-micros"),
        (pa.timestamp("ms", tz="UTC"), "timestamp-millis"),
        (pa.timestamp("us"), "timestamp-micros"),
    ],
)
def test_ordering_type_for_arrow_types(arrow_type: pa.DataType, kind: str) -> None:
    assert ordering_type_for(arrow_type) == kind


def test_ordering_type_for_unsupported_type() -> None:
    with pytest.raises(SchemaError, match="bool"):
        ordering_type_for(pa.bool_())


# --------------------------------------------------------------------------------------------
# hudi-rs reads what we write
# --------------------------------------------------------------------------------------------


def _hudi_rows(table_dir: Path) -> list[dict]:
    hudi = pytest.importorskip("hudi")
    batches = hudi.HudiTableBuilder.from_base_uri(str(table_dir.resolve())).build().read()
    rows = pa.Table.from_batches(batches).to_pylist()
    return sorted(rows, key=lambda r: r["_hoodie_record_key"])


def test_hudi_rs_reads_our_re_encoded_log_and_appended_blocks(hudi_table_zip) -> None:
    table_dir = hudi_table_zip("moravro_v6_trips_8i1u")
    (log_path,) = _logs(table_dir)
    before = _hudi_rows(table_dir)
    assert len(before) == 8

    # 1. Replace Spark's log with our own encoding of the decoded block: same snapshot.
    (block,) = read_log_blocks(log_path)
    decoded = decode_avro_data_block(block)
    instant = block.instant_time
    assert instant is not None
    log_path.unlink()
    append_blocks(log_path, [avro_data_block(decoded, block.schema, instant)])
    assert _hudi_rows(table_dir) == before

    # 2. Append an update of rider-C and a delete of rider-A (committed instant, commit-time merge).
    by_rider = {r["rider"]: r for r in before}
    update = dict(by_rider["rider-C"], rider="rider-C2", fare=99.5, _hoodie_commit_seqno=f"{instant}_0_2")
    update["_hoodie_file_name"] = decoded.column("_hoodie_file_name")[0].as_py()
    update_table = pa.Table.from_pylist([update], schema=decoded.schema)
    gone = by_rider["rider-A"]
    blocks = [
        avro_data_block(update_table, block.schema, instant),
        delete_block([DeleteRecord(gone["_hoodie_record_key"], SF, 0, "long")], instant, block.schema),
    ]
    shutil.copy(log_path, log_path.with_name(log_path.name + ".bak"))  # unrelated file: ignored by hudi-rs
    append_blocks(log_path, blocks)
    after = {r["_hoodie_record_key"]: r for r in _hudi_rows(table_dir)}
    assert len(after) == 7 and gone["_hoodie_record_key"] not in after
    changed = after[by_rider["rider-C"]["_hoodie_record_key"]]
    assert (changed["rider"], changed["fare"]) == ("rider-C2", 99.5)


# --------------------------------------------------------------------------------------------
# Record keys alone (the write's key lookup in log files)
# --------------------------------------------------------------------------------------------


def _keyed(keys: list[str]) -> pa.Table:
    rows = _with_meta(pa.table({"v": pa.array(range(len(keys)), pa.int64())}))
    return rows.set_column(2, "_hoodie_record_key", pa.array(keys, pa.string()))


def _plain_meta_types(schema: dict) -> dict:
    """The schema with its meta fields typed "string" (not a union with null)."""
    fields = [
        {"name": f["name"], "type": "string"} if f["name"] in META_FIELDS else f for f in schema["fields"]
    ]
    return dict(schema, fields=fields)


def _key_first(schema: dict) -> dict:
    """The schema with the record key field moved first: not Hudi's meta field order."""
    fields = list(schema["fields"])
    key = next(f for f in fields if f["name"] == "_hoodie_record_key")
    return dict(schema, fields=[key] + [f for f in fields if f is not key])


def test_record_keys_of_avro_blocks_are_the_keys_a_full_decode_reads() -> None:
    """Keys short and long (a length over one varint byte is walked record by record), non-ASCII,
    an empty block among others, meta fields typed plain string, and a schema whose fields are not
    in Hudi's order (decoded whole): the same keys, in order, as decoding every field."""
    short = _keyed([f"k{i}" for i in range(5)])
    long = _keyed(["x" * 70, "é€😀" * 5, "k"])
    empty = _keyed([])
    schema = _schema_of(short)
    tables_and_schemas = [
        (short, schema),
        (empty, schema),
        (long, schema),
        (short, _plain_meta_types(schema)),
        (short.select([2, 0, 1, 3, 4, 5]), _key_first(schema)),
        (long, schema),
    ]
    blocks = [_only_block(avro_data_block(t, s, T1)) for t, s in tables_and_schemas]
    expected = [decode_avro_data_block(b).column("_hoodie_record_key").to_pylist() for b in blocks]
    assert [k.to_pylist() for k in avro_blocks_record_keys(blocks)] == expected
    assert [avro_block_record_keys(b).to_pylist() for b in blocks] == expected
    assert expected[2] == ["x" * 70, "é€😀" * 5, "k"]


def test_record_keys_of_a_damaged_avro_block_are_refused_naming_it() -> None:
    block = avro_data_block(_keyed(["key0", "key1"]), _schema_of(_keyed(["a"])), T1)
    bad_utf8 = _only_block(block.replace(b"key1", b"\xff\xfe\xfd\xfc"))
    with pytest.raises(CorruptLogBlockError, match="mem offset 0: a record key is not UTF-8"):
        avro_blocks_record_keys([_only_block(block), bad_utf8])
    parsed = _only_block(block)
    content = bytearray(parsed.content)
    # The first record's commit time (content: version, count, record length, then the datum: the
    # union index at 12, the string length at 13) said to be 8,191 bytes long, past its record.
    content[13:15] = b"\xfe\x7f"
    damaged = LogBlock(parsed.block_type, parsed.header, parsed.footer, bytes(content), 0, 0, "mem")
    with pytest.raises(CorruptLogBlockError, match="mem offset 0: record 0 has a meta field running past it"):
        avro_blocks_record_keys([damaged])


def test_record_keys_of_many_blocks_walked_side_by_side_are_the_decoded_keys() -> None:
    """80 blocks (walked side by side, one numpy step per record, until fewer than 64 have records
    left, then one by one) of 0 to 9 records, keys of 2 to 73 bytes: the keys a full decode reads;
    a record length running past its block is refused naming the block and the record."""
    schema = _schema_of(_keyed(["a"]))
    tables = [_keyed([f"b{n}-" + "k" * (i * 7 % 70) + str(i) for i in range(n % 10)]) for n in range(80)]
    blocks = [_only_block(avro_data_block(t, schema, T1)) for t in tables]
    expected = [decode_avro_data_block(b).column("_hoodie_record_key").to_pylist() for b in blocks]
    assert [k.to_pylist() for k in avro_blocks_record_keys(blocks)] == expected
    damaged = blocks[9]  # 9 records: the first (walked side by side) or third (one by one) broken
    for record in (0, 2):
        content = bytearray(damaged.content)
        at = 8
        for _ in range(record):
            at += 4 + struct.unpack_from(">i", content, at)[0]
        content[at : at + 4] = struct.pack(">i", len(content))  # runs past the block
        broken = LogBlock(damaged.block_type, damaged.header, damaged.footer, bytes(content), 0, 0, "mem")
        with pytest.raises(
            CorruptLogBlockError, match=rf"^mem offset 0: record {record} of {len(content)} bytes runs past"
        ):
            avro_blocks_record_keys([*blocks[:9], broken, *blocks[10:]])
