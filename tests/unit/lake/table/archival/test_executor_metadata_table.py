"""Data-table archival under ``lake.metadata-table.maintain``: allowed, never past a commit that
completed after the metadata table's (MDT's) last compaction was requested and not at all before its
first compaction (Java's archivers), writing nothing to the MDT (Java's writes nothing there
either). hudi-rs, listing through the MDT, and our reader still read the table's rows; ``--check``
finds no difference.
"""

from __future__ import annotations

from pathlib import Path

from mdt_tables import keep_files_partition_only
from tree_digest import tree_digest

from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.metadata.files import read_files_partition
from airflow_lake_provider.lake.table.metadata.policy import kept_metadata_table
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from airflow_lake_provider.lake.timeline.instant import Action, State
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    _batch,
    _rows,
    assert_consistent,
    assert_index_consistent,
    hudi_rs,
)
from tests.unit.lake.table.metadata.test_compaction import _upserts

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
    # Every completed commit that completed before Java's MDT compaction was requested (Java 1.x
    # bounds by completion time): the last one, requested before it, completed after it (its MDT
    # deltacommit's log is in the slice after the compaction's base file), so it stays.
    assert result.archived == (
        "20260307162557587",
        "20260307162604102",
        "20260307162606034",
        "20260307162607806",
        "20260307162609526",
        "20260307162611195",
    )
    assert result.keep_from == "20260307162612542"
    assert result.limited_by == (
        "commit 20260307162612542, completed after the metadata table's last compaction "
        + JAVA_MDT_COMPACTION
    )
    assert _active(path)[0] == "20260307162612542"
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


# Spark's v8 table: its last deltacommit was requested before Hudi 1.0 compacted the MDT in the same
# job, and completed (data and MDT) after that compaction was requested: its MDT log is in the slice
# after the compaction's base file, valid only while the data or MDT timeline holds the instant.
MOR_V8 = "mdt_basic_mor_avro_v8_nonpartitioned"
SPARK_LAST = "20260101054337037"
SPARK_LAST_LOG = ".ccfdc9b6-b2d0-438f-a236-40b797bf07ea-0_20260101054337037.log.1_0-167-518"
V8_JAVA_MDT_COMPACTION = "20260101054337083"
V8_KEEP_FEW = {
    **MAINTAIN,
    "hoodie.metadata.compact.max.delta.commits": "3",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
}


def _upsert_id(path: Path, row_id: int, options: dict[str, str]):  # noqa: ANN202
    """A maintained upsert of the row ``row_id`` of the v8 table, its ``longField`` one higher."""
    snapshot = read_snapshot(LakeTable.open(path)).sort_by("id")
    at = snapshot.column("id").to_pylist().index(row_id)
    batch = _batch(snapshot, "id", "longField", [at], [row_id])
    return write(LakeTable.open(path), batch, "upsert", options=options)


def _mdt_deltacommits(path: Path) -> list[str]:
    timeline = kept_metadata_table(LakeTable.open(path)).timeline()  # type: ignore[union-attr]
    return [i.timestamp for i in timeline.filter([Action.DELTACOMMIT], [State.COMPLETED])]


def test_a_commit_completed_after_the_mdts_compaction_stays_active(hudi_table_zip) -> None:
    """Found by the property test: a compaction, an upsert rolled back, an upsert. Archival by the
    MDT compaction's requested time archived Spark's last deltacommit; the MDT's own archival then
    archived its MDT deltacommit too, and the files partition lost that deltacommit's log file."""
    path = keep_files_partition_only(hudi_table_zip(MOR_V8), INDEXES)
    _, compacted = run_compaction(LakeTable.open(path), MAINTAIN, force=True)
    first = _upsert_id(path, 1, V8_KEEP_FEW)
    (undone,) = rollback(LakeTable.open(path), first.instant, force=True, options=V8_KEEP_FEW)
    second = _upsert_id(path, 5, V8_KEEP_FEW)
    assert SPARK_LAST_LOG in read_files_partition(open_storage(path)).files["."]
    assert_consistent(path)
    assert_index_consistent(path, partitions=False)
    # Everything before Spark's last deltacommit: it completed after the MDT compaction's request.
    assert first.archived == (
        "20260101054316354",
        "20260101054325431",
        "20260101054330718",
        "20260101054332333",
        "20260101054333805",
        "20260101054335228",
        "20260101054335805",
    )
    assert second.archived == ()
    assert _active(path) == [SPARK_LAST, compacted.instant, undone.instant, second.instant]
    assert SPARK_LAST in _mdt_deltacommits(path)


def test_rows_of_a_log_in_the_latest_slice_stay_listed(hudi_table_zip) -> None:
    """Two upserts of other rows, archival keeping one commit: Spark's last deltacommit (its log in
    the latest slice of the table's one file group) stays active in both timelines, so hudi-rs,
    listing through the MDT, still reads the row it updated (it read the base file's older row when
    both were archived)."""
    path = keep_files_partition_only(hudi_table_zip(MOR_V8), INDEXES)
    # (the data table's compaction trigger keeping one deltacommit: its last compaction may go)
    options = {
        **KEEP_FEW,
        "hoodie.metadata.compact.max.delta.commits": "3",
        "hoodie.compact.inline.max.delta.commits": "1",
    }
    first = _upsert_id(path, 1, options)
    second = _upsert_id(path, 5, options)
    expected = [
        {"id": 1, "longField": 1234567892, "_hoodie_commit_time": first.instant},
        {"id": 4, "longField": 987654322, "_hoodie_commit_time": SPARK_LAST},
        {"id": 5, "longField": 1122334456, "_hoodie_commit_time": second.instant},
    ]
    columns = ["id", "longField", "_hoodie_commit_time"]
    assert hudi_rs(path).select(columns).sort_by("id").to_pylist() == expected
    assert read_snapshot(LakeTable.open(path)).select(columns).sort_by("id").to_pylist() == expected
    assert_consistent(path)
    assert SPARK_LAST not in first.archived and second.archived == ()
    assert _active(path) == [SPARK_LAST, first.instant, second.instant]
    assert SPARK_LAST in _mdt_deltacommits(path)
