"""What each run mode reports when pending cleans are about: the one named among several, the ones
finished before a refusal or before finding nothing new, and a dry run's listing and duration."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from clean_support import RETAIN_ONE, cow_table, upsert

from airflow_lake_provider.lake.services.clean import executor
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.instant import InstantClock

# Table-version neutral tests run on version 6 and on Hudi 1.x's version 8 (timeline layout 2).
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


def _two_pending_cleans(table: LakeTable) -> tuple[str, str]:
    for ts in range(3):
        upsert(table, ts)
    first = run_clean(table, RETAIN_ONE, mode="schedule").instant
    upsert(table, 3)
    second = run_clean(table, RETAIN_ONE, mode="schedule").instant
    return first, second


def _pending(table: LakeTable) -> list[str]:
    return [i.timestamp for i in executor.pending_cleans(table.timeline())]


@VERSIONS
def test_execute_finishes_the_named_clean_even_when_another_is_older(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    first, second = _two_pending_cleans(table)
    done = run_clean(table, RETAIN_ONE, mode="execute", instant=second)
    assert (done.outcome, done.instant, done.finished_pending) == (Outcome.CLEANED, second, (second,))
    assert _pending(table) == [first]


@VERSIONS
def test_pending_cleans_finished_before_an_allow_multiple_refusal_are_reported(
    tmp_path: Path, version: int
) -> None:
    table = cow_table(tmp_path, version)
    first, second = _two_pending_cleans(table)
    upsert(table, 4)
    options = {**RETAIN_ONE, "hoodie.clean.allow.multiple": "false"}
    result = run_clean(table, options, instant=first)  # finishes the first; the second stays pending
    assert (result.outcome, result.instant, result.finished_pending) == (Outcome.CLEANED, first, (first,))
    assert result.reason == "a clean is pending and hoodie.clean.allow.multiple=false"
    assert _pending(table) == [second]


@VERSIONS
def test_pending_cleans_finished_before_finding_nothing_new_are_reported(
    tmp_path: Path, version: int
) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule").instant
    # No gate on the commits since the last clean: the run plans again after finishing, and finds
    # nothing (the pending clean deleted the only cleanable slice).
    result = run_clean(table, {**RETAIN_ONE, "hoodie.clean.max.commits": "0"})
    assert (result.outcome, result.instant) == (Outcome.CLEANED, scheduled)
    assert (result.finished_pending, result.reason, result.deleted_files) == (
        (scheduled,),
        "nothing to delete",
        1,
    )


@VERSIONS
def test_a_dry_run_lists_through_its_lister_and_reports_its_duration(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c0 = upsert(table, 0, ("x", "y"))
    upsert(table, 1, ("x", "y"))
    upsert(table, 2, ("x", "y"))

    def slow_x_only(partitions: Sequence[str]) -> Mapping[str, Sequence[tuple[str, int]]]:
        time.sleep(0.3)
        return {p: table.storage.list(p) if p == "x" else [] for p in partitions}

    result = run_clean(table, RETAIN_ONE, dry_run=True, lister=slow_x_only)
    assert result.outcome is Outcome.PLANNED and list(result.plan.files_per_partition) == ["x"]
    assert [p.rsplit("_", 1)[-1] for p in result.plan.files_per_partition["x"]] == [f"{c0}.parquet"]
    assert 0.3 <= result.duration_seconds < 60


@VERSIONS
def test_a_schedule_reports_its_plan_alone_and_its_duration(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    assert (scheduled.outcome, scheduled.finished_pending, scheduled.reason) == (Outcome.SCHEDULED, (), "")
    assert 0 < scheduled.duration_seconds < 60
    assert scheduled.to_dict()["finished_pending"] == []


def test_the_clean_instant_follows_a_commit_stamped_ahead_of_this_clock(tmp_path: Path) -> None:
    ahead = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)
    ticks = iter(range(100))
    writer = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        clock=InstantClock(now=lambda: ahead + dt.timedelta(seconds=next(ticks))),
    )
    commits = [upsert(writer, ts) for ts in range(3)]
    assert commits[-1].startswith("2099")
    cleaner = LakeTable.open(tmp_path / "t")  # this process's clock: today, behind the writer's
    for mode in ("schedule", "schedule_and_execute"):
        upsert(writer, 3 if mode == "schedule" else 4)
        result = run_clean(cleaner, RETAIN_ONE, mode=mode)
        latest = max(i.timestamp for i in cleaner.timeline().instants if i.timestamp != result.instant)
        assert result.instant > latest, mode


@VERSIONS
def test_a_run_that_finishes_a_pending_clean_then_cleans_again_reports_both(
    tmp_path: Path, version: int
) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    pending = run_clean(table, RETAIN_ONE, mode="schedule").instant
    upsert(table, 3)  # a commit since: the run plans anew after finishing the pending clean

    def slow_deleter(table: LakeTable, plan: executor.CleanPlan) -> dict[str, executor.DeleteOutcome]:
        time.sleep(0.3)  # each clean takes at least this long
        return executor.local_deleter(table, plan)

    result = run_clean(table, RETAIN_ONE, deleter=slow_deleter)
    assert result.outcome is Outcome.CLEANED and result.instant > pending
    assert (result.finished_pending, result.deleted_files) == ((pending,), 1)
    assert 0.6 <= result.duration_seconds < 60  # both cleans, not only the new one
