"""Clean planner and executor on Hudi's own scenarios, with exact files kept and deleted."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest
from crash_support import crashing
from hudi import HudiReadOptions, HudiTableBuilder

from airflow_lake_provider.lake.errors import (
    CleanConfigError,
    ServiceBusyError,
    SnapshotCleanedError,
    UnsafePathError,
)
from airflow_lake_provider.lake.services.clean.config import CleanConfig, CleanPolicy
from airflow_lake_provider.lake.services.clean.executor import pending_cleans, run_clean
from airflow_lake_provider.lake.services.clean.plan import CleanPlan
from airflow_lake_provider.lake.services.clean.planner import earliest_commit_to_retain, partitions_to_scan
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome as CompactionOutcome
from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State, instant_to_datetime

# Table-version neutral tests run on version 6 and on Hudi 1.x's version 8 (timeline layout 2).
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


def _table(tmp_path: Path, kind: str = "cow", partitioned: bool = False, version: int = 6) -> LakeTable:
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",) if partitioned else (),
        table_version=version,
    )


def _timeline_names(table: LakeTable) -> list[str]:
    return sorted(os.listdir(table.base_path / table.layout.folder))


def _upsert(table: LakeTable, ids: list[str], ts: int, part: str = "a") -> str:
    batch = pa.table({"id": ids, "ts": pa.array([ts] * len(ids), pa.int64()), "p": [part] * len(ids)})
    return write(table, batch, "upsert").instant


def _data_files(table: LakeTable) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(table.base_path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for f in files:
            if f.endswith(".parquet") or ".log." in f:
                out.add(os.path.relpath(os.path.join(root, f), table.base_path))
    return out


def _base_instants(table: LakeTable) -> list[str]:
    return sorted(f.rsplit("_", 1)[1].split(".")[0] for f in _data_files(table) if f.endswith(".parquet"))


def _snapshot(table: LakeTable, as_of: str | None = None) -> list[tuple]:
    t = read_snapshot(table, as_of=as_of)
    return sorted(zip(t.column("_hoodie_record_key").to_pylist(), t.column("ts").to_pylist(), strict=True))


@VERSIONS
def test_keep_latest_commits_eleven_commits_ten_retained_earliest_is_commit_two(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, version=version)
    commits = [_upsert(table, ["a", "b"], i) for i in range(11)]
    earliest = earliest_commit_to_retain(table.timeline(), CleanConfig(), dt.datetime.now(dt.timezone.utc))
    assert earliest is not None and earliest.timestamp == commits[1]
    # Slice 1 is the last one before commit 2: a query that started before it may read it.
    assert run_clean(table).outcome is Outcome.NO_WORK
    assert _base_instants(table) == commits


@VERSIONS
def test_keep_latest_commits_twelve_commits_deletes_exactly_the_oldest_slice(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, version=version)
    commits = [_upsert(table, ["a", "b"], i) for i in range(12)]
    before = {c: _snapshot(table, c) for c in commits[2:]}
    result = run_clean(table)
    assert result.outcome is Outcome.CLEANED
    assert result.plan is not None and result.plan.earliest_instant_to_retain.timestamp == commits[2]
    assert _base_instants(table) == commits[1:]
    assert result.deleted_files == 1
    for c, rows in before.items():  # every retained instant still reads exactly as before
        assert _snapshot(table, c) == rows
    clean = table.timeline().last_completed(Action.CLEAN)
    meta = timeline_avro.read_avro(table.timeline().read_bytes(clean), "clean")
    assert meta["earliestCommitToRetain"] == commits[2]
    assert meta["totalFilesDeleted"] == 1
    (deleted,) = meta["partitionMetadata"][""]["successDeleteFiles"]
    assert deleted.endswith(f"_{commits[0]}.parquet")
    assert meta["partitionMetadata"][""]["failedDeleteFiles"] == []


@VERSIONS
def test_keep_latest_commits_untouched_group_keeps_its_single_slice(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, partitioned=True, version=version)
    _upsert(table, ["cold"], 0, part="old")
    commits = [_upsert(table, ["hot"], i, part="new") for i in range(4)]
    run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    files = _data_files(table)
    assert sum(f.startswith("old/") for f in files) == 1
    assert sorted(f.rsplit("_", 1)[1][:17] for f in files if f.startswith("new/")) == commits[2:]


@VERSIONS
def test_keep_latest_file_versions_keeps_newest_versions(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    commits = [_upsert(table, ["a"], i) for i in range(5)]
    result = run_clean(
        table,
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "2"},
    )
    assert result.outcome is Outcome.CLEANED and result.deleted_files == 3
    assert _base_instants(table) == commits[3:]
    assert _snapshot(table) == [("a", 4)]


@VERSIONS
def test_keep_latest_by_hours_uses_the_injected_clock(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    commits = [_upsert(table, ["a"], i) for i in range(4)]
    # "now" is 10 hours after commit 3, retention 10 hours: commit 3 is the earliest retained.
    now = instant_to_datetime(commits[2]) + dt.timedelta(hours=10)
    result = run_clean(
        table,
        {"hoodie.cleaner.policy": "KEEP_LATEST_BY_HOURS", "hoodie.cleaner.hours.retained": "10"},
        now=now,
    )
    assert result.plan is not None and result.plan.earliest_instant_to_retain.timestamp == commits[2]
    assert _base_instants(table) == commits[1:]


@VERSIONS
def test_savepointed_slice_is_kept_until_the_savepoint_is_deleted(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    commits = [_upsert(table, ["a"], i) for i in range(5)]
    create_savepoint(table, commits[0])
    saved = _snapshot(table, commits[0])
    run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    assert _base_instants(table) == [commits[0], commits[3], commits[4]]
    assert _snapshot(table, commits[0]) == saved
    delete_savepoint(table, commits[0])
    _upsert(table, ["a"], 9)
    run_clean(table, {"hoodie.cleaner.commits.retained": "1"})  # full scan: the savepoint set changed
    assert commits[0] not in _base_instants(table)


def _request_compaction(
    table: LakeTable, partition: str, file_id: str, base_instant: str, logs: list[str]
) -> str:
    plan = {
        "operations": [
            {
                "baseInstantTime": base_instant,
                "deltaFilePaths": logs,
                "dataFilePath": next(
                    f
                    for f in os.listdir(table.base_path / partition)
                    if f.startswith(file_id) and f.endswith(f"_{base_instant}.parquet")
                ),
                "fileId": file_id,
                "partitionPath": partition,
                "metrics": {},
                "bootstrapFilePath": None,
            }
        ],
        "extraMetadata": None,
        "version": 2,
    }
    t = table.clock.next(after=table.timeline().latest_time)
    # a test's stand-in for a scheduler
    table.store.create_requested(
        t, Action.COMPACTION, timeline_avro.write_avro(timeline_avro.COMPACTION_PLAN, plan)
    )
    return t


@VERSIONS
def test_pending_compaction_inputs_are_kept(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, kind="mor", partitioned=True, version=version)
    _upsert(table, ["a"], 0)
    _upsert(table, ["a"], 1)
    view = table.file_system_view()
    group = view.file_groups()[0]
    slice_ = group.latest_slice
    c = _request_compaction(
        table, group.partition, group.file_id, slice_.base_instant, [f.file_name for f in slice_.log_files]
    )
    before = _data_files(table)
    result = run_clean(
        table,
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
    )
    assert result.outcome is Outcome.NO_WORK
    assert _data_files(table) == before
    assert c in {i.timestamp for i in table.timeline().pending_compactions()}


def _replace(table: LakeTable, partition: str, file_ids: list[str]) -> str:
    # a test's stand-in for an insert_overwrite
    return _replace_in_scope(table, partition, file_ids)


def _replace_in_scope(table: LakeTable, partition: str, file_ids: list[str]) -> str:
    t = table.clock.next(after=table.timeline().latest_time)
    requested = table.store.create_requested(
        t,
        Action.REPLACECOMMIT,
        timeline_avro.write_avro(
            timeline_avro.REQUESTED_REPLACE_METADATA,
            {
                "operationType": "INSERT_OVERWRITE",
                "clusteringPlan": None,
                "extraMetadata": None,
                "version": 1,
            },
        ),
    )
    inflight = table.store.transition_to_inflight(requested)
    schema = table.timeline().latest_schema()
    meta = CommitMetadata("INSERT_OVERWRITE", {}, {"schema": schema}, False, {partition: tuple(file_ids)})
    table.store.transition_to_completed(inflight, meta.to_bytes(avro=table.layout.has_completion_times))
    return t


@VERSIONS
def test_replaced_file_groups_are_cleaned_once_older_than_earliest_retained(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, partitioned=True, version=version)
    _upsert(table, ["a", "b"], 0, part="x")
    _upsert(table, ["a"], 1, part="x")
    group = table.file_system_view().file_groups("x")[0]
    _replace(table, "x", [group.file_id])
    assert _snapshot(table) == []
    _upsert(table, ["c"], 2, part="y")
    _upsert(table, ["c"], 3, part="y")
    result = run_clean(table, {"hoodie.cleaner.commits.retained": "2"})
    assert result.outcome is Outcome.CLEANED
    assert not any(f.startswith("x/") for f in _data_files(table))
    assert len([f for f in _data_files(table) if f.startswith("y/")]) == 2


@VERSIONS
def test_incremental_mode_scans_only_partitions_written_since_last_clean(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path, partitioned=True, version=version)
    for i in range(3):
        _upsert(table, ["a"], i, part="one")
        _upsert(table, ["b"], i, part="two")
    run_clean(table, {"hoodie.cleaner.commits.retained": "1"})  # retains from the last commit (to "two")
    for i in range(3, 6):
        _upsert(table, ["b"], i, part="two")
    timeline = table.timeline()
    cfg = CleanConfig(commits_retained=1)
    earliest = earliest_commit_to_retain(timeline, cfg, dt.datetime.now(dt.timezone.utc))
    last = timeline_avro.read_avro(timeline.read_bytes(timeline.last_completed(Action.CLEAN)), "clean")
    assert partitions_to_scan(timeline, cfg, earliest, last, []) == ["two"]
    assert (
        partitions_to_scan(timeline, CleanConfig(commits_retained=1, incremental=False), earliest, last, [])
        is None
    )
    assert (
        partitions_to_scan(timeline, cfg, earliest, last, ["20240101000000000"]) is None
    )  # savepoints changed
    changed = CleanConfig(policy=CleanPolicy.KEEP_LATEST_BY_HOURS)
    assert partitions_to_scan(timeline, changed, earliest, last, []) is None  # policy changed: scan all


@VERSIONS
def test_interrupted_clean_is_finished_by_next_run_not_replanned(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    commits = [_upsert(table, ["a"], i) for i in range(5)]

    def crashing(tbl, plan):
        raise RuntimeError("worker lost")

    with pytest.raises(RuntimeError):
        run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, deleter=crashing)
    pending = pending_cleans(table.timeline())
    assert len(pending) == 1 and pending[0].state.name == "INFLIGHT"
    assert _base_instants(table) == commits  # nothing deleted yet
    result = run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    assert result.finished_pending == (pending[0].timestamp,)
    assert _base_instants(table) == commits[3:]
    assert [i.timestamp for i in table.timeline().filter([Action.CLEAN])] == [pending[0].timestamp]


@pytest.mark.parametrize("bad", ["../outside.parquet", ".hoodie/hoodie.properties", "/etc/passwd"])
@VERSIONS
def test_plan_naming_a_path_outside_the_table_or_in_hoodie_is_refused(
    tmp_path: Path, bad: str, version: int
) -> None:
    table = _table(tmp_path, version=version)
    _upsert(table, ["a"], 0)
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"keep me")
    path = bad if bad.startswith("/") else f"{table.base_path}/{bad}"
    record = {
        "earliestInstantToRetain": None,
        "lastCompletedCommitTimestamp": "",
        "policy": "KEEP_LATEST_COMMITS",
        "filesToBeDeletedPerPartition": {},
        "version": 2,
        "filePathsToBeDeletedPerPartition": {"": [{"filePath": path, "isBootstrapBaseFile": False}]},
        "partitionsToBeDeleted": [],
        "extraMetadata": None,
    }
    t = table.clock.next(after=table.timeline().latest_time)
    table.store.create_requested(
        t, Action.CLEAN, timeline_avro.write_avro(timeline_avro.CLEANER_PLAN, record)
    )
    hoodie_before = sorted(os.listdir(table.base_path / ".hoodie")), _timeline_names(table)
    with pytest.raises(UnsafePathError):
        run_clean(table)
    assert outside.read_bytes() == b"keep me"
    assert (table.base_path / ".hoodie" / "hoodie.properties").exists()
    assert (sorted(os.listdir(table.base_path / ".hoodie")), _timeline_names(table)) == hoodie_before


@VERSIONS
def test_clean_plan_file_parses_with_fastavro_under_hudis_schema(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    for i in range(4):
        _upsert(table, ["a"], i)
    result = run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, mode="schedule")
    assert result.outcome is Outcome.SCHEDULED
    requested = Instant(result.instant, State.REQUESTED, Action.CLEAN)
    with open(table.base_path / table.layout.instant_path(requested), "rb") as fh:
        reader = fastavro.reader(fh)
        (record,) = list(reader)
    assert reader.writer_schema["name"] == "org.apache.hudi.avro.model.HoodieCleanerPlan"
    assert record["policy"] == "KEEP_LATEST_COMMITS" and record["version"] == 2
    entries = record["filePathsToBeDeletedPerPartition"][""]
    assert len(entries) == 2  # slices 1 and 2; slice 3 is the last before the retained commit 4
    assert all(e["filePath"].startswith(str(table.base_path) + "/") for e in entries)
    plan = CleanPlan.from_avro(record, str(table.base_path))
    assert plan.files_per_partition == result.plan.files_per_partition


@VERSIONS
def test_dry_run_writes_and_deletes_nothing(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    for i in range(4):
        _upsert(table, ["a"], i)
    hoodie = sorted(os.listdir(table.base_path / ".hoodie")), _timeline_names(table)
    files = _data_files(table)
    result = run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, dry_run=True)
    assert result.outcome is Outcome.PLANNED and result.plan.file_count == 2
    assert (sorted(os.listdir(table.base_path / ".hoodie")), _timeline_names(table)) == hoodie
    assert _data_files(table) == files


def test_clean_config_accepts_hudi_1x_aliases_and_rejects_bad_values() -> None:
    cfg = CleanConfig.from_options(
        {"hoodie.clean.policy": "keep_latest_file_versions", "hoodie.clean.fileversions.retained": "5"}
    )
    assert cfg.policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS and cfg.file_versions_retained == 5
    with pytest.raises(CleanConfigError, match="hoodie.cleaner.commits.retained"):
        CleanConfig.from_options({"hoodie.cleaner.commits.retained": "0"})
    with pytest.raises(CleanConfigError, match="KEEP_EVERYTHING"):
        CleanConfig.from_options({"hoodie.cleaner.policy": "KEEP_EVERYTHING"})


@VERSIONS
def test_second_concurrent_clean_is_refused(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, version=version)
    _upsert(table, ["a"], 0)
    with (
        table.store.exclusive("clean"),
        pytest.raises(ServiceBusyError, match="another clean"),
    ):
        run_clean(table)


def _hudi_rs_rows(table: LakeTable, as_of: str | None = None) -> list[tuple]:
    builder = HudiTableBuilder.from_base_uri(str(table.base_path)).build()
    batches = builder.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else builder.read()
    theirs = pa.Table.from_batches(batches)
    return sorted(
        zip(theirs.column("_hoodie_record_key").to_pylist(), theirs.column("ts").to_pylist(), strict=True)
    )


@VERSIONS
def test_cleaned_mor_table_keeps_exactly_the_slices_retained_commits_read(
    tmp_path: Path, version: int
) -> None:
    """Merge-on-read: an insert, then three rounds of upsert (a log file) and compaction (a new slice).
    Retaining one commit (the last compaction, C3) deletes the two slices before the last one before
    it: their base and log files, nothing else; ours and hudi-rs read the same before and after."""
    table = _table(tmp_path, kind="mor", partitioned=True, version=version)
    c0 = _upsert(table, ["a", "b"], 0)
    slices = [c0]
    upserts = []
    for ts in range(1, 4):
        upserts.append(_upsert(table, ["a", "b"], ts))
        scheduled, done = run_compaction(table, force=True)
        assert done.outcome is CompactionOutcome.COMPLETED
        slices.append(scheduled.instant)
    c0, c1, c2, c3 = slices
    files = _data_files(table)
    (fid,) = {f.split("/")[1].split("_")[0] for f in files if f.endswith(".parquet")}
    # A log is named for its slice's base instant (v6) or for its own deltacommit (v8).
    log_names = {at: at if version == 6 else upserts[i] for i, at in enumerate(slices[:-1])}
    by_slice = {
        at: {f for f in files if f.endswith(f"_{at}.parquet") or f"{fid}_{log_names.get(at)}.log." in f}
        for at in slices
    }
    assert [len(by_slice[at]) for at in slices] == [2, 2, 2, 1]  # base + log, ..., the last base alone
    assert by_slice[c0] | by_slice[c1] | by_slice[c2] | by_slice[c3] == files
    as_of_u3 = _snapshot(table, upserts[2])
    assert as_of_u3 == _hudi_rs_rows(table, upserts[2]) == [("a", 3), ("b", 3)]

    result = run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    assert result.outcome is Outcome.CLEANED
    assert result.plan is not None and result.plan.earliest_instant_to_retain.timestamp == c3
    assert result.deleted_files == 4 and result.failed_files == 0
    assert _data_files(table) == by_slice[c2] | by_slice[c3]  # C2 is the last slice before C3
    meta = timeline_avro.read_avro(
        table.timeline().read_bytes(table.timeline().last_completed(Action.CLEAN)), "clean"
    )
    deleted = meta["partitionMetadata"]["a"]
    assert sorted(deleted["successDeleteFiles"]) == sorted(
        f.split("/")[1] for f in by_slice[c0] | by_slice[c1]
    )
    assert deleted["failedDeleteFiles"] == [] and meta["totalFilesDeleted"] == 4
    assert _snapshot(table) == _hudi_rs_rows(table) == [("a", 3), ("b", 3)]
    assert _snapshot(table, upserts[2]) == _hudi_rs_rows(table, upserts[2]) == as_of_u3
    with pytest.raises(SnapshotCleanedError):
        read_snapshot(table, as_of=upserts[0])


@VERSIONS
def test_files_a_killed_clean_already_deleted_count_as_deleted_when_it_is_finished(
    tmp_path: Path, version: int
) -> None:
    """The run dies right after its first delete; the next run finishes the stored plan: every planned
    file counts as deleted (the one already gone too), none as failed."""
    table = _table(tmp_path, version=version)
    commits = [_upsert(table, ["a"], i) for i in range(5)]
    with pytest.raises(SimulatedCrash):  # requested, inflight, the first delete
        run_clean(crashing(table, 3), {"hoodie.cleaner.commits.retained": "1"})
    assert len(_base_instants(table)) == 4
    (pending,) = pending_cleans(table.timeline())
    result = run_clean(table, mode="execute")
    assert result.outcome is Outcome.CLEANED and result.instant == pending.timestamp
    assert (result.deleted_files, result.failed_files) == (3, 0)
    assert _base_instants(table) == commits[3:]
    meta = timeline_avro.read_avro(
        table.timeline().read_bytes(table.timeline().last_completed(Action.CLEAN)), "clean"
    )
    part = meta["partitionMetadata"][""]
    assert sorted(f.rsplit("_", 1)[1][:17] for f in part["successDeleteFiles"]) == commits[:3]
    assert part["failedDeleteFiles"] == [] and meta["totalFilesDeleted"] == 3
