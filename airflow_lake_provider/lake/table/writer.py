"""Insert, upsert and delete of an Arrow batch into a COW or MOR table, one instant per call.

Durable order: requested -> inflight -> (markers, then data files) -> completed. Readers only see
files and log blocks of completed instants, so a crash at any earlier point leaves the table
readable and unchanged; the markers name every file the failed instant wrote, for rollback.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    CorruptDataFileError,
    LakeError,
    ObjectExistsError,
    RollbackError,
    SchemaError,
    StorageAccessError,
    StorageError,
    StorageUnavailableError,
    TableConfigError,
    WriteInputError,
)
from airflow_lake_provider.lake.file_group.data_files import store_base_file, write_partition_metadata
from airflow_lake_provider.lake.file_group.file_names import (
    BaseFileName,
    LogFileName,
    new_file_id,
    write_token,
)
from airflow_lake_provider.lake.file_group.view import FileSlice, FileSystemView
from airflow_lake_provider.lake.format.avro_schema import (
    META_FIELDS,
    arrow_to_avro,
    avro_to_arrow,
    with_meta_fields,
)
from airflow_lake_provider.lake.format.base_file import RECORD_KEY
from airflow_lake_provider.lake.format.bloom_filter import (
    DEFAULT_SETTINGS,
    BloomSettings,
    probe_footer,
)
from airflow_lake_provider.lake.format.casting import cast_exact, same_shape
from airflow_lake_provider.lake.format.partitioning import (
    partition_paths,
    record_keys,
)
from airflow_lake_provider.lake.format.table_config import MergeMode
from airflow_lake_provider.lake.log_file.data_block import avro_data_block
from airflow_lake_provider.lake.log_file.delete_block import DeleteRecord, delete_block, ordering_type_for
from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.metadata_table import guard_mutation
from airflow_lake_provider.lake.table.reader import SliceReader, conform
from airflow_lake_provider.lake.table.rollback.executor import (
    discard_failed_write,
    eligible_failed_writes,
    rollback_failed_writes_locked,
    rollback_instant_locked,
)
from airflow_lake_provider.lake.table.rollback.policy import FailedWritesConfig, heartbeat
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat, join_partition
from airflow_lake_provider.lake.timeline.instant import Action, State
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK, IOType

log = logging.getLogger(__name__)

# Event-time bookkeeping of a commit (partition commit's watermark reads the max).
EVENT_TIME_FIELD = "hoodie.payload.event.time.field"
EVENT_TIME_MIN, EVENT_TIME_MAX = "lake.minEventTime", "lake.maxEventTime"
# Internal columns carried alongside a batch while it is routed; never written.
_KEY, _PART, _ORD = "__lake_key", "__lake_partition", "__lake_ordering"
DEFAULT_MAX_ROWS_PER_FILE = 1_000_000
# A write waits this long for another write (or a compaction being scheduled) before giving up.
WRITE_LOCK_WAIT_SECONDS = 60.0
# Longer than any data, marker or temp file name a write creates (a base file name is ~70 bytes).
_LONGEST_FILE_NAME = 128
# An instant time as long as a real one, for path checks made before the instant is chosen.
_PROBE_INSTANT = "2" * 17

# Index types whose lookups this writer's bloom + range lookup gives the same answer as.
INDEX_TYPE = "hoodie.index.type"
_SAME_ANSWER_INDEXES = ("BLOOM", "SIMPLE")
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
# As Hudi: archive the timeline at the end of every write (keep.min/max.commits decide how much).
ARCHIVE_AUTOMATIC = "hoodie.archive.automatic"

# At most this many footer summaries are kept per LakeTable object (a few hundred bytes each).
_FOOTER_SUMMARIES = 100_000
# At most this many base files stay open from the key lookup to their COW rewrite (file handles);
# a file closed early is opened again by its rewrite (two reads of it instead of one).
_OPEN_BASE_FILES = 256


@dataclass(frozen=True)
class _FooterSummary:
    """What the key lookup needs of a base file's footer but its bloom filter: the record-key range
    of the file and of each row group (None where unknown)."""

    low: str | None
    high: str | None
    row_groups: tuple[tuple[str, str] | None, ...]


class Operation(str, Enum):
    INSERT = "insert"
    UPSERT = "upsert"
    DELETE = "delete"


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


@dataclass(frozen=True)
class LookupStats:
    """What the key lookup read: base files skipped by their footer's key range or bloom filter,
    the base files whose record-key column it read, and in how many row groups."""

    range_pruned: int = 0
    bloom_pruned: int = 0
    keys_read: tuple[str, ...] = ()
    row_groups_read: int = 0


FaultHook = Callable[[str], None]


def _no_fault(_point: str) -> None:
    return None


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

    ``event_time_field`` (default: the table's ``hoodie.payload.event.time.field``) names a column
    whose min and max (epoch milliseconds) the commit records in ``extraMetadata``
    (``lake.minEventTime``/``lake.maxEventTime``): partition commit derives its watermark from them.

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
    archival is logged and the write stands.
    """
    try:
        operation = Operation(operation)
    except ValueError:
        raise WriteInputError(
            f"operation {operation!r} is not one of {', '.join(o.value for o in Operation)}"
        ) from None
    config = FailedWritesConfig.from_options(table.config.properties, options or {})
    settings = {**table.config.properties, **(options or {})}
    _check_index(table, settings)
    bloom = BloomSettings.from_options(settings)
    archive = _archive_automatic(settings)
    if archive:
        ArchivalConfig.from_options(settings)  # a bad keep.min/max refuses the write before it starts
    guard_mutation(table, f"write ({operation.value})", options)
    # Held from reading the file groups to the commit: a compaction plan scheduled in between would
    # take the slices this write appends logs to, and the logs would be lost with the old slice.
    with table.store.exclusive(WRITE_LOCK, wait_seconds=WRITE_LOCK_WAIT_SECONDS):
        result = _write_locked(
            table,
            batch,
            operation,
            max_rows_per_file,
            fault,
            config,
            dict(extra_metadata or {}),
            event_time_field,
            runner,
            bloom,
        )
    if not archive:
        return result
    return replace(result, archived=_archive_after_write(table, dict(options or {})))


def _between(ordered: list[str], low: str, high: str) -> list[str]:
    """The keys of sorted ``ordered`` in [low, high] (code point order: UTF-8 byte order, as parquet
    statistics compare)."""
    return ordered[bisect.bisect_left(ordered, low) : bisect.bisect_right(ordered, high)]


def _archive_automatic(settings: Mapping[str, str]) -> bool:
    value = str(settings.get(ARCHIVE_AUTOMATIC, "true")).strip().lower()
    if value not in ("true", "false"):
        raise TableConfigError(f"{ARCHIVE_AUTOMATIC}={value!r}: use true or false")
    return value == "true"


def _archive_after_write(table: LakeTable, options: dict[str, str]) -> tuple[str, ...]:
    """Archive what is due now that the write is committed. The write stands whatever happens
    here: a failure (or another archival running) is logged and the next write or clean retries."""
    try:
        return run_archival(table, options).archived
    except LakeError as exc:
        log.warning("automatic archival after a write to %s did not run: %s", table.uri, exc)
        return ()


# Key generators whose record keys and partition paths our writer derives the same way.
_KEY_GENERATORS = frozenset(
    f"{kind}{avro}KeyGenerator" for kind in ("Simple", "Complex", "Nonpartitioned") for avro in ("", "Avro")
)


def _check_index(table: LakeTable, settings: Mapping[str, str]) -> None:
    """Refuse tables whose Hudi index this writer would leave wrong (before any instant exists).

    Our lookup is Hudi's non-global bloom index (footer key range, bloom filter, then the record-key
    column). It answers as ``BLOOM`` and ``SIMPLE`` do; a bucket index places keys by hash in
    numbered file groups, and a record index (or a global index) is kept in the metadata table,
    which this writer does not update: Java writers after ours would duplicate our keys.
    """
    kind = str(settings.get(INDEX_TYPE) or "").strip().upper()
    if kind and kind not in _SAME_ANSWER_INDEXES:
        raise TableConfigError(
            f"{table.uri}: {INDEX_TYPE}={kind} is not supported by this writer (it keeps a bloom/simple "
            "index only); write this table with Spark"
        )
    partitions = str(settings.get(METADATA_PARTITIONS) or "").split(",")
    if "record_index" in (p.strip() for p in partitions):
        raise TableConfigError(
            f"{table.uri}: the table keeps a record index ({METADATA_PARTITIONS} has record_index), "
            "which this writer does not update; write this table with Spark"
        )
    keygen = (table.config.keygen_class or "").rsplit(".", 1)[-1]
    if keygen and keygen not in _KEY_GENERATORS:
        # E.g. TimestampBasedKeyGenerator formats a time field into the partition path: taking the
        # field's raw value would put every row in a new partition, beside its old version.
        raise TableConfigError(
            f"{table.uri}: hoodie.table.keygenerator.class={table.config.keygen_class} is not supported "
            f"by this writer (it derives keys and partition paths as {', '.join(sorted(_KEY_GENERATORS))} "
            "do); write this table with Spark"
        )


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
    data_schema = _check_batch(table, batch, operation, timeline)
    event_times = _event_times(batch, event_time_field or table.config.properties.get(EVENT_TIME_FIELD))
    # Cast before the instant exists: a value that does not survive the cast refuses the batch.
    batch = _conform_batch(batch, data_schema)
    rows = _route(table, batch)
    _check_storable(table, _PROBE_INSTANT, rows)
    restoring = timeline.filter([Action.RESTORE], [State.REQUESTED, State.INFLIGHT])
    if restoring:
        raise RollbackError(
            f"{table.uri}: restore {restoring[0].timestamp} is pending; finish it before writing "
            f"(lake restore {table.uri} --savepoint ...)"
        )
    # Every check passed: only now clear failed writes (bad input changes nothing).
    if eligible_failed_writes(table, timeline, config) or timeline.filter(
        [Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT]
    ):
        rollback_failed_writes_locked(table, config)
        timeline = table.timeline()
    action = Action.DELTACOMMIT if table.config.is_mor else Action.COMMIT
    instant = table.clock.next(after=timeline.latest_time)
    # The avro schema of the table (data fields only), as recorded in every commit.
    avro = arrow_to_avro(data_schema, f"{table.config.name}_record", f"hoodie.{table.config.name}")
    full_schema = pa.schema([pa.field(m, pa.string()) for m in META_FIELDS] + list(data_schema))
    extra = {**extra, "schema": json.dumps(avro)}

    for attempt in range(1, _INSTANT_ATTEMPTS + 1):
        try:
            # LAZY: the first beat comes before the instant exists (as Hudi's writers do), so a write
            # is never pending without a heartbeat for others to judge it by.
            with heartbeat(table.store, instant, config):
                requested = table.store.create_requested(instant, action)
            break
        except CommitConflictError:
            # Another process (a clean, a compaction scheduling) took this millisecond first: the
            # instant is theirs, not ours to roll back (only our heartbeat file is). Take a later one.
            table.store.delete_heartbeat(instant)
            if attempt == _INSTANT_ATTEMPTS:
                raise
            instant = table.clock.next(after=max(instant, table.timeline().latest_time or instant))
        except Exception as exc:
            _roll_back_own(table, instant, exc)
            raise
    try:
        with heartbeat(table.store, instant, config):
            fault("requested")
            inflight_body = CommitMetadata(operation_type=operation.name, extra_metadata=extra)
            inflight = table.store.transition_to_inflight(requested, inflight_body.to_json_bytes())
            fault("inflight")

            context = WriteContext(instant, timeline, full_schema, avro, operation, bloom)
            job = _WriteJob(table, context, max_rows_per_file, fault)
            stats = job.run(rows, runner)
            metadata = CommitMetadata(
                operation_type=operation.name,
                partition_to_write_stats=stats,
                extra_metadata={**extra, **event_times},
            )
            fault("commit")
            table.store.transition_to_completed(inflight, metadata.to_json_bytes())
    except Exception as exc:
        _roll_back_own(table, instant, exc)
        raise
    table.store.delete_markers(instant)
    table.store.delete_heartbeat(instant)
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


def _event_times(batch: pa.Table, field_name: str | None) -> dict[str, str]:
    """Min and max (epoch ms) of the event time column; a bad column is refused before any instant."""
    if not field_name or batch.num_rows == 0:
        return {}
    if field_name not in batch.column_names:
        raise SchemaError(f"event time field {field_name!r} is not a column of the batch")
    column = batch.column(field_name)
    kind = column.type
    if pa.types.is_date(kind):
        column = column.cast(pa.timestamp("ms"))  # days to milliseconds: exact
        kind = column.type
    scale = (1, 1)  # epoch ms = count * scale[0] // scale[1]
    if pa.types.is_timestamp(kind):
        # The stored counts are UTC (naive timestamps count as UTC wall time, as Flink's TIMESTAMP
        # watermarks do); finer units are floored to whole milliseconds.
        scale = _TO_MS[kind.unit]
        column = column.cast(pa.int64())
    elif not pa.types.is_integer(kind):
        raise SchemaError(
            f"event time field {field_name!r} is {kind}: use a timestamp, date or integer (epoch ms) column"
        )
    low, high = (v.as_py() for v in pc.min_max(column).values())
    if low is None:
        return {}
    mul, div = scale
    return {EVENT_TIME_MIN: str(low * mul // div), EVENT_TIME_MAX: str(high * mul // div)}


# A timestamp unit's counts to epoch milliseconds: multiply, then floor-divide. Every Arrow unit:
# a delete batch may carry an event time column the table does not have.
_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1_000), "ns": (1, 1_000_000)}


# Times a write takes a new instant when another process created the one it chose first.
_INSTANT_ATTEMPTS = 5


def _roll_back_own(table: LakeTable, instant: str, error: Exception) -> None:
    """Undo this write's instant after an in-process error (a completed instant is kept: the
    error came after the commit). An error changes nothing: the instant and its files go without a
    trace unless a log file it appended to needs a rollback block. A failing undo is logged; the
    next writer finishes it."""
    found = table.timeline().get(instant)
    if found is None:
        table.store.delete_heartbeat(instant)  # beat, but the instant was never created
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


def _check_storable(table: LakeTable, instant: str, rows: pa.Table) -> None:
    """Refuse, before the instant exists, a partition whose files the storage cannot create."""
    for partition in pc.unique(rows.column(_PART)).to_pylist():
        # The deepest path a write creates: a marker under .hoodie/.temp/<instant>/<partition>/.
        probe = join_partition(
            join_partition(table.store.marker_dir(instant), partition), "x" * _LONGEST_FILE_NAME
        )
        try:
            table.storage.check_path(probe, what=f"partition path {partition!r} of {table.uri}")
        except StorageError as exc:
            raise SchemaError(f"{exc} (counting the files a write puts under it)") from None


def _check_batch(table: LakeTable, batch: pa.Table, operation: Operation, timeline: Timeline) -> pa.Schema:
    """Validate the batch against the table and return the table's data schema (Arrow)."""
    cfg = table.config
    names = batch.column_names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SchemaError(f"batch has column(s) {twice} more than once")
    reserved = [n for n in names if n.startswith("__lake_")]
    if reserved:
        raise SchemaError(f"batch column(s) {reserved}: names starting with '__lake_' are reserved")
    required = list(cfg.record_key_fields) + list(cfg.partition_fields if cfg.is_partitioned else ())
    required += [cfg.precombine_field] if cfg.precombine_field else []
    missing = [c for c in required if c not in batch.column_names]
    if missing:
        raise SchemaError(
            f"batch is missing required column(s) {missing} (record key, partition, precombine)"
        )
    if cfg.precombine_field and batch.column(cfg.precombine_field).null_count:
        raise SchemaError(f"precombine field {cfg.precombine_field!r} has null values")
    data = pa.schema([f for f in batch.schema if f.name not in META_FIELDS])
    if not cfg.populate_meta_fields:
        raise SchemaError(f"{table.uri}: writing tables without meta fields is not supported")
    existing = table.data_avro_schema(timeline)
    if existing is None:
        # Canonical types: what a reader of the recorded Avro schema will expect in the files.
        return avro_to_arrow(arrow_to_avro(data, "probe", "probe"))
    table_schema = pa.schema([f for f in avro_to_arrow(existing) if f.name not in META_FIELDS])
    if operation is Operation.DELETE:
        for name in data.names:
            if name in table_schema.names:
                _check_castable(batch.schema.field(name), table_schema.field(name))
        return table_schema
    extra = [n for n in data.names if n not in table_schema.names]
    absent = [n for n in table_schema.names if n not in data.names]
    if extra or absent:
        raise SchemaError(
            f"batch schema does not match the table: unknown column(s) {extra}, missing column(s) {absent}"
        )
    for name in data.names:
        _check_castable(data.field(name), table_schema.field(name))
    return table_schema


def _check_castable(got: pa.Field, want: pa.Field) -> None:
    """Refuse types whose values could never all fit (checked per value later, in ``_conform_batch``)."""
    if not same_shape(got.type, want.type, _leaf_castable):
        raise SchemaError(f"column {got.name!r} has type {got.type}, the table stores {want.type}")


def _leaf_castable(got: pa.DataType, want: pa.DataType) -> bool:
    return (
        got == want
        or (pa.types.is_integer(got) and pa.types.is_integer(want) and _int_fits(got, want))
        or (pa.types.is_floating(got) and pa.types.is_floating(want))
        or ({str(got), str(want)} <= {"string", "large_string"})
        or (pa.types.is_timestamp(got) and pa.types.is_timestamp(want) and got.unit == want.unit)
    )


def _int_fits(got: pa.DataType, want: pa.DataType) -> bool:
    """Every value of integer type ``got`` fits ``want`` (uint64 does not fit int64, int8 not uint8)."""
    if pa.types.is_signed_integer(got) == pa.types.is_signed_integer(want):
        return got.bit_width <= want.bit_width
    return pa.types.is_unsigned_integer(got) and got.bit_width < want.bit_width


def _conform_batch(batch: pa.Table, data_schema: pa.Schema) -> pa.Table:
    """The batch's table columns cast to the table's types, every value exactly (else SchemaError)."""
    for name in batch.column_names:
        if name in data_schema.names:
            target = data_schema.field(name).type
            batch = batch.set_column(
                batch.schema.get_field_index(name), name, cast_exact(batch.column(name), target, name)
            )
    return batch


def _dedupe(rows: pa.Table, event_time: bool) -> pa.Table:
    """Keep one row per (partition, key): the largest ordering value, later rows winning ties."""
    idx = pa.array(range(rows.num_rows), pa.int64())
    tagged = rows.append_column("__lake_idx", idx)
    sort = [(_PART, "ascending"), (_KEY, "ascending")]
    sort += [(_ORD, "ascending")] if event_time else []
    ordered = tagged.take(pc.sort_indices(tagged, sort_keys=[*sort, ("__lake_idx", "ascending")]))
    if ordered.num_rows <= 1:
        return ordered.drop_columns(["__lake_idx"])
    k = pc.binary_join_element_wise(ordered.column(_PART), ordered.column(_KEY), "\x00").combine_chunks()
    last = pa.concat_arrays([pc.not_equal(k.slice(0, len(k) - 1), k.slice(1)), pa.array([True])])
    return ordered.filter(last).drop_columns(["__lake_idx"])


def _route(table: LakeTable, batch: pa.Table) -> pa.Table:
    cfg = table.config
    batch = batch.drop_columns([c for c in batch.column_names if c in META_FIELDS])
    rows = batch.append_column(_KEY, record_keys(batch, cfg))
    rows = rows.append_column(_PART, partition_paths(batch, cfg))
    if cfg.precombine_field:
        rows = rows.append_column(_ORD, batch.column(cfg.precombine_field))
    return _dedupe(rows, cfg.merge_mode is MergeMode.EVENT_TIME_ORDERING and bool(cfg.precombine_field))


class GroupKind(str, Enum):
    INSERT = "insert"  # new file group: one new base file
    MERGE = "merge"  # copy-on-write: the group rewritten as a new base file
    APPEND = "append"  # merge-on-read: a new log file version with one data or delete block


@dataclass(frozen=True)
class WriteContext:
    """What every file group's part of one write needs; picklable, so Spark executors get it whole."""

    instant: str
    timeline: Timeline
    schema: pa.Schema  # meta fields + data fields, as the base files hold them
    avro: dict  # the table's Avro schema (data fields)
    operation: Operation
    bloom: BloomSettings = DEFAULT_SETTINGS  # sizes the bloom filter of every base file written


@dataclass(frozen=True)
class FileGroupWrite:
    """One file group's part of a write, planned by :func:`plan_file_groups` with the key lookup
    and run by :func:`write_file_group` (in this process, or on an executor)."""

    index: int  # 1-based, unique in the write: the write token and the commit sequence numbers
    partition: str
    kind: GroupKind
    file_id: str
    seqno_start: int
    rows: pa.Table  # the routed rows of this group (with the internal __lake_* columns)
    merged: FileSlice | None = None  # MERGE/APPEND: the latest slice as readers merge it
    newest: FileSlice | None = None  # APPEND: the slice the new log file joins
    first_in_partition: bool = False  # INSERT: write the partition metadata file first


@dataclass(frozen=True)
class FileGroupResult:
    """What one :class:`FileGroupWrite` wrote: files, its write stat (``None``: nothing won)."""

    files: tuple[str, ...] = ()
    stat: WriteStat | None = None
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


# Runs the file groups of a write and returns their results in the same order (the default runs
# them here one by one; spark_jobs/write.py spreads them over executors).
GroupRunner = Callable[[LakeTable, WriteContext, Sequence[FileGroupWrite]], Sequence[FileGroupResult]]


class _WriteJob:
    """The data-file part of one write: the key lookup here, then each file group through ``runner``."""

    def __init__(
        self, table: LakeTable, context: WriteContext, max_rows_per_file: int, fault: FaultHook
    ) -> None:
        self.table, self.context = table, context
        self.max_rows = max(1, max_rows_per_file)
        self.fault = fault
        self.inserted = self.updated = self.deleted = 0
        self.files: list[str] = []
        self.lookup_stats = LookupStats()

    def run(self, rows: pa.Table, runner: GroupRunner | None) -> dict[str, tuple[WriteStat, ...]]:
        with BaseFileReads(self.table) as reads:
            units = plan_file_groups(self.table, self.context, rows, self.max_rows, reads)
            if runner is None:
                # Here, a COW rewrite takes its base file from the lookup's open file (and the record
                # keys it read): every base file is opened once per write.
                results: Sequence[FileGroupResult] = []
                for unit in units:
                    results.append(write_file_group(self.table, self.context, unit, self.fault, reads))
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
            if result.stat is not None:
                stats.setdefault(result.stat.partition_path, []).append(result.stat)
        return {p: tuple(s) for p, s in stats.items()}


def plan_file_groups(
    table: LakeTable,
    context: WriteContext,
    rows: pa.Table,
    max_rows_per_file: int,
    reads: BaseFileReads,
) -> list[FileGroupWrite]:
    """Assign the routed ``rows`` to file groups (Hudi's bloom index, non-global): keys not in the
    table go to new groups of at most ``max_rows_per_file`` rows, existing ones to their group.
    Reads only; nothing is written. ``reads`` keeps the base files the lookup opened, for the
    caller to hand to :func:`write_file_group`."""
    partitions = sorted(set(rows.column(_PART).to_pylist()))
    if not partitions:
        return []
    view = table.file_system_view(context.timeline, partitions, sizes=False)  # sized when used
    units: list[FileGroupWrite] = []
    seqno = 0

    def add(partition: str, kind: GroupKind, file_id: str, group_rows: pa.Table, **more: Any) -> None:
        nonlocal seqno
        units.append(FileGroupWrite(len(units) + 1, partition, kind, file_id, seqno, group_rows, **more))
        seqno += group_rows.num_rows

    for partition in partitions:
        part_rows = rows.filter(pc.equal(rows.column(_PART), partition))
        groups, held = _locate(table, context, view, partition, part_rows.column(_KEY), reads)
        # A hash lookup of the keys, not a join: Arrow's joins cannot carry struct, list or map columns.
        where = pc.index_in(part_rows.column(_KEY), value_set=held.column(_KEY))
        located = part_rows.append_column("__lake_fid", held.column("__lake_fid").take(where))
        found = pc.is_valid(located.column("__lake_fid"))
        new_rows = located.filter(pc.invert(found)).drop_columns(["__lake_fid"])
        old_rows = located.filter(found)
        if context.operation is not Operation.DELETE:  # deleting an absent key does nothing
            for start in range(0, new_rows.num_rows, max_rows_per_file):  # >= 1: _WriteJob clamps it
                add(
                    partition,
                    GroupKind.INSERT,
                    new_file_id(),
                    new_rows.slice(start, max_rows_per_file),
                    first_in_partition=start == 0,
                )
        for fid in sorted(set(old_rows.column("__lake_fid").to_pylist())):
            group_rows = old_rows.filter(pc.equal(old_rows.column("__lake_fid"), fid)).drop_columns(
                ["__lake_fid"]
            )
            merged, newest = groups[fid]
            if table.config.is_mor:
                add(partition, GroupKind.APPEND, fid, group_rows, merged=merged, newest=newest)
            else:
                add(partition, GroupKind.MERGE, fid, group_rows, merged=merged)
    return units


def _locate(
    table: LakeTable,
    context: WriteContext,
    view: FileSystemView,
    partition: str,
    keys: pa.Array | pa.ChunkedArray,
    reads: BaseFileReads,
) -> tuple[dict[str, tuple[FileSlice, FileSlice]], pa.Table]:
    """Which file group holds each of ``keys`` (Hudi's bloom index, non-global), with the (merged,
    newest) slices of each group that holds one.

    Per base file: the footer's min/max record key keeps only the keys in its range, its bloom
    filter only the keys it may hold; the record-key column is read only if a key is left, and only
    of the row groups whose key statistics may hold one. Keys found in no base file are then looked
    for in the log files of the latest slices (where Hudi's bloom index does not look): a key can
    live in logs only (a compaction executed after it was re-inserted on top of its plan, or a
    writer that inserts into logs), and must stay in its group. Deletes count there too: a logged
    delete may lose to the base row (event time), and the key's next version must meet it in the
    same group. Only the slices read are built (an older slice may be being cleaned).
    """
    groups: dict[str, tuple[FileSlice, FileSlice]] = {}
    found_keys: list[pa.Array] = []
    owners: list[pa.Array] = []
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    keys = keys.cast(pa.string())
    # Sorted once per partition: each file's key range is then two bisections, not Arrow calls.
    ordered = sorted(keys.to_pylist())
    with_logs: list[str] = []

    def found(file_id: str, held: pa.Array | None) -> None:
        if held is None or not len(held):
            return
        pair = view.latest_pair(partition, file_id)
        assert pair is not None  # snapshot_bases lists only groups with a slice to read
        groups[file_id] = pair
        found_keys.append(held)
        owners.append(pa.array([file_id] * len(held), pa.string()))

    # From the view's index: slices (log files parsed) are built only for the groups that hold a
    # key or whose logs are searched, not for every group of the partition.
    for file_id, base, has_logs in view.snapshot_bases(partition):
        if has_logs:
            with_logs.append(file_id)
        if base is None:
            continue
        rel = join_partition(partition, base[0])
        held = reads.candidate_keys(rel, base[1], ordered)
        if held is not None:
            # Keep only the batch's keys: hashing the (small) batch beats hashing a large file's keys.
            held = held.filter(pc.is_in(held, value_set=keys))
        if held is None or not len(held) or table.config.is_mor or has_logs:
            reads.release(rel)  # no COW rewrite will read this file from the lookup's open
        found(file_id, held)
    rest = keys
    if found_keys and with_logs:
        rest = keys.filter(pc.invert(pc.is_in(keys, value_set=pa.concat_arrays(found_keys))))
    if with_logs and len(rest):
        for file_id, held in _keys_in_logs(table, context, view, partition, with_logs, rest).items():
            found(file_id, held)
    if not found_keys:
        return groups, pa.table({_KEY: pa.array([], pa.string()), "__lake_fid": pa.array([], pa.string())})
    return groups, pa.table({_KEY: pa.concat_arrays(found_keys), "__lake_fid": pa.concat_arrays(owners)})


def _keys_in_logs(
    table: LakeTable,
    context: WriteContext,
    view: FileSystemView,
    partition: str,
    file_ids: list[str],
    keys: pa.Array,
) -> dict[str, pa.Array]:
    """Which of ``keys`` the visible log blocks of each group's latest slice name (data or delete), by
    file id; a key named in two groups' logs (written so by others) goes to the first, as a key in
    two base files does."""
    reader = SliceReader(table, context.timeline, pa.schema([context.schema.field(RECORD_KEY)]))
    paths = [view.snapshot_logs(partition, file_id) for file_id in file_ids]
    logged = reader.log_keys_of(paths, readers=table.storage.concurrent_reads)
    every = pa.concat_arrays(logged)  # one hash lookup for all groups
    named = pc.is_in(every, value_set=keys)
    if not pc.any(named).as_py():
        return {}
    owner = np.repeat(np.arange(len(file_ids)), [len(k) for k in logged])
    where = np.flatnonzero(named.to_numpy(zero_copy_only=False))
    first: dict[str, int] = {}
    for key, at in zip(every.take(where).to_pylist(), owner[where].tolist(), strict=True):
        first.setdefault(key, at)
    by_group: dict[str, list[str]] = {}
    for key, at in first.items():
        by_group.setdefault(file_ids[at], []).append(key)
    return {file_id: pa.array(found, pa.string()) for file_id, found in by_group.items()}


class BaseFileReads:
    """The base files one write reads, each opened once: the key lookup reads the footer and the
    record keys, a COW rewrite in the same process the other columns from the same open file.

    Not picklable (open files): a file group written on an executor opens its base file there.
    """

    def __init__(self, table: LakeTable) -> None:
        self.table = table
        self._open: dict[str, tuple[contextlib.AbstractContextManager[Any], pq.ParquetFile]] = {}
        self._keys: dict[tuple[str, int], pa.Array] = {}
        self.range_pruned = self.bloom_pruned = self.row_groups_read = 0
        self.keys_read: list[str] = []

    def __enter__(self) -> BaseFileReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> LookupStats:
        return LookupStats(self.range_pruned, self.bloom_pruned, tuple(self.keys_read), self.row_groups_read)

    def close(self) -> None:
        for rel in list(self._open):
            self.release(rel)

    def release(self, rel: str) -> None:
        """Close ``rel`` and forget what was read of it (nothing more of it is needed)."""
        opened = self._open.pop(rel, None)
        for key in [k for k in self._keys if k[0] == rel]:
            del self._keys[key]
        if opened is not None:
            opened[0].__exit__(None, None, None)

    def open(self, rel: str) -> pq.ParquetFile:
        """The base file ``rel`` opened once (its footer parsed once) while this object keeps it."""
        if rel not in self._open:
            if len(self._open) >= _OPEN_BASE_FILES:
                self.release(next(iter(self._open)))  # the oldest; its rewrite opens it again
            with self.corrupt(rel):
                manager = self.table.storage.open_input(rel)
                source = manager.__enter__()
                try:
                    parquet = pq.ParquetFile(source)
                except BaseException:
                    manager.__exit__(None, None, None)
                    raise
            self._open[rel] = (manager, parquet)
        return self._open[rel][1]

    @contextlib.contextmanager
    def corrupt(self, rel: str) -> Iterator[None]:
        """Arrow and OS errors reading ``rel`` as one CorruptDataFileError naming it."""
        try:
            yield
        except (StorageAccessError, StorageUnavailableError):
            raise  # the store, not the file
        except (pa.ArrowException, OSError) as exc:
            message = " ".join(str(exc).split())
            raise CorruptDataFileError(
                f"cannot read base file {self.table.storage.uri(rel)}: {message}"
            ) from exc

    def candidate_keys(self, rel: str, size: int, ordered: list[str]) -> pa.Array | None:
        """Record keys of base file ``rel`` that may be among the (sorted) keys ``ordered``, or None
        when its footer rules out every one of them."""
        summary = self._summary(rel, size)
        if summary.low is not None and summary.high is not None:
            ordered = _between(ordered, summary.low, summary.high)
            if not ordered:
                self.range_pruned += 1
                return None
        maybe = self._bloom(rel, self.open(rel).metadata.metadata or {}, ordered)
        if maybe is not None:
            ordered = [key for key, hit in zip(ordered, maybe, strict=True) if hit]
            if not ordered:
                self.bloom_pruned += 1
                return None
        # Only the row groups whose key statistics may hold a candidate (base files hold
        # ROW_GROUP_ROWS rows per group: with keys that grow over time, few are read).
        parts = [
            self._row_group_keys(rel, index)
            for index, stats in enumerate(summary.row_groups)
            if stats is None or _between(ordered, *stats)
        ]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.string())

    def _summary(self, rel: str, size: int) -> _FooterSummary:
        """The footer summary of ``rel``, from the table's cache when a write already read it."""
        cache = self.table.footer_summaries
        found = cache.get((rel, size))
        if found is not None:
            return found
        meta = self.open(rel).metadata
        kv = meta.metadata or {}
        low, high = kv.get(b"hoodie_min_record_key"), kv.get(b"hoodie_max_record_key")
        leaf = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == RECORD_KEY), None)
        groups: list[tuple[str, str] | None] = []
        for index in range(meta.num_row_groups):
            stats = meta.row_group(index).column(leaf).statistics if leaf is not None else None
            known = stats is not None and stats.has_min_max and isinstance(stats.min, str)
            groups.append((stats.min, stats.max) if known else None)  # type: ignore[union-attr]
        ranged = low is not None and high is not None
        summary = _FooterSummary(
            low.decode() if ranged else None,  # type: ignore[union-attr]
            high.decode() if ranged else None,  # type: ignore[union-attr]
            tuple(groups),
        )
        if len(cache) >= _FOOTER_SUMMARIES:
            cache.clear()
        cache[(rel, size)] = summary
        return summary

    def _bloom(self, rel: str, meta: Mapping[bytes, bytes], ordered: list[str]) -> np.ndarray | None:
        """Which of ``ordered`` the footer's bloom filter may hold (None: no filter we can read)."""
        try:
            return probe_footer(meta, pa.array(ordered, pa.string()), self.table.storage.uri(rel))
        except CorruptDataFileError as exc:  # a filter we cannot read only costs the key column read
            log.warning("%s; reading its record keys instead", exc)
            return None

    def _row_group_keys(self, rel: str, index: int) -> pa.Array:
        if (rel, index) not in self._keys:
            parquet = self.open(rel)
            with self.corrupt(rel):
                group = parquet.read_row_group(index, columns=[RECORD_KEY])
            if RECORD_KEY not in group.column_names:  # Arrow skips a column the file lacks
                raise CorruptDataFileError(
                    f"cannot read base file {self.table.storage.uri(rel)}: it has no {RECORD_KEY} column"
                )
            column = group.column(0)
            self._keys[(rel, index)] = column.combine_chunks().cast(pa.string())
            self.row_groups_read += 1
            if rel not in self.keys_read:
                self.keys_read.append(rel)
        return self._keys[(rel, index)]

    def rows(self, rel: str, schema: pa.Schema) -> pa.Table:
        """The rows of base file ``rel`` as ``schema``, its record keys taken from what the lookup
        read: every column chunk of the file is read once per write."""
        parquet = self.open(rel)
        # A file the lookup found a key in has row groups, and the meta fields besides the key.
        keys = pa.concat_arrays(
            [self._row_group_keys(rel, i) for i in range(parquet.metadata.num_row_groups)]
        )
        present = set(parquet.schema_arrow.names)
        wanted = [n for n in schema.names if n in present and n != RECORD_KEY]
        with self.corrupt(rel):
            rows = parquet.read(columns=wanted)
        return conform(rows.append_column(RECORD_KEY, keys), schema)


def write_file_group(
    table: LakeTable,
    context: WriteContext,
    unit: FileGroupWrite,
    fault: FaultHook = _no_fault,
    reads: BaseFileReads | None = None,
) -> FileGroupResult:
    """Write one file group's part of the write (its marker first, then its file); any process may
    run it, given the table, the context and the unit. Commits nothing.

    ``reads``: the planning lookup's open base files (same process only), so a COW rewrite reads
    no part of its base file twice; without it the base file is opened here, once."""
    if reads is not None:
        return _GroupWriter(table, context, unit, fault, reads).run()
    with BaseFileReads(table) as own:
        return _GroupWriter(table, context, unit, fault, own).run()


class _GroupWriter:
    """The files of one :class:`FileGroupWrite`: a new base file, a rewritten one, or a log file."""

    def __init__(
        self,
        table: LakeTable,
        context: WriteContext,
        unit: FileGroupWrite,
        fault: FaultHook,
        reads: BaseFileReads,
    ) -> None:
        self.table, self.context, self.unit, self.fault = table, context, unit, fault
        self.reads = reads
        self.instant, self.schema, self.operation = context.instant, context.schema, context.operation
        self.timeline = context.timeline
        self.log_avro = with_meta_fields(context.avro)
        self.cfg = table.config
        self.event_time = self.cfg.merge_mode is MergeMode.EVENT_TIME_ORDERING and bool(
            self.cfg.precombine_field
        )
        self.token = write_token(unit.index, 1, 0)

    def run(self) -> FileGroupResult:
        unit = self.unit
        if unit.kind is GroupKind.INSERT:
            return self._write_insert(unit.rows)
        if unit.kind is GroupKind.MERGE:
            return self._rewrite_group(unit.rows)
        return self._append_log(unit.rows)

    def _meta_rows(self, rows: pa.Table, partition: str, file_name: str) -> pa.Table:
        n = rows.num_rows
        start = self.unit.seqno_start
        # conform() keeps the schema's fields only, so the internal __lake_* columns drop out.
        data = conform(rows, pa.schema([f for f in self.schema if f.name not in META_FIELDS]))
        meta = [  # in META_FIELDS order; self.schema names them
            pa.array([self.instant] * n, pa.string()),
            pa.array([f"{self.instant}_{self.unit.index}_{start + i}" for i in range(n)], pa.string()),
            rows.column(_KEY).cast(pa.string()),
            pa.array([partition] * n, pa.string()),
            pa.array([file_name] * n, pa.string()),
        ]
        return pa.Table.from_arrays(meta + list(data.columns), schema=self.schema)

    def _write_parquet(self, partition: str, name: str, table: pa.Table) -> tuple[str, int]:
        rel = join_partition(partition, name)
        size = store_base_file(self.table.storage, rel, table, self.context.bloom)
        self.fault("file")
        return rel, size

    def _write_insert(self, rows: pa.Table) -> FileGroupResult:
        partition, file_id = self.unit.partition, self.unit.file_id
        if self.unit.first_in_partition:
            depth = len(partition.split("/")) if partition else 0
            write_partition_metadata(self.table.storage, partition, self.instant, depth)
        name = BaseFileName.create(file_id, self.token, self.instant).name
        self.table.store.create_marker(self.instant, partition, name, IOType.CREATE)
        rel, size = self._write_parquet(partition, name, self._meta_rows(rows, partition, name))
        stat = WriteStat(
            file_id,
            partition,
            rel,
            "null",
            num_writes=rows.num_rows,
            num_inserts=rows.num_rows,
            total_write_bytes=size,
            file_size_in_bytes=size,
        )
        return FileGroupResult((rel,), stat, inserted=rows.num_rows)

    def _rewrite_group(self, changes: pa.Table) -> FileGroupResult:
        """COW: write the group's full new row set as a new base file at this instant."""
        slice_ = self.unit.merged
        partition = self.unit.partition
        assert slice_ is not None and slice_.base_file is not None
        reader = SliceReader(self.table, self.timeline, self.schema)
        if slice_.log_files:  # not written by COW writers; read and merged as a reader would
            current = reader.read_slice(slice_)
        else:
            current = self.reads.rows(slice_.base_file.relative_path, self.schema)
        keys = reader.keys_of(current)
        if self.event_time:
            # Event time: a version with a smaller ordering value than the stored one loses.
            stored = current.column(self.cfg.precombine_field).take(
                pc.index_in(changes.column(_KEY), value_set=keys)
            )
            wins = pc.greater_equal(changes.column(_ORD).cast(stored.type), stored)
            changes = changes.filter(pc.fill_null(wins, True))
            if not changes.num_rows:
                return FileGroupResult()
        changed = changes.column(_KEY).combine_chunks()
        name = BaseFileName.create(self.unit.file_id, self.token, self.instant).name
        self.table.store.create_marker(self.instant, partition, name, IOType.MERGE)
        kept = current.filter(pc.invert(pc.is_in(keys, value_set=changed)))
        kept = kept.set_column(4, "_hoodie_file_name", pa.array([name] * kept.num_rows, pa.string()))
        parts = [kept]
        deleted = updated = 0
        if self.operation is Operation.DELETE:
            deleted = changes.num_rows
        else:
            updated = changes.num_rows
            parts.append(self._meta_rows(changes, partition, name))
        out = pa.concat_tables(parts)
        rel, size = self._write_parquet(partition, name, out)
        stat = WriteStat(
            self.unit.file_id,
            partition,
            rel,
            slice_.base_instant,
            num_writes=out.num_rows,
            num_deletes=deleted,
            num_update_writes=updated,
            total_write_bytes=size,
            file_size_in_bytes=size,
        )
        return FileGroupResult((rel,), stat, updated=updated, deleted=deleted)

    def _append_log(self, changes: pa.Table) -> FileGroupResult:
        """MOR: a new log file version of the group's newest slice with a data or delete block."""
        newest, merged = self.unit.newest, self.unit.merged  # newest may be a pending compaction's slice
        assert newest is not None
        partition, file_id = self.unit.partition, self.unit.file_id
        base_name = merged.base_file.file_name if merged is not None and merged.base_file else ""
        version = max((f.name.version for f in newest.log_files), default=0) + 1
        name = LogFileName.create(file_id, newest.base_instant, version, self.token).name
        self.table.store.create_marker(self.instant, partition, name, IOType.APPEND)
        if self.operation is Operation.DELETE:
            block = self._delete_block(changes, partition, merged)
            updated, deleted = 0, changes.num_rows
        else:
            records = self._meta_rows(changes, partition, file_id)  # Java: file id in logs
            block = avro_data_block(records, self.log_avro, self.instant)
            updated, deleted = changes.num_rows, 0
        rel = join_partition(partition, name)
        try:
            self.table.storage.create(rel, block)  # a new log version per write: no appends needed
        except ObjectExistsError:
            # A retried (or speculative) Spark task of this write made the same file: the same
            # bytes are that task's work done; anything else is another writer's, never overwritten.
            if self.table.storage.read(rel) != block:
                raise

        self.fault("file")
        stat = WriteStat(
            file_id,
            partition,
            rel,
            newest.base_instant,
            num_writes=updated,
            num_deletes=deleted,
            num_update_writes=updated,
            total_write_bytes=len(block),
            file_size_in_bytes=len(block),
            base_file=base_name,
            log_files=(name,),
            log_version=version,
            log_offset=0,  # a new file per write: the block starts it
        )
        return FileGroupResult((rel,), stat, updated=updated, deleted=deleted)

    def _delete_block(self, changes: pa.Table, partition: str, slice_: FileSlice | None) -> bytes:
        ordering = self.cfg.precombine_field
        keys = changes.column(_KEY)
        if not ordering:
            records = [DeleteRecord(key, partition) for key in keys.to_pylist()]
            return delete_block(records, self.instant, self.log_avro)
        if self.event_time:  # the delete's own ordering value; reads and compaction compare it
            values = changes.column(_ORD).to_pylist()
        else:
            # Commit time: the stored value, so Java, which compares ordering values even there,
            # deletes too. The one write path that reads the slice (deletes from commit-time tables).
            values = self._stored_ordering(slice_, keys).to_pylist()
        # A null value (a key with no version left) is written as the null branch, whatever the type.
        ord_type = ordering_type_for(self.schema.field(ordering).type)
        records = [
            DeleteRecord(key, partition, value, ord_type)
            for key, value in zip(keys.to_pylist(), values, strict=True)
        ]
        return delete_block(records, self.instant, self.log_avro)

    def _stored_ordering(self, slice_: FileSlice | None, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The current ordering value of each key in a file slice (null where the key is gone)."""
        ordering = self.cfg.precombine_field
        assert slice_ is not None and ordering  # a found key's group has a slice; deletes need ordering
        fields = [self.schema.field(RECORD_KEY), self.schema.field(ordering)]
        reader = SliceReader(self.table, self.timeline, pa.schema(fields))
        live = reader.read_slice(slice_)
        where = pc.index_in(keys, value_set=reader.keys_of(live))
        return live.column(ordering).combine_chunks().take(where)
