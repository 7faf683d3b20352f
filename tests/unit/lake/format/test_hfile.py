"""HFile v3 reader and writer: every HFile of the Hudi 1.x test tables decodes and is written again
byte for byte from its decoded content; the writer's own rules on inputs it never saw from Java."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from mdt_tables import MDT_TABLES, mdt_files

from airflow_lake_provider.lake.errors import CorruptDataFileError, WriteInputError
from airflow_lake_provider.lake.format.hfile import (
    Compression,
    Dialect,
    HFileContent,
    HFileSettings,
    read_hfile,
    write_hfile,
)
from airflow_lake_provider.lake.format.hfile.writer import java_hash_map_order


@pytest.mark.parametrize("name", MDT_TABLES)
def test_every_base_hfile_is_written_again_byte_for_byte(hudi_table_zip, name: str) -> None:
    table = hudi_table_zip(name)
    paths = list(mdt_files(table, ".hfile"))
    assert paths  # every MDT table has at least its files partition's base file
    dialects = set()
    for path in paths:
        data = path.read_bytes()
        hfile = read_hfile(data, str(path))
        dialects.add(hfile.dialect)
        assert write_hfile(hfile.content, hfile.settings()) == data, path
    # Hudi 1.0.x (table version 8) wrote through HBase, Hudi 1.1.x (version 9) through hudi-io.
    assert dialects == {Dialect.HBASE if "_v8_" in name else Dialect.HUDI}


def test_reader_gives_cells_file_info_meta_blocks_and_trailer(hudi_table_zip) -> None:
    table = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    path = table / ".hoodie/metadata/files/files-0000-0_22-161-506_20260101054337083.hfile"
    hfile = read_hfile(path.read_bytes(), str(path))
    assert [row for row, _ in hfile.content.cells] == [b".", b"__all_partitions__"]
    assert [len(value) for _, value in hfile.content.cells] == [532, 66]
    assert [k for k, _ in hfile.content.file_info] == [
        b"bloomFilterTypeCode",
        b"maxRecordKey",
        b"minRecordKey",
        b"schema",
    ]
    assert hfile.content.info("bloomFilterTypeCode") == b"DYNAMIC_V0"
    assert hfile.content.info("minRecordKey") == b"."
    assert [(name, len(payload)) for name, payload in hfile.content.meta_blocks] == [(b"bloomFilter", 431380)]
    t = hfile.trailer
    assert (t.entry_count, t.data_index_count, t.meta_index_count, t.index_levels) == (2, 1, 1, 1)
    assert (t.load_on_open_offset, t.file_info_offset, t.total_uncompressed_bytes) == (1075, 1225, 444569)
    assert t.comparator == "org.apache.hudi.io.storage.HoodieHBaseKVComparator"
    assert t.compression is Compression.GZ
    assert hfile.dialect is Dialect.HBASE
    assert hfile.settings().create_time_ms == 0


def test_hudi_writer_file_info_follows_java_hash_map_order() -> None:
    # The order a Hudi 1.1 base file of the files partition has (cow_v9_txns_simple_meta).
    inserted = [
        b"schema",
        b"bloomFilterTypeCode",
        b"minRecordKey",
        b"maxRecordKey",
        b"hfile.LASTKEY",
        b"hfile.AVG_VALUE_LEN",
        b"hfile.AVG_KEY_LEN",
        b"KEY_VALUE_VERSION",
        b"MAX_MEMSTORE_TS_KEY",
        b"hfile.CREATE_TIME_TS",
    ]
    assert [k for k, _ in java_hash_map_order([(k, b"") for k in inserted])] == [
        b"schema",
        b"bloomFilterTypeCode",
        b"hfile.LASTKEY",
        b"hfile.AVG_VALUE_LEN",
        b"minRecordKey",
        b"hfile.AVG_KEY_LEN",
        b"maxRecordKey",
        b"KEY_VALUE_VERSION",
        b"MAX_MEMSTORE_TS_KEY",
        b"hfile.CREATE_TIME_TS",
    ]


@pytest.mark.parametrize("dialect", list(Dialect))
@pytest.mark.parametrize("compression", list(Compression))
def test_round_trip_with_many_blocks_empty_and_meta(dialect: Dialect, compression: Compression) -> None:
    cells = tuple((f"key-{i:04d}".encode(), bytes([i % 251]) * (i % 97)) for i in range(500))
    content = HFileContent(cells, ((b"schema", b"{}"),), ((b"bloomFilter", b"bits"),))
    settings = HFileSettings(dialect=dialect, compression=compression, block_size=1024, create_time_ms=7)
    data = write_hfile(content, settings)
    hfile = read_hfile(data, "mem")
    assert hfile.content == content
    assert hfile.trailer.data_index_count > 10  # 1 KiB blocks
    assert hfile.settings(block_size=1024) == settings
    assert write_hfile(hfile.content, hfile.settings(block_size=1024)) == data
    empty = HFileContent((), (), ())
    assert read_hfile(write_hfile(empty, settings), "mem").content == empty


def test_hbase_indexes_later_blocks_by_a_shortest_midpoint_row() -> None:
    # One cell per block: the second block's index key lies between b"abc" and b"abz": b"abd".
    cells = ((b"abc", b"x" * 10), (b"abz", b"y"))
    settings = HFileSettings(dialect=Dialect.HBASE, block_size=1)
    hfile = read_hfile(write_hfile(HFileContent(cells, (), ()), settings), "mem")
    keys = [entry.key for entry in hfile.data_index]
    latest = struct.pack(">q", (1 << 63) - 1)
    assert keys == [b"\x00\x03abc\x00" + latest + b"\x04", b"\x00\x03abd\x00" + latest + b"\xff"]
    hudi = read_hfile(write_hfile(HFileContent(cells, (), ()), HFileSettings(block_size=1)), "mem")
    assert [entry.key for entry in hudi.data_index] == [b"\x00\x03abc", b"\x00\x03abz"]


def test_writer_refuses_unsorted_or_repeated_keys_and_derived_file_info() -> None:
    with pytest.raises(WriteInputError, match=r"b'a' comes after b'b'"):
        write_hfile(HFileContent(((b"b", b""), (b"a", b"")), (), ()), HFileSettings())
    with pytest.raises(WriteInputError, match=r"b'a' comes after b'a'"):
        write_hfile(HFileContent(((b"a", b""), (b"a", b"")), (), ()), HFileSettings())
    with pytest.raises(WriteInputError, match=r"\['hfile.LASTKEY'\] are computed by the writer"):
        write_hfile(HFileContent((), ((b"hfile.LASTKEY", b""),), ()), HFileSettings())


def test_corrupt_files_are_refused_with_the_place(hudi_table_zip) -> None:
    table = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    path = table / ".hoodie/metadata/files/files-0000-0_22-161-506_20260101054337083.hfile"
    data = path.read_bytes()
    flipped = bytearray(data)
    flipped[100] ^= 0xFF  # inside the first data block's GZ data
    with pytest.raises(CorruptDataFileError, match=r"block at offset 0: checksum mismatch in chunk 0"):
        read_hfile(bytes(flipped), "x.hfile")
    with pytest.raises(CorruptDataFileError, match=r"x.hfile: no trailer magic"):
        read_hfile(data[:-4096] + b"TRABLKxx" + data[-4088:], "x.hfile")
    with pytest.raises(CorruptDataFileError, match=r"x.hfile: 10 bytes, shorter than an HFile v3 trailer"):
        read_hfile(data[:10], "x.hfile")
    with pytest.raises(CorruptDataFileError, match=r"HFile version 2.0 is not supported"):
        read_hfile(data[:-4] + b"\x00\x00\x00\x02", "x.hfile")


def test_test_tables_are_the_shared_copies() -> None:
    here = Path(__file__).resolve().parents[3] / "data" / "hudi-tables-1x"
    assert sorted(p.stem for p in here.glob("*.zip") if p.stem in MDT_TABLES) == sorted(MDT_TABLES)


@pytest.mark.parametrize("name", MDT_TABLES)
def test_bloom_filter_meta_block_is_rebuilt_from_the_keys(hudi_table_zip, name: str) -> None:
    """Every base HFile's ``bloomFilter`` meta block is Hudi's DYNAMIC_V0 filter of its record keys:
    the bloom filter module writes it again byte for byte (entries: 60000 in Hudi 1.0's files,
    10000 in 1.1's, read from the filter's header)."""
    import base64

    import pyarrow as pa

    from airflow_lake_provider.lake.format.bloom_filter import BloomSettings, build

    for path in mdt_files(hudi_table_zip(name), ".hfile"):
        hfile = read_hfile(path.read_bytes(), str(path))
        (meta,) = hfile.content.meta_blocks
        assert meta[0] == b"bloomFilter"
        assert hfile.content.info("bloomFilterTypeCode") == b"DYNAMIC_V0"
        entries = int.from_bytes(base64.b64decode(meta[1][:24])[13:17], "big")
        keys = pa.array([row.decode() for row, _ in hfile.content.cells], pa.string())
        rebuilt = build(keys, BloomSettings(num_entries=entries, fpp=1e-9, type_code="DYNAMIC_V0"))
        assert rebuilt.serialize().encode() == meta[1], path


@pytest.mark.parametrize("name", MDT_TABLES)
def test_info_only_reads_give_the_trailer_file_info_and_settings_of_a_full_read(
    hudi_table_zip, name: str
) -> None:
    """What the MDT writer reads of the ``files`` base file at every opening (its record schema and
    HFile settings) without decompressing its data and meta blocks (a bloom filter of 431 KB)."""
    for path in mdt_files(hudi_table_zip(name), ".hfile"):
        data = path.read_bytes()
        full, head = read_hfile(data, str(path)), read_hfile(data, str(path), info_only=True)
        assert (head.trailer, head.all_file_info, head.data_index) == (
            full.trailer,
            full.all_file_info,
            full.data_index,
        )
        assert head.content.file_info == full.content.file_info
        assert head.settings() == full.settings()
        assert (head.content.cells, head.content.meta_blocks) == ((), ())
        with pytest.raises(CorruptDataFileError):
            read_hfile(data[:-1], str(path), info_only=True)
