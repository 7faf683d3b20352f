"""Insert, upsert and delete of an Arrow batch into a COW or MOR table, one instant per call.

Durable order: requested -> inflight -> (markers, then data files) -> completed. Readers only see
files and log blocks of completed instants, so a crash at any earlier point leaves the table
readable and unchanged; the markers name every file the failed instant wrote, for rollback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from airflow_lake_provider.lake.config import registry
from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    LakeError,
    WriteInputError,
)
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS, arrow_to_avro
from airflow_lake_provider.lake.format.bloom_filter import DEFAULT_SETTINGS, BloomSettings
from airflow_lake_provider.lake.log_file.data_block import BlockRows
from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.index.bloom import BaseFileReads, LookupStats
from airflow_lake_provider.lake.table.metadata.policy import (
    drops_metadata_table,
    guard_mutation,
    kept_metadata_table,
)
from airflow_lake_provider.lake.table.metadata.records import change_of_commit
from airflow_lake_provider.lake.table.metadata.services import services_after_commit
from airflow_lake_provider.lake.table.progress import Progress
from airflow_lake_provider.lake.table.rollback.executor import (
    discard_failed_write,
    eligible_failed_writes,
    refuse_while_restoring,
    rollback_failed_writes_locked,
    rollback_instant_locked,
)
from airflow_lake_provider.lake.table.rollback.policy import FailedWritesConfig, heartbeat
from airflow_lake_provider.lake.table.rollback.undone import rolled_back_compactions
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.checks import check_index, prepare_batch
from airflow_lake_provider.lake.table.write.group_writer import write_file_group
from airflow_lake_provider.lake.table.write.plan import (
    FaultHook,
    FileGroupResult,
    GroupRunner,
    Operation,
    WriteContext,
    _no_fault,
)
from airflow_lake_provider.lake.table.write.planner import plan_file_groups, refuse_pending_clustering
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

log = logging.getLogger(__name__)


DEFAULT_MAX_ROWS_PER_FILE = 1_000_000
# A write waits this long for another write (or a compaction being scheduled) before giving up.
WRITE_LOCK_WAIT_SECONDS = 60.0
# As Hudi: archive the timeline at the end of every write (keep.min/max.commits decide how much).
ARCHIVE_AUTOMATIC = registry.ARCHIVE_AUTOMATIC.key
# Times a write takes a new instant when another process created the one it chose first.
_INSTANT_ATTEMPTS = 5


@dataclass(frozen=True)
class WriteResult:
    instant: str
    action: str
    operation: Operation
    metadata: CommitMetadata
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    files: tuple[str, ...] = field(default=())
    lookup: LookupStats = field(default_factory=lambda: LookupStats())
    archived: tuple[str, ...] = ()  # instants the automatic archival after this write moved
    metadata_compaction: str | None = None  # the MDT compaction run after this write (maintain)


def write(
    table: LakeTable,
    batch: pa.Table,
    operation: Operation | str,
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    fault: FaultHook = _no_fault,
    event_time_field: str | None = None,
    options: Mapping[str, str] | None = None,
    extra_metadata: Mapping[str, str] | None = None,
    runner: GroupRunner | None = None,
) -> WriteResult:
    """Write ``batch`` as one new instant and return what was committed.

    ``event_time_field`` (default: ``hoodie.payload.event.time.field`` of ``options``, else the
    table's) names a column whose min and max (epoch milliseconds) the commit records in
    ``extraMetadata`` (``lake.minEventTime``/``lake.maxEventTime``): partition commit derives its
    watermark from them.

    ``fault`` is called at each durable step (``requested``, ``inflight``, ``file``, ``commit``) so
    tests can inject a crash there. Holds the table's write lock throughout (waiting up to
    ``WRITE_LOCK_WAIT_SECONDS`` for another write or a compaction scheduling to finish).

    Failed writes (``options`` override the table's ``hoodie.cleaner.policy.failed.writes``):
    ``EAGER`` rolls back every pending write first, ``LAZY`` those whose heartbeat expired (and this
    write beats while it runs), ``NEVER`` none. An error raised after this write's instant exists
    rolls the instant back before it reaches the caller. ``extra_metadata`` goes into the inflight
    and completed commit metadata (e.g. which task started the write).

    ``runner`` writes the planned file groups (default: here, one after the other; the Spark job
    spreads them over executors). The key lookup, the instant and the commit stay in this process.

    The key lookup is Hudi's bloom index (non-global): footer key range, then bloom filter, then the
    record-key column of the row groups that may hold a key; new base files carry the filter
    (``hoodie.index.bloom.*``). Tables whose index this writer cannot keep are refused. After the
    commit, the timeline is archived (``hoodie.archive.automatic``, default true); a failed
    archival is logged and the write stands. Under ``lake.metadata-table.maintain`` the metadata
    table's own compaction runs first when due (``metadata.services``), on the same terms.
    """
    result, archive = _write_checked(
        table,
        batch,
        operation,
        max_rows_per_file=max_rows_per_file,
        fault=fault,
        event_time_field=event_time_field,
        options=options,
        extra_metadata=extra_metadata,
        runner=runner,
    )
    compacted = services_after_commit(table, options)
    if compacted is not None:
        result = replace(result, metadata_compaction=compacted)
    if not archive:
        return result
    return replace(result, archived=_archive_after_write(table, dict(options or {})))


def _write_checked(
    table: LakeTable,
    batch: pa.Table,
    operation: Operation | str,
    *,
    max_rows_per_file: int,
    fault: FaultHook,
    event_time_field: str | None,
    options: Mapping[str, str] | None,
    extra_metadata: Mapping[str, str] | None,
    runner: GroupRunner | None,
) -> tuple[WriteResult, bool]:
    """:func:`write` up to its commit; also whether automatic archival is on."""
    checked = check_write(table, batch, operation, options, event_time_field)
    operation = checked.operation
    # (an MDT we cannot keep refuses here, before the lock file; it is opened again under the lock)
    guard_mutation(table, f"write ({operation.value})", options, maintains=True)
    # Held from reading the file groups to the commit: a compaction plan scheduled in between would
    # take the slices this write appends logs to, and the logs would be lost with the old slice.
    with table.store.exclusive(WRITE_LOCK, wait_seconds=WRITE_LOCK_WAIT_SECONDS):
        result = _write_locked(
            table,
            batch,
            operation,
            max_rows_per_file,
            fault,
            checked.failed_writes,
            dict(extra_metadata or {}),
            checked.event_time_field,
            runner,
            checked.bloom,
        )
    return result, checked.archive


@dataclass(frozen=True)
class CheckedWrite:
    """What :func:`check_write` read from the write's arguments and options."""

    operation: Operation
    failed_writes: FailedWritesConfig
    event_time_field: str | None
    bloom: BloomSettings
    archive: bool


def check_write(
    table: LakeTable,
    batch: pa.Table,
    operation: Operation | str,
    options: Mapping[str, str] | None = None,
    event_time_field: str | None = None,
) -> CheckedWrite:
    """Everything a write checks before it changes anything, the batch too when its options drop the
    table's MDT (the drop cannot be undone). The Airflow hook calls it before its own guard, which
    drops the MDT ahead of the rollback of an earlier attempt."""
    try:
        operation = Operation(operation)
    except ValueError:
        raise WriteInputError(
            f"operation {operation!r} is not one of {', '.join(o.value for o in Operation)}"
        ) from None
    config = FailedWritesConfig.from_options(table.config.properties, options or {})
    # Read as layers, not one merged dict: the caller's value wins over hoodie.properties' whichever
    # name each gives (merged, ``archive.max_commits`` beside the table's ``hoodie.keep.max.commits``
    # was refused as the same option given twice).
    layers = (table.config.properties, options or {})
    event_time_field = event_time_field or registry.EVENT_TIME_FIELD.read(*layers)
    check_index(table, {**table.config.properties, **(options or {})}, options)
    bloom = table.config.checked_bloom_settings(options or {})
    archive = registry.ARCHIVE_AUTOMATIC.read(*layers)
    if archive:
        ArchivalConfig.from_options(*layers)  # a bad keep.min/max refuses the write before it starts
    if drops_metadata_table(table, options):
        # The drop cannot be undone: a batch this write refuses anyway fails before it, changing nothing.
        timeline = table.timeline()
        rows = prepare_batch(table, batch, operation, timeline, event_time_field)[2]
        refuse_pending_clustering(table, timeline, rows, operation)
    return CheckedWrite(operation, config, event_time_field, bloom, archive)


def _archive_after_write(table: LakeTable, options: dict[str, str]) -> tuple[str, ...]:
    """Archive what is due now that the write is committed. The write stands whatever happens
    here: a failure (or another archival running) is logged and the next write or clean retries.
    An MDT still there after the write is kept (``maintain``): archival keeps every commit that
    completed after its last compaction was requested."""
    try:
        return run_archival(table, options, guarded=True).archived
    except LakeError as exc:
        log.warning("automatic archival after a write to %s did not run: %s", table.uri, exc)
        return ()


def _write_locked(
    table: LakeTable,
    batch: pa.Table,
    operation: Operation,
    max_rows_per_file: int,
    fault: FaultHook,
    config: FailedWritesConfig,
    extra: dict[str, str],
    event_time_field: str | None = None,
    runner: GroupRunner | None = None,
    bloom: BloomSettings = DEFAULT_SETTINGS,
) -> WriteResult:
    timeline = table.timeline()
    data_schema, event_times, rows = prepare_batch(table, batch, operation, timeline, event_time_field)
    refuse_pending_clustering(table, timeline, rows, operation)  # before any rollback or instant
    timeline = _ready_timeline(table, timeline, config)
    mdt = kept_metadata_table(table)
    if mdt is not None:
        mdt.discard_orphans(timeline)
    action = Action.DELTACOMMIT if table.config.is_mor else Action.COMMIT
    instant = table.clock.next(after=timeline.latest_time)
    # The avro schema of the table (data fields only), as recorded in every commit.
    avro = arrow_to_avro(data_schema, f"{table.config.name}_record", f"hoodie.{table.config.name}")
    full_schema = pa.schema([pa.field(m, pa.string()) for m in META_FIELDS] + list(data_schema))
    extra = {**extra, "schema": json.dumps(avro)}

    instant, requested = _request_instant(table, instant, action, config)
    try:
        with heartbeat(table.store, instant, config):
            fault("requested")
            inflight_body = CommitMetadata(operation_type=operation.name, extra_metadata=extra)
            as_avro = table.layout.has_completion_times  # layout 2 (v8/v9): Avro commit metadata
            inflight = table.store.transition_to_inflight(requested, inflight_body.to_bytes(as_avro))
            fault("inflight")

            context = WriteContext(instant, timeline, full_schema, avro, operation, bloom)
            job = _WriteJob(table, context, max_rows_per_file, fault, keep_log_rows=mdt is not None)
            stats = job.run(rows, runner)
            metadata = CommitMetadata(
                operation_type=operation.name,
                partition_to_write_stats=stats,
                extra_metadata={**extra, **event_times},
            )
            if mdt is not None:  # completed before the data instant, as Hudi's writers do
                change = change_of_commit(metadata)
                logs = job.log_rows
                mdt.commit_write(
                    table.storage, table.config, timeline, inflight, change, new_instant=True, logs=logs
                )
            fault("commit")
            table.store.transition_to_completed(inflight, metadata.to_bytes(as_avro))
    except Exception as exc:
        _roll_back_own(table, instant, exc)
        raise
    return _finish(table, instant, action, operation, metadata, job)


def _ready_timeline(table: LakeTable, timeline: Timeline, config: FailedWritesConfig) -> Timeline:
    """Refuse a write while a restore is pending; roll back the failed writes the policy names
    (only now, after every check of the batch passed: bad input changes nothing)."""
    refuse_while_restoring(table, timeline, "writing")
    failed = eligible_failed_writes(table, timeline, config)
    rolling = timeline.filter([Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT])
    # (a compaction a completed rollback undid is removed first: this write's logs would go on its slices)
    if failed or rolling or rolled_back_compactions(timeline):
        rollback_failed_writes_locked(table, config)
        timeline = table.timeline()
    return timeline


def _request_instant(
    table: LakeTable, instant: str, action: Action, config: FailedWritesConfig
) -> tuple[str, Instant]:
    """Create the write's requested instant at ``instant`` or, when another process took that time
    first, at a later one; return the time taken and the instant."""
    for attempt in range(1, _INSTANT_ATTEMPTS + 1):
        try:
            # LAZY: the first beat comes before the instant exists (as Hudi's writers do), so a write
            # is never pending without a heartbeat for others to judge it by.
            with heartbeat(table.store, instant, config):
                return instant, table.store.create_requested(instant, action)
        except CommitConflictError:
            # Another process (a clean, a compaction scheduling) took this millisecond first: the
            # instant is theirs, not ours to roll back (only our heartbeat file is). Take a later one.
            table.store.heartbeats.delete(instant)
            if attempt == _INSTANT_ATTEMPTS:
                raise
            instant = table.clock.next(after=max(instant, table.timeline().latest_time or instant))
        except Exception as exc:
            _roll_back_own(table, instant, exc)
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _finish(
    table: LakeTable,
    instant: str,
    action: Action,
    operation: Operation,
    metadata: CommitMetadata,
    job: _WriteJob,
) -> WriteResult:
    """After the commit: drop the write's markers and heartbeat, log and return what it did."""
    table.store.markers.delete(instant)
    table.store.heartbeats.delete(instant)
    log.info(
        "committed %s %s at %s: %d inserted, %d updated, %d deleted in %d files",
        action.value,
        operation.value,
        instant,
        job.inserted,
        job.updated,
        job.deleted,
        len(job.files),
    )
    return WriteResult(
        instant,
        action.value,
        operation,
        metadata,
        job.inserted,
        job.updated,
        job.deleted,
        tuple(job.files),
        job.lookup_stats,
    )


def _roll_back_own(table: LakeTable, instant: str, error: Exception) -> None:
    """Undo this write's instant after an in-process error (a completed instant is kept: the
    error came after the commit). An error changes nothing: the instant and its files go without a
    trace unless a log file it appended to needs a rollback block. A failing undo is logged; the
    next writer finishes it."""
    found = table.timeline().get(instant)
    if found is None:
        table.store.heartbeats.delete(instant)  # beat, but the instant was never created
        return
    if found.is_completed:
        return
    try:
        if discard_failed_write(table, instant):
            _note(error, f"the write's instant {instant} of {table.uri} was undone: nothing of it is left")
            return
        rollback_instant_locked(table, instant)
    except Exception as rollback_error:  # the write's own error is the one the caller must see
        log.error("could not roll back failed write %s of %s: %s", instant, table.uri, rollback_error)
        _note(error, f"its instant {instant} is not rolled back yet: run lake rollback {table.uri}")
    else:
        _note(error, f"the write's instant {instant} of {table.uri} was rolled back")


def _note(error: Exception, text: str) -> None:
    if hasattr(error, "add_note"):  # Python 3.11+
        error.add_note(text)


class _WriteJob:
    """The data-file part of one write: the key lookup here, then each file group through ``runner``."""

    def __init__(
        self,
        table: LakeTable,
        context: WriteContext,
        max_rows_per_file: int,
        fault: FaultHook,
        *,
        keep_log_rows: bool,
    ) -> None:
        self.table, self.context = table, context
        self.max_rows = max(1, max_rows_per_file)
        self.fault = fault
        self.inserted = self.updated = self.deleted = 0
        self.files: list[str] = []
        # log file (table-relative) -> the rows it holds, for the MDT's column stats: kept only when
        # an MDT is kept (else every group's rows would stay in memory until the commit).
        self.keep_log_rows = keep_log_rows
        self.log_rows: dict[str, BlockRows] = {}
        self.lookup_stats = LookupStats()

    def run(self, rows: pa.Table, runner: GroupRunner | None) -> dict[str, tuple[WriteStat, ...]]:
        with BaseFileReads(self.table) as reads:
            units = plan_file_groups(self.table, self.context, rows, self.max_rows, reads)
            if runner is None:
                # Here, a COW rewrite takes its base file from the lookup's open file (and the record
                # keys it read): every base file is opened once per write.
                results: Sequence[FileGroupResult] = []
                progress = Progress(
                    f"write {self.context.instant} of {self.table.uri}", len(units), rows.num_rows
                )
                for unit in units:
                    done = write_file_group(self.table, self.context, unit, self.fault, reads)
                    results.append(done)
                    progress.step(len(done.files), done.inserted + done.updated + done.deleted)
                    if unit.merged is not None and unit.merged.base_file is not None:
                        reads.release(unit.merged.base_file.relative_path)
            else:
                reads.close()  # executors open the files they rewrite themselves (once each)
                results = runner(self.table, self.context, units)
                if len(results) != len(units):
                    raise LakeError(
                        f"write {self.context.instant}: {len(results)} results for {len(units)} file groups"
                    )
            # Row groups read here, by the lookup and by rewrites in this process.
            self.lookup_stats = reads.stats()
        stats: dict[str, list[WriteStat]] = {}
        for result in results:
            self.inserted += result.inserted
            self.updated += result.updated
            self.deleted += result.deleted
            self.files.extend(result.files)
            if self.keep_log_rows and result.log_rows is not None:
                self.log_rows[result.files[0]] = result.log_rows
            if result.stat is not None:
                stats.setdefault(result.stat.partition_path, []).append(result.stat)
        return {p: tuple(s) for p, s in stats.items()}
