"""format/base_file.py: which string columns of a base file are read as dictionaries (small
dictionary pages in every row group) and decoded back to their values, the same values."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.format.base_file import (
    SMALL_DICTIONARY_BYTES,
    decode_dictionaries,
    small_dictionary_columns,
)

ROWS = 20_000


def _write(path: str, table: pa.Table, **options: object) -> pq.FileMetaData:
    pq.write_table(table, path, row_group_size=ROWS // 4, **options)
    return pq.ParquetFile(path).metadata


def _table() -> pa.Table:
    return pa.table(
        {
            "file": pa.array(["a-long-file-name-0_1-2-3_20240101.parquet"] * ROWS),
            "city": pa.array([("berlin", None, "essen")[i % 3] for i in range(ROWS)]),
            "key": pa.array([f"key{i:08d}" for i in range(ROWS)]),  # unique: no dictionary asked
            "qty": pa.array([i % 5 for i in range(ROWS)], pa.int32()),  # dictionary, but not strings
            "tags": pa.array([[f"t{i % 2}"] for i in range(ROWS)]),  # nested strings
            "blob": pa.array([b"x" * 8] * ROWS, pa.binary()),
        }
    )


def test_low_cardinality_string_columns_are_chosen_in_file_order(tmp_path) -> None:  # noqa: ANN001
    meta = _write(
        str(tmp_path / "f.parquet"), _table(), use_dictionary=["file", "city", "qty", "tags", "blob"]
    )
    assert small_dictionary_columns(meta) == ["file", "city", "blob"]


def test_a_string_column_written_without_a_dictionary_is_not_chosen(tmp_path) -> None:  # noqa: ANN001
    meta = _write(str(tmp_path / "f.parquet"), _table(), use_dictionary=["file"])
    assert small_dictionary_columns(meta) == ["file"]


def test_a_large_dictionary_is_not_chosen(tmp_path) -> None:  # noqa: ANN001
    # 2,500 distinct 40-byte values, each repeated: a dictionary page of ~100 KB, uncompressible.
    import random

    rng = random.Random(7)
    values = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(40)) for _ in range(2500)
    ]
    table = pa.table(
        {"big": pa.array([values[i % 2500] for i in range(ROWS)]), "small": pa.array(["x"] * ROWS)}
    )
    meta = _write(str(tmp_path / "f.parquet"), table, use_dictionary=["big", "small"], compression="none")
    chunk = meta.row_group(0).column(0)
    assert chunk.has_dictionary_page
    assert chunk.data_page_offset - chunk.dictionary_page_offset > SMALL_DICTIONARY_BYTES
    assert small_dictionary_columns(meta) == ["small"]


def test_a_file_without_row_groups_has_no_dictionary_columns(tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "f.parquet")
    pq.ParquetWriter(path, _table().schema).close()
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 0
    assert small_dictionary_columns(meta) == []


def test_decoded_dictionaries_are_the_same_values_and_types(tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "f.parquet")
    table = _table()
    meta = _write(path, table, use_dictionary=["file", "city", "blob"])
    chosen = small_dictionary_columns(meta)
    read = pq.ParquetFile(path, read_dictionary=chosen).read()
    assert [pa.types.is_dictionary(read.schema.field(c).type) for c in chosen] == [True, True, True]
    decoded = decode_dictionaries(read)
    assert decoded.schema == table.schema
    assert decoded.equals(table)
    assert decoded.column("city").null_count == table.column("city").null_count > 0
    assert decode_dictionaries(table) is table  # nothing to decode: the table itself


def test_a_column_whose_dictionary_fell_back_to_plain_pages_is_not_chosen(tmp_path) -> None:  # noqa: ANN001
    # As Spark writes Hudi's meta columns (a dictionary tried on every column, given up past 1 MB)
    # with zstd: the unique _hoodie_commit_seqno's 1 MB dictionary compresses to ~15 KB, yet all
    # but its first ~40,000 values are plain pages. Read as a dictionary, each of those is hashed
    # into one: 1.0 s, not 0.09 s, for these two columns of 1,000,000 rows.
    rows = 200_000
    table = pa.table(
        {
            "_hoodie_commit_seqno": pa.array([f"20240101120000000_0_{i}" for i in range(rows)]),
            "_hoodie_record_key": pa.array([f"id:{i}" for i in range(rows)]),
            "_hoodie_file_name": pa.array(["a-long-file-name-0_1-2-3_20240101.parquet"] * rows),
        }
    )
    path = str(tmp_path / "f.parquet")
    pq.write_table(table, path, compression="zstd", dictionary_pagesize_limit=1 << 20, row_group_size=rows)
    meta = pq.ParquetFile(path).metadata
    seqno = meta.row_group(0).column(0)
    assert seqno.has_dictionary_page
    assert seqno.data_page_offset - seqno.dictionary_page_offset <= SMALL_DICTIONARY_BYTES  # small, yet
    assert seqno.total_uncompressed_size > 4 * rows  # plain pages: more than any index could take
    assert small_dictionary_columns(meta) == ["_hoodie_file_name"]
    read = pq.ParquetFile(path, read_dictionary=small_dictionary_columns(meta)).read()
    assert decode_dictionaries(read).equals(table)


@pytest.mark.slow
def test_a_row_group_of_more_than_2_gib_of_dictionary_values_is_decoded_in_pieces(tmp_path) -> None:  # noqa: ANN001
    # 540,000 rows of one 4 KiB value: a 2.2 GB column in one row group (a Spark row group of a few
    # million narrow rows and one long constant string gets there). Parquet's own read splits it in
    # chunks of 32-bit offsets; decoded in one take, the dictionary overflowed them ("Take operation
    # overflowed binary array capacity"), and the reader called the base file corrupt.
    rows, value = 540_000, "v" * 4096
    path = str(tmp_path / "f.parquet")
    part = pa.table({"d": pa.array([value] * 10_000)})
    pq.write_table(pa.concat_tables([part] * (rows // 10_000)), path, row_group_size=rows)
    meta = pq.ParquetFile(path).metadata
    assert (meta.num_row_groups, small_dictionary_columns(meta)) == (1, ["d"])
    read = pq.ParquetFile(path, read_dictionary=["d"]).read_row_group(0)
    decoded = decode_dictionaries(read).column("d")
    del read
    assert (decoded.type, len(decoded)) == (pa.string(), rows)
    assert pc.all(pc.equal(decoded, value)).as_py()
