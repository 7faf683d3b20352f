"""Reads of Hudi 1.x tables whose oldest instants only the LSM history still holds.

A copy of a Spark-written table gets its oldest completed instants archived as Hudi's archiver
archives them (``tests/history_support.py``). hudi-rs does not read the history, so the referee is
hudi-rs reading the original, un-archived table: a read of the archived copy as of any commit, and
its snapshot, give the rows hudi-rs gives for the original.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import SnapshotCleanedError
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from tests.history_support import archive_oldest
from tests.tree_digest import tree_digest
from tests.unit.lake.table.test_reader_1x import _assert_same, _hudi_rs
from tests.unit.lake.timeline.test_history import CountingStorage

# (table, how many of its oldest instants to archive): MOR and COW, v8 and v9, with and without a
# metadata table, a rollback archived too. Archival stops before the first replacecommit, whose
# replaced file groups still have files (Hudi's archiver does too).
ARCHIVED = [
    ("mdt_basic_mor_avro_v8_nonpartitioned", 6),
    ("cow_v8_nonpartitioned", 1),
    ("cow_v9_txns_simple_nometa", 7),
    ("mor_avro_v9_txns_simple_nometa", 7),
    ("mor_avro_v9_txns_simple_meta", 7),
    ("cow_v9_txns_complex_nometa", 7),
    ("mor_avro_v9_txns_complex_nometa", 7),
    ("cow_v9_timebasedkeygen_nonhivestyle", 3),
    ("mor_avro_v9_timebasedkeygen_nonhivestyle", 4),
    ("mor_avro_v9_nonpartitioned_rollback", 2),
]
HISTORY = Path(".hoodie/timeline/history")


def _copies(hudi_table_zip: Callable[[str], Path], name: str, count: int) -> tuple[Path, Path, list[str]]:
    """The original table, and a copy whose ``count`` oldest instants were archived."""
    original = hudi_table_zip(name)
    archived = original.parent / f"{original.name}-archived"
    shutil.copytree(original, archived)
    return original, archived, archive_oldest(archived, count)


@pytest.mark.parametrize(("name", "count"), ARCHIVED)
def test_read_as_of_archived_instants_equals_hudi_rs_on_the_original(
    name: str, count: int, hudi_table_zip: Callable[[str], Path]
) -> None:
    original, archived, times = _copies(hudi_table_zip, name, count)
    table = LakeTable.open(archived)
    timeline = table.timeline()
    assert timeline.instants[0].timestamp > times[-1]  # only the history holds them now
    assert not any(t in p.name for t in times for p in (archived / ".hoodie" / "timeline").iterdir())
    commits = [i.timestamp for i in LakeTable.open(original).timeline().completed_commits]
    assert set(times) & set(commits)
    for as_of in [None, *commits]:
        ours = read_snapshot(table, as_of)
        _assert_same(ours, _hudi_rs(original, as_of), name, table, as_of)
        assert ours.num_rows > 0, as_of


def test_lake_read_as_of_an_archived_commit_equals_hudi_rs(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "mor_avro_v9_txns_simple_nometa"
    original, archived, times = _copies(hudi_table_zip, name, 7)
    out = tmp_path / "out.parquet"
    assert main(["read", str(archived), "--output", str(out), "--as-of", times[2]]) == 0
    assert capsys.readouterr().out == f"{pq.read_metadata(out).num_rows} rows -> {out}\n"
    _assert_same(pq.read_table(out), _hudi_rs(original, times[2]), name, LakeTable.open(archived), times[2])


def _history_reads(storage: CountingStorage) -> list[str]:
    return [r for r in storage.reads if str(HISTORY) in r]


def test_loading_the_timeline_and_a_snapshot_read_read_nothing_of_the_history(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """The history is read only for what the active timeline cannot answer: a read as of an
    archived instant reads its files, the active timeline's load and a COW snapshot read do not."""
    _, archived, times = _copies(hudi_table_zip, "cow_v9_txns_simple_nometa", 7)
    storage = CountingStorage(archived)
    table = LakeTable.open(storage)
    timeline = table.timeline()
    assert len(timeline.instants) == 5 and _history_reads(storage) == []
    assert read_snapshot(table).num_rows > 0
    assert _history_reads(storage) == []
    assert read_snapshot(table, times[3]).num_rows > 0
    parquet = [r for r in _history_reads(storage) if r.endswith(".parquet")]
    assert parquet == [f"{HISTORY}/{times[0]}_{times[-1]}_0.parquet"] * len(parquet) and parquet


def test_log_of_an_archived_deltacommit_sliced_by_its_completion_time_from_the_history(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """A log file is named after its deltacommit; once that instant is archived, its completion
    time (which decides the file slice) comes from the history, not from the log's name."""
    from tests.unit.lake.file_group.test_completion_slicing import APAC_GROUP, APAC_LOG, COMPACTION, DELTA

    path = hudi_table_zip("mor_avro_v9_txns_simple_nometa")
    timeline = path / ".hoodie" / "timeline"
    # The deltacommit completed after the compaction was requested: its log is the compaction's.
    (timeline / f"{DELTA}_20260307135836076.deltacommit").rename(
        timeline / f"{DELTA}_20260307135839900.deltacommit"
    )
    assert DELTA in archive_oldest(path, 7)
    group = LakeTable.open(path).file_system_view().groups[APAC_GROUP]
    assert [(s.base_instant, [f.file_name for f in s.log_files]) for s in group.slices] == [
        ("20260307135827749", []),
        (COMPACTION, [APAC_LOG]),
    ]


def test_as_of_an_archived_instant_whose_files_a_clean_removed_is_refused(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """Same rule as for an active instant: the archived commit's metadata names the files the
    read needs; one is gone, so the read is refused instead of returning partial rows."""
    _, archived, times = _copies(hudi_table_zip, "cow_v9_txns_simple_nometa", 7)
    table = LakeTable.open(archived)
    written = table.timeline().with_history(times[0])
    stats = written.commit_metadata(written.instants[0]).write_stats()
    gone = archived / stats[0].path
    gone.unlink()
    before = tree_digest(archived)
    with pytest.raises(SnapshotCleanedError) as info:
        read_snapshot(table, times[0])
    assert str(info.value).startswith(
        f"{archived}: cannot read as of {times[0]}: a clean removed the file slice {times[0]} of file group "
        f"{stats[0].file_id} in partition {stats[0].partition_path}"
    )
    assert tree_digest(archived) == before


def test_timeline_with_history_serves_archived_metadata_named_by_the_history(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    _, archived, times = _copies(hudi_table_zip, "mor_avro_v9_txns_simple_nometa", 7)
    timeline = LakeTable.open(archived).timeline()
    assert timeline.with_history("20200101000000000") is timeline  # older than everything archived
    merged = timeline.with_history(times[1])
    assert [i.timestamp for i in merged.instants[:2]] == times[:2]
    assert merged.instants[2:] == timeline.instants
    first = merged.instants[0]
    assert first.completion_time == "20260307135829538"
    assert merged.path_of(first) == f"{archived / HISTORY} (archived {times[0]} deltacommit)"
    assert merged.commit_metadata(first).write_stats()
    assert merged.is_committed(times[4]) and not merged.is_committed("20260307135900000")
    assert timeline.completion_time(times[4]) == "20260307135835085"  # the plain timeline asks the history
