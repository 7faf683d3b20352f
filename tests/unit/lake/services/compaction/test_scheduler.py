"""services/compaction/scheduler.py exactly: the base files a plan takes are checked (their footers
read) before the write lock is taken, those a writer added to the plan meanwhile under it, and
scheduling names itself when a table's metadata table refuses it (a dry run is not refused)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from compaction_support import DUE, START, TIMELINE, batch, empty_mor, mor, recorded
from metadata_table_support import add_metadata_table

from airflow_lake_provider.lake.errors import (
    CompactionScheduleConflictError,
    CorruptDataFileError,
    ServiceBusyError,
    TableConfigError,
)
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.metadata.policy import detect
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

SCHEDULE_LOCK, WRITE_LOCK = ".lake-compaction-schedule.lock", ".lake-write.lock"
INSTANT_LOCK = ".lake-instant.lock"  # taken to pick the plan's instant time


def _base(table: LakeTable, partition: str) -> str:
    (path,) = (table.base_path / partition).glob("*.parquet")
    return f"{partition}/{path.name}"


@pytest.mark.parametrize("force", [False, True], ids=["due", "forced"])
def test_the_planned_base_files_are_checked_before_the_write_lock(tmp_path: Path, force: bool) -> None:
    """Their footers are most of a schedule's reads, and writers wait for the write lock: read once,
    before it. Forced on a table whose trigger is not due, the same."""
    table, storage = recorded(mor(tmp_path))
    options = {"hoodie.compact.inline.max.delta.commits": "5"} if force else DUE
    result = schedule_compaction(table, options, force=force)
    assert result.outcome is Outcome.SCHEDULED
    assert storage.events == [
        ("lock", SCHEDULE_LOCK),
        TIMELINE,
        ("read", _base(table, "x")),
        ("lock", WRITE_LOCK),
        TIMELINE,  # read again under the lock, once: the view and the schema use it
        ("lock", INSTANT_LOCK),
        TIMELINE,
    ]


def test_a_partition_aware_plan_is_checked_for_the_day_given_not_today(tmp_path: Path) -> None:
    """``now`` is "today" for the check's plan too: the plan of 2025-03-02 takes the slice of
    2025-03-01 (today's plan would take nothing and leave the read to the write lock)."""
    table, storage = recorded(empty_mor(tmp_path))
    write(table, batch(["a"], 1, "2025-03-01"), "insert")
    write(table, batch(["a"], 2, "2025-03-01"), "upsert")
    storage.events.clear()
    options = {
        **DUE,
        "hoodie.compaction.strategy": "BoundedPartitionAwareCompactionStrategy",
        "hoodie.compaction.daybased.target.partitions": "2",
    }
    result = schedule_compaction(table, options, now=START + dt.timedelta(days=1))
    assert result.outcome is Outcome.SCHEDULED
    assert [op.partition for op in result.plan.operations] == ["2025-03-01"]
    assert storage.events == [
        ("lock", SCHEDULE_LOCK),
        TIMELINE,
        ("read", _base(table, "2025-03-01")),
        ("lock", WRITE_LOCK),
        TIMELINE,
        ("lock", INSTANT_LOCK),
        TIMELINE,
    ]


def test_a_slice_a_writer_adds_to_the_plan_before_the_write_lock_is_checked_under_it(tmp_path: Path) -> None:
    """A write between the check and the write lock gives y a log: y's base file joins the plan
    and is checked then (here a foreign parquet file in its place: refused, no plan written)."""
    table, storage = recorded(mor(tmp_path))
    y_base = _base(table, "y")

    def writer() -> None:
        write(LakeTable.open(table.base_path, clock=table.clock), batch(["c"], 2, "y"), "upsert")
        pq.write_table(pa.table({"v": [1]}), table.base_path / y_base)

    storage.before_write_lock = writer
    message = (
        f"{table.storage.uri(y_base)} is not a base file of {table.uri}: it lacks column(s) "
        "_hoodie_commit_time, _hoodie_commit_seqno, _hoodie_record_key, _hoodie_partition_path, "
        "_hoodie_file_name (its columns: v)"
    )
    with pytest.raises(CorruptDataFileError) as raised:
        schedule_compaction(table, DUE)
    assert str(raised.value) == message
    assert storage.events == [
        ("lock", SCHEDULE_LOCK),
        TIMELINE,
        ("read", _base(table, "x")),
        ("lock", WRITE_LOCK),
        TIMELINE,
        ("read", y_base),
    ]
    assert table.timeline().pending_compactions() == []


def test_a_table_with_a_metadata_table_refuses_scheduling_by_name_but_not_a_dry_run(tmp_path: Path) -> None:
    created = mor(tmp_path)
    add_metadata_table(created.base_path, partitions="files,column_stats")
    table = LakeTable.open(created.base_path, clock=created.clock)
    with pytest.raises(TableConfigError) as raised:
        schedule_compaction(table, DUE)
    assert str(raised.value).startswith(
        f"compaction schedule refused: {table.uri} has Hudi's metadata table (partitions [files, "
        "column_stats], folder .hoodie/metadata/), which this engine keeps up to date by default, but "
        "cannot for this action: partitions [files, column_stats] (only [files] on table version 6); the "
        "action would leave it stale"
    )
    dry = schedule_compaction(table, DUE, dry_run=True)
    assert (dry.outcome, dry.dry_run, len(dry.plan.operations)) == (Outcome.PLANNED, True, 1)
    assert table.timeline().pending_compactions() == []


def test_an_instant_given_that_is_taken_is_refused_before_the_drop_of_the_metadata_table(
    tmp_path: Path,
) -> None:
    """The drop ``hoodie.metadata.enable=false`` asks for is not done for a schedule refused anyway."""
    created = mor(tmp_path)
    add_metadata_table(created.base_path)
    table = LakeTable.open(created.base_path, clock=created.clock)
    taken = table.timeline().instants[-1].timestamp
    with pytest.raises(CompactionScheduleConflictError, match=f"at {taken}: the time is taken$"):
        schedule_compaction(table, {**DUE, "hoodie.metadata.enable": "false"}, instant=taken)
    assert detect(LakeTable.open(created.base_path)).present


def test_an_instant_given_equal_to_a_completion_time_is_not_later_than_it(tmp_path: Path) -> None:
    """Table version 8: a log belongs to the slice of the greatest base instant not after its
    completion time, so a plan at a deltacommit's completion time would take that log into the
    slice it creates: refused, naming the completion time as the last completed instant."""
    table = mor(tmp_path, table_version=8)
    completion = max(i.completion_time for i in table.timeline().instants if i.completion_time)
    assert all(i.timestamp != completion for i in table.timeline().instants)
    with pytest.raises(CompactionScheduleConflictError) as raised:
        schedule_compaction(table, DUE, instant=completion)
    assert str(raised.value) == (
        f"cannot schedule a compaction at {completion}: it must be later than the last completed instant "
        f"{completion}"
    )
    assert table.timeline().pending_compactions() == []


def test_a_dry_run_takes_no_lock_and_reports_while_a_writer_holds_the_write_lock(tmp_path: Path) -> None:
    """A dry run writes nothing, so it waits on no writer or scheduler: it reports the plan while
    both locks are held (a real schedule is refused as busy)."""
    table = mor(tmp_path)
    with table.store.exclusive("write"), table.store.exclusive("compaction-schedule"):
        dry = schedule_compaction(table, DUE, dry_run=True)
        assert (dry.outcome, dry.dry_run, len(dry.plan.operations)) == (Outcome.PLANNED, True, 1)
        with pytest.raises(ServiceBusyError):
            schedule_compaction(table, DUE)
    assert table.timeline().pending_compactions() == []
