"""The clean executor's exact results: deletes (gone, failed, many), metadata, summary, modes and triggers."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from clean_support import RETAIN_ONE, cow_table, upsert
from compaction_support import TIMELINE, recorded

from airflow_lake_provider.lake.errors import CommitConflictError
from airflow_lake_provider.lake.services.clean import executor
from airflow_lake_provider.lake.services.clean.executor import delete_files, execute_pending, run_clean
from airflow_lake_provider.lake.services.clean.result import DeleteOutcome, Outcome
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import (
    Action,
    InstantClock,
    format_instant,
    instant_to_datetime,
)

# Table-version neutral tests run on version 6 and on Hudi 1.x's version 8 (timeline layout 2).
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


def _data_files(table: LakeTable) -> set[str]:
    return {
        str(p.relative_to(table.base_path))
        for p in table.base_path.rglob("*.parquet")
        if ".hoodie" not in p.relative_to(table.base_path).parts
    }


def _clean_metadata(table: LakeTable) -> dict:
    timeline = table.timeline()
    return timeline_avro.read_avro(timeline.read_bytes(timeline.last_completed(Action.CLEAN)), "clean")


@pytest.mark.parametrize("count", [3, executor.PARALLEL_DELETE_THRESHOLD + 6])
@VERSIONS
def test_delete_files_counts_gone_files_as_deleted_and_keeps_the_order(
    tmp_path: Path, count: int, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    table = cow_table(tmp_path, version)
    part = table.base_path / "x"
    part.mkdir()
    names = [f"x/f{i:03d}.parquet" for i in range(count)]
    for name in names[1:]:  # the first is already gone
        (table.base_path / name).write_bytes(b"data")
    (part / "f050_dir.parquet").mkdir()  # a directory cannot be unlinked: a failed delete
    paths = [*names[: count // 2], "x/f050_dir.parquet", *names[count // 2 :]]
    with pytest.raises(OSError) as error:  # what deleting the directory raises, for the log line
        table.storage.delete("x/f050_dir.parquet")
    caplog.set_level(logging.WARNING, logger=executor.log.name)
    outcome = delete_files(table.storage, paths)
    assert outcome == DeleteOutcome(tuple(names), ("x/f050_dir.parquet",))
    assert sorted(p.name for p in part.iterdir()) == ["f050_dir.parquet"]
    assert _log(caplog) == [f"could not delete {table.storage.uri('x/f050_dir.parquet')}: {error.value}"]


class _BulkLocalStorage(LocalStorage):
    """Local files through the object-store branch of ``delete_files`` (the base ``delete_many``)."""

    supports_bulk_delete = True


def test_bulk_delete_keeps_the_order_and_logs_each_failure_sorted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = _BulkLocalStorage(tmp_path)
    (tmp_path / "x").mkdir()
    for name in ("b", "c"):  # x/a is already gone: it counts as deleted
        (tmp_path / "x" / f"{name}.parquet").write_bytes(b"data")
    for name in ("d_dir", "e_dir"):  # a directory cannot be deleted as a file: a failed delete
        (tmp_path / "x" / f"{name}.parquet").mkdir()
    paths = ["x/c.parquet", "x/e_dir.parquet", "x/a.parquet", "x/d_dir.parquet", "x/b.parquet"]
    caplog.set_level(logging.WARNING, logger=executor.log.name)
    outcome = delete_files(storage, paths)
    assert outcome == DeleteOutcome(
        ("x/c.parquet", "x/a.parquet", "x/b.parquet"), ("x/e_dir.parquet", "x/d_dir.parquet")
    )
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["d_dir.parquet", "e_dir.parquet"]
    assert _log(caplog) == [
        f"could not delete {storage.uri('x/d_dir.parquet')}",
        f"could not delete {storage.uri('x/e_dir.parquet')}",
    ]


@VERSIONS
def test_a_failed_delete_is_recorded_in_the_clean_metadata_and_the_result(
    tmp_path: Path, version: int
) -> None:
    table = cow_table(tmp_path, version)
    c0 = upsert(table, 0, ("x", "y"))
    upsert(table, 1, ("x", "y"))
    c2 = upsert(table, 2, ("x", "y"))
    old = sorted(f for f in _data_files(table) if f.endswith(f"_{c0}.parquet"))
    assert [f.split("/")[0] for f in old] == ["x", "y"]
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    assert scheduled.plan.files_per_partition == {"x": (old[0],), "y": (old[1],)}
    # After planning, the y file is replaced by a directory of the same name: its delete fails.
    (table.base_path / old[1]).unlink()
    (table.base_path / old[1]).mkdir()
    result = run_clean(table, RETAIN_ONE, mode="execute")
    assert (result.outcome, result.deleted_files, result.failed_files) == (Outcome.CLEANED, 1, 1)
    meta = _clean_metadata(table)
    assert meta["totalFilesDeleted"] == 1 and meta["earliestCommitToRetain"] == c2
    assert meta["version"] == 2 and meta["startCleanTime"] == result.instant
    x_name, y_name = (f.split("/")[1] for f in old)
    assert meta["partitionMetadata"] == {
        "x": {
            "partitionPath": "x",
            "policy": "KEEP_LATEST_COMMITS",
            "deletePathPatterns": [x_name],
            "successDeleteFiles": [x_name],
            "failedDeleteFiles": [],
            "isPartitionDeleted": False,
        },
        "y": {
            "partitionPath": "y",
            "policy": "KEEP_LATEST_COMMITS",
            "deletePathPatterns": [y_name],
            "successDeleteFiles": [],
            "failedDeleteFiles": [y_name],
            "isPartitionDeleted": False,
        },
    }
    assert meta["extraMetadata"] == {"lake.policy": "KEEP_LATEST_COMMITS", "lake.savepoints": ""}


@VERSIONS
def test_result_summary_is_exact(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c0 = upsert(table, 0, ("x", "y"))
    upsert(table, 1, ("x", "y"))
    c2 = upsert(table, 2, ("x",))
    sizes = {
        f: (table.base_path / f).stat().st_size for f in _data_files(table) if f.endswith(f"_{c0}.parquet")
    }
    (x_old,) = (f for f in sizes if f.startswith("x/"))
    summary = run_clean(table, RETAIN_ONE).to_dict()
    duration = summary.pop("duration_seconds")
    assert isinstance(duration, float) and 0 <= duration < 60
    instant = summary.pop("instant")
    assert instant > c2
    # y's only slices are c0 and c1: c1 is the last before c2, so c0 goes; x: c0 goes too.
    (y_old,) = (f for f in sizes if f.startswith("y/"))
    assert summary == {
        "outcome": "CLEANED",
        "earliest_commit_to_retain": c2,
        "policy": "KEEP_LATEST_COMMITS",
        "files_planned": 2,
        "bytes_planned": sizes[x_old] + sizes[y_old],
        "partitions": {"x": {"files": 1, "bytes": sizes[x_old]}, "y": {"files": 1, "bytes": sizes[y_old]}},
        "deleted_files": 2,
        "failed_files": 0,
        "finished_pending": [],
        "kept_for_savepoints": [],
        "held_back_by": [],
        "reason": "",
    }
    nothing = run_clean(table, RETAIN_ONE).to_dict()
    assert (
        nothing["outcome"] == "NO_WORK"
        and nothing["instant"] is None
        and nothing["policy"] == "KEEP_LATEST_COMMITS"
    )
    assert nothing["files_planned"] == 0 and nothing["partitions"] == {} and nothing["bytes_planned"] == 0
    assert nothing["earliest_commit_to_retain"] is None


@VERSIONS
def test_unknown_mode_is_refused_and_nothing_is_written(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    hoodie = sorted(str(p.relative_to(table.base_path)) for p in (table.base_path / ".hoodie").rglob("*"))
    with pytest.raises(ValueError, match=r"^unknown clean mode 'clean'$"):
        run_clean(table, RETAIN_ONE, mode="clean")
    assert (
        sorted(str(p.relative_to(table.base_path)) for p in (table.base_path / ".hoodie").rglob("*"))
        == hoodie
    )


@VERSIONS
def test_schedule_then_execute_one_instant(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c0 = upsert(table, 0)
    upsert(table, 1)
    upsert(table, 2)
    files = _data_files(table)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    assert scheduled.outcome is Outcome.SCHEDULED and scheduled.deleted_files == 0
    assert scheduled.plan.file_count == 1 and _data_files(table) == files  # nothing deleted yet
    nothing = run_clean(table, RETAIN_ONE, mode="execute", instant="20000101000000000")
    assert (nothing.outcome, nothing.reason) == (Outcome.NO_WORK, "no pending clean to execute")
    assert _data_files(table) == files
    done = run_clean(table, RETAIN_ONE, mode="execute", instant=scheduled.instant)
    assert (done.outcome, done.instant, done.deleted_files) == (Outcome.CLEANED, scheduled.instant, 1)
    assert done.finished_pending == (scheduled.instant,) and done.reason == ""
    assert {f for f in files if f.endswith(f"_{c0}.parquet")} == files - _data_files(table)


@VERSIONS
def test_schedule_and_execute_finishes_a_pending_clean_first(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    result = run_clean(table, RETAIN_ONE)
    # The pending clean deleted the only cleanable slice: no new plan.
    assert result.outcome is Outcome.CLEANED and result.instant == scheduled.instant
    assert result.finished_pending == (scheduled.instant,)
    assert result.reason == "fewer than 1 commits since the last clean" and result.deleted_files == 1
    upsert(table, 3)  # a commit since: planned again; slice c1 is cleanable now
    again = run_clean(table, RETAIN_ONE)
    assert (again.outcome, again.deleted_files, again.finished_pending) == (Outcome.CLEANED, 1, ())


@VERSIONS
def test_nothing_to_delete_writes_no_instant(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    upsert(table, 0)
    upsert(table, 1)
    result = run_clean(table, RETAIN_ONE)
    assert (result.outcome, result.reason, result.instant) == (Outcome.NO_WORK, "nothing to delete", None)
    assert result.finished_pending == () and result.plan is None
    assert (
        executor.pending_cleans(table.timeline()) == []
        and table.timeline().last_completed(Action.CLEAN) is None
    )


@VERSIONS
def test_allow_multiple_false_plans_nothing_while_a_clean_is_pending(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    first = run_clean(table, RETAIN_ONE, mode="schedule")
    upsert(table, 3)
    options = {**RETAIN_ONE, "hoodie.clean.allow.multiple": "false"}
    refused = run_clean(table, options, mode="schedule")
    assert refused.outcome is Outcome.NO_WORK
    assert refused.reason == "a clean is pending and hoodie.clean.allow.multiple=false"
    assert [i.timestamp for i in executor.pending_cleans(table.timeline())] == [first.instant]
    second = run_clean(table, RETAIN_ONE, mode="schedule")  # allowed by default
    assert second.outcome is Outcome.SCHEDULED
    assert [i.timestamp for i in executor.pending_cleans(table.timeline())] == [first.instant, second.instant]


@VERSIONS
def test_max_commits_waits_for_enough_commits_since_the_last_clean(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    assert executor.commits_since_last_clean(table.timeline()) == 3
    options = {**RETAIN_ONE, "hoodie.clean.max.commits": "4"}
    early = run_clean(table, options)
    assert (early.outcome, early.reason) == (Outcome.NO_WORK, "fewer than 4 commits since the last clean")
    options["hoodie.clean.max.commits"] = "3"
    assert run_clean(table, options).outcome is Outcome.CLEANED  # exactly 3: due
    assert executor.commits_since_last_clean(table.timeline()) == 0
    upsert(table, 3)
    assert executor.commits_since_last_clean(table.timeline()) == 1
    again = run_clean(table, {**RETAIN_ONE, "hoodie.clean.max.commits": "2"})
    assert again.reason == "fewer than 2 commits since the last clean"


def _log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == executor.log.name]


@VERSIONS
def test_clean_logs_what_it_scanned_planned_and_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    caplog.set_level(logging.INFO, logger=executor.log.name)
    table = cow_table(tmp_path, version)
    uri = table.uri
    upsert(table, 0, ("x", "y"))
    c1 = upsert(table, 1, ("x", "y"))
    assert run_clean(table, RETAIN_ONE).outcome is Outcome.NO_WORK
    assert _log(caplog) == [
        f"clean of {uri}: scanned 2 partitions, 2 file groups",
        "clean: no new plan: nothing to delete",
    ]
    caplog.clear()
    upsert(table, 2, ("x",))
    result = run_clean(table, RETAIN_ONE)
    t = result.instant
    assert _log(caplog) == [
        f"clean of {uri}: scanned 2 partitions, 2 file groups",
        f"clean {t} of {uri} planned: 2 files in 2 partitions",
        f"clean {t} of {uri} completed: 2 files deleted, 0 failed",
    ]
    caplog.clear()
    # No commit since the clean retained c2: nothing to scan.
    assert run_clean(table, {"hoodie.cleaner.commits.retained": "3"}).outcome is Outcome.NO_WORK
    assert _log(caplog) == [
        "clean: no new plan: fewer than 1 commits since the last clean",
    ]
    caplog.clear()
    upsert(table, 3, ("y",))
    assert run_clean(table, {"hoodie.cleaner.commits.retained": "5"}).outcome is Outcome.NO_WORK
    assert _log(caplog) == [
        f"clean of {uri}: nothing to scan (earliest commit to retain: None)",
        "clean: no new plan: nothing to delete",
    ]
    assert c1 < t


@VERSIONS
def test_planned_files_a_later_savepoint_needs_are_kept_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    from airflow_lake_provider.lake.services.savepoint import create_savepoint

    table = cow_table(tmp_path, version)
    parts = tuple(f"p{i:02d}" for i in range(11))
    c0 = upsert(table, 0, parts)
    upsert(table, 1, parts)
    upsert(table, 2, parts)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    assert scheduled.plan.file_count == 11
    point = create_savepoint(table, c0)
    caplog.set_level(logging.INFO, logger=executor.log.name)
    caplog.clear()  # the schedule's lines too, where an earlier test left the logger at INFO
    done = run_clean(table, RETAIN_ONE, mode="execute")
    kept = tuple(sorted(point.files))
    assert done.kept_for_savepoints == kept and done.deleted_files == 0 and done.plan.file_count == 0
    assert point.files <= _data_files(table)
    assert _log(caplog)[0] == (
        f"clean {scheduled.instant} of {table.uri}: keeping 11 planned files that savepoints need: "
        + ", ".join(kept[:10])
        + " ..."
    )
    meta = _clean_metadata(table)
    assert meta["extraMetadata"]["lake.keptForSavepoints"] == ",".join(kept)
    assert meta["totalFilesDeleted"] == 0 and meta["partitionMetadata"] == {}


@VERSIONS
def test_incremental_planning_reads_the_state_file_and_falls_back_to_the_clean_metadata(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts, ("one", "two"))
    upsert(table, 3, ("two",))
    done = run_clean(table, RETAIN_ONE)  # retains from commit 3, which wrote "two" only
    state_path = table.base_path / ".hoodie" / ".aux" / executor.STATE_FILE
    state = json.loads(state_path.read_text())
    assert state == {
        "instant": done.instant,
        "earliestCommitToRetain": done.plan.earliest_instant_to_retain.timestamp,
        "extraMetadata": {"lake.policy": "KEEP_LATEST_COMMITS", "lake.savepoints": ""},
    }
    for ts in range(4, 6):
        upsert(table, ts, ("two",))
    config = executor.clean_config(table, RETAIN_ONE)
    caplog.set_level(logging.INFO, logger=executor.log.name)

    def scanned(state_text: str | None) -> int:
        if state_text is None:
            state_path.unlink(missing_ok=True)
        else:
            state_path.write_text(state_text)
        caplog.clear()
        executor.plan(table, config)
        (line,) = [m for m in _log(caplog) if "scanned" in m]
        return int(line.split("scanned ")[1].split(" ")[0])

    other_policy = {**state, "extraMetadata": {"lake.policy": "KEEP_LATEST_BY_HOURS"}}
    assert scanned(json.dumps(state)) == 1  # only "two" was written since
    assert scanned(json.dumps(other_policy)) == 2  # the state file is what is read: a changed policy
    assert scanned(None) == 1  # no state file: the clean metadata says the same
    assert scanned("{not json") == 1
    assert scanned("[]") == 1
    assert scanned(json.dumps({**other_policy, "instant": "20000101000000000"})) == 1  # another clean's


@VERSIONS
def test_dry_run_results_are_exact(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    upsert(table, 0)
    nothing = run_clean(table, RETAIN_ONE, dry_run=True)
    assert (nothing.outcome, nothing.instant, nothing.plan, nothing.reason) == (
        Outcome.NO_WORK,
        None,
        None,
        "nothing to delete",
    )
    c1, c2 = upsert(table, 1), upsert(table, 2)
    preview = run_clean(table, RETAIN_ONE, dry_run=True)
    assert (preview.outcome, preview.instant, preview.reason) == (Outcome.PLANNED, None, "")
    assert preview.plan.earliest_instant_to_retain.timestamp == c2 and preview.plan.file_count == 1
    assert preview.plan.last_completed_commit == c2 and preview.kept_for_savepoints == ()
    summary = preview.to_dict()
    assert summary["duration_seconds"] == round(summary["duration_seconds"], 3)
    assert isinstance(summary["duration_seconds"], float)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    pending = run_clean(table, RETAIN_ONE, dry_run=True)
    assert (pending.outcome, pending.instant, pending.reason) == (
        Outcome.PLANNED,
        scheduled.instant,
        "a pending clean would be finished",
    )
    assert pending.plan == scheduled.plan and pending.kept_for_savepoints == ()
    assert c1 < c2


@VERSIONS
def test_duration_covers_the_whole_run_every_pending_clean_it_finished(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    first = run_clean(table, RETAIN_ONE, mode="schedule")
    upsert(table, 3)
    second = run_clean(table, RETAIN_ONE, mode="schedule")

    def slow_deleter(table: LakeTable, plan: executor.CleanPlan) -> dict[str, DeleteOutcome]:
        time.sleep(0.5)  # each pending clean takes at least this long
        return executor.local_deleter(table, plan)

    done = run_clean(table, RETAIN_ONE, mode="execute", deleter=slow_deleter)
    assert done.finished_pending == (first.instant, second.instant)
    assert 1.0 <= done.duration_seconds < 60  # both cleans, not only the last one
    nothing = run_clean(table, RETAIN_ONE, mode="execute")
    assert (nothing.outcome, nothing.reason) == (Outcome.NO_WORK, "no pending clean to execute")
    assert 0 < nothing.duration_seconds < 60


@VERSIONS
def test_a_partition_the_deleter_does_not_report_counts_as_failed(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c0 = upsert(table, 0, ("x", "y"))
    upsert(table, 1, ("x", "y"))
    upsert(table, 2, ("x", "y"))
    old = sorted(f for f in _data_files(table) if f.endswith(f"_{c0}.parquet"))

    def x_only(table: LakeTable, plan: executor.CleanPlan) -> dict[str, DeleteOutcome]:
        return {"x": executor.delete_files(table.storage, plan.files_per_partition["x"])}

    result = run_clean(table, RETAIN_ONE, deleter=x_only)
    assert (result.outcome, result.deleted_files) == (Outcome.CLEANED, 1)
    y = _clean_metadata(table)["partitionMetadata"]["y"]
    name = old[1].split("/")[1]
    assert (y["deletePathPatterns"], y["successDeleteFiles"], y["failedDeleteFiles"]) == ([name], [], [name])


class _Contended(LocalStorage):
    """A table another process writes to: before each of the first ``collisions`` instant locks, it
    requests a commit at the millisecond after the timeline's latest (the one a clean asks next) and,
    with ``ahead`` ms, one more that much later (a writer whose clock runs ahead of ours)."""

    def __init__(self, root: str | Path, collisions: int, ahead: int = 0) -> None:
        super().__init__(root)
        self.collisions, self.ahead = collisions, ahead
        self.taken: list[str] = []

    def lock(self, rel: str, what: str, wait_seconds: float = 0.0) -> Any:
        if rel.endswith(".lake-instant.lock") and self.collisions:
            self.collisions -= 1
            latest = instant_to_datetime(max(n[:17] for n in self.list_names(".hoodie") if n[:17].isdigit()))
            for ms in (1, self.ahead) if self.ahead else (1,):
                t = format_instant(latest + dt.timedelta(milliseconds=ms))
                self.write(f".hoodie/{t}.commit.requested", b"")
                self.taken.append(t)
        return super().lock(rel, what, wait_seconds)


@pytest.mark.parametrize("collisions", [4, 5])
def test_a_clean_takes_up_to_five_instant_times_when_writers_take_them_first(
    tmp_path: Path, collisions: int
) -> None:
    """Each try takes the millisecond after the latest instant; the fifth taken too, it gives up."""
    created = cow_table(tmp_path)
    for ts in range(3):
        upsert(created, ts)
    frozen = InstantClock(now=lambda: dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))  # behind them all
    storage = _Contended(created.base_path, collisions)
    table = LakeTable(storage, created.config, frozen)
    if collisions == 5:
        with pytest.raises(CommitConflictError) as raised:
            run_clean(table, RETAIN_ONE, mode="schedule")
        assert len(storage.taken) == 5 and table.timeline().filter([Action.CLEAN]) == []
        last = storage.taken[-1]
        assert str(raised.value) == f"instant time {last} is already used by ['{last}.commit.requested']"
        return
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    assert len(storage.taken) == 4
    after = format_instant(instant_to_datetime(storage.taken[-1]) + dt.timedelta(milliseconds=1))
    assert (scheduled.outcome, scheduled.instant) == (Outcome.SCHEDULED, after)


def test_a_clean_retries_after_the_latest_instant_not_only_after_the_time_it_tried(tmp_path: Path) -> None:
    """The writer that took the clean's millisecond also requested a commit 9 ms later: the retry
    takes the millisecond after that one, the timeline's latest (not the one after its own try)."""
    created = cow_table(tmp_path)
    for ts in range(3):
        upsert(created, ts)
    frozen = InstantClock(now=lambda: dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))  # behind them all
    storage = _Contended(created.base_path, 1, ahead=9)
    table = LakeTable(storage, created.config, frozen)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    first, ahead = storage.taken
    assert instant_to_datetime(ahead) - instant_to_datetime(first) == dt.timedelta(milliseconds=8)
    after = format_instant(instant_to_datetime(ahead) + dt.timedelta(milliseconds=1))
    assert (scheduled.outcome, scheduled.instant) == (Outcome.SCHEDULED, after)


def test_a_scheduled_clean_plans_on_the_timeline_it_read_under_its_lock(tmp_path: Path) -> None:
    """One listing of the timeline under the clean lock serves its checks and the plan (S3 lists
    cost); before the lock, one for the pending writes holding cleans back; after, the instant
    lock's check that the clean's time is free."""
    created = cow_table(tmp_path)
    for ts in range(3):
        upsert(created, ts)
    table, storage = recorded(created)
    assert run_clean(table, RETAIN_ONE, mode="schedule").outcome is Outcome.SCHEDULED
    assert storage.events == [
        TIMELINE,
        ("lock", ".lake-clean.lock"),
        TIMELINE,
        ("lock", ".lake-instant.lock"),
        TIMELINE,
    ]


def test_a_dry_run_logs_the_scan_at_debug_level_only_without_log_scan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A preview its caller follows with a real run: the partition scan is not logged twice at info."""
    table = cow_table(tmp_path)
    for ts in range(3):
        upsert(table, ts)
    scanned = f"clean of {table.uri}: scanned 1 partitions, 1 file groups"
    with caplog.at_level(logging.DEBUG, logger=executor.log.name):
        assert run_clean(table, RETAIN_ONE, dry_run=True, log_scan=False).plan.file_count == 1
        assert run_clean(table, RETAIN_ONE, dry_run=True).plan.file_count == 1  # log_scan by default
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage() == scanned] == [
        (logging.DEBUG, scanned),
        (logging.INFO, scanned),
    ]


@VERSIONS
def test_a_pending_clean_finished_on_its_own_reports_its_own_duration(tmp_path: Path, version: int) -> None:
    """execute_pending (the Spark job's and a resumed clean's step) times itself: from its start."""
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    timeline = table.timeline()
    done = execute_pending(table, timeline.get(scheduled.instant), timeline)
    assert (done.outcome, done.instant, done.deleted_files) == (Outcome.CLEANED, scheduled.instant, 1)
    assert isinstance(done.duration_seconds, float) and 0 < done.duration_seconds < 60
