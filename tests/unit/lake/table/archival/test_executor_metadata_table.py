"""Data-table archival under ``lake.metadata-table.maintain``: allowed, never past the metadata
table's (MDT's) last compaction and not at all before its first (Java's archivers), writing nothing
to the MDT (Java's writes nothing there either). hudi-rs, listing through the MDT, and our reader
still read the table's rows; ``--check`` finds no difference.
"""

from __future__ import annotations

from pathlib import Path

from mdt_tables import keep_files_partition_only
from tree_digest import tree_digest

from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.metadata_table import kept_metadata_table
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.instant import Action
from tests.unit.lake.table.test_metadata_commit import (
    INDEXES,
    MAINTAIN,
    _rows,
    assert_consistent,
    assert_index_consistent,
)
from tests.unit.lake.table.test_metadata_compaction import _upserts

NAME = "mor_avro_v9_txns_simple_meta"
KEEP_FEW = {**MAINTAIN, "hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "2"}
JAVA_MDT_COMPACTION = "20260307162612567"


def _active(path: Path) -> list[str]:
    return [i.timestamp for i in LakeTable.open(path).timeline().instants]


def test_archival_stops_at_the_mdts_last_compaction(hudi_table_zip) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    before = _rows(assert_consistent(path))
    mdt = tree_digest(path / ".hoodie/metadata")
    result = run_archival(LakeTable.open(path), KEEP_FEW)
    # Every completed instant requested before Java's MDT compaction (the last one's MDT deltacommit
    # completed after it, in the new slice: Java archives it too), nothing from it on.
    assert result.archived == (
        "20260307162557587",
        "20260307162604102",
        "20260307162606034",
        "20260307162607806",
        "20260307162609526",
        "20260307162611195",
        "20260307162612542",
    )
    assert (result.keep_from, result.limited_by) == (
        JAVA_MDT_COMPACTION,
        f"the metadata table's last compaction {JAVA_MDT_COMPACTION}",
    )
    assert _active(path)[0] == "20260307162614221"
    assert tree_digest(path / ".hoodie/metadata") == mdt  # nothing written to the MDT
    assert _rows(assert_consistent(path)) == before
    assert_index_consistent(path)


def test_no_archival_before_the_mdts_first_compaction(hudi_table_zip) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    for java in (path / ".hoodie/metadata/.hoodie/timeline").glob(f"{JAVA_MDT_COMPACTION}*"):
        java.unlink()  # as if Java had not compacted the MDT: its base files belong to no instant
    active = _active(path)
    result = run_archival(LakeTable.open(path), KEEP_FEW)
    assert result.archived == ()
    assert result.reason.endswith("(limited by no compaction yet on the metadata table)")
    assert _active(path) == active


def test_archival_follows_our_mdt_compactions(hudi_table_zip) -> None:
    """After a clean (which removes the files of replaced file groups, so their replacecommits may
    go) and maintained writes that compact the MDT every third deltacommit, the automatic archival
    after each write archives up to the MDT's latest compaction and not past it."""
    path = keep_files_partition_only(hudi_table_zip("cow_v9_txns_simple_meta"), INDEXES)
    options = {**KEEP_FEW, "hoodie.metadata.compact.max.delta.commits": "3"}
    one_version = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    cleaned = run_clean(LakeTable.open(path), {**options, **one_version})
    assert cleaned.deleted_files > 0
    timeline = kept_metadata_table(LakeTable.open(path)).timeline()  # type: ignore[union-attr]
    (after_clean,) = [i.timestamp for i in timeline.filter([Action.COMMIT]) if i.timestamp > cleaned.instant]
    r1, r2, r3, r4, r5 = _upserts(path, 5, options)
    assert [r.metadata_compaction for r in (r1, r2, r3, r4, r5)] == [
        None,
        None,
        r3.metadata_compaction,
        None,
        None,
    ]
    assert r3.metadata_compaction is not None and r3.metadata_compaction > r3.instant
    # The first write archives everything before the MDT compaction the clean ran (the clean too).
    assert r1.archived[-1] == cleaned.instant and after_clean > cleaned.instant
    assert (r2.archived, r3.archived, r4.archived) == ((), (r1.instant, r2.instant), ())
    # keep.min.commits=1 would keep only r5; the MDT's last compaction (after r3) keeps r4 too.
    assert r5.archived == (r3.instant,)
    assert _active(path) == [r4.instant, r5.instant]
    assert_consistent(path)
    assert_index_consistent(path)
