"""Execution and plan-time rules of the compaction service, exactly: which pending compaction a run
picks, what each outcome reports, the lock, the log lines, and the plan instant's refusals."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from pathlib import Path

import pyarrow as pa
import pytest
from compaction_support import (
    DUE,
    START,
    TIMELINE,
    batch,
    crash_at,
    drop_commit_schemas,
    empty_mor,
    mor,
    recorded,
    store,
    timeline_file,
)
from metadata_table_support import add_metadata_table

from airflow_lake_provider.lake.errors import (
    CompactionScheduleConflictError,
    ServiceBusyError,
    TableConfigError,
)
from airflow_lake_provider.lake.services.compaction import scheduler
from airflow_lake_provider.lake.services.compaction.config import CompactionConfig
from airflow_lake_provider.lake.services.compaction.executor import (
    EXECUTE_LOCK,
    CompactionError,
    execute_compaction,
    run_compaction,
)
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import plan_instant, schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.metadata.policy import detect
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock, State, format_instant

COMPACTION_LOG = "airflow_lake_provider.lake.services.compaction"  # the loggers of its modules


def _quick(seconds: float) -> bool:
    return 0 < seconds < 60  # measured, so never exactly 0


def test_a_run_recovers_a_crashed_compaction_before_an_older_requested_one(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    older = schedule_compaction(table, DUE).instant  # x
    write(table, batch(["c"], 2, "y"), "upsert")
    crashed = schedule_compaction(table, DUE).instant  # y
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, crashed, fault=crash_at("inflight"))
    done = execute_compaction(table)
    assert (done.outcome, done.instant, done.recovered) == (Outcome.COMPLETED, crashed, True)
    assert [i.timestamp for i in table.timeline().pending_compactions()] == [older]


def test_a_run_asked_for_an_instant_that_is_no_compaction_is_refused(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    write_instant = table.timeline().completed_commits[-1].timestamp
    for asked in (write_instant, "20250301000000500"):
        with pytest.raises(
            CompactionError,
            match=f"^{re.escape(str(table.storage.root))}: there is no compaction at instant {asked}$",
        ):
            execute_compaction(table, asked)


def test_every_outcome_reports_its_instant_and_duration(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    nothing = execute_compaction(table)
    assert (nothing.outcome, nothing.instant) == (Outcome.NO_WORK, None) and _quick(nothing.duration_seconds)
    c = schedule_compaction(table, DUE).instant
    dry = execute_compaction(table, c, dry_run=True)
    assert (dry.outcome, dry.instant, dry.operations, dry.recovered) == (Outcome.PLANNED, c, 1, False)
    assert _quick(dry.duration_seconds) and table.timeline().get(c).is_requested
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("inflight"))
    dry = execute_compaction(table, c, dry_run=True)
    assert (dry.outcome, dry.instant, dry.operations, dry.recovered) == (Outcome.PLANNED, c, 1, True)
    done = execute_compaction(table, c)
    assert (done.outcome, done.instant) == (Outcome.COMPLETED, c) and _quick(done.duration_seconds)
    again = execute_compaction(table, c)
    assert (again.outcome, again.instant) == (Outcome.ALREADY_COMPLETED, c) and _quick(again.duration_seconds)


def test_the_inflight_file_holds_the_plan_on_v6_and_nothing_on_v8(tmp_path: Path, table_version: int) -> None:
    """Version 8: Hudi 1.x writes the compaction inflight empty (as the Spark-written 1.x tables
    hold it) and reads the plan from the requested file."""
    table = mor(tmp_path, table_version=table_version)
    c = schedule_compaction(table, DUE).instant
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("inflight"))
    plan = timeline_file(table, c, State.REQUESTED).read_bytes()
    inflight = timeline_file(table, c, State.INFLIGHT).read_bytes()
    assert plan and inflight == (plan if table_version == 6 else b"")
    assert execute_compaction(table, c).outcome is Outcome.COMPLETED  # recovered from the requested plan


def test_a_run_while_another_holds_the_compaction_lock_is_refused(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    c = schedule_compaction(table, DUE).instant
    with store(table).exclusive(EXECUTE_LOCK), pytest.raises(ServiceBusyError):
        execute_compaction(LakeTable.open(table.base_path), c)
    assert table.timeline().get(c).is_requested
    # A dry run takes no lock (it writes nothing): it reports while the lock is held.
    with store(table).exclusive(EXECUTE_LOCK):
        dry = execute_compaction(LakeTable.open(table.base_path), c, dry_run=True)
    assert (dry.outcome, dry.instant) == (Outcome.PLANNED, c)


def test_failed_operations_are_listed_one_after_another(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    write(table, batch(["c"], 2, "y"), "upsert")
    scheduled = schedule_compaction(table, DUE)
    for op in scheduled.plan.operations:
        (table.base_path / op.partition / op.delta_file_names[0]).unlink()
    with pytest.raises(CompactionError) as raised:
        execute_compaction(table, scheduled.instant)
    message = str(raised.value)
    assert "2 of 2 operations failed" in message
    x, y = sorted(scheduled.plan.operations, key=lambda op: op.partition)
    assert re.search(f": x/{x.file_id}: [^;]+; y/{y.file_id}: ", message), message


def test_the_log_lines_of_a_run(tmp_path: Path, table_version: int, caplog: pytest.LogCaptureFixture) -> None:
    table = mor(tmp_path, table_version=table_version)
    c = schedule_compaction(table, DUE).instant
    caplog.set_level(logging.DEBUG, logger=COMPACTION_LOG)
    caplog.clear()
    done = execute_compaction(table, c)
    (stat,) = done.stats
    assert [r.getMessage() for r in caplog.records if r.name.startswith(COMPACTION_LOG)] == [
        f"compaction {c}: {stat.file_id} -> {stat.path} (2 rows)",
        f"compaction {c} of {table.uri} completed: 1 file groups, 2 rows, {stat.total_write_bytes} bytes",
    ]


def test_a_delete_only_log_counts_no_insert(tmp_path: Path, table_version: int) -> None:
    table = empty_mor(tmp_path, table_version=table_version)
    write(table, batch(["a", "b"], 1, "x"), "insert")
    write(table, batch(["b"], 2, "x"), "delete")
    done = execute_compaction(table, schedule_compaction(table, DUE).instant)
    (stat,) = done.stats
    assert (stat.num_writes, stat.num_deletes, stat.num_update_writes, stat.num_inserts) == (1, 1, 0, 0)


# -- plan_instant --------------------------------------------------------------------------------------
def test_a_plan_instant_on_an_empty_timeline_is_the_clock_time(tmp_path: Path, table_version: int) -> None:
    at = START + dt.timedelta(hours=1)
    table = empty_mor(tmp_path, InstantClock(now=lambda: at), table_version=table_version)
    assert plan_instant(table, table.timeline()) == format_instant(at)


def test_a_plan_instant_follows_every_instant_even_with_a_clock_behind(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    # On v8 after every completion time too: a log that completed after the plan's instant would
    # belong to the slice the plan creates, not to the one it compacts.
    latest = table.timeline().latest_time
    assert table_version == 6 or latest == table.timeline().completed_commits[-1].completion_time
    table.clock = InstantClock(now=lambda: START - dt.timedelta(days=1))
    instant = plan_instant(table, table.timeline())
    assert instant > latest


def test_a_plan_instant_refused_by_pending_writes_names_them(tmp_path: Path, table_version: int) -> None:
    table = empty_mor(
        tmp_path, InstantClock(now=lambda: START + dt.timedelta(hours=1)), table_version=table_version
    )
    first, second = format_instant(START), format_instant(START + dt.timedelta(minutes=1))
    for t in (second, first):
        store(table).create_requested(t, Action.DELTACOMMIT)
    message = (
        f"cannot schedule a compaction at {format_instant(START + dt.timedelta(hours=1))}: pending write(s) "
        f"{first}, {second} started earlier, and a plan must be later than the last completed instant - "
        "but earlier than every pending write; finish those writes or, if they failed, roll them back "
        f"(lake rollback {table.uri})"
    )
    with pytest.raises(CompactionScheduleConflictError, match=f"^{re.escape(message)}$"):
        plan_instant(table, table.timeline())


def test_a_schedule_takes_a_config_object_and_logs_the_plan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    caplog.set_level(logging.INFO, logger=scheduler.log.name)
    caplog.clear()
    scheduled = schedule_compaction(table, CompactionConfig.from_options(DUE))
    assert scheduled.outcome is Outcome.SCHEDULED
    assert [r.getMessage() for r in caplog.records if r.name == scheduler.log.name] == [
        f"compaction {scheduled.instant} of {table.uri} scheduled: 1 file groups, "
        f"{scheduled.plan.total_io_mb:.3f} MB IO"
    ]


def _set_properties(table: LakeTable, **props: str) -> LakeTable:
    store(table).update_properties({**table.config.properties, **props})
    return LakeTable.open(table.base_path)


def test_a_table_without_a_schema_or_meta_fields_is_not_compacted(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    drop_commit_schemas(table)
    with pytest.raises(
        CompactionError,
        match=f"^{re.escape(table.uri)}: the table has no schema \\(no commit records one\\)$",
    ):
        schedule_compaction(table, DUE)
    table = _set_properties(
        mor(tmp_path / "2", table_version=table_version), **{"hoodie.populate.meta.fields": "false"}
    )
    with pytest.raises(
        CompactionError,
        match=f"^{re.escape(table.uri)}: compacting tables without meta fields is not supported$",
    ):
        schedule_compaction(table, DUE)
    assert table.timeline().pending_compactions() == []


def test_what_a_schedule_reports_when_nothing_is_scheduled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, table_version: int
) -> None:
    cow = LakeTable.create(
        tmp_path / "cow", name="c", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    assert schedule_compaction(cow, DUE).reason == f"{cow.uri} is copy-on-write; nothing to compact"
    table = mor(tmp_path, table_version=table_version)
    caplog.set_level(logging.INFO, logger=scheduler.log.name)
    caplog.clear()
    later = {"hoodie.compact.inline.max.delta.commits": "9"}
    result = schedule_compaction(table, later, dry_run=True)
    reason = result.reason.removeprefix("not due: ")
    assert (result.outcome, result.dry_run) == (Outcome.NO_WORK, True) and reason != result.reason
    assert [r.getMessage() for r in caplog.records if r.name == scheduler.log.name] == [
        f"compaction of {table.uri} not due: {reason}"
    ]
    # A plan written reports the trigger's reason, as its dry run does.
    dry = schedule_compaction(table, DUE, dry_run=True)
    assert dry.instant is not None and dry.instant > table.timeline().instants[-1].timestamp
    done = schedule_compaction(table, DUE)
    assert done.reason == dry.reason and "delta commit" in done.reason


def test_a_schedule_while_another_holds_the_schedule_lock_is_refused(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    with store(table).exclusive(scheduler.SCHEDULE_LOCK), pytest.raises(ServiceBusyError):
        schedule_compaction(LakeTable.open(table.base_path), DUE)
    assert table.timeline().pending_compactions() == []


def test_a_partition_aware_strategy_reads_the_now_given(tmp_path: Path, table_version: int) -> None:
    table = LakeTable.create(
        tmp_path / "d",
        name="d",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("y", "m", "d"),
        table_version=table_version,
    )
    for ts in (1, 2):
        row = {"id": ["a"], "ts": pa.array([ts], pa.int64()), "y": ["2025"], "m": ["02"], "d": ["28"]}
        write(table, pa.table(row), "insert" if ts == 1 else "upsert")
    bounded = {**DUE, "hoodie.compaction.strategy": "BoundedPartitionAwareCompactionStrategy"}
    # Within the last 10 days of the now given (today's date would leave it out).
    scheduled = schedule_compaction(table, bounded, now=START + dt.timedelta(days=1))
    assert [op.partition for op in scheduled.plan.operations] == ["2025/02/28"]
    strategy = bounded["hoodie.compaction.strategy"]
    requested = timeline_file(table, scheduled.instant, State.REQUESTED)
    plan = timeline_avro.read_avro(requested.read_bytes(), str(requested))
    assert plan["extraMetadata"] == {scheduler.STRATEGY_KEY: strategy}
    # 100 days on, the partition is out of the window: nothing selected, and the reason says by what.
    write(table, pa.table(row), "upsert")
    late = schedule_compaction(table, bounded, now=START + dt.timedelta(days=100), dry_run=True)
    assert (late.outcome, late.reason, late.dry_run) == (
        Outcome.NO_WORK,
        f"no file slice selected by {strategy}",
        True,
    )


def test_a_run_reads_the_timeline_once_under_its_lock_before_its_first_step(tmp_path: Path) -> None:
    """The plan, the schema and the planned base files' check all come from the one timeline read
    under the compaction lock (S3 lists cost); the inflight step and the commit read it again."""
    created = mor(tmp_path)
    schedule_compaction(created, DUE)
    table, storage = recorded(created)
    assert execute_compaction(table).outcome is Outcome.COMPLETED
    (base,) = (f"x/{p.name}" for p in (created.base_path / "x").glob("*.parquet") if "_1-1-0_" in p.name)
    assert storage.events == [
        ("lock", f".lake-{EXECUTE_LOCK}.lock"),
        TIMELINE,
        ("read", base),  # its footer checked
        TIMELINE,  # the inflight transition
        ("read", base),  # its rows (a small file: its keys with them)
        TIMELINE,
        TIMELINE,
    ]


def test_a_metadata_table_refuses_execution_by_name_unless_dropped_or_dry(
    tmp_path: Path,
) -> None:
    created = mor(tmp_path)
    c = schedule_compaction(created, DUE).instant
    add_metadata_table(created.base_path, partitions="files,column_stats")
    table = LakeTable.open(created.base_path, clock=created.clock)
    with pytest.raises(TableConfigError) as raised:
        execute_compaction(table)
    assert str(raised.value).startswith(
        f"compaction execute refused: {table.uri} has Hudi's metadata table (partitions [files, "
        "column_stats], folder .hoodie/metadata/), which this engine keeps up to date by default, but "
        "cannot for this action: partitions [files, column_stats] (only [files] on table version 6); the "
        "action would leave it stale"
    )
    dry = execute_compaction(table, dry_run=True)
    assert (dry.outcome, dry.instant) == (Outcome.PLANNED, c)
    assert detect(table).present
    # The option the refusal names drops the metadata table as Hudi's writers do, then the run goes on.
    done = execute_compaction(table, options={"hoodie.metadata.enable": "false"})
    assert (done.outcome, done.instant) == (Outcome.COMPLETED, c)
    assert not detect(LakeTable.open(created.base_path)).present


def test_an_instant_that_is_no_compaction_is_refused_before_the_drop_of_the_metadata_table(
    tmp_path: Path,
) -> None:
    """The drop the option asks for is not done for a run that is refused anyway: an instant given
    that is not a compaction (a deltacommit, or no instant at all) leaves the metadata table."""
    created = mor(tmp_path)
    c = schedule_compaction(created, DUE).instant
    add_metadata_table(created.base_path)
    table = LakeTable.open(created.base_path, clock=created.clock)
    deltacommit = next(i.timestamp for i in table.timeline().instants if i.action is Action.DELTACOMMIT)
    for instant in (deltacommit, "20990101000000000"):
        with pytest.raises(CompactionError, match=f"there is no compaction at instant {instant}$"):
            execute_compaction(table, instant, options={"hoodie.metadata.enable": "false"})
        assert detect(LakeTable.open(created.base_path)).present
    assert table.timeline().get(c).is_requested


def test_run_compaction_takes_a_compaction_config_too(tmp_path: Path) -> None:
    """A CompactionConfig (no metadata-table options in it) schedules and executes as its options do:
    the execution gets no options, not the config."""
    table = mor(tmp_path)
    scheduled, done = run_compaction(table, CompactionConfig.from_options(DUE))
    assert (scheduled.outcome, done.outcome, done.instant) == (
        Outcome.SCHEDULED,
        Outcome.COMPLETED,
        scheduled.instant,
    )


def test_a_run_asked_for_its_own_instant_finishes_no_crashed_compaction(tmp_path: Path) -> None:
    """A run that asked for an instant of its own and scheduled nothing leaves a compaction another
    run left inflight alone (NO_WORK): only a run with no instant of its own is a retry of that run."""
    table = mor(tmp_path / "t")
    scheduled = schedule_compaction(table, DUE)
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, scheduled.instant, fault=crash_at("inflight"))
    own = format_instant(START + dt.timedelta(minutes=1))
    again, done = run_compaction(table, DUE, instant=own)
    assert (again.outcome, done.outcome, done.instant) == (Outcome.NO_WORK, Outcome.NO_WORK, None)
    assert table.timeline().get(scheduled.instant).is_inflight


def test_a_run_finishes_the_compaction_a_crashed_run_left_inflight(tmp_path: Path, capsys) -> None:
    """The crashed run's plan holds the file groups, so a new schedule finds nothing: the next run
    (an Airflow retry of the same task) finishes the inflight compaction instead of answering
    NO_WORK and leaving it for good; the CLI's ``--mode run`` alike."""
    from airflow_lake_provider.lake.cli import main

    for way in ("api", "cli"):
        table = mor(tmp_path / way)
        scheduled = schedule_compaction(table, DUE)
        with pytest.raises(SimulatedCrash):
            execute_compaction(table, scheduled.instant, fault=crash_at("inflight"))
        assert table.timeline().get(scheduled.instant).is_inflight
        if way == "api":
            again, done = run_compaction(table, DUE)
            assert (again.outcome, done.outcome, done.instant) == (
                Outcome.NO_WORK,
                Outcome.COMPLETED,
                scheduled.instant,
            )
        else:
            capsys.readouterr()
            assert main(["compact", str(table.base_path), "--mode", "run"]) == 0
            out = json.loads(capsys.readouterr().out)
            assert (out["outcome"], out["execute"]["instant"]) == ("COMPLETED", scheduled.instant)
        assert table.timeline().get(scheduled.instant).is_completed
        # Nothing inflight, nothing due: a run is NO_WORK and executes nothing.
        nothing, idle = run_compaction(table, DUE)
        assert (nothing.outcome, idle.outcome, idle.instant) == (Outcome.NO_WORK, Outcome.NO_WORK, None)
