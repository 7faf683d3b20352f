"""One operation of a compaction plan: the file slice it names merged into a new base file.

Touches no timeline file except its marker, so a distributed task may run it; the driver commits
the write stats (``executor.commit_compaction``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import (
    CompactionError,
    CorruptDataFileError,
    LakeError,
    UnsafePathError,
)
from airflow_lake_provider.lake.file_group.data_files import store_base_parts
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName, write_token
from airflow_lake_provider.lake.file_group.model import BaseFile, FileSlice, LogFile
from airflow_lake_provider.lake.format.bloom_filter import BloomFilter, from_footer
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation, CompactionPlan
from airflow_lake_provider.lake.table.merge import DataItem, DeleteItem, LogMerge
from airflow_lake_provider.lake.table.reader import SliceReader
from airflow_lake_provider.lake.table.rollback.plan import in_table
from airflow_lake_provider.lake.table.stream import read_ahead
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import RuntimeStats, WriteStat, join_partition
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.markers import IOType

log = logging.getLogger(__name__)


FaultHook = Callable[[str], None]
FILE_NAME_COLUMN = "_hoodie_file_name"
# Base files up to this size are read in the merging thread, their keys with their rows (``parts``).
READ_AHEAD_MIN_BYTES = 4 << 20


def _no_fault(_point: str) -> None:
    return None


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


def base_files(plan: CompactionPlan) -> list[str]:
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
    started = time.monotonic()
    items = reader.log_items(slice_.log_files)
    config = table.config
    merge = (
        LogMerge(items, mode=config.merge_mode, ordering=config.precombine_field, schema=schema)
        if items
        else None
    )
    name = BaseFileName.create(op.file_id, token or write_token(), instant).name
    # An empty result still gets a base file: it ends the old slice, so its rows stay deleted.
    table.store.markers.create(
        instant, op.partition, name, IOType.MERGE if slice_.base_file is not None else IOType.CREATE
    )
    relative = join_partition(op.partition, name)
    # The keys logged as data (the updates counted). Without delete blocks they are exactly the keys
    # the merge has a winner for: its match of the base keys tells them, no second hash of the log's.
    log_keys = [i.keys for i in items if isinstance(i, DataItem)]
    touched = None
    if any(isinstance(i, DeleteItem) for i in items):
        touched = pc.unique(pa.concat_arrays(log_keys)) if log_keys else pa.array([], pa.string())
    scanned = time.monotonic()
    out = _SliceMerge(table, reader, slice_, merge, touched, schema, name)
    rows, size = store_base_parts(
        table.storage, relative, schema, out.parts(), config.bloom_settings, out.previous
    )
    # As Hudi's compactor: the log scan's time, and the write's as the merge (upsert) or create
    # handle's, whichever made the file.
    scan_ms, write_ms = int((scanned - started) * 1000), int((time.monotonic() - scanned) * 1000)
    previous = slice_.base_file.file_name if slice_.base_file is not None else None
    runtime = RuntimeStats(scan_ms, 0 if previous else write_ms, write_ms if previous else 0)
    fault("file")
    log.debug("compaction %s: %s -> %s (%d rows)", instant, op.file_id, relative, rows)
    return WriteStat(
        file_id=op.file_id,
        partition_path=op.partition,
        path=relative,
        prev_commit=op.base_instant,
        num_writes=rows,
        num_deletes=out.base - out.kept,
        num_update_writes=out.updated,
        num_inserts=out.inserted,
        total_write_bytes=size,
        file_size_in_bytes=size,
        total_log_records=sum(len(i.keys) for i in items),
        total_log_files_compacted=len(slice_.log_files),
        total_log_size_compacted=slice_.total_log_size,
        total_updated_records_compacted=out.updated,
        prev_base_file=previous,
        runtime_stats=runtime,
    )


class _SliceMerge:
    """One operation's new base file as parts, merged a base row group at a time; counts its rows."""

    def __init__(
        self,
        table: LakeTable,
        reader: SliceReader,
        slice_: FileSlice,
        merge: LogMerge | None,
        touched: pa.Array | None,
        schema: pa.Schema,
        name: str,
    ) -> None:
        self.table, self.reader, self.slice_, self.merge, self.touched = table, reader, slice_, merge, touched
        self.name, self.file_name = name, schema.get_field_index(FILE_NAME_COLUMN)
        self.footer: list[Mapping[bytes, bytes]] = []
        self.base = self.kept = self.updated = self.inserted = 0
        self._names = pa.array([], pa.string())

    def named(self, rows: pa.Table) -> pa.Table:
        if len(self._names) < rows.num_rows:  # built once for a row group, sliced for each part
            self._names = pa.repeat(pa.scalar(self.name, pa.string()), rows.num_rows)
        return rows.set_column(self.file_name, FILE_NAME_COLUMN, self._names.slice(0, rows.num_rows))

    def hits(self, keys: pa.Array, match: pa.Array) -> pa.Array | None:
        """Which of ``keys`` the log holds as data (``match``: the merge's :meth:`LogMerge.match` of
        them); None when it holds none."""
        if self.touched is None:  # no delete blocks: a key with a winner is a key logged as data
            return pc.is_valid(match)
        return pc.is_in(keys, value_set=self.touched) if len(self.touched) else None

    def parts(self) -> Iterator[tuple[pa.Table, bool]]:
        # One base row group at a time, merged in place (updated rows where their base rows were,
        # as Hudi's merge handle writes them), then the inserted keys: the rows of a part are keys
        # of the old base file, whose bloom filter the new file's starts from.
        reader, merge, base_file = self.reader, self.merge, self.slice_.base_file
        # A large base file's keys are matched against the log's at once (the key column alone: per
        # row group the log's keys would be hashed again each time), and its next row groups decode
        # on a thread (two ahead) while this one is merged and the one before it encoded. A small
        # one (a row group or so) gains from neither: the second read of its keys and the thread
        # cost a plan of 200 2,000-row groups a quarter of its CPU (benchmarks/compaction_checks.py).
        large = base_file is not None and base_file.size > READ_AHEAD_MIN_BYTES
        all_keys = reader.base_key_column(self.slice_) if merge is not None and large else None
        match_all = merge.match(all_keys) if merge is not None and all_keys is not None else None
        hit_all = self.hits(all_keys, match_all) if merge is not None and all_keys is not None else None
        offset = 0
        # The file name column is not decoded: every row gets the new one (``named``). Its one
        # value, dictionary encoded, became 65,536 strings a row group: 0.1 s of 1M rows' CPU.
        # The footer (for ``previous``) is read before the first part arrives.
        base = functools.partial(
            reader.base_parts, self.slice_, self.footer, keys=all_keys, skip=(FILE_NAME_COLUMN,)
        )
        with read_ahead(base) if large else contextlib.nullcontext(base()) as parts:
            for part in parts:
                keys = reader.keys_of(part)
                self.base += len(keys)
                if merge is None:
                    out = part
                else:
                    match = match_all.slice(offset, len(keys)) if match_all is not None else merge.match(keys)
                    out, met = merge.replacing_rows(part, keys, match)
                    hit = hit_all.slice(offset, len(keys)) if hit_all is not None else self.hits(keys, match)
                    if hit is not None:
                        self.updated += pc.sum(pc.and_(hit, met)).as_py() or 0
                offset += len(keys)
                self.kept += out.num_rows
                yield self.named(out), True
        if merge is not None:
            inserted = merge.inserted_rows()
            self.inserted = inserted.num_rows
            yield self.named(inserted), False

    def previous(self) -> BloomFilter | None:
        if not self.footer:
            return None
        base = self.slice_.base_file
        assert base is not None  # a footer was read, so the slice has a base file
        try:
            return from_footer(self.footer[0], self.table.storage.uri(base.relative_path))
        except CorruptDataFileError:
            return None  # a damaged filter is not carried over: the new one is built from the keys


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
