"""What the compaction services return and refuse, exactly: the JSON of a schedule and of an
execution, run_compaction passing its arguments on, and commit_compaction's refusals."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from compaction_support import DUE, START, batch, commit_record, drop_commit_schemas, empty_mor, store

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    CompactionError,
    InvalidStateTransitionError,
)
from airflow_lake_provider.lake.services.compaction.executor import (
    commit_compaction,
    execute_compaction,
    run_compaction,
)
from airflow_lake_provider.lake.services.compaction.result import CompactionResult, Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import format_instant


def _mor(tmp_path: Path, table_version: int = 6) -> LakeTable:
    table = empty_mor(tmp_path, table_version=table_version)
    write(table, batch(["a", "b"], 1, "x"), "insert")
    write(table, batch(["a"], 2, "x"), "upsert")  # a log file on the group: something to compact
    return table


def test_schedule_and_execution_json_are_exact(tmp_path: Path, table_version: int) -> None:
    table = _mor(tmp_path, table_version=table_version)
    scheduled = schedule_compaction(table, DUE, now=START + dt.timedelta(hours=1))
    assert scheduled.outcome is Outcome.SCHEDULED
    as_json = scheduled.to_json()
    assert as_json == {
        "outcome": "SCHEDULED",
        "instant": scheduled.instant,
        "dry_run": False,
        "reason": scheduled.reason,
        "plan": scheduled.plan.summary(),
    }
    assert scheduled.reason != "" and as_json["plan"] is not None
    done = execute_compaction(table, scheduled.instant)
    as_json = done.to_json()
    assert as_json.pop("duration_seconds") == round(done.duration_seconds, 3)
    (stat,) = done.stats
    assert as_json == {
        "outcome": "COMPLETED",
        "instant": scheduled.instant,
        "operations": 1,
        "records_written": 2,
        "log_records_merged": 1,
        "bytes_written": stat.total_write_bytes,
        "files": [stat.path],
        "recovered": False,
        "removed_files": [],
    }
    assert stat.path.startswith("x/") and stat.total_write_bytes > 0


def test_execution_json_rounds_the_duration_to_milliseconds() -> None:
    result = CompactionResult(Outcome.COMPLETED, "20250301000000000", duration_seconds=1.23456789)
    assert result.to_json()["duration_seconds"] == 1.235
    removed = CompactionResult(Outcome.COMPLETED, recovered=True, removed_files=("x/f.parquet",))
    assert (removed.to_json()["recovered"], removed.to_json()["removed_files"]) == (True, ["x/f.parquet"])


def test_run_compaction_passes_now_instant_and_force_on(tmp_path: Path, table_version: int) -> None:
    table = _mor(tmp_path, table_version=table_version)
    # Not due (5 delta commits needed): nothing runs, and the execution half says so.
    scheduled, executed = run_compaction(table, {"hoodie.compact.inline.max.delta.commits": "5"})
    assert (scheduled.outcome, executed.outcome, executed.instant) == (Outcome.NO_WORK, Outcome.NO_WORK, None)
    assert table.timeline().pending_compactions() == []
    # force skips the trigger; the plan goes at the instant asked for, and that one is executed.
    wanted = format_instant(START + dt.timedelta(seconds=100))
    scheduled, executed = run_compaction(
        table, {"hoodie.compact.inline.max.delta.commits": "5"}, instant=wanted, force=True
    )
    assert (scheduled.outcome, scheduled.instant) == (Outcome.SCHEDULED, wanted)
    assert (executed.outcome, executed.instant) == (Outcome.COMPLETED, wanted)


def test_run_compaction_reads_the_trigger_at_the_now_given(tmp_path: Path, table_version: int) -> None:
    table = _mor(tmp_path, table_version=table_version)
    by_time = {
        "hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED",
        "hoodie.compact.inline.max.delta.seconds": "3600",
    }
    early, _ = run_compaction(table, by_time, now=START + dt.timedelta(minutes=10))
    assert early.outcome is Outcome.NO_WORK
    late, executed = run_compaction(table, by_time, now=START + dt.timedelta(hours=2))
    assert (late.outcome, executed.outcome) == (Outcome.SCHEDULED, Outcome.COMPLETED)


def test_commit_refuses_what_is_not_an_inflight_compaction(tmp_path: Path, table_version: int) -> None:
    table = _mor(tmp_path, table_version=table_version)
    last_write = table.timeline().last_completed_commit.timestamp
    with pytest.raises(
        InvalidStateTransitionError,
        match="^compaction 20250301000010000 is not inflight \\(found nothing\\)$",
    ):
        commit_compaction(table, "20250301000010000", [])
    with pytest.raises(
        InvalidStateTransitionError,
        match=f"^compaction {last_write} is not inflight \\(found {last_write}__deltacommit__COMPLETED\\)$",
    ):
        commit_compaction(table, last_write, [])
    scheduled = schedule_compaction(table, DUE, now=START + dt.timedelta(hours=1))
    requested = scheduled.instant
    with pytest.raises(
        InvalidStateTransitionError,
        match=f"^compaction {requested} is not inflight \\(found {requested}__compaction__REQUESTED\\)$",
    ):
        commit_compaction(table, requested, [])
    done = execute_compaction(table, requested)
    with pytest.raises(CommitConflictError, match=f"^compaction {requested} is already completed$"):
        commit_compaction(table, requested, list(done.stats))


def test_commit_refuses_stats_that_do_not_match_the_plan(tmp_path: Path, table_version: int) -> None:
    table = _mor(tmp_path, table_version=table_version)
    scheduled = schedule_compaction(table, DUE, now=START + dt.timedelta(hours=1))
    c = scheduled.instant
    (op,) = scheduled.plan.operations

    def crash(point: str) -> None:
        if point == "commit":
            raise RuntimeError("stop before the commit")

    with pytest.raises(RuntimeError):
        execute_compaction(table, c, fault=crash)
    # The retry's own output: an execution whose stats we hold (it stops at the commit again).
    stats = []

    def keep(table, timeline, schema, instant, ops):  # type: ignore[no-untyped-def]
        from airflow_lake_provider.lake.services.compaction.operation import run_operation

        out = [run_operation(table, timeline, schema, instant, i, o) for i, o in enumerate(ops)]
        stats.extend(out)
        return out

    with pytest.raises(RuntimeError):
        execute_compaction(table, c, fault=crash, runner=keep)
    (stat,) = stats
    group = (op.partition, op.file_id)
    with pytest.raises(
        CompactionError, match=re.escape(f"(missing [{group}], unexpected [], 0 stats for 1 operations)")
    ):
        commit_compaction(table, c, [])
    with pytest.raises(
        CompactionError, match=re.escape("(missing [], unexpected [], 2 stats for 1 operations)")
    ):
        commit_compaction(table, c, [stat, stat])
    assert table.timeline().get(c).is_inflight
    commit_compaction(table, c, [stat])
    assert table.timeline().get(c).is_completed
    # Only the reported output is left of the group at c: the earlier attempt's file was removed.
    names = sorted(p.name for p in (table.base_path / "x").iterdir() if c in p.name)
    assert names == [stat.path.split("/")[-1]]


def test_a_table_whose_commits_carry_no_schema_gets_a_compaction_commit_without_one(
    tmp_path: Path, table_version: int
) -> None:
    # Such a table's schema is hoodie.table.create.schema; the compaction commit stays like the others.
    table = _mor(tmp_path, table_version=table_version)
    schema = table.timeline().latest_schema()
    assert schema is not None
    drop_commit_schemas(table)
    store(table).update_properties({**table.config.properties, "hoodie.table.create.schema": schema})
    table = LakeTable.open(table.base_path)
    assert table.timeline().latest_schema() is None
    _, done = run_compaction(table, DUE)
    assert done.outcome is Outcome.COMPLETED
    assert commit_record(table, done.instant)["extraMetadata"] == {}
