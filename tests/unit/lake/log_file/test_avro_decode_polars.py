"""The polars fast path of AVRO_DATA blocks (its container in a mapping of its own, issue 31) gives
exactly fastavro's rows and types, on the records Spark wrote in the logs of the test tables (v6, v8
and v9: nulls, nested records, arrays; one block each and many to a block) and on our own writes
(every type, maps included); a block whose lengths lie falls back to the record by record decode."""

from __future__ import annotations

import logging
import struct

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import CorruptLogBlockError
from airflow_lake_provider.lake.format.avro_schema import avro_to_arrow
from airflow_lake_provider.lake.log_file.avro_decode import (
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


def _assert_decodes_alike(block: LogBlock) -> None:
    expected = decode_avro_data_block_fastavro(block)
    got = decode_avro_data_block_polars(block)
    assert got is not None
    assert got.schema == expected.schema == avro_to_arrow(block.schema)
    assert got.equals(expected), block.location


def _spark_records_block(blocks: list[LogBlock], copies: int) -> LogBlock:
    """One block of the Spark-written records of ``blocks`` (one schema), ``copies`` times over:
    the records' bytes as Spark wrote them, many to a block."""
    records = [block.content[8:] for block in blocks]
    counts = [struct.unpack_from(">i", block.content, 4)[0] for block in blocks]
    content = struct.pack(">ii", 3, sum(counts) * copies) + b"".join(records) * copies
    return _only_block(encode_block(BlockType.AVRO_DATA, blocks[0].header, content))


@pytest.mark.parametrize("name", SPARK_AVRO_TABLES)
def test_spark_written_avro_records_decode_alike(hudi_table_zip, name: str) -> None:
    by_schema: dict[str, list[LogBlock]] = {}
    for log_path in _logs(hudi_table_zip(name)):
        for block in read_log_blocks(log_path):
            if block.block_type is BlockType.AVRO_DATA:
                assert polars_can_decode(block.schema)
                _assert_decodes_alike(block)
                by_schema.setdefault(block.header[HeaderKey.SCHEMA], []).append(block)
    assert by_schema
    for blocks in by_schema.values():
        many = _spark_records_block(blocks, copies=7)
        _assert_decodes_alike(many)
        rows = pa.concat_tables([decode_avro_data_block_fastavro(b) for b in blocks] * 7)
        assert decode_avro_data_block_polars(many).equals(rows)


@pytest.mark.parametrize("with_maps", [False, True], ids=["no-maps", "maps"])
def test_our_blocks_of_every_type_decode_alike(with_maps: bool) -> None:
    one = _all_types_table(with_maps)  # nulls, nested records, lists, maps, decimals, timestamps
    table = pa.concat_tables([one] * 200)
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    _assert_decodes_alike(block)
    assert decode_avro_data_block_polars(block).equals(table.cast(avro_to_arrow(block.schema)))


def test_a_block_whose_lengths_lie_falls_back_to_the_record_by_record_decode(caplog) -> None:
    # Record 1 claims record 2 as well: the lengths do not tile the block; polars hands over to the
    # record by record decode, which names the record.
    table = _with_meta(pa.table({"v": pa.array([10, 20, 30, 40], pa.int64())}))
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    content = bytearray(block.content)
    (first,) = struct.unpack_from(">i", content, 8)
    (second,) = struct.unpack_from(">i", content, 12 + first)
    struct.pack_into(">i", content, 8, first + 4 + second)
    lying = _only_block(encode_block(BlockType.AVRO_DATA, block.header, bytes(content)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert decode_avro_data_block_polars(lying) is None
    assert "do not tile" in caplog.text
    with pytest.raises(CorruptLogBlockError, match="record 0 declared"):
        decode_avro_data_block(lying)


@pytest.mark.parametrize("cut", [1, 7, 20])
def test_a_block_cut_short_is_a_corrupt_block_naming_it(cut: int) -> None:
    """polars fails on records cut short; the record by record decode then names the record: a
    CorruptLogBlockError, which the reader logs and skips as any corrupt block, not an exception
    outside LakeError."""
    table = _with_meta(pa.table({"v": pa.array([f"s{i}" * 5 for i in range(10)], pa.string())}))
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    cut_short = _only_block(encode_block(BlockType.AVRO_DATA, block.header, block.content[:-cut]))
    with pytest.raises(CorruptLogBlockError, match=f"^{cut_short.location}: record 9 of 69 bytes runs past"):
        decode_avro_data_block(cut_short)


@pytest.mark.parametrize("cut", [1, 7, 20, "count"])
def test_a_block_cut_short_prints_no_rust_panic(capfd, cut: int | str) -> None:  # noqa: ANN001
    """Records cut short, or a header counting one record more than the block holds: polars read
    past the end of its buffer and panicked, and Rust's panic hook printed the panic (a backtrace
    under RUST_BACKTRACE) to stderr, above `lake read`'s one `lake: error:` line. Read into bytes
    that do not decode, it fails as an error, printing nothing."""
    table = _with_meta(pa.table({"v": pa.array([f"s{i}" * 5 for i in range(10)], pa.string())}))
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    content = bytearray(block.content)
    if cut == "count":
        struct.pack_into(">i", content, 4, 11)
    else:
        del content[-cut:]
    short = _only_block(encode_block(BlockType.AVRO_DATA, block.header, bytes(content)))
    capfd.readouterr()
    with pytest.raises(CorruptLogBlockError) as raised:
        decode_avro_data_block(short)
    last = "record 10 length" if cut == "count" else "record 9 of 69 bytes"
    assert str(raised.value) == f"{short.location}: {last} runs past the block"
    assert capfd.readouterr().err == ""


def test_bytes_after_a_blocks_records_are_ignored_as_hudi_reads_them() -> None:
    # Hudi's readers read the records the header counts and no further (the record by record
    # decode too); the fast path's sentinel record after them finds the extra bytes and hands over.
    table = _with_meta(pa.table({"v": pa.array([f"s{i}" * 5 for i in range(10)], pa.string())}))
    block = _only_block(avro_data_block(table, _schema_of(table), T1))
    padded = _only_block(encode_block(BlockType.AVRO_DATA, block.header, block.content + b"\x07junk"))
    assert decode_avro_data_block_polars(padded) is None
    assert decode_avro_data_block(padded).equals(decode_avro_data_block(block))
