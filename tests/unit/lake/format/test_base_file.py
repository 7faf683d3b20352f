"""format/base_file.py: which columns of a base file are dictionary encoded. Judged on the first rows
written: the repetitive columns only (Arrow's default tries every column and drops the dictionary
only past its page limit, paying the hashing and leaving dictionary pages in unique columns)."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.format.base_file import ROW_GROUP_ROWS, BaseFileWriter, write_base_file

SCHEMA = pa.schema(
    [
        ("_hoodie_record_key", pa.string()),
        ("city", pa.string()),
        ("price", pa.float64()),
        ("tags", pa.list_(pa.int64())),
    ]
)


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "_hoodie_record_key": [f"key{i:08d}" for i in range(start, start + n)],  # unique
            "city": [("amsterdam", "berlin", "chennai")[i % 3] for i in range(start, start + n)],
            "price": [i * 0.5 for i in range(start, start + n)],  # unique
            "tags": [[i % 2] for i in range(start, start + n)],  # nested: Arrow's default
        },
        schema=SCHEMA,
    )


def _dictionary_columns(data: bytes) -> list[list[str]]:
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    return [
        [
            meta.row_group(g).column(c).path_in_schema
            for c in range(meta.num_columns)
            if meta.row_group(g).column(c).has_dictionary_page
        ]
        for g in range(meta.num_row_groups)
    ]


def test_only_the_repetitive_columns_are_dictionary_encoded_in_every_row_group() -> None:
    sink = io.BytesIO()
    writer = BaseFileWriter(sink, SCHEMA)
    writer.write(_rows(ROW_GROUP_ROWS))
    writer.write(_rows(1000, ROW_GROUP_ROWS))
    writer.close()
    assert _dictionary_columns(sink.getvalue()) == [["city"], ["city"]]
    assert pq.read_table(pa.BufferReader(sink.getvalue())).equals(
        pa.concat_tables([_rows(ROW_GROUP_ROWS), _rows(1000, ROW_GROUP_ROWS)])
    )


def test_a_small_file_is_judged_on_its_own_rows() -> None:
    sink = io.BytesIO()
    write_base_file(sink, _rows(6))  # 3 cities in 6 rows: half as many distinct values as rows
    assert _dictionary_columns(sink.getvalue()) == [["city"]]


def test_a_file_without_rows_is_still_a_parquet_file() -> None:
    sink = io.BytesIO()
    writer = BaseFileWriter(sink, SCHEMA)
    writer.close()
    read = pq.read_table(pa.BufferReader(sink.getvalue()))
    assert read.num_rows == 0 and read.schema.names == SCHEMA.names
