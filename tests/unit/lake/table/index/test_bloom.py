"""The writer's key lookup (``table.index.bloom``): which files and row groups it reads, counted at
the storage, with the bloom filters and key ranges of the base files (the filter format itself:
``tests/unit/lake/format/test_bloom_filter.py``)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.format import bloom_filter as bf
from airflow_lake_provider.lake.format.base_file import ROW_GROUP_ROWS
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.index import bloom
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import LookupStats, WriteContext, write, write_file_group
from airflow_lake_provider.lake.timeline.instant import InstantClock


# -- the writer's key lookup ------------------------------------------------------------------------
class CountingStorage(LocalStorage):
    """A local table that counts how often each file is opened or read."""

    def __init__(self, root: str | Path) -> None:
        super().__init__(root)
        self.opened: dict[str, int] = {}

    def _count(self, rel: str) -> None:
        self.opened[rel] = self.opened.get(rel, 0) + 1

    def open_input(self, rel: str) -> Any:
        self._count(rel)
        return super().open_input(rel)

    def read(self, rel: str) -> bytes:
        self._count(rel)
        return super().read(rel)

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        self._count(rel)
        return super().read_range(rel, start, length)

    def base_file_reads(self) -> dict[str, int]:
        return {rel: n for rel, n in self.opened.items() if rel.endswith(".parquet")}


def _counting(path: Path, kind: str) -> tuple[LakeTable, CountingStorage]:
    LakeTable.create(
        path,
        name="orders",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
        clock=InstantClock(),
    )
    plain = LakeTable.open(path)
    storage = CountingStorage(path)
    return LakeTable(storage, plain.config), storage


def _batch(ids: list[int], ts: int, city: str = "sf") -> pa.Table:
    return pa.table(
        {
            "id": pa.array([f"k{i:05d}" for i in ids]),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "city": [city] * len(ids),
            "v": pa.array(ids, pa.int64()),
        }
    )


def _hudi_ids(path: Path) -> list[tuple[str, int]]:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    table = pa.Table.from_batches(batches)
    return sorted(zip(table.column("id").to_pylist(), table.column("ts").to_pylist(), strict=True))


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_new_keys_inside_the_key_range_read_no_key_column(tmp_path: Path, kind: str) -> None:
    table, storage = _counting(tmp_path / "t", kind)
    write(table, _batch(list(range(0, 1000, 2)), 1), "insert")  # even ids k00000-k00998
    storage.opened.clear()
    # Odd ids lie inside the file's min/max range: only the bloom filter rules them out.
    result = write(table, _batch([1, 501, 999], 2), "upsert")
    assert result.inserted == 3 and result.updated == 0
    assert result.lookup.keys_read == () and result.lookup.bloom_pruned == 1
    assert list(storage.base_file_reads().values()) == [1]  # its footer, once
    # Keys outside the range: not even the bloom filter is needed.
    storage.opened.clear()
    result = write(table, _batch([5000], 3), "upsert")
    assert result.lookup == LookupStats(range_pruned=2, bloom_pruned=0, keys_read=(), row_groups_read=0)
    # The table object keeps each footer's key ranges: ruling files out again opens only the one
    # file it had not seen (written by the last write).
    newest = result.files
    storage.opened.clear()
    result = write(table, _batch([6000], 4), "upsert")
    assert result.lookup.range_pruned == 3 and storage.base_file_reads() == {newest[0]: 1}
    expected = sorted([(f"k{i:05d}", 1) for i in range(0, 1000, 2)] + [("k00001", 2), ("k00501", 2)])
    expected = sorted(expected + [("k00999", 2), ("k05000", 3), ("k06000", 4)])
    assert _hudi_ids(tmp_path / "t") == expected
    ours = read_snapshot(LakeTable.open(tmp_path / "t"))
    assert sorted(zip(ours.column("id").to_pylist(), ours.column("ts").to_pylist(), strict=True)) == expected


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_update_reads_the_key_column_of_the_holding_file_only(tmp_path: Path, kind: str) -> None:
    table, storage = _counting(tmp_path / "t", kind)
    first = write(table, _batch(list(range(100)), 1), "insert")
    write(table, _batch(list(range(100, 200)), 1), "insert")
    holder = first.files[0]
    result = write(table, _batch([7, 150_000], 2), "upsert")
    assert result.lookup.keys_read == (holder,)
    assert result.lookup.range_pruned == 1  # k00007 is outside the second file's range
    assert (result.inserted, result.updated) == (1, 1)


def test_writer_cow_upsert_opens_the_touched_base_file_once(tmp_path: Path) -> None:
    table, storage = _counting(tmp_path / "t", "cow")
    first = write(table, _batch(list(range(100)), 1), "insert")
    storage.opened.clear()
    result = write(table, _batch([3, 4], 2), "upsert")
    assert result.updated == 2
    # Read by the lookup (footer, keys) and the rewrite (other columns) through one open.
    assert storage.base_file_reads() == {first.files[0]: 1}
    rows = read_snapshot(LakeTable.open(tmp_path / "t"))
    assert rows.num_rows == 100
    assert sorted(rows.filter(pa.compute.equal(rows.column("ts"), 2)).column("id").to_pylist()) == [
        "k00003",
        "k00004",
    ]
    assert _hudi_ids(tmp_path / "t") == sorted((f"k{i:05d}", 2 if i in (3, 4) else 1) for i in range(100))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"hoodie.index.type": "BUCKET"}, "hoodie.index.type=BUCKET is not supported"),
        ({"hoodie.index.type": "record_index"}, "hoodie.index.type=RECORD_INDEX is not supported"),
        ({"hoodie.index.type": "GLOBAL_BLOOM"}, "hoodie.index.type=GLOBAL_BLOOM is not supported"),
        ({"hoodie.table.metadata.partitions": "files,record_index"}, "keeps a record index"),
        ({"hoodie.index.bloom.fpp": "2"}, "fpp must be in"),
    ],
)
def test_writer_refuses_index_it_cannot_keep_and_changes_nothing(
    tmp_path: Path, options: dict[str, str], message: str
) -> None:
    table, _ = _counting(tmp_path / "t", "mor")
    write(table, _batch([1], 1), "insert")
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with pytest.raises(TableConfigError, match=message):
        write(table, _batch([2], 2), "upsert", options=options)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("index", ["BLOOM", "SIMPLE", "bloom"])
def test_writer_accepts_bloom_and_simple_index(tmp_path: Path, index: str) -> None:
    table, _ = _counting(tmp_path / "t", "cow")
    result = write(table, _batch([1], 1), "insert", options={"hoodie.index.type": index})
    assert result.inserted == 1


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_lookup_reads_keys_of_the_row_groups_that_may_hold_them(tmp_path: Path, kind: str) -> None:
    table, storage = _counting(tmp_path / "t", kind)
    count = 3 * ROW_GROUP_ROWS  # ids in order: each row group holds a key range of its own
    first = write(table, _batch(list(range(count)), 1), "insert", max_rows_per_file=count)
    assert pq.ParquetFile(tmp_path / "t" / first.files[0]).metadata.num_row_groups == 3
    storage.opened.clear()
    result = write(table, _batch([5, count - 1], 2), "upsert")
    # The lookup reads the keys of groups 1 and 3; a COW rewrite then needs group 2's too (once).
    assert result.lookup.keys_read == (first.files[0],)
    assert result.lookup.row_groups_read == (2 if kind == "mor" else 3)
    assert storage.base_file_reads() == {first.files[0]: 1}
    assert result.updated == 2
    rows = read_snapshot(LakeTable.open(tmp_path / "t"))
    assert rows.num_rows == count
    newer = rows.filter(pa.compute.equal(rows.column("ts"), 2))
    assert sorted(newer.column("id").to_pylist()) == ["k00005", f"k{count - 1:05d}"]


def test_writer_groups_written_elsewhere_open_their_base_file_once_and_carry_the_options_filter(
    tmp_path: Path,
) -> None:
    table, storage = _counting(tmp_path / "t", "cow")
    first = write(table, _batch(list(range(100)), 1), "insert")
    executor = CountingStorage(tmp_path / "t")

    def runner(_table: LakeTable, context: WriteContext, units: Any) -> list[Any]:
        # As Spark ships them: pickled, to a table object of the executor's own.
        context, units = pickle.loads(pickle.dumps((context, list(units))))
        there = LakeTable(executor, LakeTable.open(tmp_path / "t").config)
        return [write_file_group(there, context, unit) for unit in units]

    storage.opened.clear()
    options = {bf.TYPE_OPTION: "SIMPLE", bf.NUM_ENTRIES_OPTION: "1000"}
    result = write(table, _batch([3, 200], 2), "upsert", options=options, runner=runner)
    assert (result.inserted, result.updated) == (1, 1)
    # The driver's lookup opened the file once (footer, keys); the executor once, to rewrite it.
    assert storage.base_file_reads() == {first.files[0]: 1}
    assert executor.base_file_reads() == {first.files[0]: 1}
    assert result.lookup.keys_read == (first.files[0],)
    want = bf.BloomSettings.from_options(options)
    assert len(result.files) == 2
    for rel in result.files:  # the inserted file and the rewritten one: the options' filter
        filt = bf.from_footer(pq.ParquetFile(tmp_path / "t" / rel).metadata.metadata)
        assert filt is not None and (filt.type_code, filt.vector_size) == (bf.SIMPLE, want.vector_size)
    expected = [(f"k{i:05d}", 2 if i == 3 else 1) for i in range(100)] + [("k00200", 2)]
    assert _hudi_ids(tmp_path / "t") == sorted(expected)


def test_writer_past_the_open_file_cap_reopens_a_base_file_for_its_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, storage = _counting(tmp_path / "t", "cow")
    monkeypatch.setattr(bloom, "_OPEN_BASE_FILES", 1)  # file handles kept lookup -> rewrite
    first = write(table, _batch(list(range(100)), 1), "insert")
    second = write(table, _batch(list(range(100, 200)), 1), "insert")
    storage.opened.clear()
    result = write(table, _batch([3, 150], 2), "upsert")
    assert result.updated == 2
    # One file open at a time: the lookup closed the first file it opened to open the other, so a
    # rewrite opened its file again (at most twice each, never more).
    reads = storage.base_file_reads()
    assert set(reads) == {first.files[0], second.files[0]}
    assert max(reads.values()) == 2 and sum(reads.values()) in (3, 4)
    expected = [(f"k{i:05d}", 2 if i in (3, 150) else 1) for i in range(200)]
    assert _hudi_ids(tmp_path / "t") == expected
