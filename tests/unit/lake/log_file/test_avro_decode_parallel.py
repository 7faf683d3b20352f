"""A large AVRO_DATA block is decoded by polars as runs of records at once (issue 31: the decode was
on the critical path of a read): every split gives exactly the rows and types of the whole decode
and of fastavro, on the records Spark wrote in the logs of the test tables (v6, v8 and v9: nulls,
nested records, arrays) and on our own writes (every type, maps included); a block whose lengths
lie falls back as it did whole."""

from __future__ import annotations

import logging
import struct

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import CorruptLogBlockError
from airflow_lake_provider.lake.format.avro_schema import avro_to_arrow
from airflow_lake_provider.lake.log_file.avro_decode import (
    PARALLEL_DECODE_PARTS,
    PARALLEL_DECODE_RECORDS,
    _record_runs,
    decode_avro_data_block,
    decode_avro_data_block_fastavro,
    decode_avro_data_block_polars,
    polars_can_decode,
)
from airflow_lake_provider.lake.log_file.data_block import avro_data_block
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, LogBlock, encode_block
from tests.unit.lake.log_file.test_log_format import (
    LOGGER,
    T1,
    _all_types_table,
    _logs,
    _only_block,
    _schema_of,
    _with_meta,
    read_log_blocks,
)

# The test tables whose logs hold Avro data blocks: Spark wrote one record a block.
SPARK_AVRO_TABLES = [
    "moravro_v6_trips_8i1u",
    "mdt_basic_mor_avro_v8_nonpartitioned",
    "mor_avro_v9_lance_nonhivestyle",
    "mor_avro_v9_timebasedkeygen_nonhivestyle",
    "mor_avro_v9_txns_complex_meta",
    "mor_avro_v9_txns_complex_nometa",
    "mor_avro_v9_txns_nonpart_meta",
    "mor_avro_v9_txns_nonpart_nometa",
    "mor_avro_v9_txns_simple_meta",
    "mor_avro_v9_txns_simple_nometa",
]


def _assert_every_split_decodes_alike(block: LogBlock) -> None:
    """Decode ``block`` whole, in 2 and 3 runs and a run a record: all equal fastavro's table."""
    expected = decode_avro_data_block_fastavro(block)
    count = expected.num_rows
    for parts in sorted({1, 2, 3, count}):
        assert len(_record_runs(block.content, count, parts)) == min(parts, count)
        got = decode_avro_data_block_polars(block, parts)
        assert got is not None
        assert got.schema == expected.schema == avro_to_arrow(block.schema)
        assert got.equals(expected), f"{block.location}: split in {parts}"


def _spark_records_block(blocks: list[LogBlock], copies: int) -> LogBlock:
    """One block of the Spark-written records of ``blocks`` (one schema), ``copies`` times over:
    the records' bytes as Spark wrote them, many to a block."""
    records = [block.content[8:] for block in blocks]
    counts = [struct.unpack_from(">i", block.content, 4)[0] for block in blocks]
    content = struct.pack(">ii", 3, sum(counts) * copies) + b"".join(records) * copies
    return _only_block(encode_block(BlockType.AVRO_DATA, blocks[0].header, content))


@pytest.mark.parametrize("name", SPARK_AVRO_TABLES)
def test_spark_written_avro_records_decode_alike_in_runs(hudi_table_zip, name: str) -> None:
    by_schema: dict[str, list[LogBlock]] = {}
    for log_path in _logs(hudi_table_zip(name)):
        for block in read_log_blocks(log_path):
            if block.block_type is BlockType.AVRO_DATA:
                assert polars_can_decode(block.schema)
                _assert_every_split_decodes_alike(block)
                by_schema.setdefault(block.header[HeaderKey.SCHEMA], []).append(block)
    assert by_schema
    for blocks in by_schema.values():
        many = _spark_records_block(blocks, copies=7)
        _assert_every_split_decodes_alike(many)
        rows = pa.concat_tables([decode_avro_data_block_fastavro(b) for b in blocks] * 7)
        assert decode_avro_data_block_polars(many, 2).equals(rows)


@pytest.mark.parametrize("with_maps", [False, True], ids=["no-maps", "maps"])
def test_our_blocks_of_every_type_decode_alike_in_runs(with_maps: bool) -> None:
    one = _all_types_table(with_maps)  # nulls, nested records, lists, maps, decimals, timestamps
    table = pa.concat_tables([one] * 200)
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    _assert_every_split_decodes_alike(block)
    assert decode_avro_data_block_polars(block, 7).equals(table.cast(avro_to_arrow(block.schema)))


def test_a_large_block_is_decoded_in_runs_as_the_whole_block() -> None:
    n = PARALLEL_DECODE_RECORDS + 1
    table = _with_meta(
        pa.table(
            {
                "ts": pa.array(range(n), pa.int64()),
                "v": pa.array([None if i % 7 == 0 else f"v{i}" for i in range(n)], pa.string()),
            }
        )
    )
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    got = decode_avro_data_block(block)
    assert got.column("ts").num_chunks == PARALLEL_DECODE_PARTS  # decoded as runs, at once
    assert got.equals(decode_avro_data_block_polars(block, 1))
    assert got.equals(table.cast(avro_to_arrow(block.schema)))


def test_a_block_whose_lengths_lie_falls_back_in_runs_as_it_does_whole(caplog) -> None:
    # Record 1 claims record 2 as well: the split after two records lands after record 3, and the
    # lengths do not tile the block. Decoded whole or in runs, polars hands over to the record by
    # record decode, which names the record.
    table = _with_meta(pa.table({"v": pa.array([10, 20, 30, 40], pa.int64())}))
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    content = bytearray(block.content)
    (first,) = struct.unpack_from(">i", content, 8)
    (second,) = struct.unpack_from(">i", content, 12 + first)
    struct.pack_into(">i", content, 8, first + 4 + second)
    lying = _only_block(encode_block(BlockType.AVRO_DATA, block.header, bytes(content)))
    assert _record_runs(lying.content, 4, 2)[0][2] == 2
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert decode_avro_data_block_polars(lying, 1) is None
        assert decode_avro_data_block_polars(lying, 2) is None
    assert "do not tile" in caplog.text
    with pytest.raises(CorruptLogBlockError, match="record 0 declared"):
        decode_avro_data_block(lying)


def test_record_runs_cover_the_block_in_record_order() -> None:
    table = _with_meta(pa.table({"v": pa.array(range(10), pa.int64())}))
    content = _only_block(avro_data_block(table, _schema_of(table), T1)).content
    runs = _record_runs(content, 10, 3)
    assert [r[2] for r in runs] == [3, 3, 4]
    assert runs[0][0] == 8 and runs[-1][1] == len(content)
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:], strict=False))
    assert _record_runs(content, 10, 1) == [(8, len(content), 10)]
    assert _record_runs(content[:-3], 10, 3)[-1][1] == len(content) - 3  # cut short: found by the decode
    assert _record_runs(b"\x00" * 8 + b"\xff\xff\xff\xff", 2, 2) == [(8, 12, 2)]  # a negative length
