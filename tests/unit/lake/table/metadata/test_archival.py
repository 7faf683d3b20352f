"""Archival of the metadata table's (MDT's) own timeline under ``lake.metadata-table.maintain``, as
Java's MDT writer archives it: keep.min/max commits of the data table plus one, the deltacommits
since the MDT's last compaction kept, and nothing at or after the data table's first active commit
or pending instant. The archived instants go to the MDT's LSM history; both readers keep reading
the table's rows through the MDT.
"""

from __future__ import annotations

from pathlib import Path

from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.table.metadata.archival import data_bound, metadata_archival_config
from airflow_lake_provider.lake.table.metadata.policy import kept_metadata_table
from airflow_lake_provider.lake.table.table import LakeTable
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    assert_consistent,
    assert_index_consistent,
)
from tests.unit.lake.table.metadata.test_compaction import _upserts

OPTIONS = {
    **MAINTAIN,
    "hoodie.metadata.compact.max.delta.commits": "3",
    "hoodie.keep.min.commits": "1",
    "hoodie.keep.max.commits": "2",
}


def _mdt_active(path: Path) -> list[tuple[str, str]]:
    timeline = kept_metadata_table(LakeTable.open(path)).timeline()  # type: ignore[union-attr]
    return [(i.timestamp, i.action.value) for i in timeline.instants]


def test_the_config_is_the_data_tables_plus_one() -> None:
    config = metadata_archival_config({"hoodie.keep.min.commits": "4", "hoodie.keep.max.commits": "7"})
    assert (config.min_commits, config.max_commits, config.max_delta_commits) == (5, 8, 10)


def test_maintained_writes_archive_the_mdt_timeline_up_to_the_data_tables_first_commit(
    hudi_table_zip,
) -> None:
    path = keep_files_partition_only(hudi_table_zip("cow_v9_txns_simple_meta"), INDEXES)
    # A clean first removes the replaced file groups' files, so the data archival is not held back
    # by their replacecommits (see metadata/test_archival).
    one_version = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    run_clean(LakeTable.open(path), {**OPTIONS, **one_version})
    w = _upserts(path, 7, OPTIONS)
    c3 = w[5].metadata_compaction
    assert c3 is not None and [r.metadata_compaction is not None for r in w] == [
        False,
        False,
        True,
        False,
        False,
        True,
        False,
    ]
    data = LakeTable.open(path).timeline()
    assert [i.timestamp for i in data.instants] == [w[5].instant, w[6].instant]
    assert data_bound(data) == (w[5].instant, f"the data table's first active commit {w[5].instant}")
    # The MDT keeps its instants from the data table's first commit: that write's deltacommit, the
    # compaction after it and the last write's deltacommit (3 commits: at most keep.max + 1).
    assert _mdt_active(path) == [(w[5].instant, "deltacommit"), (c3, "commit"), (w[6].instant, "deltacommit")]
    history = sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline/history").glob("*.parquet"))
    assert history and history[-1].split("_")[1] < w[5].instant
    assert_consistent(path)
    assert_index_consistent(path)
