"""Hudi log files: real Spark-written blocks decode, ours round-trip, damage is skipped, not fatal."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_lake_provider.lake import log_format
from airflow_lake_provider.lake.avro_schema import (
    arrow_to_avro,
    avro_to_arrow,
    meta_arrow_fields,
    with_meta_fields,
)
from airflow_lake_provider.lake.errors import SchemaError
from airflow_lake_provider.lake.log_format import BlockType, DeleteRecord

T1, T2 = "20240101000000001", "20240101000100002"


def _logs(table_dir: Path) -> list[Path]:
    return sorted(p for p in table_dir.rglob(".*.log.*"))


def test_real_avro_log_holds_a_data_block_and_a_spark_delete_block(hudi_table_zip) -> None:
    (log_path,) = _logs(hudi_table_zip("moravro_v6_trips_8i3d"))
    blocks = log_format.read_log_blocks(log_path)
    assert [b.block_type for b in blocks] == [BlockType.DELETE]
    deletes = log_format.decode_delete_block(blocks[0])
    assert len(deletes) == 3
    assert {d.ordering_value for d in deletes} == {0} and {d.ordering_type for d in deletes} == {"long"}
    assert all(d.partition_path == "city=san_francisco" for d in deletes)
    # Our encoder writes the very same content and headers (header order is free) for those entries.
    (again,) = log_format.parse_log_bytes(
        log_format.delete_block(deletes, blocks[0].instant_time, blocks[0].schema), "mem"
    )
    assert again.content == blocks[0].content and dict(again.header) == dict(blocks[0].header)
    assert again.size == blocks[0].size


def test_real_avro_data_block_decodes_to_the_updated_rider(hudi_table_zip) -> None:
    (log_path,) = _logs(hudi_table_zip("moravro_v6_trips_8i1u"))
    (block,) = log_format.read_log_blocks(log_path)
    assert block.block_type is BlockType.AVRO_DATA
    table = log_format.decode_avro_data_block(block)
    assert table.num_rows == 1
    assert table.column_names[:5] == [f.name for f in meta_arrow_fields()]
    assert table.column("_hoodie_commit_time").to_pylist() == [block.instant_time]
    assert table.equals(log_format.decode_avro_data_block_fastavro(block))


def test_real_rollback_table_has_a_rollback_block_and_parquet_blocks(hudi_table_zip) -> None:
    blocks = [
        b
        for p in _logs(hudi_table_zip("morparquet_v6_nonpartitioned_rollback"))
        for b in log_format.read_log_blocks(p)
    ]
    kinds = [b.block_type for b in blocks]
    assert kinds.count(BlockType.COMMAND) == 1 and kinds.count(BlockType.PARQUET_DATA) == 2
    (rollback,) = [b for b in blocks if b.is_rollback]
    assert rollback.target_instant_time == "20250126040826878"
    data = [log_format.decode_parquet_block(b) for b in blocks if b.block_type is BlockType.PARQUET_DATA]
    assert [t.num_rows for t in data] == [1, 1]


def _records(n: int) -> pa.Table:
    meta = {
        f.name: pa.array([f"{T1}-{f.name}-{i}" for i in range(n)], pa.string()) for f in meta_arrow_fields()
    }
    return pa.table(
        {
            **meta,
            "id": pa.array([f"k{i}" for i in range(n)], pa.string()),
            "ts": pa.array(range(n), pa.int64()),
            "qty": pa.array([i if i % 3 else None for i in range(n)], pa.int32()),
            "price": pa.array([i / 4 for i in range(n)], pa.float64()),
            "ok": pa.array([i % 2 == 0 for i in range(n)], pa.bool_()),
            "day": pa.array([dt.date(2024, 1, 1 + i % 28) for i in range(n)], pa.date32()),
            "at": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i) for i in range(n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "amount": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(10, 2)),
        }
    )


def test_avro_data_block_round_trips_and_both_decoders_agree() -> None:
    records = _records(500)
    schema = with_meta_fields(
        arrow_to_avro(
            records.drop_columns([f.name for f in meta_arrow_fields()]).schema, "t_record", "hoodie.t"
        )
    )
    (block,) = log_format.parse_log_bytes(log_format.avro_data_block(records, schema, T2), "mem")
    fast = log_format.decode_avro_data_block(block)
    slow = log_format.decode_avro_data_block_fastavro(block)
    assert fast.equals(slow)
    assert fast.to_pylist() == records.cast(fast.schema).to_pylist()


@settings(max_examples=30)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=8),
            st.one_of(st.none(), st.integers(-(2**62), 2**62)),
            st.floats(allow_nan=False),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_avro_data_block_round_trip_property(rows: list[tuple]) -> None:
    n = len(rows)
    meta = {f.name: pa.array([f"m{i}" for i in range(n)], pa.string()) for f in meta_arrow_fields()}
    data = pa.table(
        {
            **meta,
            "s": [r[0] for r in rows],
            "n": pa.array([r[1] for r in rows], pa.int64()),
            "f": [r[2] for r in rows],
        }
    )
    schema = with_meta_fields(arrow_to_avro(data.drop_columns(list(meta)).schema, "p_record", "hoodie.p"))
    (block,) = log_format.parse_log_bytes(log_format.avro_data_block(data, schema, T1), "mem")
    decoded = log_format.decode_avro_data_block(block)
    assert decoded.equals(log_format.decode_avro_data_block_fastavro(block))
    assert decoded.to_pylist() == data.cast(decoded.schema).to_pylist()


def _two_block_log(tmp_path: Path) -> tuple[Path, bytes, bytes]:
    records = _records(3)
    schema = with_meta_fields(
        arrow_to_avro(
            records.drop_columns([f.name for f in meta_arrow_fields()]).schema, "t_record", "hoodie.t"
        )
    )
    first = log_format.avro_data_block(records, schema, T1)
    second = log_format.delete_block([DeleteRecord("k1", "", 5, "long")], T2, schema)
    path = tmp_path / ".f1_20240101000000001.log.1_0-0-0"
    offset, size = log_format.append_blocks(path, [first, second])
    assert (offset, size) == (0, len(first) + len(second))
    return path, first, second


def test_truncated_trailing_block_is_skipped_with_a_warning(tmp_path: Path, caplog) -> None:
    path, first, second = _two_block_log(tmp_path)
    path.write_bytes(first + second[: len(second) // 2])  # a crash in the middle of an append
    with caplog.at_level(logging.WARNING):
        blocks = log_format.read_log_blocks(path)
    assert [b.block_type for b in blocks] == [BlockType.AVRO_DATA]
    assert str(path) in caplog.text


def test_corrupt_middle_block_is_skipped_and_later_blocks_still_read(tmp_path: Path, caplog) -> None:
    path, first, second = _two_block_log(tmp_path)
    damaged = bytearray(first)
    damaged[20] ^= 0xFF  # the block type / header region
    damaged[-3] ^= 0xFF  # and its reverse pointer
    path.write_bytes(bytes(damaged) + second)
    with caplog.at_level(logging.WARNING):
        blocks = log_format.read_log_blocks(path)
    assert [b.block_type for b in blocks] == [BlockType.DELETE]
    assert log_format.decode_delete_block(blocks[0]) == [DeleteRecord("k1", "", 5, "long")]
    assert "offset 0" in caplog.text


def test_rollback_command_block_round_trips() -> None:
    (block,) = log_format.parse_log_bytes(log_format.rollback_command_block(T2, T1), "mem")
    assert block.is_rollback and block.instant_time == T2 and block.target_instant_time == T1


def test_arrow_avro_schema_round_trip_keeps_types() -> None:
    schema = pa.schema(
        [
            pa.field("s", pa.string(), nullable=False),
            pa.field("l", pa.int64()),
            pa.field("d", pa.float64()),
            pa.field("b", pa.bool_()),
            pa.field("day", pa.date32()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("amount", pa.decimal128(10, 2)),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("attrs", pa.map_(pa.string(), pa.int64())),
            pa.field("nested", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.string())])),
        ]
    )
    avro = arrow_to_avro(schema, "r_record", "hoodie.r")
    assert avro_to_arrow(avro) == schema
    assert "local-timestamp" not in str(avro)


def test_unsupported_arrow_type_names_the_field() -> None:
    with pytest.raises(SchemaError, match="when"):
        arrow_to_avro(pa.schema([pa.field("when", pa.time64("us"))]), "r", "ns")
