"""The files of one file group's part of a write: a new base file, a rewritten one (COW), or a new log
file (MOR), each after its marker. Any process may run it; it commits nothing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import ObjectExistsError
from airflow_lake_provider.lake.file_group.data_files import store_base_file, write_partition_metadata
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName, write_token
from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS, with_meta_fields
from airflow_lake_provider.lake.format.base_file import RECORD_KEY
from airflow_lake_provider.lake.format.table_config import MergeMode
from airflow_lake_provider.lake.log_file.data_block import encode_avro_data_block
from airflow_lake_provider.lake.log_file.delete_block import DeleteRecord, delete_block, ordering_type_for
from airflow_lake_provider.lake.table.index.bloom import BaseFileReads
from airflow_lake_provider.lake.table.merge import IS_DELETED_FIELD
from airflow_lake_provider.lake.table.reader import SliceReader, conform
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.plan import (
    _KEY,
    _ORD,
    FaultHook,
    FileGroupResult,
    FileGroupWrite,
    GroupKind,
    Operation,
    WriteContext,
    _no_fault,
)
from airflow_lake_provider.lake.timeline.commit_metadata import WriteStat, join_partition
from airflow_lake_provider.lake.timeline.markers import IOType


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


def _flagged(rows: pa.Table) -> pa.Array | None:
    """Which ``rows`` carry ``_hoodie_is_deleted`` true (Hudi's delete marker in a write's rows, as
    Java's writers honour it), or None when none does."""
    if IS_DELETED_FIELD not in rows.column_names:
        return None
    flag = pc.fill_null(rows.column(IS_DELETED_FIELD), False).combine_chunks()
    return flag if pc.any(flag).as_py() else None


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
        flagged = _flagged(rows)  # new keys marked deleted: nothing to write for them
        if flagged is not None:
            rows = rows.filter(pc.invert(flagged))
            if not rows.num_rows:
                return FileGroupResult()
        name = BaseFileName.create(file_id, self.token, self.instant).name
        self.table.store.markers.create(self.instant, partition, name, IOType.CREATE)
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
        # Each stored row of a changed key is replaced, unless (event time) its ordering value is
        # larger than the new version's. A key a base file holds twice (Hudi's bulk_insert) is
        # thereby met copy by copy, as Java's merge handle meets it: a copy that wins stays.
        version = pc.index_in(keys, value_set=changes.column(_KEY))  # per stored row
        replaced = pc.is_valid(version)
        if self.event_time:
            stored = current.column(self.cfg.precombine_field)
            new = changes.column(_ORD).cast(stored.type).take(version)
            replaced = pc.and_(replaced, pc.fill_null(pc.greater_equal(new, stored), True))
            # A version applies if it replaced a stored row, or its key is not stored (an insert).
            applies = pc.or_(
                pc.is_in(changes.column(_KEY), value_set=keys.filter(replaced)),
                pc.invert(pc.is_in(changes.column(_KEY), value_set=keys)),
            )
            changes = changes.filter(applies)
            if not changes.num_rows:
                return FileGroupResult()
        name = BaseFileName.create(self.unit.file_id, self.token, self.instant).name
        self.table.store.markers.create(self.instant, partition, name, IOType.MERGE)
        kept = current.filter(pc.invert(replaced))
        kept = kept.set_column(4, "_hoodie_file_name", pa.array([name] * kept.num_rows, pa.string()))
        parts = [kept]
        deleted = updated = 0
        if self.operation is Operation.DELETE:
            deleted = changes.num_rows
        else:
            flagged = _flagged(changes)  # versions marked deleted: they replace, and are not written
            if flagged is not None:
                deleted = pc.sum(flagged).as_py()
                changes = changes.filter(pc.invert(flagged))
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
        if self.table.layout.has_completion_times:
            # Hudi 1.x: a new log file per deltacommit, named by its (requested) time; readers put it
            # in the slice its completion time falls into. Its write stat names that time as prevCommit.
            version, log_instant, prev_commit = 1, self.instant, self.instant
        else:
            version = max((f.name.version for f in newest.log_files), default=0) + 1
            log_instant = prev_commit = newest.base_instant
        name = LogFileName.create(file_id, log_instant, version, self.token).name
        self.table.store.markers.create(self.instant, partition, name, IOType.APPEND)
        log_rows = None
        if self.operation is Operation.DELETE:
            block = self._delete_block(changes, partition, merged)
            updated, deleted = 0, changes.num_rows
        else:
            records = self._meta_rows(changes, partition, file_id)  # Java: file id in logs
            block, log_rows = encode_avro_data_block(records, self.log_avro, self.instant)
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
            prev_commit,
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
        return FileGroupResult((rel,), stat, updated=updated, deleted=deleted, log_rows=log_rows)

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
        # Each key's last live row: the log's version, which a read puts after the base rows (a key
        # a base file holds twice reads its later rows as stored, before it). Java's log scan drops
        # a delete whose value is below the logged version's, commit time or not.
        backwards = pa.array(np.arange(live.num_rows - 1, -1, -1, dtype=np.int64))
        where = pc.index_in(keys, value_set=reader.keys_of(live).take(backwards))
        return live.column(ordering).take(backwards).combine_chunks().take(where)
