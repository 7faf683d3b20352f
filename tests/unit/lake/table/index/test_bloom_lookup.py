"""The writer's key lookup (``table.index.bloom``) on base files whose footers are damaged, partial
or replaced, and past a file group of logs only: what it prunes by key range and bloom filter, which
keys it reads, and the rows it leaves."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from write_support import T1, add_log_only_group
from write_support import base_file as _base_file
from write_support import base_file_at as _base_file_at
from write_support import batch as _batch
from write_support import hudi_rows as _hudi_rows
from write_support import our_rows as _our_rows
from write_support import table as _table

from airflow_lake_provider.lake.table.index import bloom
from airflow_lake_provider.lake.table.write import write


def test_an_unreadable_bloom_filter_is_logged_and_the_keys_are_read_instead(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    base = _base_file(path)
    damaged = {**pq.read_schema(base).metadata, b"org.apache.hudi.bloomfilter": b"!!!!"}
    pq.write_table(pq.read_table(base).replace_schema_metadata(damaged), base)
    caplog.set_level(logging.WARNING, logger=bloom.log.name)
    caplog.clear()
    done = write(table, _batch([2], ts=2, v="y"), "upsert")
    assert [r.getMessage() for r in caplog.records if r.name == bloom.log.name] == [
        f"cannot decode the bloom filter of {table.storage.uri(base.name)}: Only base64 data is allowed; "
        "reading its record keys instead"
    ]
    assert (done.lookup.bloom_pruned, done.lookup.keys_read) == (0, (base.name,))
    assert _our_rows(path, "id", "v") == _hudi_rows(path, "id", "v") == [(1, "x1"), (2, "y2")]


def test_a_base_file_rewritten_in_place_is_looked_up_anew(tmp_path: Path) -> None:
    # The footer summaries a table keeps are keyed by path and size: a file replaced under its
    # name (a repair, a copy) is read again, so its new keys are found, not inserted twice.
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    write(table, _batch([9]), "insert")  # the lookup keeps the summary of T1's file (keys 1..2)
    base = _base_file_at(path, T1)
    rows = pq.read_table(base)
    extra = rows.slice(0, 1).set_column(2, "_hoodie_record_key", pa.array(["5"]))
    extra = extra.set_column(5, "id", pa.array([5]))
    metadata = {k: v for k, v in rows.schema.metadata.items() if b"bloom" not in k}
    metadata[b"hoodie_max_record_key"] = b"5"
    pq.write_table(pa.concat_tables([rows, extra]).replace_schema_metadata(metadata), base)
    write(table, _batch([5], ts=3, v="z"), "upsert")
    assert (
        _our_rows(path, "id", "v")
        == _hudi_rows(path, "id", "v")
        == [(1, "x1"), (2, "x2"), (5, "z5"), (9, "x9")]
    )


def test_a_footer_with_only_one_end_of_the_key_range_is_not_used_for_pruning(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    base = _base_file(path)
    metadata = dict(pq.read_schema(base).metadata)
    del metadata[b"hoodie_max_record_key"]
    pq.write_table(pq.read_table(base).replace_schema_metadata(metadata), base)
    done = write(table, _batch([2], ts=2, v="y"), "upsert")
    assert (done.inserted, done.updated, done.lookup.range_pruned) == (0, 1, 0)


def test_a_cow_upsert_reads_each_files_keys_once(tmp_path: Path) -> None:
    # Two files, one key updated in each: the lookup reads both key columns, and each rewrite
    # takes its file's keys from what the lookup read.
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2, 3, 4]), "insert", max_rows_per_file=2)
    done = write(table, _batch([1, 3], ts=2, v="y"), "upsert")
    assert (done.updated, len(done.lookup.keys_read), done.lookup.row_groups_read) == (2, 2, 2)


def test_keys_every_file_rules_out_are_counted_per_file(tmp_path: Path) -> None:
    # Key 5 is inside both files' key ranges; both bloom filters rule it out.
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 9]), "insert")
    write(table, _batch([2, 8]), "insert")
    done = write(table, _batch([5]), "upsert")
    assert (done.inserted, done.lookup.range_pruned, done.lookup.bloom_pruned, done.lookup.keys_read) == (
        1,
        0,
        2,
        (),
    )


def test_a_key_between_a_files_row_groups_is_not_found_there(tmp_path: Path) -> None:
    # No bloom filter, two row groups (keys 1-2 and 8-9): key 5 is in the file's range but in no
    # row group's, so no key column is read and the key is new.
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2, 8, 9]), "insert")
    base = _base_file(path)
    rows = pq.read_table(base).sort_by("_hoodie_record_key")
    metadata = {k: v for k, v in rows.schema.metadata.items() if b"bloom" not in k}
    pq.write_table(rows.replace_schema_metadata(metadata), base, row_group_size=2)
    assert pq.ParquetFile(base).metadata.num_row_groups == 2
    done = write(table, _batch([5]), "upsert")
    assert (done.inserted, done.lookup.row_groups_read, done.lookup.keys_read) == (1, 0, ())
    assert _our_rows(path, "id") == _hudi_rows(path, "id") == [(1,), (2,), (5,), (8,), (9,)]


def test_a_footer_with_no_key_range_at_all_is_looked_up_by_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    base = _base_file(path)
    metadata = {k: v for k, v in pq.read_schema(base).metadata.items() if not k.startswith(b"hoodie_m")}
    pq.write_table(pq.read_table(base).replace_schema_metadata(metadata), base)
    done = write(table, _batch([2], ts=2, v="y"), "upsert")
    assert (done.inserted, done.updated) == (0, 1)


def test_a_group_of_logs_only_sorted_first_does_not_end_the_lookup(tmp_path: Path) -> None:
    # The groups are looked up in file-id order; a group with no base file (here the first) has no
    # footer to read, and the groups after it must still be read: key 1 lives in the second group's
    # base file, so the upsert updates it there instead of inserting it a second time.
    path = tmp_path / "t"
    table = _table(path, "mor")
    write(table, _batch([1]), "insert")
    group = "00000000-0000-4000-8000-000000000000-0"
    assert group < _base_file(path).name
    add_log_only_group(path, group, T1, 2, "x2")
    done = write(table, _batch([1], ts=2, v="y"), "upsert")
    assert (done.inserted, done.updated) == (0, 1)
    assert _our_rows(path, "id", "v") == _hudi_rows(path, "id", "v") == [(1, "y1"), (2, "x2")]
