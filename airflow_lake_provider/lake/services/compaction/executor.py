"""Compaction of merge-on-read tables: schedule a plan, execute it, recover a crashed run.

Durable order of an execution at ``c``: ``c.compaction.requested`` -> ``c.compaction.inflight`` ->
per operation a marker, then the new base file ``<fileId>_<token>_<c>.parquet`` -> ``c.commit``.
Readers ignore base files of an instant that is not completed, so a crash before the commit leaves
the table unchanged; the retry removes the partial output (named by markers) and runs again.

``execute_operation`` and ``commit_compaction`` are the halves a distributed runner needs: tasks
call the first once per operation, the driver commits their write stats with the second.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    CompactionError,
    CompactionScheduleConflictError,
    InvalidStateTransitionError,
    LakeError,
    UnsafePathError,
)
from airflow_lake_provider.lake.file_group.data_files import store_base_file
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName, write_token
from airflow_lake_provider.lake.file_group.view import BaseFile, FileSlice, LogFile
from airflow_lake_provider.lake.services.compaction.config import STRATEGY_KEY, CompactionConfig
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation, CompactionPlan
from airflow_lake_provider.lake.services.compaction.planner import plan_compaction, trigger_state
from airflow_lake_provider.lake.table.merge import DataItem, merge_slice
from airflow_lake_provider.lake.table.metadata_table import guard_mutation
from airflow_lake_provider.lake.table.reader import SliceReader, check_base_files
from airflow_lake_provider.lake.table.rollback.plan import in_table
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat, join_partition
from airflow_lake_provider.lake.timeline.instant import (
    COMMIT_ACTIONS,
    Action,
    Instant,
    State,
    format_instant,
    instant_to_datetime,
    validate_instant_time,
)
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK, IOType

log = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
# Services each hold their own lock, so scheduling never waits for a long execution.
SCHEDULE_LOCK = "compaction-schedule"
EXECUTE_LOCK = "compaction"
FILE_NAME_COLUMN = "_hoodie_file_name"
# How far past the table's clock an explicit plan instant may be: clock skew between machines.
MAX_CLOCK_SKEW = dt.timedelta(minutes=5)


def _no_fault(_point: str) -> None:
    return None


class Outcome(str, Enum):
    SCHEDULED = "SCHEDULED"
    COMPLETED = "COMPLETED"
    ALREADY_COMPLETED = "ALREADY_COMPLETED"
    NO_WORK = "NO_WORK"
    DRY_RUN = "DRY_RUN"


@dataclass(frozen=True)
class ScheduleResult:
    """What ``schedule_compaction`` did; with ``dry_run`` the plan was computed but not written."""

    outcome: Outcome
    instant: str | None = None
    plan: CompactionPlan | None = None
    reason: str = ""
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "instant": self.instant,
            "dry_run": self.dry_run,
            "reason": self.reason,
            "plan": self.plan.summary() if self.plan else None,
        }


@dataclass(frozen=True)
class CompactionResult:
    """What ``execute_compaction`` did at ``instant``."""

    outcome: Outcome
    instant: str | None = None
    operations: int = 0
    records_written: int = 0
    log_records_merged: int = 0
    bytes_written: int = 0
    files: tuple[str, ...] = ()
    recovered: bool = False
    removed_files: tuple[str, ...] = ()
    duration_seconds: float = 0.0
    stats: tuple[WriteStat, ...] = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "instant": self.instant,
            "operations": self.operations,
            "records_written": self.records_written,
            "log_records_merged": self.log_records_merged,
            "bytes_written": self.bytes_written,
            "files": list(self.files),
            "recovered": self.recovered,
            "removed_files": list(self.removed_files),
            "duration_seconds": round(self.duration_seconds, 3),
        }


# -- scheduling --------------------------------------------------------------------------------------
def _config(options: Mapping[str, object] | CompactionConfig | None) -> CompactionConfig:
    return options if isinstance(options, CompactionConfig) else CompactionConfig.from_options(options or {})


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
    others = [i.timestamp for i in timeline.instants if i.timestamp not in writes]
    instant = (
        check_requested_instant(table, requested)
        if requested
        else table.clock.next(after=max(others, default=None))
    )
    completed = [i.timestamp for i in timeline.instants if i.is_completed]
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
    config = _config(options)
    if instant is not None:  # refused even when nothing is due: the caller asked for this time
        check_requested_instant(table, instant)
    now = now or dt.datetime.now(dt.timezone.utc)
    if not table.config.is_mor:
        return ScheduleResult(Outcome.NO_WORK, reason=f"{table.uri} is copy-on-write; nothing to compact")
    guard_mutation(
        table,
        "compaction schedule",
        None if isinstance(options, CompactionConfig) else options,
        dry_run=dry_run,
    )
    with table.store.exclusive(SCHEDULE_LOCK):
        checked = _check_base_files_unlocked(table, config, now, force)
        # The write lock too: a writer between reading its file groups and committing would append
        # logs to slices this plan takes over, and lose them (Hudi needs a lock provider here).
        with table.store.exclusive(WRITE_LOCK):
            return _schedule_locked(table, config, now, dry_run, instant, force, checked)


def _check_base_files_unlocked(
    table: LakeTable, config: CompactionConfig, now: dt.datetime, force: bool
) -> set[str]:
    """Check the base files a plan would take now, before the write lock is held: their footers
    (one read each) are most of a schedule's I/O, and writers wait for that lock. Returns them."""
    timeline = table.timeline()
    if not (trigger_state(timeline, config, now).due or force):
        return set()
    plan = plan_compaction(timeline, table.file_system_view(timeline), config, now=now)
    files = _base_files(plan) if plan else []
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
    check_base_files(table, [f for f in _base_files(plan) if f not in checked])
    c = plan_instant(table, timeline, instant)
    plan = CompactionPlan(plan.operations, {STRATEGY_KEY: config.strategy})
    if dry_run:
        return ScheduleResult(Outcome.SCHEDULED, c, plan, trigger.reason, dry_run=True)
    body = timeline_avro.write_avro(timeline_avro.COMPACTION_PLAN, plan.to_avro())
    table.store.create_requested(c, Action.COMPACTION, body)
    log.info(
        "compaction %s of %s scheduled: %d file groups, %.3f MB IO",
        c,
        table.uri,
        len(plan.operations),
        plan.total_io_mb,
    )
    return ScheduleResult(Outcome.SCHEDULED, c, plan, trigger.reason)


# -- execution ---------------------------------------------------------------------------------------
def load_plan(timeline: Timeline, instant: str) -> CompactionPlan:
    source = str(timeline.path_of(Instant(instant, State.REQUESTED, Action.COMPACTION)))
    return CompactionPlan.from_avro(timeline.compaction_plan(instant), source)


def output_schema(table: LakeTable, timeline: Timeline) -> pa.Schema:
    """The schema of compacted base files: meta columns then the table's data columns."""
    schema = table.arrow_schema(timeline)
    if schema is None:
        raise CompactionError(f"{table.uri}: the table has no schema (no commit records one)")
    if not table.config.populate_meta_fields or FILE_NAME_COLUMN not in schema.names:
        raise CompactionError(f"{table.uri}: compacting tables without meta fields is not supported")
    return schema


def _base_files(plan: CompactionPlan) -> list[str]:
    return [join_partition(op.partition, op.data_file_name) for op in plan.operations if op.data_file_name]


def plan_slice(table: LakeTable, op: CompactionOperation, timeline: Timeline | None = None) -> FileSlice:
    """The file slice an operation names, exactly (logs written later against the plan are not in it).

    A planned log file that a completed rollback in ``timeline`` deleted is left out: it held only
    the blocks of a write that never committed (a plan fitted before a failed write lists the log
    files that write left, and its rollback deletes them); the plan must still run.
    """

    def size_of(name: str) -> int | None:
        rel = join_partition(op.partition, name)
        try:
            return table.storage.size(rel)
        except FileNotFoundError:
            if LogFileName.parse(name) is not None and timeline is not None:
                if rel in _deleted_by_rollbacks(table, timeline):
                    log.info("compaction of file group %s: planned log %s was rolled back", op.file_id, rel)
                    return None
            raise CompactionError(
                f"compaction of file group {op.file_id}: planned file {rel} is missing"
            ) from None

    base = None
    if op.data_file_name:
        parsed = BaseFileName.parse(op.data_file_name)
        if parsed is None:
            raise CompactionError(
                f"compaction plan names {op.data_file_name!r}, which is not a base file name"
            )
        size = size_of(op.data_file_name)
        assert size is not None  # only log files are left out
        base = BaseFile(op.partition, parsed, size)
    logs = []
    for name in op.delta_file_names:
        parsed_log = LogFileName.parse(name)
        if parsed_log is None:
            raise CompactionError(f"compaction plan names {name!r}, which is not a log file name")
        log_size = size_of(name)
        if log_size is not None:
            logs.append(LogFile(op.partition, parsed_log, log_size))
    logs.sort(key=lambda f: f.name.sort_key)
    return FileSlice(op.partition, op.file_id, op.base_instant, base, tuple(logs))


def _deleted_by_rollbacks(table: LakeTable, timeline: Timeline) -> frozenset[str]:
    """Table-relative paths of the files the completed rollbacks of ``timeline`` deleted."""
    found = set()
    for rollback in timeline.filter([Action.ROLLBACK], [State.COMPLETED]):
        record = timeline.avro_record(rollback)
        for partition, meta in (record.get("partitionMetadata") or {}).items():
            for path in meta.get("successDeleteFiles") or ():
                try:
                    found.add(in_table(table.storage, path, partition))
                except UnsafePathError:
                    continue  # names no file of this table
    return frozenset(found)


def execute_operation(
    table: LakeTable,
    timeline: Timeline,
    schema: pa.Schema,
    instant: str,
    op: CompactionOperation,
    *,
    token: str | None = None,
    fault: FaultHook = _no_fault,
) -> WriteStat:
    """Merge one planned slice into ``<fileId>_<token>_<instant>.parquet`` and return its write stat.

    Merged rows keep their ``_hoodie_commit_time``/seqno; every row gets the new file name. Only
    blocks of instants committed in ``timeline`` are merged. Touches no timeline file except its
    marker, so a distributed task may call it; an error means this operation failed.
    """
    slice_ = plan_slice(table, op, timeline)
    reader = SliceReader(table, timeline, schema, as_of=None)
    base = reader.read_base(slice_)
    items = reader.log_items(slice_.log_files)
    base_keys = reader.keys_of(base) if base is not None else pa.array([], pa.string())
    if items:
        merged = merge_slice(
            base,
            base_keys,
            items,
            mode=table.config.merge_mode,
            ordering=table.config.precombine_field,
            schema=schema,
        )
    else:
        merged = base if base is not None else schema.empty_table()
    name = BaseFileName.create(op.file_id, token or write_token(), instant).name
    # An empty result still gets a base file: it ends the old slice, so its rows stay deleted.
    table.store.create_marker(
        instant, op.partition, name, IOType.MERGE if base is not None else IOType.CREATE
    )
    out = merged.set_column(
        merged.schema.get_field_index(FILE_NAME_COLUMN),
        FILE_NAME_COLUMN,
        pa.repeat(pa.scalar(name, pa.string()), merged.num_rows),
    )
    relative = join_partition(op.partition, name)
    log_keys = [i.keys for i in items if isinstance(i, DataItem)]
    touched = pa.concat_arrays(log_keys) if log_keys else pa.array([], pa.string())
    if pa.cpu_count() > 1:
        # Encoding + fsync of the file and the counting both run without the GIL: overlap them when
        # Arrow may use more than one core (a Spark job caps it at the task's cores).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compaction-write") as pool:
            writing = pool.submit(store_base_file, table.storage, relative, out, table.config.bloom_settings)
            updated, inserted, deleted = _write_counts(base_keys, reader.keys_of(out), touched)
            size = writing.result()
    else:
        size = store_base_file(table.storage, relative, out, table.config.bloom_settings)
        updated, inserted, deleted = _write_counts(base_keys, reader.keys_of(out), touched)
    fault("file")
    log.debug("compaction %s: %s -> %s (%d rows)", instant, op.file_id, relative, out.num_rows)
    return WriteStat(
        file_id=op.file_id,
        partition_path=op.partition,
        path=relative,
        prev_commit=op.base_instant,
        num_writes=out.num_rows,
        num_deletes=deleted,
        num_update_writes=updated,
        num_inserts=inserted,
        total_write_bytes=size,
        file_size_in_bytes=size,
        total_log_records=sum(len(i.keys) for i in items),
        total_log_files_compacted=len(slice_.log_files),
        total_log_size_compacted=slice_.total_log_size,
        total_updated_records_compacted=updated,
    )


def _write_counts(base_keys: pa.Array, out_keys: pa.Array, touched: pa.Array) -> tuple[int, int, int]:
    """(updated, inserted, deleted) rows of a merge, from the base, output and log (data) keys.

    Keys are unique in the base and in the output, and every output key comes from the base or from
    a log record, so only the (usually few) log keys need a hash set: an output key no log touched is
    a kept base row. Hashing the (large) base keys instead costs as much as the merge itself.
    """
    if not len(touched):
        return 0, 0, len(base_keys) - len(out_keys)
    small = pc.unique(touched)
    out_touched = out_keys.filter(pc.is_in(out_keys, value_set=small))
    base_touched = base_keys.filter(pc.is_in(base_keys, value_set=small))
    updated = pc.sum(pc.is_in(out_touched, value_set=base_touched)).as_py() or 0
    kept = len(out_keys) - len(out_touched) + updated  # output keys that are base keys
    return updated, len(out_touched) - updated, len(base_keys) - kept


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
    table.store.delete_markers(instant)
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
    timeline = timeline or table.timeline()
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
    for marker in table.store.read_markers(instant):
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
    table.store.transition_to_completed(current, metadata.to_json_bytes())
    table.store.delete_markers(instant)
    return metadata


# Runs a plan's operations: a write stat per operation that succeeded, an error text per failure.
OperationRunner = Callable[
    [LakeTable, Timeline, pa.Schema, str, Sequence[CompactionOperation]], list["WriteStat | str"]
]


def run_operation(
    table: LakeTable,
    timeline: Timeline,
    schema: pa.Schema,
    instant: str,
    index: int,
    op: CompactionOperation,
    *,
    attempt: int = 0,
    fault: FaultHook = _no_fault,
) -> WriteStat | str:
    """One operation, its failure turned into a message (the token keeps retried attempts apart)."""
    try:
        return execute_operation(
            table, timeline, schema, instant, op, token=write_token(index, 1, attempt), fault=fault
        )
    except (LakeError, OSError, pa.ArrowException) as exc:
        # Info, not error: the CompactionError that ends the run names every failure, once.
        log.info("compaction %s: file group %s/%s failed: %s", instant, op.partition, op.file_id, exc)
        return f"{join_partition(op.partition, op.file_id)}: {exc}"


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
    """The compaction to run: the one asked for, else a crashed (inflight) one, else the earliest."""
    if instant is not None:
        validate_instant_time(instant)
        found = timeline.get(instant)
        if found is None or not (found.action is Action.COMPACTION or timeline.is_compaction(found)):
            raise CompactionError(f"{timeline.storage.root}: there is no compaction at instant {instant}")
        return found
    pending = timeline.pending_compactions()
    inflight = [i for i in pending if i.is_inflight]
    return (inflight or pending or [None])[0]


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
    ``options`` are read only for ``hoodie.metadata.enable`` (see ``metadata_table``).
    """
    guard_mutation(table, "compaction execute", options, dry_run=dry_run)
    started = time.monotonic()
    with table.store.exclusive(EXECUTE_LOCK):
        timeline = table.timeline()
        target = _pick(timeline, instant)
        if target is None:
            return CompactionResult(Outcome.NO_WORK, duration_seconds=time.monotonic() - started)
        c = target.timestamp
        if target.is_completed:
            return CompactionResult(Outcome.ALREADY_COMPLETED, c, duration_seconds=time.monotonic() - started)
        plan = load_plan(timeline, c)
        if dry_run:
            return CompactionResult(
                Outcome.DRY_RUN,
                c,
                len(plan.operations),
                recovered=target.is_inflight,
                duration_seconds=time.monotonic() - started,
            )
        # Before any step on disk: an unreadable schema (a corrupt commit file) or a planned base
        # file that is not one of the table's (a foreign parquet file) changes nothing.
        schema = output_schema(table, timeline)
        check_base_files(table, _base_files(plan))
        removed: list[str] = []
        if target.is_inflight:
            removed = remove_partial_output(table, c, plan)
        else:
            table.store.transition_to_inflight(target, timeline.read_bytes(target))
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
    result = CompactionResult(
        Outcome.COMPLETED,
        c,
        operations=len(stats),
        records_written=sum(s.num_writes for s in stats),
        log_records_merged=sum(s.total_log_records for s in stats),
        bytes_written=sum(s.total_write_bytes for s in stats),
        files=tuple(s.path for s in stats),
        recovered=target.is_inflight,
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


def run_compaction(
    table: LakeTable,
    options: Mapping[str, object] | CompactionConfig | None = None,
    now: dt.datetime | None = None,
    *,
    instant: str | None = None,
    force: bool = False,
) -> tuple[ScheduleResult, CompactionResult]:
    """Schedule, then execute what was scheduled (Hudi's ``scheduleAndExecute``)."""
    scheduled = schedule_compaction(table, options, now, instant=instant, force=force)
    if scheduled.outcome is not Outcome.SCHEDULED:
        return scheduled, CompactionResult(Outcome.NO_WORK)
    return scheduled, execute_compaction(table, scheduled.instant)
