"""The LSM history's parquet files carry Hudi 1.x's HoodieLSMTimelineInstant as Java writes it."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow.parquet as pq

from airflow_lake_provider.lake.timeline.history import records
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant

# hudi-common/src/main/avro/HoodieLSMTimelineInstant.avsc of Hudi 1.0/1.1.
HUDI_SCHEMA = {
    "type": "record",
    "name": "HoodieLSMTimelineInstant",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "instantTime", "type": ["null", "string"], "default": None},
        {"name": "completionTime", "type": ["null", "string"], "default": None},
        {"name": "action", "type": ["null", "string"], "default": None},
        {"name": "metadata", "type": ["null", "bytes"], "default": None},
        {"name": "plan", "type": ["null", "bytes"], "default": None},
        {"name": "version", "type": "int", "default": 1},
    ],
}
JAVA_STRING = '["null",{"type":"string","avro.java.string":"String"}]'
# What avro-parquet's schema converter makes of it (the root's name aside).
PARQUET_COLUMNS = [
    ("instantTime", "BYTE_ARRAY", "String", 1),
    ("completionTime", "BYTE_ARRAY", "String", 1),
    ("action", "BYTE_ARRAY", "String", 1),
    ("metadata", "BYTE_ARRAY", "None", 1),
    ("plan", "BYTE_ARRAY", "None", 1),
    ("version", "INT32", "None", 0),
]
ENTRIES = [
    ArchivedEntry(ArchivedInstant("20250101000000001", "20250101000000005", "commit"), b'{"a":1}', None),
    ArchivedEntry(ArchivedInstant("20250101000000002", "20250101000000003", "clean"), b"\x00\xff", b"\x01"),
    ArchivedEntry(ArchivedInstant("20250101000000004", None, "rollback"), None, None),
]


def written(entries: list[ArchivedEntry]) -> bytes:
    sink = io.BytesIO()
    records.write_records(sink, entries)
    return sink.getvalue()


def test_the_shipped_schema_is_hudis() -> None:
    assert records.avro_schema() == HUDI_SCHEMA


def test_the_footer_carries_the_java_class_schema_and_the_avro_model() -> None:
    footer = pq.ParquetFile(io.BytesIO(written(ENTRIES))).metadata.metadata
    assert footer[b"writer.model.name"] == b"avro"
    assert footer[b"parquet.avro.schema"].decode() == (
        '{"type":"record","name":"HoodieLSMTimelineInstant","namespace":"org.apache.hudi.avro.model",'
        f'"fields":[{{"name":"instantTime","type":{JAVA_STRING},"default":null}},'
        f'{{"name":"completionTime","type":{JAVA_STRING},"default":null}},'
        f'{{"name":"action","type":{JAVA_STRING},"default":null}},'
        '{"name":"metadata","type":["null","bytes"],"default":null},'
        '{"name":"plan","type":["null","bytes"],"default":null},'
        '{"name":"version","type":"int","default":1}]}'
    )
    # Without Java's string-class hint it is the shipped schema itself.
    plain = footer[b"parquet.avro.schema"].decode().replace(',"avro.java.string":"String"', "")
    assert json.loads(plain.replace('{"type":"string"}', '"string"')) == records.avro_schema()
    assert set(footer) == {b"writer.model.name", b"parquet.avro.schema"}


def test_the_parquet_columns_are_those_avro_parquet_derives() -> None:
    parquet_file = pq.ParquetFile(io.BytesIO(written(ENTRIES)))
    schema = parquet_file.schema
    got = [
        (c.name, c.physical_type, str(c.logical_type), c.max_definition_level)
        for c in (schema.column(i) for i in range(len(schema)))
    ]
    assert got == PARQUET_COLUMNS
    assert parquet_file.metadata.row_group(0).column(0).compression == "GZIP"


def test_rows_round_trip_and_are_valid_hoodie_lsm_timeline_instants() -> None:
    table = records.read_table(io.BytesIO(written(ENTRIES)))
    assert table.to_pylist() == [
        {
            "instantTime": "20250101000000001",
            "completionTime": "20250101000000005",
            "action": "commit",
            "metadata": b'{"a":1}',
            "plan": None,
            "version": 1,
        },
        {
            "instantTime": "20250101000000002",
            "completionTime": "20250101000000003",
            "action": "clean",
            "metadata": b"\x00\xff",
            "plan": b"\x01",
            "version": 1,
        },
        {
            "instantTime": "20250101000000004",
            "completionTime": None,
            "action": "rollback",
            "metadata": None,
            "plan": None,
            "version": 1,
        },
    ]
    parsed = fastavro.parse_schema(
        json.loads(pq.ParquetFile(io.BytesIO(written(ENTRIES))).metadata.metadata[b"parquet.avro.schema"])
    )
    for row in table.to_pylist():
        assert fastavro.validation.validate(row, parsed)
    assert records.instants_of(table) == [e.instant for e in ENTRIES]


def test_a_lookup_reads_only_the_row_groups_that_can_hold_its_times() -> None:
    many = [
        ArchivedEntry(ArchivedInstant(f"20250101{n:09d}", None, "commit"), b"m", None)
        for n in range(3 * records.ROW_GROUP_ROWS)
    ]
    data = written(many)
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups == 3
    wanted = f"20250101{records.ROW_GROUP_ROWS + 5:09d}"
    rows = records.read_range(io.BytesIO(data), wanted, wanted)
    assert rows.num_rows == records.ROW_GROUP_ROWS
    assert rows.column("instantTime")[0].as_py() == f"20250101{records.ROW_GROUP_ROWS:09d}"
    # A range over the end of the first group and the start of the second reads those two.
    first_end = f"20250101{records.ROW_GROUP_ROWS - 1:09d}"
    two = records.read_range(io.BytesIO(data), first_end, wanted, ["instantTime"])
    assert (two.num_rows, two.column_names) == (2 * records.ROW_GROUP_ROWS, ["instantTime"])
    assert records.read_range(io.BytesIO(data), None, None).num_rows == 3 * records.ROW_GROUP_ROWS


def test_what_an_archived_record_holds_per_action() -> None:
    def archived(action: str, pending: str, **files: bytes | None) -> tuple[bytes | None, bytes | None]:
        instant = ArchivedInstant("20250101000000001", "20250101000000002", action)
        found = records.archived_entry(instant, pending, files.pop("completed", b"done"), **files)
        assert found.instant == instant
        return found.metadata, found.plan

    assert archived("deltacommit", "deltacommit", requested=b"", inflight=b"w") == (b"done", None)
    assert archived("commit", "commit", completed=b"") == (None, None)
    assert archived("clean", "clean", requested=b"cleaner plan") == (b"done", b"cleaner plan")
    assert archived("clean", "clean", inflight=b"cleaner plan") == (b"done", b"cleaner plan")
    assert archived("commit", "compaction", requested=b"compaction plan", inflight=b"") == (
        b"done",
        b"compaction plan",
    )
    assert archived("logcompaction", "logcompaction", requested=b"plan") == (b"done", b"plan")
    assert archived("replacecommit", "replacecommit", requested=b"req", inflight=b"infl") == (
        b"done",
        b"infl",
    )
    assert archived("replacecommit", "clustering", requested=b"req", inflight=b"") == (b"done", b"req")
    assert archived("replacecommit", "replacecommit", requested=b"", inflight=None) == (b"done", None)
    assert archived("rollback", "rollback", requested=b"rollback plan") == (b"done", None)
