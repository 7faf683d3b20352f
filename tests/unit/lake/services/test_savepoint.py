"""Savepoint creation and deletion: the exact record written, and each refusal with nothing changed."""

from __future__ import annotations

import getpass
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import SavepointError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.services.savepoint import (
    Savepoint,
    create_savepoint,
    delete_savepoint,
    savepointed_files,
    savepoints,
)
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action

# Every test here is table-version neutral: it runs on version 6 and on Hudi 1.x's version 8.
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


def _table(tmp_path: Path, partitioned: bool = True, version: int = 6) -> LakeTable:
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",) if partitioned else (),
        table_version=version,
    )


def _upsert(table: LakeTable, rows: list[tuple[str, str]], ts: int) -> str:
    batch = pa.table(
        {"id": [r[0] for r in rows], "ts": pa.array([ts] * len(rows), pa.int64()), "p": [r[1] for r in rows]}
    )
    return write(table, batch, "upsert").instant


def _hoodie(table: LakeTable) -> set[str]:
    return {p.name for p in (table.base_path / table.layout.folder).iterdir() if p.is_file()}


def _data_files(table: LakeTable) -> set[str]:
    return {
        str(p.relative_to(table.base_path))
        for p in table.base_path.rglob("*.parquet")
        if ".hoodie" not in p.relative_to(table.base_path).parts
    }


@VERSIONS
def test_savepoint_record_names_every_file_of_the_instant_per_partition(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    c0 = _upsert(table, [("a", "x"), ("b", "y")], 0)
    files_c0 = _data_files(table)
    _upsert(table, [("a", "x")], 1)  # a newer slice in x: the savepoint still names c0's
    before = int(time.time())
    point = create_savepoint(table, c0, user="alice", comment="before the migration")
    after = int(time.time())

    assert point == Savepoint(c0, frozenset(files_c0), ())
    (instant,) = table.timeline().savepoints()
    record = table.timeline().avro_record(instant)
    assert before <= record.pop("savepointedAt") <= after
    by_partition = {p: sorted(f.split("/")[1] for f in files_c0 if f.startswith(f"{p}/")) for p in "xy"}
    assert record == {
        "savepointedBy": "alice",
        "comments": "before the migration",
        "partitionMetadata": {
            "x": {"partitionPath": "x", "savepointDataFile": by_partition["x"]},
            "y": {"partitionPath": "y", "savepointDataFile": by_partition["y"]},
        },
        "version": 1,
    }
    assert list(record["partitionMetadata"]) == ["x", "y"]  # Avro maps keep their order: sorted
    assert savepoints(table.timeline()) == [Savepoint(c0, frozenset(files_c0))]
    assert savepointed_files(table.timeline()) == frozenset(files_c0)


@VERSIONS
def test_savepoint_of_an_unpartitioned_table_defaults_to_the_current_user(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, partitioned=False, version=version)
    c0 = _upsert(table, [("a", "")], 0)
    point = create_savepoint(table, c0)
    record = table.timeline().avro_record(table.timeline().savepoints()[0])
    assert record["savepointedBy"] == getpass.getuser() and record["comments"] == ""
    assert point.files == frozenset(_data_files(table)) and "/" not in next(iter(point.files))
    assert savepointed_files(table.timeline()) == point.files


@VERSIONS
def test_savepoints_fall_back_to_the_partition_key_when_partition_path_is_empty(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, version=version)
    c0 = _upsert(table, [("a", "x")], 0)
    (name,) = (f.split("/")[1] for f in _data_files(table))
    record = {
        "savepointedBy": "java",
        "savepointedAt": 1,
        "comments": "",
        "partitionMetadata": {"x": {"partitionPath": "", "savepointDataFile": [name]}},
        "version": 1,
    }
    table.store.create_savepoint(c0, timeline_avro.write_avro(timeline_avro.SAVEPOINT_METADATA, record))
    assert savepoints(table.timeline()) == [Savepoint(c0, frozenset({f"x/{name}"}))]
    # Records with no partitions, or a partition with no files (Java may write them): nothing kept.
    c1 = _upsert(table, [("a", "x")], 1)
    c2 = _upsert(table, [("a", "x")], 2)
    empty = {**record, "partitionMetadata": {}}
    table.store.create_savepoint(c1, timeline_avro.write_avro(timeline_avro.SAVEPOINT_METADATA, empty))
    no_files = {**record, "partitionMetadata": {"x": {"partitionPath": "x", "savepointDataFile": []}}}
    table.store.create_savepoint(c2, timeline_avro.write_avro(timeline_avro.SAVEPOINT_METADATA, no_files))
    assert savepoints(table.timeline())[1:] == [Savepoint(c1, frozenset()), Savepoint(c2, frozenset())]


@VERSIONS
def test_savepoint_refusals_name_the_instant_and_change_nothing(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    c0 = _upsert(table, [("a", "x")], 0)
    uri = table.uri
    create_savepoint(table, c0)
    before = _hoodie(table)
    with pytest.raises(SavepointError) as exc:
        create_savepoint(table, c0)
    assert str(exc.value) == f"{uri}: a savepoint at {c0} already exists"
    missing = "20200101000000000"
    with pytest.raises(SavepointError) as exc:
        create_savepoint(table, missing)
    assert str(exc.value) == f"{uri}: {missing} is not a completed commit on the timeline"
    # A pending commit is not a completed one.
    pending = "20300101000000000"
    table.store.create_requested(pending, Action.COMMIT)
    with pytest.raises(SavepointError) as exc:
        create_savepoint(table, pending)
    assert str(exc.value) == f"{uri}: {pending} is not a completed commit on the timeline"
    assert _hoodie(table) - before == {f"{pending}.commit.requested"}
    with pytest.raises(SavepointError) as exc:
        delete_savepoint(table, missing)
    assert str(exc.value) == f"{uri}: there is no completed savepoint at {missing}"
    delete_savepoint(table, c0)
    assert table.timeline().savepoints() == []
    with pytest.raises(SavepointError) as exc:
        delete_savepoint(table, c0)
    assert str(exc.value) == f"{uri}: there is no completed savepoint at {c0}"


@VERSIONS
def test_savepoint_of_a_clean_instant_is_refused(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, partitioned=False, version=version)
    for ts in range(3):
        _upsert(table, [("a", "")], ts)
    clean = run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    assert clean.outcome is Outcome.CLEANED
    with pytest.raises(SavepointError) as exc:
        create_savepoint(table, clean.instant)
    assert str(exc.value) == f"{table.uri}: {clean.instant} is not a completed commit on the timeline"


@VERSIONS
def test_savepoint_older_than_the_last_clean_retained_is_refused_the_retained_one_is_not(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, partitioned=False, version=version)
    c0, c1, c2 = (_upsert(table, [("a", "")], ts) for ts in range(3))
    clean = run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    assert clean.outcome is Outcome.CLEANED and clean.plan.earliest_instant_to_retain.timestamp == c2
    for old in (c0, c1):
        with pytest.raises(SavepointError) as exc:
            create_savepoint(table, old)
        assert str(exc.value) == (
            f"{table.uri}: {old} is older than {c2}, the earliest commit the last clean "
            f"({clean.instant}) retained; its files may be gone"
        )
    assert table.timeline().savepoints() == []
    assert create_savepoint(table, c2).instant == c2


@VERSIONS
def test_savepoint_of_an_instant_whose_slice_was_cleaned_names_the_slice(
    tmp_path: Path, version: int
) -> None:
    # KEEP_LATEST_FILE_VERSIONS retains no commit, so only the slice check can refuse.
    table = _table(tmp_path, version=version)
    c0, c1, c2 = (_upsert(table, [("a", "x")], ts) for ts in range(3))
    (file_id,) = {f.split("/")[1].split("_")[0] for f in _data_files(table)}
    options = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    assert run_clean(table, options).outcome is Outcome.CLEANED
    before = _hoodie(table)
    for old in (c0, c1):
        with pytest.raises(SavepointError) as exc:
            create_savepoint(table, old)
        assert str(exc.value) == (
            f"{table.uri}: cannot savepoint {old}: the file slice {old} of file group "
            f"{file_id} in partition x it reads was already cleaned"
        )
    assert _hoodie(table) == before
    assert create_savepoint(table, c2).files == frozenset(_data_files(table))


@VERSIONS
def test_savepoint_on_the_root_partition_names_it_root(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, partitioned=False, version=version)
    c0, _c1 = (_upsert(table, [("a", "")], ts) for ts in range(2))
    options = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    assert run_clean(table, options).outcome is Outcome.CLEANED
    with pytest.raises(SavepointError, match=r"in partition <root> it reads was already cleaned$"):
        create_savepoint(table, c0)


@VERSIONS
def test_savepoint_names_the_pending_cleans_it_overrides(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    import logging

    from airflow_lake_provider.lake.services import savepoint as savepoint_module

    table = _table(tmp_path, partitioned=False, version=version)
    c0, _c1, _c2, _c3 = (_upsert(table, [("a", "")], ts) for ts in range(4))
    retain_one = {"hoodie.cleaner.commits.retained": "1"}
    first = run_clean(table, retain_one, mode="schedule")  # deletes c0's and c1's slices
    second = run_clean(table, {"hoodie.cleaner.commits.retained": "2"}, mode="schedule")  # c0's only
    caplog.set_level(logging.WARNING, logger=savepoint_module.log.name)
    point = create_savepoint(table, c0)
    assert point.overrides == (first.instant, second.instant)
    assert [r.getMessage() for r in caplog.records if r.name == savepoint_module.log.name] == [
        f"savepoint {c0} of {table.uri} overrides pending clean(s) {first.instant}, {second.instant}: "
        "they will keep its files"
    ]
    caplog.clear()
    # c3's slice is the latest: no pending clean plans to delete it, nothing is logged.
    assert create_savepoint(table, _c3).overrides == ()
    assert caplog.records == []


@VERSIONS
def test_overrides_name_only_pending_cleans_not_completed_ones_or_pending_writes(
    tmp_path: Path, version: int
) -> None:
    # KEEP_LATEST_FILE_VERSIONS retains no commit, so c1 can be savepointed again after the clean.
    table = _table(tmp_path, partitioned=False, version=version)
    _c0, c1, _c2 = (_upsert(table, [("a", "")], ts) for ts in range(3))
    versions = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    scheduled = run_clean(table, versions, mode="schedule")  # plans c0's and c1's slices
    first = create_savepoint(table, c1)
    assert first.overrides == (scheduled.instant,)
    done = run_clean(table, versions, mode="execute")
    assert done.kept_for_savepoints == tuple(sorted(first.files))
    delete_savepoint(table, c1)
    # The completed clean's stored plan still names c1's files, and a write is pending: neither is
    # a pending clean to override (a pending commit has no clean plan to read).
    table.store.create_requested("20300101000000000", Action.COMMIT)
    again = create_savepoint(table, c1)
    assert again == Savepoint(c1, first.files, ())


@VERSIONS
def test_savepoints_take_the_partition_from_partition_path_over_the_map_key(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, version=version)
    c0 = _upsert(table, [("a", "x")], 0)
    (name,) = (f.split("/")[1] for f in _data_files(table))
    record = {
        "savepointedBy": "java",
        "savepointedAt": 1,
        "comments": "",
        "partitionMetadata": {"key-x": {"partitionPath": "x", "savepointDataFile": [name]}},
        "version": 1,
    }
    table.store.create_savepoint(c0, timeline_avro.write_avro(timeline_avro.SAVEPOINT_METADATA, record))
    assert savepoints(table.timeline()) == [Savepoint(c0, frozenset({f"x/{name}"}))]


@VERSIONS
def test_deleting_one_savepoint_keeps_the_others(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    c0, c1 = _upsert(table, [("a", "x")], 0), _upsert(table, [("a", "x")], 1)
    create_savepoint(table, c0)
    create_savepoint(table, c1)
    delete_savepoint(table, c0)
    assert [i.timestamp for i in table.timeline().savepoints()] == [c1]
