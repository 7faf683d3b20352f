"""Every table Apache Hudi wrote (tests/data/hudi-tables) reads exactly as hudi-rs reads it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable

HUDI_TABLES = Path(__file__).resolve().parents[2] / "data" / "hudi-tables"  # see tests/data/README.md

# name -> rows a snapshot holds (the hudi-tables README's numbers)
TABLES = {
    "cow_v6_complexkeygen_hivestyle": 4,
    "cow_v6_empty": 0,
    "cow_v6_nonpartitioned": 4,
    "cow_v6_simplekeygen_hivestyle_no_metafields": 4,
    "cow_v6_simplekeygen_nonhivestyle": 4,
    "cow_v6_simplekeygen_nonhivestyle_overwritetable": 1,
    "cow_v6_timebasedkeygen_nonhivestyle": 4,
    "moravro_v6_trips_8i1u": 8,
    "moravro_v6_trips_8i3d": 5,
    "morparquet_v6_complexkeygen_hivestyle": 4,
    "morparquet_v6_empty": 0,
    "morparquet_v6_nonpartitioned": 4,
    "morparquet_v6_nonpartitioned_rollback": 3,
    "morparquet_v6_simplekeygen_hivestyle_no_metafields": 4,
    "morparquet_v6_simplekeygen_nonhivestyle": 4,
    "morparquet_v6_simplekeygen_nonhivestyle_overwritetable": 1,
}


def _rows(table: pa.Table) -> list[str]:
    """Rows as sorted canonical strings, so the comparison is exact but order-free."""
    return sorted(repr(sorted(row.items())) for row in table.to_pylist())


def test_shared_tables_all_listed() -> None:
    assert sorted(p.stem for p in HUDI_TABLES.glob("*.zip")) == sorted(TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_real_table_snapshot_matches_hudi_rs(hudi_table_zip, name: str) -> None:
    path = hudi_table_zip(name)
    ours = read_snapshot(LakeTable.open(path))
    assert ours.num_rows == TABLES[name]
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    if not batches:  # hudi-rs returns no batches (and no schema) for a table without commits
        assert TABLES[name] == 0
        return
    theirs = pa.Table.from_batches(batches)
    assert ours.column_names == theirs.column_names
    assert _rows(ours) == _rows(theirs)


def test_real_mor_table_delete_block_removes_three_riders(hudi_table_zip) -> None:
    ours = read_snapshot(LakeTable.open(hudi_table_zip("moravro_v6_trips_8i3d")))
    before = read_snapshot(LakeTable.open(hudi_table_zip("moravro_v6_trips_8i1u")))
    assert before.num_rows == 8 and ours.num_rows == 5
    assert sorted(ours.column("rider").to_pylist()) == ["rider-E", "rider-F", "rider-G", "rider-I", "rider-J"]


def test_real_rollback_table_hides_rolled_back_blocks(hudi_table_zip) -> None:
    table = LakeTable.open(hudi_table_zip("morparquet_v6_nonpartitioned_rollback"))
    timeline = table.timeline()
    assert timeline.is_committed("20250126040823628")
    assert not timeline.is_committed("20250126040826878")  # rolled back: a gap in the timeline
    ours = read_snapshot(table).select(["id", "_hoodie_commit_time"]).to_pylist()
    assert sorted((r["id"], r["_hoodie_commit_time"]) for r in ours) == [
        (1, "20250126040823628"),
        (2, "20250126060846931"),
        (3, "20250126040823628"),
    ]
