"""What a clean plan is made from: the timeline and lister the caller passes, the table's own clean
properties, every savepoint, and the log line when there is nothing new to scan."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from clean_support import RETAIN_ONE, cow_table, upsert
from crash_support import crashing

from airflow_lake_provider.lake.services.clean import executor
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.instant import InstantClock, instant_to_datetime

# Table-version neutral tests run on version 6 and on Hudi 1.x's version 8 (timeline layout 2).
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


def _ending(plan: executor.CleanPlan) -> list[str]:
    """The instant of each planned file, from its name."""
    return sorted(
        p.rsplit("_", 1)[-1].removesuffix(".parquet") for ps in plan.files_per_partition.values() for p in ps
    )


@VERSIONS
def test_the_plan_reads_the_files_of_the_timeline_it_is_given(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c = [upsert(table, ts) for ts in range(3)]
    then = table.timeline()
    c += [upsert(table, ts) for ts in range(3, 5)]
    config = executor.clean_config(table, RETAIN_ONE)
    # As of c2: c2 and the slice before it (c1) are retained, c0 goes; c3 and c4 are not in that
    # timeline.
    as_of_then = executor.plan(table, config, then)
    assert _ending(as_of_then) == [c[0]] and as_of_then.last_completed_commit == c[2]
    # Now: c4 and c3 are retained, c0 to c2 go.
    now = executor.plan(table, config)
    assert _ending(now) == c[:3] and now.last_completed_commit == c[4]


@VERSIONS
def test_the_plan_lists_partitions_through_the_lister_given(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c0 = upsert(table, 0, ("x", "y"))
    upsert(table, 1, ("x", "y"))
    upsert(table, 2, ("x", "y"))
    asked: list[list[str]] = []

    def only_x(partitions: Sequence[str]) -> Mapping[str, Sequence[tuple[str, int]]]:
        """A lister (as a Spark job's) that sees y as empty: y's files cannot be planned."""
        asked.append(list(partitions))
        return {p: table.storage.list(p) if p == "x" else [] for p in partitions}

    plan = executor.plan(table, executor.clean_config(table, RETAIN_ONE), lister=only_x)
    assert asked == [["x", "y"]]
    assert list(plan.files_per_partition) == ["x"] and _ending(plan) == [c0]


@VERSIONS
def test_the_tables_clean_properties_apply_without_options(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    table.store.update_properties({**table.config.properties, **RETAIN_ONE})
    table = LakeTable.open(tmp_path / "t")
    c0 = upsert(table, 0)
    upsert(table, 1)
    upsert(table, 2)
    planned = run_clean(table, dry_run=True).plan  # Hudi's default would retain 10 commits: no plan
    assert planned is not None and _ending(planned) == [c0]
    # The caller's options still win over the table's.
    assert run_clean(table, {"hoodie.cleaner.commits.retained": "5"}, dry_run=True).plan is None


@VERSIONS
def test_every_savepoint_is_recorded_in_the_plan(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c = [upsert(table, ts) for ts in range(5)]
    create_savepoint(table, c[1])
    create_savepoint(table, c[0])
    result = run_clean(table, RETAIN_ONE)
    assert result.outcome is Outcome.CLEANED  # c2's file is not savepointed: it goes
    assert _ending(result.plan) == [c[2]]
    assert result.plan.extra_metadata["lake.savepoints"] == f"{c[0]},{c[1]}"


@VERSIONS
def test_nothing_to_scan_names_the_earliest_commit_to_retain(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    table = cow_table(tmp_path, version)
    for ts in range(3):
        upsert(table, ts)
    done = run_clean(table, RETAIN_ONE)
    assert done.outcome is Outcome.CLEANED
    earliest = done.plan.earliest_instant_to_retain
    caplog.set_level(logging.INFO, logger=executor.log.name)
    caplog.clear()
    # No commit since: the earliest commit to retain has not moved, no partition needs a look.
    assert run_clean(table, RETAIN_ONE, dry_run=True).outcome is Outcome.NO_WORK
    lines = [r.getMessage() for r in caplog.records if r.name == executor.log.name]
    assert lines == [f"clean of {table.uri}: nothing to scan (earliest commit to retain: {earliest})"]
    assert str(earliest).startswith(f"{earliest.timestamp}__commit__")


@VERSIONS
def test_a_run_lists_through_its_lister(tmp_path: Path, version: int) -> None:
    table = cow_table(tmp_path, version)
    c0 = upsert(table, 0, ("x", "y"))
    upsert(table, 1, ("x", "y"))
    upsert(table, 2, ("x", "y"))

    def only_x(partitions: Sequence[str]) -> Mapping[str, Sequence[tuple[str, int]]]:
        return {p: table.storage.list(p) if p == "x" else [] for p in partitions}

    done = run_clean(table, RETAIN_ONE, lister=only_x)
    assert list(done.plan.files_per_partition) == ["x"] and _ending(done.plan) == [c0]


def test_a_pending_write_before_the_retention_cutoff_at_the_given_now_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start = dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)
    hours = iter(range(100))
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        clock=InstantClock(now=lambda: start + dt.timedelta(hours=next(hours))),
    )
    never = {"hoodie.cleaner.policy.failed.writes": "NEVER"}  # the failed write stays pending
    table.store.update_properties({**table.config.properties, **never})
    table = LakeTable.open(tmp_path / "t", clock=table.clock)
    for ts in range(3):
        upsert(table, ts)
    with pytest.raises(SimulatedCrash):  # a write that died
        upsert(crashing(table, 1), 3)
    (failed,) = table.timeline().pending
    c4 = upsert(table, 4)  # an hour or more later (the clock moves an hour a call)
    assert instant_to_datetime(c4) - instant_to_datetime(failed.timestamp) >= dt.timedelta(hours=1)
    caplog.set_level(logging.WARNING, logger=executor.log.name)
    options = {"hoodie.cleaner.policy": "KEEP_LATEST_BY_HOURS", "hoodie.cleaner.hours.retained": "1"}
    # Half an hour after c4 the cutoff is half an hour before it: c4 is the earliest commit to retain,
    # and the failed write is older.
    result = run_clean(table, options, now=instant_to_datetime(c4) + dt.timedelta(minutes=30), dry_run=True)
    advice = (
        f"failed or running write(s) {failed.timestamp} (commit); if they failed, roll them back with: "
        f"lake rollback {table.uri}"
    )
    assert (result.outcome, result.held_back_by, result.reason) == (
        Outcome.PLANNED,
        (failed.timestamp,),
        advice,
    )
    lines = [r.getMessage() for r in caplog.records if r.name == executor.log.name]
    assert lines == [f"clean of {table.uri} keeps files older than pending write(s): {advice}"]
    # Cleaned, then nothing left to delete: both reasons are given.
    now = instant_to_datetime(c4) + dt.timedelta(minutes=30)
    assert run_clean(table, options, now=now).outcome is Outcome.CLEANED
    again = run_clean(table, options, now=now, dry_run=True)
    assert (again.outcome, again.reason) == (Outcome.NO_WORK, f"nothing to delete; {advice}")
