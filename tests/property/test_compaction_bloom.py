"""The bloom filter of a compacted base file (issue 31): it starts from the old base file's filter
plus the log's inserted keys when that filter is laid out as a new one of the new key count would
be, else it is built from the keys. Over random compactions with updates, deletes and inserts, at
settings small enough that dynamic filters grow several rows:

- every key of the new base file answers "maybe" (no false negatives), in every case;
- the filter is laid out (type, vector size, hash count, keys per row, rows, active count) exactly
  as one built from scratch for the file's keys;
- where the key set is the old one (updates only), the file keeps the old rows' order (updates in
  place, as Hudi's merge handle writes them) and the filter's bytes are a from-scratch build's,
  which are the old file's.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import derandomized, example_dir, examples, tally

from airflow_lake_provider.lake.format import bloom_filter as bf
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import InstantClock

DUE = {"hoodie.compact.inline.max.delta.commits": "1"}
START = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)
SETTINGS = [
    bf.BloomSettings(num_entries=8, fpp=0.05, type_code=bf.DYNAMIC_V0, max_entries=20),  # up to 3 rows
    bf.BloomSettings(num_entries=8, fpp=0.05, type_code=bf.DYNAMIC_V0, max_entries=8),  # 1 row, then spread
    bf.BloomSettings(num_entries=16, fpp=0.05, type_code=bf.SIMPLE, max_entries=100),
]
LAYOUT = ("type_code", "vector_size", "num_hashes", "row_capacity", "active_count")


def _options(bloom: bf.BloomSettings) -> dict[str, str]:
    return {
        bf.NUM_ENTRIES_OPTION: str(bloom.num_entries),
        bf.FPP_OPTION: str(bloom.fpp),
        bf.TYPE_OPTION: bloom.type_code,
        bf.MAX_ENTRIES_OPTION: str(bloom.max_entries),
    }


def _table(path: Path, bloom: bf.BloomSettings, table_version: int = 6) -> LakeTable:
    ticks = iter(range(10**6))
    created = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        clock=InstantClock(now=lambda: START + dt.timedelta(seconds=next(ticks))),
        table_version=table_version,
    )
    # The bloom options as table properties (compaction sizes its filters by them), in memory.
    config = TableConfig.from_properties({**created.config.properties, **_options(bloom)})
    return LakeTable(created.storage, config, created.clock)


def _rows(ids: list[str], ts: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.string()), "ts": pa.array([ts] * len(ids), pa.int64())})


def _only_base(path: Path, instant: str | None = None) -> Path:
    found = [p for p in path.glob("*.parquet") if instant is None or p.name.endswith(f"_{instant}.parquet")]
    (base,) = found
    return base


@st.composite
def _histories(draw: st.DrawFn) -> tuple[int, list[str], list[int], list[int], list[str]]:
    which = draw(st.integers(0, len(SETTINGS) - 1))
    count = draw(st.integers(1, 40))
    # Keys of several lengths (the hashing groups keys by length), unique.
    base = draw(
        st.lists(
            st.text("abcxyz0123456789", min_size=1, max_size=6), min_size=count, max_size=count, unique=True
        )
    )
    picks = st.lists(st.integers(0, count - 1), unique=True, max_size=count)
    updated, deleted = draw(picks), draw(picks)
    inserted = [
        f"new-{k}" for k in draw(st.lists(st.text("pq", min_size=1, max_size=4), unique=True, max_size=12))
    ]
    return which, base, updated, deleted, inserted


@settings(max_examples=examples(25), derandomize=derandomized(), deadline=None)
@given(history=_histories(), table_version=st.sampled_from([6, 8]))
def test_a_compacted_files_filter_holds_its_keys_and_is_a_fresh_builds_where_the_keys_are_the_same(
    tmp_path_factory: pytest.TempPathFactory,
    history: tuple[int, list[str], list[int], list[int], list[str]],
    table_version: int,
) -> None:
    """On table versions 6 and 8 (Hudi 1.x: the compacted base file is built alike)."""
    which, base_keys, updated, deleted, inserted = history
    bloom = SETTINGS[which]
    path = example_dir(tmp_path_factory, "compaction-bloom") / "t"
    table = _table(path, bloom, table_version)
    write(table, _rows(base_keys, 1), "insert", options=_options(bloom))
    old_file = _only_base(path)
    old_order = pq.read_table(old_file).column("_hoodie_record_key").to_pylist()
    old_footer = pq.ParquetFile(old_file).metadata.metadata
    if updated:
        write(table, _rows([base_keys[i] for i in updated], 2), "upsert", options=_options(bloom))
    gone = [base_keys[i] for i in deleted if i not in updated]
    if gone:
        write(table, _rows(gone, 3), "delete", options=_options(bloom))
    if inserted:
        write(table, _rows(inserted, 2), "upsert", options=_options(bloom))
    scheduled = schedule_compaction(table, DUE)
    if scheduled.instant is None:  # nothing logged: no compaction to check
        tally("compaction bloom")["no log"] += 1
        return
    execute_compaction(table, scheduled.instant)

    new_file = _only_base(path, scheduled.instant)
    keys = pq.read_table(new_file).column("_hoodie_record_key")
    # New keys may have gone to a new file group (the writer's choice): the group's keys are read.
    snapshot = read_snapshot(table)
    mine = pc.equal(snapshot.column("_hoodie_file_name"), new_file.name)
    expected_keys = set(snapshot.filter(mine).column("_hoodie_record_key").to_pylist())
    assert sorted(keys.to_pylist()) == sorted(expected_keys)
    assert not expected_keys & set(gone)
    got = bf.from_footer(pq.ParquetFile(new_file).metadata.metadata)
    assert got is not None
    fresh = bf.build(keys, bloom)
    assert got.might_contain(keys).all()
    assert [getattr(got, f) for f in LAYOUT] + [len(got.rows)] == [getattr(fresh, f) for f in LAYOUT] + [
        len(fresh.rows)
    ]
    if expected_keys == set(base_keys):
        tally("compaction bloom")["same keys"] += 1
        # Updates in place: the file keeps the old order, and its filter is a fresh build's, the old one.
        assert keys.to_pylist() == old_order
        assert got.serialize() == fresh.serialize()
        assert got.serialize().encode() == old_footer[bf.FILTER_KEY.encode()]
    else:
        tally("compaction bloom")["deletes or inserts"] += 1


@settings(max_examples=examples(200), derandomize=derandomized(), deadline=None)
@given(
    which=st.integers(0, len(SETTINGS) - 1),
    old_keys=st.lists(st.text("abc012", min_size=1, max_size=5), unique=True, max_size=60),
    dropped=st.sets(st.integers(0, 59)),
    added=st.lists(st.text("xyz", min_size=1, max_size=5).map(lambda k: f"n{k}"), unique=True, max_size=60),
)
def test_a_carried_filter_holds_every_key_and_is_laid_out_as_a_fresh_one(
    which: int, old_keys: list[str], dropped: set[int], added: list[str]
) -> None:
    """``carried`` alone, inserts included: the new file holds the old keys left (in their order)
    then the added ones, as a compaction writes them."""
    bloom = SETTINGS[which]
    old = bf.build(pa.array(old_keys, pa.string()), bloom)
    kept = [k for i, k in enumerate(old_keys) if i not in dropped]
    new_keys = pa.array(kept + added, pa.string())
    at = np.arange(len(kept), len(kept) + len(added), dtype=np.int64)
    got = bf.carried(old, bloom, len(new_keys), pa.array(added, pa.string()), at)
    fresh = bf.build(new_keys, bloom)
    if got is None:  # the old layout is not a fresh one's for the new count: built from scratch
        assert len(old.rows) != len(fresh.rows)
        return
    assert got.might_contain(new_keys).all()
    assert [getattr(got, f) for f in LAYOUT] + [len(got.rows)] == [getattr(fresh, f) for f in LAYOUT] + [
        len(fresh.rows)
    ]
    if not added and len(kept) == len(old_keys):
        assert got.serialize() == fresh.serialize() == old.serialize()
    # A filter of another type, vector size or hash count is never carried.
    for other in SETTINGS:
        if (other.type_code, other.vector_size, other.num_hashes) != (
            bloom.type_code,
            bloom.vector_size,
            bloom.num_hashes,
        ):
            assert bf.carried(old, other, len(new_keys), pa.array(added, pa.string()), at) is None
