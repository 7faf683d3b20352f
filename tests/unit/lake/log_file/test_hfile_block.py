"""HFILE_DATA log blocks (the metadata table's log records): every block of the 1.x test tables
decodes, and is encoded again from its decoded records byte for byte."""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from mdt_tables import MDT_TABLES, mdt_files

from airflow_lake_provider.lake.errors import CorruptLogBlockError, SchemaError
from airflow_lake_provider.lake.format.hfile import (
    Dialect,
    HFileContent,
    HFileSettings,
    read_hfile,
    write_hfile,
)
from airflow_lake_provider.lake.log_file.hfile_block import (
    SCHEMA_INFO,
    _single_record_unions,
    decode_hfile_block,
    decode_hfile_cells,
    hfile_data_block,
    hfile_of_block,
)
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, LogBlock, parse_log_bytes


@pytest.mark.parametrize("name", MDT_TABLES)
def test_every_hfile_block_is_encoded_again_byte_for_byte(hudi_table_zip, name: str) -> None:
    table = hudi_table_zip(name)
    seen = 0
    for path in mdt_files(table, ".log."):
        data = path.read_bytes()
        for block in parse_log_bytes(data, str(path)):
            if block.block_type != BlockType.HFILE_DATA:
                continue
            seen += 1
            records = decode_hfile_block(block)
            schema_first = next(iter(block.header)) == HeaderKey.SCHEMA
            encoded = hfile_data_block(
                records,
                block.header[HeaderKey.SCHEMA],
                block.instant_time or "",
                hfile_of_block(block).settings(),
                schema_first=schema_first,
            )
            assert encoded == data[block.offset : block.offset + block.size], (path, block.offset)
    assert seen > 0


def _block(table, rel: str) -> LogBlock:
    path = table / rel
    (block,) = [
        b for b in parse_log_bytes(path.read_bytes(), str(path)) if b.block_type == BlockType.HFILE_DATA
    ]
    return block


def test_files_partition_block_decodes_to_its_records(hudi_table_zip) -> None:
    table = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    block = _block(table, ".hoodie/metadata/files/.files-0000-0_20260101054337037.log.1_4-175-537")
    records = decode_hfile_block(block)
    assert [(key, rec["type"], rec["key"]) for key, rec in records] == [
        (".", 2, ""),
        ("__all_partitions__", 1, ""),
    ]
    assert records[0][1]["filesystemMetadata"] == {
        ".ccfdc9b6-b2d0-438f-a236-40b797bf07ea-0_20260101054337037.log.1_0-167-518": {
            "size": 1767,
            "isDeleted": False,
        }
    }
    assert records[1][1]["filesystemMetadata"] == {".": {"size": 0, "isDeleted": False}}
    assert hfile_of_block(block).dialect is Dialect.HBASE


def test_new_block_round_trips_and_bad_records_are_refused(hudi_table_zip) -> None:
    table = hudi_table_zip("mor_avro_v9_txns_simple_meta")
    block = next(
        b
        for path in mdt_files(table, ".files-0000-0_")
        for b in parse_log_bytes(path.read_bytes(), str(path))
        if b.block_type == BlockType.HFILE_DATA
    )
    schema_text = block.header[HeaderKey.SCHEMA]
    template = decode_hfile_block(block)[0][1]
    files = {"a.parquet": {"size": 10, "isDeleted": False}, "b.parquet": {"size": 0, "isDeleted": True}}
    records = [
        ("region=us", {**template, "type": 2, "filesystemMetadata": files}),
        (
            "__all_partitions__",
            {**template, "type": 1, "filesystemMetadata": {"region=us": {"size": 0, "isDeleted": False}}},
        ),
    ]
    data = hfile_data_block(records, schema_text, "20990101000000000", HFileSettings())
    (back,) = parse_log_bytes(data, "mem")
    assert back.instant_time == "20990101000000000"
    assert json.loads(back.header[HeaderKey.SCHEMA]) == json.loads(schema_text)
    assert [(k, r["filesystemMetadata"]) for k, r in decode_hfile_block(back)] == [
        ("__all_partitions__", {"region=us": {"size": 0, "isDeleted": False}}),
        ("region=us", files),
    ]
    with pytest.raises(SchemaError, match=r"metadata record key 'x' given twice in one block"):
        hfile_data_block([("x", records[0][1]), ("x", records[0][1])], schema_text, "1", HFileSettings())
    with pytest.raises(SchemaError, match=r"metadata record 'y' does not fit its schema"):
        hfile_data_block([("y", {**template, "type": "two"})], schema_text, "1", HFileSettings())
    damaged = bytearray(back.content)
    damaged[-1] = 9  # HFile version 9
    broken = LogBlock(back.block_type, back.header, back.footer, bytes(damaged), 0, back.size, "x.log")
    with pytest.raises(CorruptLogBlockError, match=r"x.log offset 0: HFile block unreadable: .*version 9"):
        decode_hfile_block(broken)


@pytest.mark.parametrize("name", MDT_TABLES)
def test_every_hfile_decodes_as_fastavro_with_the_record_name_override_reads_it(
    hudi_table_zip, name: str
) -> None:
    """The records of every HFile of the MDTs (base files, log blocks) are decoded without
    fastavro's ``return_record_name_override`` (slow: it counts a union's records at every union
    read) and unwrapped: the same records as with it, every one."""
    table = hudi_table_zip(name)
    hfiles = [(read_hfile(p.read_bytes(), str(p)), None) for p in mdt_files(table, ".hfile")]
    for path in mdt_files(table, ".log."):
        for block in parse_log_bytes(path.read_bytes(), str(path)):
            if block.block_type == BlockType.HFILE_DATA:
                hfiles.append((hfile_of_block(block), block.header[HeaderKey.SCHEMA]))
    cells = 0
    for hfile, header in hfiles:
        text = header or hfile.content.info(SCHEMA_INFO).decode()
        assert _single_record_unions(text) is not None  # the fast way follows Hudi's schemas
        schema = fastavro.parse_schema(json.loads(text))
        theirs = [
            (row.decode(), fastavro.schemaless_reader(io.BytesIO(value), schema, None, True, True))
            for row, value in hfile.content.cells
        ]
        assert decode_hfile_cells(hfile, text, hfile.source) == theirs, hfile.source
        cells += len(theirs)
    assert cells > 0


def test_single_record_unions_are_unwrapped_wherever_they_are() -> None:
    """Inside arrays, maps, other records and the records of unions of several, and a union of one
    record reached by name; a schema the unwrapping cannot follow (a recursive type) is read with the
    override instead."""
    inner = {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}
    other = {"type": "record", "name": "Other", "fields": [{"name": "o", "type": ["null", "In"]}]}
    schema = {
        "type": "record",
        "name": "Top",
        "fields": [
            {"name": "a", "type": ["null", inner]},
            {"name": "b", "type": {"type": "array", "items": ["null", "In"]}},
            {"name": "c", "type": {"type": "map", "values": ["null", "In", "string"]}},
            {"name": "d", "type": ["null", other, {"type": "record", "name": "More", "fields": []}]},
            {"name": "e", "type": ["null", "Other"]},
        ],
    }
    record = {
        "a": {"x": 1},
        "b": [None, {"x": 2}],
        "c": {"k": {"x": 3}, "s": "text", "n": None},
        "d": ("Other", {"o": {"x": 4}}),
        "e": {"o": None},
    }
    text = json.dumps(schema)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(text)), record)
    cells = ((b"k", buf.getvalue()),)
    hfile = read_hfile(write_hfile(HFileContent(cells, (), ()), HFileSettings()), "t")
    with_override = fastavro.schemaless_reader(io.BytesIO(cells[0][1]), json.loads(text), None, True, True)
    assert decode_hfile_cells(hfile, text, "t") == [("k", record)] == [("k", with_override)]
    assert _single_record_unions(text) is not None
    recursive = {"type": "record", "name": "R", "fields": [{"name": "r", "type": ["null", "R"]}]}
    assert _single_record_unions(json.dumps(recursive)) is None
