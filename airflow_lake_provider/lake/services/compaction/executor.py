"""Compaction of merge-on-read tables: execute a scheduled plan, recover a crashed run.

Scheduling is in ``scheduler``, one operation (a file slice merged into a new base file) in
``operation``, the results in ``result``.

Durable order of an execution at ``c``: ``c.compaction.requested`` -> ``c.compaction.inflight`` ->
per operation a marker, then the new base file ``<fileId>_<token>_<c>.parquet`` -> ``c.commit``
(table versions 8 and 9, timeline layout 2: the inflight file is empty and the completed one is
``<c>_<completion>.commit`` with Avro metadata, as Hudi 1.x writes them; the store knows which).
Readers ignore base files of an instant that is not completed, so a crash before the commit leaves
the table unchanged; the retry removes the partial output (named by markers) and runs again.

``operation.execute_operation`` and ``commit_compaction`` are the halves a distributed runner needs: tasks
call the first once per operation, the driver commits their write stats with the second.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence

import pyarrow as pa

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    CompactionError,
    InvalidStateTransitionError,
)
from airflow_lake_provider.lake.file_group.file_names import BaseFileName
from airflow_lake_provider.lake.services.compaction.config import CompactionConfig
from airflow_lake_provider.lake.services.compaction.operation import (
    FaultHook,
    OperationRunner,
    _no_fault,
    base_files,
    load_plan,
    output_schema,
    run_operation,
)
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation, CompactionPlan
from airflow_lake_provider.lake.services.compaction.result import CompactionResult, Outcome, ScheduleResult
from airflow_lake_provider.lake.services.compaction.scheduler import (
    refuse_while_restoring,
    schedule_compaction,
    service_lock,
)
from airflow_lake_provider.lake.table.metadata.policy import (
    drops_metadata_table,
    guard_mutation,
    kept_metadata_table,
)
from airflow_lake_provider.lake.table.metadata.records import change_of_commit
from airflow_lake_provider.lake.table.metadata.services import services_after_commit
from airflow_lake_provider.lake.table.reader import check_base_files
from airflow_lake_provider.lake.table.rollback.undone import undone_compactions
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat, join_partition
from airflow_lake_provider.lake.timeline.instant import Action, Instant, validate_instant_time

log = logging.getLogger(__name__)


EXECUTE_LOCK = "compaction"


def _remove(table: LakeTable, relative: str) -> bool:
    return table.storage.delete_data_file(relative)


def _own_output(instant: str, plan: CompactionPlan, partition: str, name: str) -> bool:
    """True for a base file this compaction may have written: its instant, a planned file group."""
    parsed = BaseFileName.parse(name)
    return parsed is not None and parsed.instant == instant and (partition, parsed.file_id) in plan.groups


def remove_partial_output(table: LakeTable, instant: str, plan: CompactionPlan) -> list[str]:
    """Delete what a crashed run of ``instant`` wrote: base files at ``instant`` of the plan's file groups.

    The planned partitions are listed rather than the markers read: a marker is created before its
    file, so the listing finds every file a marker could name, and also one whose marker is lost.
    Nothing else is touched: log files written against ``instant`` by later writers are kept.
    """
    targets = [
        join_partition(partition, name)
        for partition in sorted({op.partition for op in plan.operations})
        for name in table.storage.list_names(partition)
        if _own_output(instant, plan, partition, name)
    ]
    removed = sorted(t for t in targets if _remove(table, t))
    # The old attempt's markers name files that are gone now; the retry writes its own.
    table.store.markers.delete(instant)
    if removed:
        log.info("compaction %s: removed %d files of an earlier attempt", instant, len(removed))
    return removed


def commit_compaction(
    table: LakeTable, instant: str, stats: Sequence[WriteStat], timeline: Timeline | None = None
) -> CommitMetadata:
    """Complete ``instant`` as ``<c>.commit`` once every planned operation has a write stat.

    Files an instant's markers name but no stat reports (failed task attempts) are removed first.
    A second committer gets ``CommitConflictError``: the completed file is create-only.
    """
    return _commit(table, instant, stats, timeline or table.timeline())


def _commit(table: LakeTable, instant: str, stats: Sequence[WriteStat], timeline: Timeline) -> CommitMetadata:
    current = timeline.get(instant)
    if current is None or current.action is not Action.COMPACTION or not current.is_inflight:
        if current is not None and current.is_completed and timeline.is_compaction(current):
            raise CommitConflictError(f"compaction {instant} is already completed")
        raise InvalidStateTransitionError(
            f"compaction {instant} is not inflight (found {current or 'nothing'})"
        )
    plan = load_plan(timeline, instant)
    reported = [(s.partition_path, s.file_id) for s in stats]
    missing = sorted(plan.groups - set(reported))
    unexpected = sorted(set(reported) - plan.groups)
    if missing or unexpected or len(reported) != len(set(reported)):
        raise CompactionError(
            f"compaction {instant}: write stats do not match the plan (missing {missing}, unexpected "
            f"{unexpected}, {len(reported)} stats for {len(plan.operations)} operations); not committing"
        )
    written = {s.path for s in stats}
    for marker in table.store.markers.read(instant):
        if marker.relative_path not in written and _own_output(
            instant, plan, marker.partition, marker.file_name
        ):
            _remove(table, marker.relative_path)
    per_partition: dict[str, list[WriteStat]] = {}
    for stat in stats:
        per_partition.setdefault(stat.partition_path, []).append(stat)
    schema = timeline.latest_schema()
    metadata = CommitMetadata(
        operation_type="COMPACT",
        partition_to_write_stats={p: tuple(s) for p, s in per_partition.items()},
        extra_metadata={"schema": schema} if schema else {},
        compacted=True,
    )
    mdt = kept_metadata_table(table)
    if mdt is not None:  # maintained: the new base files' MDT deltacommit completes first, as Hudi's
        done = dataclasses.replace(current, action=Action.COMMIT)
        mdt.commit_write(table.storage, table.config, timeline, done, change_of_commit(metadata))
    # JSON in table version 6, Avro (Hudi 1.x's schema) in 8 and 9, as every commit of the table.
    table.store.transition_to_completed(current, metadata.to_bytes(table.layout.has_completion_times))
    table.store.markers.delete(instant)
    return metadata


def _local_runner(fault: FaultHook) -> OperationRunner:
    def run(
        table: LakeTable,
        timeline: Timeline,
        schema: pa.Schema,
        instant: str,
        ops: Sequence[CompactionOperation],
    ) -> list[WriteStat | str]:
        return [
            run_operation(table, timeline, schema, instant, i, op, fault=fault) for i, op in enumerate(ops)
        ]

    return run


def _pick(timeline: Timeline, instant: str | None) -> Instant | None:
    """The compaction to run: the one asked for, else a crashed (inflight) one, else the earliest.
    One a rollback undid or is undoing is never run again (``undone_compactions``): asked for, it
    is refused; otherwise passed over."""
    undone = undone_compactions(timeline)
    root = timeline.storage.root
    if instant is not None:
        validate_instant_time(instant)
        found = timeline.get(instant)
        if found is None or not (found.action is Action.COMPACTION or timeline.is_compaction(found)):
            raise CompactionError(f"{root}: there is no compaction at instant {instant}")
        if instant in undone:
            raise CompactionError(f"{root}: compaction {instant} {_why_not(timeline, undone[instant])}")
        return found
    for c, r in undone.items():
        log.warning("compaction %s of %s is not run: %s", c, root, _why_not(timeline, r))
    pending = [c for c in timeline.pending_compactions() if c.timestamp not in undone]
    inflight = [i for i in pending if i.is_inflight]
    return (inflight or pending or [None])[0]


def _why_not(timeline: Timeline, r: str) -> str:
    root = timeline.storage.root
    rollback = timeline.get(r)
    if rollback is not None and rollback.is_completed:
        return f"is rolled back by {r}; a crash kept it pending: lake rollback {root} removes it"
    return (
        f"is being rolled back by {r}, which a crash interrupted: lake rollback {root} finishes that "
        "(if it is Hudi's retry of the compaction, the compaction then runs again)"
    )


def execute_compaction(
    table: LakeTable,
    instant: str | None = None,
    *,
    dry_run: bool = False,
    fault: FaultHook = _no_fault,
    runner: OperationRunner | None = None,
    options: Mapping[str, object] | None = None,
) -> CompactionResult:
    """Run one pending compaction to completion and return its metrics.

    ``runner`` executes the plan's operations (default: one after another in this process; the
    Spark job spreads them over executors); everything else happens here, under the lock.

    Without ``instant``, an inflight (crashed) compaction is recovered first, else the earliest
    requested one runs. Holds the table's compaction lock: a concurrent run gets ``ServiceBusyError``,
    a run that finds the instant completed returns ``ALREADY_COMPLETED``. ``fault`` is called at
    ``inflight``, after each operation's ``file`` and before the ``commit`` (crash tests).
    ``options`` are read only for the metadata table's options (see ``metadata.policy``): under
    ``lake.metadata-table.maintain``, a completed compaction runs the metadata table's own
    compaction next when due (``metadata.services``; a failure there is logged, the compaction stands).
    """
    result = _execute(table, instant, dry_run, fault, runner, options)
    if not dry_run and result.outcome is Outcome.COMPLETED:
        services_after_commit(table, options)
    return result


def _execute(
    table: LakeTable,
    instant: str | None,
    dry_run: bool,
    fault: FaultHook,
    runner: OperationRunner | None,
    options: Mapping[str, object] | None,
) -> CompactionResult:
    if instant is not None and drops_metadata_table(table, options):  # refused anyway: before the drop
        _pick(table.timeline(), instant)
    table.config.checked_bloom_settings()  # new base files' filters: refused before any step
    guard_mutation(table, "compaction execute", options, dry_run=dry_run, maintains=True, moves_keys=False)
    started = time.monotonic()
    with service_lock(table, EXECUTE_LOCK, dry_run):
        timeline = table.timeline()
        refuse_while_restoring(table, timeline, "running a compaction")
        target = _pick(timeline, instant)
        if target is None:
            return CompactionResult(Outcome.NO_WORK, duration_seconds=time.monotonic() - started)
        c = target.timestamp
        if target.is_completed:
            return CompactionResult(Outcome.ALREADY_COMPLETED, c, duration_seconds=time.monotonic() - started)
        plan = load_plan(timeline, c)
        if dry_run:
            return CompactionResult(
                Outcome.PLANNED,
                c,
                len(plan.operations),
                recovered=target.is_inflight,
                duration_seconds=time.monotonic() - started,
            )
        # Before any step on disk: an unreadable schema (a corrupt commit file) or a planned base
        # file that is not one of the table's (a foreign parquet file) changes nothing.
        schema = output_schema(table, timeline)
        check_base_files(table, base_files(plan))
        removed: list[str] = []
        if target.is_inflight:
            removed = remove_partial_output(table, c, plan)
        else:
            table.store.start_planned(target, timeline.read_bytes(target))
        fault("inflight")
        outcomes = (runner or _local_runner(fault))(table, timeline, schema, c, plan.operations)
        stats = [o for o in outcomes if isinstance(o, WriteStat)]
        failures = [o for o in outcomes if not isinstance(o, WriteStat)]
        if failures:
            raise CompactionError(
                f"compaction {c}: {len(failures)} of {len(plan.operations)} operations failed; "
                "the instant stays "
                f"inflight for a retry: {'; '.join(failures)}"
            )
        fault("commit")
        commit_compaction(table, c, stats, table.timeline())
    return _completed(table, c, stats, target.is_inflight, removed, started)


def _completed(
    table: LakeTable, c: str, stats: list[WriteStat], recovered: bool, removed: list[str], started: float
) -> CompactionResult:
    """The result of a committed run, logged."""
    result = CompactionResult(
        Outcome.COMPLETED,
        c,
        operations=len(stats),
        records_written=sum(s.num_writes for s in stats),
        log_records_merged=sum(s.total_log_records for s in stats),
        bytes_written=sum(s.total_write_bytes for s in stats),
        files=tuple(s.path for s in stats),
        recovered=recovered,
        removed_files=tuple(removed),
        duration_seconds=time.monotonic() - started,
        stats=tuple(stats),
    )
    log.info(
        "compaction %s of %s completed: %d file groups, %d rows, %d bytes",
        c,
        table.uri,
        result.operations,
        result.records_written,
        result.bytes_written,
    )
    return result


def run_finishes_crashed(table: LakeTable, instant: str | None) -> bool:
    """Whether a run that scheduled nothing finishes an inflight compaction instead: a crashed run's
    (or one another process is running: the execute lock tells them apart), unless the run asked
    for an instant of its own."""
    return instant is None and any(c.is_inflight for c in table.timeline().pending_compactions())


def run_compaction(
    table: LakeTable,
    options: Mapping[str, object] | CompactionConfig | None = None,
    now: dt.datetime | None = None,
    *,
    instant: str | None = None,
    force: bool = False,
) -> tuple[ScheduleResult, CompactionResult]:
    """Schedule, then execute what was scheduled (Hudi's ``scheduleAndExecute``). With nothing new
    to schedule, a compaction a crashed run left inflight is finished (the file groups it plans are
    what kept the new plan empty): a retried run recovers its own crash."""
    scheduled = schedule_compaction(table, options, now, instant=instant, force=force)
    # The caller's options decide the metadata-table policy of both halves (a config carries none).
    policy = None if isinstance(options, CompactionConfig) else options
    if scheduled.outcome is not Outcome.SCHEDULED:
        if run_finishes_crashed(table, instant):
            return scheduled, execute_compaction(table, options=policy)  # the inflight one first
        return scheduled, CompactionResult(Outcome.NO_WORK)
    return scheduled, execute_compaction(table, scheduled.instant, options=policy)
