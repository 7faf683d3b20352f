"""Scheduling a compaction: when a plan is due, at which instant, and writing its requested file.

Under the schedule lock and the write lock (a writer between reading its file groups and committing
would append logs to slices a new plan takes over); the base files' footers are checked before the
write lock is taken.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Mapping

from airflow_lake_provider.lake.errors import CompactionError, CompactionScheduleConflictError
from airflow_lake_provider.lake.services.compaction.config import STRATEGY_KEY, CompactionConfig
from airflow_lake_provider.lake.services.compaction.operation import base_files, output_schema
from airflow_lake_provider.lake.services.compaction.plan import CompactionPlan
from airflow_lake_provider.lake.services.compaction.planner import plan_compaction, trigger_state
from airflow_lake_provider.lake.services.compaction.result import Outcome, ScheduleResult
from airflow_lake_provider.lake.table.metadata.policy import drops_metadata_table, guard_mutation
from airflow_lake_provider.lake.table.reader import check_base_files
from airflow_lake_provider.lake.table.rollback.executor import refuse_while_restoring as refuse_restoring
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import (
    COMMIT_ACTIONS,
    Action,
    format_instant,
    instant_to_datetime,
    validate_instant_time,
)
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

log = logging.getLogger(__name__)


# Services each hold their own lock, so scheduling never waits for a long execution.
SCHEDULE_LOCK = "compaction-schedule"
# How far past the table's clock an explicit plan instant may be: clock skew between machines.
MAX_CLOCK_SKEW = dt.timedelta(minutes=5)


def _config(table: LakeTable, options: Mapping[str, object] | CompactionConfig | None) -> CompactionConfig:
    """The run's options over ``hoodie.properties`` (as every service reads them), or a built config."""
    if isinstance(options, CompactionConfig):
        return options
    return CompactionConfig.from_options(table.config.properties, options or {})


def check_requested_instant(table: LakeTable, requested: str) -> str:
    """``requested`` if it is a valid time no later than now (plus ``MAX_CLOCK_SKEW``), else raise.

    Every new instant must follow every instant on the timeline, so a plan at a future time (say
    29991231235959999) would push every later write and service to after it.
    """
    validate_instant_time(requested)
    now = table.clock.now()
    if instant_to_datetime(requested) > now + MAX_CLOCK_SKEW:
        raise CompactionScheduleConflictError(
            f"cannot schedule a compaction at {requested}: it is later than now ({format_instant(now)}) "
            f"by more than {MAX_CLOCK_SKEW.total_seconds() / 60:g} minutes, and every later instant "
            "would have to follow it"
        )
    return requested


def plan_instant(table: LakeTable, timeline: Timeline, requested: str | None = None) -> str:
    """A time for a new plan: after every completed (and pending service) instant, before every pending write.

    A write that is still pending may append to the slices being planned; a plan instant before it
    keeps its log files in the new slice (Java's rule), so a later instant is refused.
    """
    writes = [i.timestamp for i in timeline.pending if i.action in COMMIT_ACTIONS]
    # Layout 2 (table versions 8 and 9): completion times too. A log belongs to the slice of the
    # greatest base instant not after its write's completion time, so each log the plan takes must
    # have completed before the plan's instant (or it would fall into the slice being created).
    completions = [i.completion_time for i in timeline.instants if i.completion_time]
    others = [i.timestamp for i in timeline.instants if i.timestamp not in writes] + completions
    instant = (
        check_requested_instant(table, requested)
        if requested
        else table.clock.next(after=max(others, default=None))
    )
    completed = [i.timestamp for i in timeline.instants if i.is_completed] + completions
    last_completed = max(completed, default=None)
    if any(i.timestamp == instant for i in timeline.instants):
        raise CompactionScheduleConflictError(f"cannot schedule a compaction at {instant}: the time is taken")
    if last_completed is not None and instant <= last_completed:
        raise CompactionScheduleConflictError(
            f"cannot schedule a compaction at {instant}: it must be later than the last completed instant "
            f"{last_completed}"
        )
    blocking = sorted(t for t in writes if t <= instant)
    if blocking:
        raise CompactionScheduleConflictError(
            f"cannot schedule a compaction at {instant}: pending write(s) {', '.join(blocking)} started "
            f"earlier, and a plan must be later than the last completed instant {last_completed or '-'} "
            "but earlier than every pending write; finish those writes or, if they failed, roll them back "
            f"(lake rollback {table.uri})"
        )
    return instant


def schedule_compaction(
    table: LakeTable,
    options: Mapping[str, object] | CompactionConfig | None = None,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    *,
    instant: str | None = None,
    force: bool = False,
) -> ScheduleResult:
    """Write ``<c>.compaction.requested`` if the trigger is due and the strategy selects file groups.

    ``now`` (aware) is the clock the trigger and partition-aware strategies read; ``instant`` asks
    for a specific plan time; ``force`` skips the trigger (the strategy still selects).
    """
    config = _config(table, options)
    raw = None if isinstance(options, CompactionConfig) else options
    if instant is not None:  # refused even when nothing is due: the caller asked for this time
        check_requested_instant(table, instant)
        if table.config.is_mor and drops_metadata_table(table, raw):  # refused anyway: before the drop
            plan_instant(table, table.timeline(), instant)
    now = now or dt.datetime.now(dt.timezone.utc)
    if not table.config.is_mor:
        return ScheduleResult(Outcome.NO_WORK, reason=f"{table.uri} is copy-on-write; nothing to compact")
    table.config.checked_bloom_settings()  # a plan whose base files could not be written is not scheduled
    guard_mutation(
        table,
        "compaction schedule",
        raw,
        dry_run=dry_run,
        maintains=True,  # a plan changes no listing: Hudi writes no MDT deltacommit for it
        moves_keys=False,
    )
    with service_lock(table, SCHEDULE_LOCK, dry_run):
        checked = _check_base_files_unlocked(table, config, now, force)
        # The write lock too: a writer between reading its file groups and committing would
        # append logs to slices this plan takes over, and lose them (Hudi needs a lock provider).
        with service_lock(table, WRITE_LOCK, dry_run):
            return _schedule_locked(table, config, now, dry_run, instant, force, checked)


def refuse_while_restoring(table: LakeTable, timeline: Timeline, doing: str) -> None:
    """``CompactionError`` while a restore is pending, as writers refuse: its plan was fixed when it
    started, so a compaction planned or run now could take slices it is about to delete, or redo
    one it is rolling back."""
    refuse_restoring(table, timeline, doing, CompactionError)


def service_lock(table: LakeTable, service: str, dry_run: bool) -> contextlib.AbstractContextManager[None]:
    """The service's lock; none for a dry run, which writes nothing (not even a lock file) and
    reports what a run would do on the timeline as it reads it."""
    return contextlib.nullcontext() if dry_run else table.store.exclusive(service)


def _check_base_files_unlocked(
    table: LakeTable, config: CompactionConfig, now: dt.datetime, force: bool
) -> set[str]:
    """Check the base files a plan would take now, before the write lock is held: their footers
    (one read each) are most of a schedule's I/O, and writers wait for that lock. Returns them."""
    timeline = table.timeline()
    if not (trigger_state(timeline, config, now).due or force):
        return set()
    plan = plan_compaction(timeline, table.file_system_view(timeline), config, now=now)
    files = base_files(plan) if plan else []
    check_base_files(table, files)
    return set(files)


def _schedule_locked(
    table: LakeTable,
    config: CompactionConfig,
    now: dt.datetime,
    dry_run: bool,
    instant: str | None,
    force: bool,
    checked: set[str],
) -> ScheduleResult:
    timeline = table.timeline()
    refuse_while_restoring(table, timeline, "scheduling a compaction")
    trigger = trigger_state(timeline, config, now)
    if not (trigger.due or force):
        log.info("compaction of %s not due: %s", table.uri, trigger.reason)
        return ScheduleResult(Outcome.NO_WORK, reason=f"not due: {trigger.reason}", dry_run=dry_run)
    plan = plan_compaction(timeline, table.file_system_view(timeline), config, now=now)
    if plan is None:
        return ScheduleResult(
            Outcome.NO_WORK, reason=f"no file slice selected by {config.strategy}", dry_run=dry_run
        )
    output_schema(table, timeline)  # a plan no run could execute is refused, not written
    # A foreign parquet file in a base file's place is refused by name before a plan exists.
    check_base_files(table, [f for f in base_files(plan) if f not in checked])
    c = plan_instant(table, timeline, instant)
    # The partitions it leaves out are recorded in Hudi 1.x's plans only (0.x's schema has no field).
    missing = plan.missing_partitions if table.layout.has_completion_times else ()
    plan = CompactionPlan(plan.operations, {STRATEGY_KEY: config.strategy}, missing_partitions=missing)
    if dry_run:
        return ScheduleResult(Outcome.PLANNED, c, plan, trigger.reason, dry_run=True)
    body = table.store.encode_plan(timeline_avro.COMPACTION_PLAN, plan.to_avro())
    table.store.create_requested(c, Action.COMPACTION, body)
    log.info(
        "compaction %s of %s scheduled: %d file groups, %.3f MB IO",
        c,
        table.uri,
        len(plan.operations),
        plan.total_io_mb,
    )
    return ScheduleResult(Outcome.SCHEDULED, c, plan, trigger.reason)
