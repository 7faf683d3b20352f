"""Hudi's record-key bloom filters: the format (against Spark-written files), the filters our base
files carry, and the writer's key lookup that uses them (what it reads, counted at the storage)."""

from __future__ import annotations

import base64
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_lake_provider.lake.errors import CorruptDataFileError, TableConfigError
from airflow_lake_provider.lake.format import bloom_filter as bf
from airflow_lake_provider.lake.format.base_file import ROW_GROUP_ROWS, write_base_file
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.index import bloom
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import LookupStats, WriteContext, write, write_file_group
from airflow_lake_provider.lake.timeline.instant import InstantClock

HUDI_TABLES = Path(__file__).resolve().parents[4] / "data" / "hudi-tables"
FILTER = bf.FILTER_KEY.encode()


def _spark_base_files() -> list[tuple[str, pa.Array, dict[bytes, bytes]]]:
    """(name, record keys, footer metadata) of every Spark-written base file with a bloom filter."""
    found = []
    for archive in sorted(HUDI_TABLES.glob("*.zip")):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not name.endswith(".parquet") or name.startswith("__MACOSX"):
                    continue
                parquet = pq.ParquetFile(io.BytesIO(zf.read(name)))
                meta = parquet.metadata.metadata or {}
                if FILTER in meta:
                    keys = parquet.read(columns=["_hoodie_record_key"]).column(0)
                    found.append((f"{archive.stem}/{name}", keys, dict(meta)))
    return found


SPARK_FILES = _spark_base_files()


def test_bloom_spark_files_decode_answer_maybe_for_their_keys_and_rebuild_byte_identical() -> None:
    assert len(SPARK_FILES) >= 30  # every zip table but the no-meta-fields ones carries filters
    absent = pa.array([f"absent-key-{i}" for i in range(2000)])
    for name, keys, meta in SPARK_FILES:
        assert meta[bf.TYPE_CODE_KEY.encode()] == b"DYNAMIC_V0", name
        filt = bf.from_footer(meta, name)
        assert filt is not None
        assert (filt.type_code, filt.vector_size, filt.num_hashes) == ("DYNAMIC_V0", 2587966, 30), name
        assert filt.row_capacity == 60000 and len(filt.rows) == 1 and filt.active_count == len(keys)
        assert filt.might_contain(keys).all(), name
        # 1e-9 false positive rate at a few keys: none of 2,000 absent keys passes.
        assert not filt.might_contain(absent).any(), name
        # Our writer lays out the same keys bit for bit as Spark's did.
        assert bf.build(keys).serialize().encode() == meta[FILTER], name
        # The lookup's probe, which decodes only the keys' bits, answers as the whole filter.
        probe = bf.probe_footer(meta, pa.concat_arrays([keys.combine_chunks(), absent]), name)
        assert probe is not None and probe[: len(keys)].all() and not probe[len(keys) :].any(), name


def test_bloom_default_settings_are_hudis() -> None:
    default = bf.BloomSettings.from_options({})
    assert default == bf.BloomSettings(60_000, 1e-9, "DYNAMIC_V0", 100_000)
    assert (default.vector_size, default.num_hashes) == (2587966, 30)
    small = bf.BloomSettings.from_options(
        {
            "hoodie.index.bloom.num_entries": "1000",
            "hoodie.index.bloom.fpp": "0.01",
            "hoodie.bloom.index.filter.type": "simple",
            "hoodie.bloom.index.filter.dynamic.max.entries": "5000",
        }
    )
    assert small == bf.BloomSettings(1000, 0.01, "SIMPLE", 5000)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hoodie.index.bloom.num_entries", "0", "num_entries must be positive"),
        ("hoodie.index.bloom.num_entries", "many", "num_entries='many' is not a whole number"),
        ("hoodie.index.bloom.fpp", "1.5", "fpp must be in"),
        ("hoodie.bloom.index.filter.type", "CUCKOO", "SIMPLE or DYNAMIC_V0"),
    ],
)
def test_bloom_bad_option_raises_naming_it(key: str, value: str, message: str) -> None:
    with pytest.raises(TableConfigError, match=message):
        bf.BloomSettings.from_options({key: value})


def test_bloom_dynamic_rows_grow_then_spread_as_java_does() -> None:
    settings_ = bf.BloomSettings(num_entries=4, fpp=0.01, max_entries=10)
    keys = pa.array([f"key{i}" for i in range(20)])
    filt = bf.build(keys, settings_)
    # Rows are added while rows x 4 < 10: 3 rows take keys 0-11; the active row counts on past it.
    assert len(filt.rows) == 3 and filt.row_capacity == 4 and filt.active_count == 20 - 8
    back = bf.decode(filt.serialize(), "DYNAMIC_V0")
    assert back == filt
    assert back.might_contain(keys).all()


def test_bloom_corrupt_filter_raises_corrupt_data_file() -> None:
    with pytest.raises(CorruptDataFileError, match="cannot decode the bloom filter of f.parquet"):
        bf.decode("AAAA", "DYNAMIC_V0", "f.parquet")
    with pytest.raises(CorruptDataFileError, match="Only base64 data"):
        bf.decode("!!!", "SIMPLE", "f.parquet")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=200),
    probes=st.lists(st.text(min_size=1, max_size=40), max_size=50),
    per_row=st.integers(1, 50),
    max_entries=st.integers(0, 200),
    kind=st.sampled_from(["SIMPLE", "DYNAMIC_V0"]),
)
def test_bloom_property_no_false_negatives(
    keys: list[str], probes: list[str], per_row: int, max_entries: int, kind: str
) -> None:
    settings_ = bf.BloomSettings(num_entries=per_row, fpp=0.05, type_code=kind, max_entries=max_entries)
    filt = bf.decode(bf.build(pa.array(keys), settings_).serialize(), kind)
    assert filt.might_contain(pa.array(keys)).all()
    # Answers are per key: a batch mixing absent keys still says "maybe" for every present one.
    mixed = pa.array(probes + keys)
    assert filt.might_contain(mixed)[len(probes) :].all()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=120),
    probes=st.lists(st.text(min_size=1, max_size=20), max_size=40),
    per_row=st.integers(1, 40),
    max_entries=st.integers(0, 150),
    fpp=st.sampled_from([0.5, 0.05, 0.001]),
    kind=st.sampled_from(["SIMPLE", "DYNAMIC_V0"]),
)
def test_bloom_probe_answers_as_the_decoded_filter(
    keys: list[str], probes: list[str], per_row: int, max_entries: int, fpp: float, kind: str
) -> None:
    """Every answer, false positives included (fpp 0.5 makes them common), bit for bit."""
    built = bf.build(pa.array(keys), bf.BloomSettings(per_row, fpp, kind, max_entries))
    asked = pa.array(probes + keys)
    expected = bf.decode(built.serialize(), kind).might_contain(asked)
    answer = bf.probe_footer(built.footer(), asked)
    assert answer is not None and answer.tolist() == expected.tolist()


def test_bloom_probe_refuses_a_damaged_filter_and_reads_none_without_one() -> None:
    built = bf.build(pa.array([f"k{i}" for i in range(30)]), bf.BloomSettings(10, 0.01, "DYNAMIC_V0", 40))
    footer = built.footer()
    text = footer[FILTER]
    assert bf.probe_footer({}, pa.array(["k1"])) is None
    damaged = {
        "cut short": text[:-4],
        "trailing quad": text + b"AAAA",
        "too short for a header": b"AAAA",
        # A bad character inside the bits one key's hashes land on (all of them: every quad).
        "bad character": b"!" * len(text),
    }
    for what, bad in damaged.items():
        with pytest.raises(CorruptDataFileError, match="cannot decode the bloom filter of f.parquet"):
            bf.probe_footer({**footer, FILTER: bad}, pa.array(["k1"]), "f.parquet")
            pytest.fail(f"{what}: no error")
    # A row whose header differs from the filter's (hash count 9, not 7, in the second row).
    raw = bytearray(base64.b64decode(text))
    second_row = bf._HEADER.size + bf._DYNAMIC.size + bf._HEADER.size + (built.vector_size + 7) // 8
    assert built.num_hashes == 7
    raw[second_row + 7] = 9
    assert len(built.rows) >= 2
    with pytest.raises(CorruptDataFileError, match="row header"):
        bf.probe_footer({**footer, FILTER: base64.b64encode(bytes(raw))}, pa.array(["k1"]), "f.parquet")
    with pytest.raises(CorruptDataFileError, match="unknown bloom filter type code"):
        bf.probe_footer({**footer, bf.TYPE_CODE_KEY.encode(): b"CUCKOO"}, pa.array(["k1"]), "f.parquet")


def test_bloom_base_file_we_write_carries_a_filter_that_decodes_back() -> None:
    keys = [f"id:{i}" for i in range(500)]
    rows = pa.table({"_hoodie_record_key": keys, "v": list(range(500))})
    sink = io.BytesIO()
    write_base_file(sink, rows)
    meta = pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.metadata
    assert meta[bf.TYPE_CODE_KEY.encode()] == b"DYNAMIC_V0"
    assert (meta[b"hoodie_min_record_key"], meta[b"hoodie_max_record_key"]) == (b"id:0", b"id:99")
    filt = bf.from_footer(meta)
    assert filt is not None and filt.might_contain(pa.array(keys)).all()
    assert filt == bf.build(pa.array(keys))


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
