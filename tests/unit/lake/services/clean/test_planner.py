"""The clean planner's exact answers: stored plans (ours, Java v1 and v2), retention edges, guards."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import MappingProxyType

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.services.clean.config import CleanConfig, CleanPolicy
from airflow_lake_provider.lake.services.clean.plan import CleanPlan
from airflow_lake_provider.lake.services.clean.planner import (
    earliest_commit_to_retain,
    held_back_by,
    partitions_to_scan,
)
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import (
    Action,
    Instant,
    InstantClock,
    State,
    format_instant,
    instant_to_datetime,
)

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)


def _plan(**kw: object) -> CleanPlan:
    fields = {
        "earliest_instant_to_retain": Instant("20240101000000000", State.COMPLETED, Action.COMMIT),
        "last_completed_commit": "20240102000000000",
        "policy": CleanPolicy.KEEP_LATEST_COMMITS,
        "files_per_partition": MappingProxyType({"a": ("a/f1.parquet", "a/f2.parquet"), "": ("g.parquet",)}),
        "file_sizes": MappingProxyType({"a/f1.parquet": 10, "a/f2.parquet": 5}),
        "extra_metadata": MappingProxyType({"lake.policy": "KEEP_LATEST_COMMITS"}),
    }
    fields.update(kw)
    return CleanPlan(**fields)  # type: ignore[arg-type]


def test_plan_to_avro_is_hudis_v2_record_with_absolute_paths() -> None:
    record = _plan().to_avro("/data/t/")
    assert record == {
        "earliestInstantToRetain": {
            "timestamp": "20240101000000000",
            "action": "commit",
            "state": "COMPLETED",
        },
        "lastCompletedCommitTimestamp": "20240102000000000",
        "policy": "KEEP_LATEST_COMMITS",
        "filesToBeDeletedPerPartition": {},
        "version": 2,
        "filePathsToBeDeletedPerPartition": {
            "a": [
                {"filePath": "/data/t/a/f1.parquet", "isBootstrapBaseFile": False},
                {"filePath": "/data/t/a/f2.parquet", "isBootstrapBaseFile": False},
            ],
            "": [{"filePath": "/data/t/g.parquet", "isBootstrapBaseFile": False}],
        },
        "partitionsToBeDeleted": [],
        "extraMetadata": {"lake.policy": "KEEP_LATEST_COMMITS"},
    }
    bare = _plan(earliest_instant_to_retain=None, extra_metadata=MappingProxyType({})).to_avro("/data/t")
    assert bare["earliestInstantToRetain"] is None and bare["extraMetadata"] is None
    assert bare["filePathsToBeDeletedPerPartition"][""][0]["filePath"] == "/data/t/g.parquet"
    back = CleanPlan.from_avro(record, "/data/t")
    assert back == _plan() and back.file_sizes == {}  # sizes are not stored
    # Only slashes are trimmed from the base path, whatever its last letters.
    odd = _plan().to_avro("/data/tX/")["filePathsToBeDeletedPerPartition"]
    assert odd[""] == [{"filePath": "/data/tX/g.parquet", "isBootstrapBaseFile": False}]
    assert CleanPlan.from_avro(_plan().to_avro("/data/tX"), "/data/tX/") == _plan()


def test_plan_from_java_records_v1_names_and_file_scheme_paths() -> None:
    record = {
        "earliestInstantToRetain": {"timestamp": "20240101000000000", "action": "deltacommit", "state": None},
        "lastCompletedCommitTimestamp": None,
        "policy": None,
        "filePathsToBeDeletedPerPartition": {
            "a": [{"filePath": "file:/data/t/a/f1.parquet"}, {"filePath": "file:///data/t/a/f2.parquet"}],
            "b": [{"filePath": "/elsewhere/b/f3.parquet"}, {"filePath": None}],
        },
        # v1 (file names): used only for partitions the v2 field does not name.
        "filesToBeDeletedPerPartition": {"a": ["ignored.parquet"], "c": ["f4.parquet"], "": ["f5.parquet"]},
        "extraMetadata": None,
    }
    plan = CleanPlan.from_avro(record, "/data/t/")
    assert plan.earliest_instant_to_retain == Instant(
        "20240101000000000", State.COMPLETED, Action.DELTACOMMIT
    )
    assert plan.last_completed_commit == "" and plan.policy is CleanPolicy.KEEP_LATEST_COMMITS
    assert dict(plan.files_per_partition) == {
        "a": ("a/f1.parquet", "a/f2.parquet"),
        "b": ("/elsewhere/b/f3.parquet", ""),  # not the table's: returned as is, the executor refuses it
        "c": ("c/f4.parquet",),
        "": ("f5.parquet",),
    }
    assert plan.extra_metadata == {}
    record["earliestInstantToRetain"] = {"timestamp": "", "action": "commit", "state": "COMPLETED"}
    record["policy"] = "KEEP_LATEST_FILE_VERSIONS"
    again = CleanPlan.from_avro(record, "/data/t")
    assert again.earliest_instant_to_retain is None and again.policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS
    record["earliestInstantToRetain"] = {
        "timestamp": "20240101000000000",
        "action": "commit",
        "state": "INFLIGHT",
    }
    assert CleanPlan.from_avro(record, "/data/t").earliest_instant_to_retain.state is State.INFLIGHT
    assert CleanPlan.from_avro({}, "/data/t").files_per_partition == {}


def test_plan_without_kept_files_drops_emptied_partitions_and_summary_counts_bytes() -> None:
    plan = _plan()
    assert plan.file_count == 3
    assert plan.summary() == {"": {"files": 1, "bytes": 0}, "a": {"files": 2, "bytes": 15}}
    assert list(plan.summary()) == ["", "a"]
    rest = plan.without(frozenset({"a/f1.parquet", "g.parquet"}))
    assert dict(rest.files_per_partition) == {"a": ("a/f2.parquet",)} and rest.file_count == 1
    assert rest.summary() == {"a": {"files": 1, "bytes": 5}}
    assert rest.earliest_instant_to_retain == plan.earliest_instant_to_retain
    assert plan.without(frozenset()).files_per_partition == plan.files_per_partition


def _table(tmp_path: Path) -> LakeTable:
    ticks = iter(range(10**6))
    clock = InstantClock(
        now=lambda: dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=next(ticks))
    )
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        clock=clock,
    )


def _upsert(table: LakeTable, ts: int) -> str:
    return write(table, pa.table({"id": ["a"], "ts": pa.array([ts], pa.int64())}), "upsert").instant


def test_keep_latest_commits_retains_exactly_n_commits(tmp_path: Path) -> None:
    table = _table(tmp_path)
    c = [_upsert(table, ts) for ts in range(3)]
    timeline = table.timeline()
    assert earliest_commit_to_retain(timeline, CleanConfig(commits_retained=3), NOW) is None
    assert earliest_commit_to_retain(timeline, CleanConfig(commits_retained=2), NOW).timestamp == c[1]
    assert earliest_commit_to_retain(timeline, CleanConfig(commits_retained=1), NOW).timestamp == c[2]
    versions = CleanConfig(policy=CleanPolicy.KEEP_LATEST_FILE_VERSIONS)
    assert earliest_commit_to_retain(timeline, versions, NOW) is None
    assert held_back_by(timeline, versions, NOW) == []


def test_keep_latest_by_hours_cutoff_is_inclusive(tmp_path: Path) -> None:
    table = _table(tmp_path)
    c = [_upsert(table, ts) for ts in range(2)]
    timeline = table.timeline()
    hours = CleanConfig(policy=CleanPolicy.KEEP_LATEST_BY_HOURS, hours_retained=2)
    at_c1 = instant_to_datetime(c[1]) + dt.timedelta(hours=2)  # c1 is exactly at the cutoff
    assert earliest_commit_to_retain(timeline, hours, at_c1).timestamp == c[1]
    later = at_c1 + dt.timedelta(milliseconds=1)
    assert earliest_commit_to_retain(timeline, hours, later) is None  # every commit is older


def test_keep_latest_by_hours_reaching_before_year_one_retains_every_commit(tmp_path: Path) -> None:
    """More hours than lie between year 1 and now: no instant time can be formed for the cutoff,
    and every commit is within the hours retained, the oldest first."""
    table = _table(tmp_path)
    c = [_upsert(table, ts) for ts in range(2)]
    hours = CleanConfig(policy=CleanPolicy.KEEP_LATEST_BY_HOURS, hours_retained=10**8)
    assert earliest_commit_to_retain(table.timeline(), hours, NOW).timestamp == c[0]


def _between(older: str, newer: str) -> str:
    """An instant time between two commits (the table's clock ticks a second a commit)."""
    at = format_instant(instant_to_datetime(older) + dt.timedelta(milliseconds=500))
    assert older < at < newer
    return at


def test_pending_writes_move_the_earliest_commit_back(tmp_path: Path) -> None:
    table = _table(tmp_path)
    c0, c1, c2, c3 = (_upsert(table, ts) for ts in range(4))
    # Created after the writes (a write rolls back older failed ones), timed between c1 and c2.
    pending = _between(c1, c2)
    table.store.create_requested(pending, Action.COMMIT)
    timeline = table.timeline()
    one, three, four = (CleanConfig(commits_retained=n) for n in (1, 3, 4))
    # Retaining from c3, but the pending write (older) may need slices older than it: back to c1.
    assert earliest_commit_to_retain(timeline, one, NOW).timestamp == c1
    assert [i.timestamp for i in held_back_by(timeline, one, NOW)] == [pending]
    # Retaining from c1: the pending write is newer, nothing moves.
    assert earliest_commit_to_retain(timeline, three, NOW).timestamp == c1
    assert held_back_by(timeline, three, NOW) == []
    assert earliest_commit_to_retain(timeline, four, NOW) is None and held_back_by(timeline, four, NOW) == []
    assert c0 < c1


def test_the_oldest_of_several_pending_writes_sets_the_earliest_commit(tmp_path: Path) -> None:
    """Two failed writes left pending (LAZY/NEVER failed-write policies, or Java writers): the older
    one decides, so slices it may read stay."""
    table = _table(tmp_path)
    c0, c1, c2, c3 = (_upsert(table, ts) for ts in range(4))
    older, newer = _between(c0, c1), _between(c2, c3)
    table.store.create_requested(newer, Action.DELTACOMMIT)
    table.store.create_requested(older, Action.COMMIT)
    timeline = table.timeline()
    one = CleanConfig(commits_retained=1)
    assert earliest_commit_to_retain(timeline, one, NOW).timestamp == c0
    assert [i.timestamp for i in held_back_by(timeline, one, NOW)] == [older, newer]


def test_pending_write_older_than_every_commit_leaves_nothing_to_clean(tmp_path: Path) -> None:
    table = _table(tmp_path)
    c0, _c1, _c2 = (_upsert(table, ts) for ts in range(3))
    pending = format_instant(instant_to_datetime(c0) - dt.timedelta(seconds=1))
    table.store.create_requested(pending, Action.DELTACOMMIT)
    one = CleanConfig(commits_retained=1)
    assert earliest_commit_to_retain(table.timeline(), one, NOW) is None
    assert [i.timestamp for i in held_back_by(table.timeline(), one, NOW)] == [pending]


def test_a_pending_clean_moves_nothing_back(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _c0, c1, c2, c3 = (_upsert(table, ts) for ts in range(4))
    table.store.create_requested(_between(c1, c2), Action.CLEAN)
    one = CleanConfig(commits_retained=1)
    assert earliest_commit_to_retain(table.timeline(), one, NOW).timestamp == c3
    assert held_back_by(table.timeline(), one, NOW) == []


def test_partitions_to_scan_edges(tmp_path: Path) -> None:
    table = _table(tmp_path)
    c = [_upsert(table, ts) for ts in range(3)]
    timeline = table.timeline()
    cfg = CleanConfig(commits_retained=1)
    earliest = Instant(c[2], State.COMPLETED, Action.COMMIT)
    last = {"earliestCommitToRetain": c[1], "extraMetadata": {"lake.policy": "KEEP_LATEST_COMMITS"}}
    assert partitions_to_scan(timeline, cfg, earliest, last, []) == [""]  # c1 wrote the root partition
    assert partitions_to_scan(timeline, cfg, None, last, []) == []
    assert partitions_to_scan(timeline, cfg, earliest, None, []) is None  # first clean: everything
    versions = CleanConfig(policy=CleanPolicy.KEEP_LATEST_FILE_VERSIONS)
    assert partitions_to_scan(timeline, versions, None, last, []) is None
    assert partitions_to_scan(timeline, cfg, earliest, {**last, "earliestCommitToRetain": None}, []) is None
    assert partitions_to_scan(timeline, cfg, earliest, {**last, "extraMetadata": None}, []) is None
    # [E0, E1): nothing was written from c2 on before c2.
    same = {**last, "earliestCommitToRetain": c[2]}
    assert partitions_to_scan(timeline, cfg, earliest, same, []) == []
    # The savepoints the last clean saw, in sorted order, are compared as one string.
    seen = {
        **last,
        "extraMetadata": {"lake.policy": "KEEP_LATEST_COMMITS", "lake.savepoints": f"{c[0]},{c[1]}"},
    }
    assert partitions_to_scan(timeline, cfg, earliest, seen, [c[1], c[0]]) == [""]
    assert partitions_to_scan(timeline, cfg, earliest, seen, [c[0]]) is None


def test_the_planner_itself_leaves_savepointed_files_out(tmp_path: Path) -> None:
    # The executor would keep them too (a savepoint made after planning); here the plan never names them.
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.services.clean.result import Outcome
    from airflow_lake_provider.lake.services.savepoint import create_savepoint

    table = _table(tmp_path)
    c = [_upsert(table, ts) for ts in range(4)]
    point = create_savepoint(table, c[1])
    retain_one = {"hoodie.cleaner.commits.retained": "1"}
    preview = run_clean(table, retain_one, dry_run=True)
    planned = {p for paths in preview.plan.files_per_partition.values() for p in paths}
    assert len(planned) == 1 and not planned & point.files  # c0's slice; c1's is savepointed
    done = run_clean(table, retain_one)
    assert done.outcome is Outcome.CLEANED and done.deleted_files == 1 and done.kept_for_savepoints == ()


def test_a_slice_without_a_base_file_is_cleaned_by_its_log_files(tmp_path: Path) -> None:
    """Other engines write file groups into log files only: a doomed slice then has no base file."""
    import shutil

    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.services.savepoint import create_savepoint

    table = LakeTable.create(
        tmp_path / "m", name="m", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    c0, c1, c2 = _upsert(table, 0), _upsert(table, 1), _upsert(table, 2)
    log = min(p for p in table.base_path.iterdir() if ".log." in p.name)
    file_id = "00000000-0000-0000-0000-000000000001-0"
    tail = log.name.split(".log.", 1)[1]
    old, middle, new = (f".{file_id}_{at}.log.{tail}" for at in (c0, c1, c2))
    for name in (old, middle, new):
        shutil.copyfile(log, table.base_path / name)
    versions = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    # Savepoints are checked against log-only slices too; the savepointed slice is not a kept version.
    point = create_savepoint(table, c2)
    assert new in point.files and not {old, middle} & point.files
    preview = run_clean(table, versions, dry_run=True)
    assert dict(preview.plan.files_per_partition) == {"": (old,)}
    assert preview.plan.file_sizes == {old: log.stat().st_size}


@pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])
def test_a_pending_compactions_new_slice_counts_as_a_kept_version(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.services.compaction.executor import run_compaction
    from airflow_lake_provider.lake.services.compaction.result import Outcome as Compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

    table = LakeTable.create(
        tmp_path / "m",
        name="m",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=version,
    )
    c0 = _upsert(table, 0)
    slices, upserts = [], []
    for ts in (1, 2):  # a log on the latest slice, then compacted: three slices c0, k1, k2
        upserts.append(_upsert(table, ts))
        slices.append(run_compaction(table, force=True)[0].instant)
    _upsert(table, 3)
    assert schedule_compaction(table, force=True).outcome is Compaction.SCHEDULED  # forms a 4th slice
    versions = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "2",
    }
    preview = run_clean(table, versions, dry_run=True)
    # Kept: the pending compaction's slice (one of the 2 versions), k2 (its input), k1 (the 2nd version);
    # doomed: slice c0, its base file and its log file.
    doomed = preview.plan.files_per_partition[""]
    log_of_c0 = c0 if version == 6 else upserts[0]  # v8 names a log for its own deltacommit
    log, base = sorted(doomed, key=lambda name: name.endswith(".parquet"))
    assert f"_{log_of_c0}.log." in log and base.endswith(f"_{c0}.parquet")
    assert sum(name.endswith(".parquet") for name in doomed) == 1 and c0 < slices[0]


def test_savepointed_files_in_a_partition_are_left_out_of_the_plan(tmp_path: Path) -> None:
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.services.savepoint import create_savepoint

    table = LakeTable.create(
        tmp_path / "p",
        name="p",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    c = [
        write(table, pa.table({"id": ["a"], "ts": pa.array([ts], pa.int64()), "p": ["x"]}), "upsert").instant
        for ts in range(4)
    ]
    point = create_savepoint(table, c[1])
    preview = run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, dry_run=True)
    (planned,) = preview.plan.files_per_partition["x"]
    assert planned.startswith("x/") and planned.endswith(f"_{c[0]}.parquet") and planned not in point.files


def test_replaced_file_group_under_file_versions_is_cleaned_whole_but_savepointed_slices(
    tmp_path: Path,
) -> None:
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.services.savepoint import create_savepoint

    table = _table(tmp_path)
    c0, c1 = _upsert(table, 0), _upsert(table, 1)
    (group,) = table.file_system_view().file_groups()
    point = create_savepoint(table, c0)
    _replace_group(table, group.file_id)
    versions = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "3",
    }
    preview = run_clean(table, versions, dry_run=True)
    # Every slice of a replaced group goes, whatever the versions retained; c0's is savepointed.
    (doomed,) = preview.plan.files_per_partition[""]
    assert doomed.endswith(f"_{c1}.parquet") and doomed not in point.files


def _replace_group(table: LakeTable, file_id: str) -> str:
    """An INSERT_OVERWRITE that replaces one file group of the root partition (as test_clean's helper)."""
    from airflow_lake_provider.lake.timeline import avro as timeline_avro
    from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata

    t = table.clock.next(after=table.timeline().latest_time)
    plan = {"operationType": "INSERT_OVERWRITE", "clusteringPlan": None, "extraMetadata": None, "version": 1}
    requested = table.store.create_requested(
        t, Action.REPLACECOMMIT, timeline_avro.write_avro(timeline_avro.REQUESTED_REPLACE_METADATA, plan)
    )
    inflight = table.store.transition_to_inflight(requested)
    schema = table.timeline().latest_schema()
    meta = CommitMetadata("INSERT_OVERWRITE", {}, {"schema": schema}, False, {"": (file_id,)})
    table.store.transition_to_completed(inflight, meta.to_json_bytes())
    return t


def test_a_group_replaced_at_the_earliest_retained_commit_keeps_its_last_slice(tmp_path: Path) -> None:
    from airflow_lake_provider.lake.services.clean.executor import run_clean

    table = _table(tmp_path)
    c0, _c1 = _upsert(table, 0), _upsert(table, 1)
    (group,) = table.file_system_view().file_groups()
    replaced = _replace_group(table, group.file_id)
    preview = run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, dry_run=True)
    # Replaced at E itself (not before it): a query that began before E may still read slice c1.
    assert preview.plan.earliest_instant_to_retain.timestamp == replaced
    (doomed,) = preview.plan.files_per_partition[""]
    assert doomed.endswith(f"_{c0}.parquet")


def test_partitions_to_scan_are_the_union_over_the_commits_since_the_last_clean(tmp_path: Path) -> None:
    table = LakeTable.create(
        tmp_path / "p",
        name="p",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    c = [
        write(table, pa.table({"id": ["a"], "ts": pa.array([ts], pa.int64()), "p": [p]}), "upsert").instant
        for ts, p in enumerate(["x", "y", "z"])
    ]
    last = {"earliestCommitToRetain": c[0], "extraMetadata": {"lake.policy": "KEEP_LATEST_COMMITS"}}
    earliest = Instant(c[2], State.COMPLETED, Action.COMMIT)
    assert partitions_to_scan(table.timeline(), CleanConfig(), earliest, last, []) == ["x", "y"]


@pytest.mark.parametrize(
    "policy",
    [
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
        {"hoodie.cleaner.policy": "KEEP_LATEST_COMMITS", "hoodie.cleaner.commits.retained": "1"},
    ],
    ids=["file_versions", "commits"],
)
def test_a_v9_group_of_log_files_only_is_one_slice_the_clean_keeps(tmp_path: Path, policy: dict) -> None:
    """Table versions 8/9 name a log after its deltacommit: a group without a base file (Flink, bucket
    index) is one slice in Java, so a clean deletes none of its logs; one slice per log lost rows."""
    from write_support import hudi_rows, log_only_group, our_rows

    from airflow_lake_provider.lake.services.clean.executor import run_clean

    path = tmp_path / "t"
    table, _, logs = log_only_group(path)
    done = run_clean(table, policy)
    assert done.deleted_files == 0
    assert sorted(p.name for p in path.glob(".*.log.*")) == logs
    assert our_rows(path, "id", "ts", "v") == hudi_rows(path, "id", "ts", "v") == [(1, 4, "u1"), (2, 3, "u2")]
