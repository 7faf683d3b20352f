"""Snapshot reads of COW and MOR tables (optionally as of an instant), with the meta columns."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import (
    ConfigError,
    CorruptDataFileError,
    CorruptLogBlockError,
    InstantArchivedError,
    ObjectNotFoundError,
    SchemaError,
    SnapshotCleanedError,
    StorageAccessError,
    StorageUnavailableError,
)
from airflow_lake_provider.lake.file_group.model import FileSlice, LogFile
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS
from airflow_lake_provider.lake.format.base_file import decode_dictionaries, small_dictionary_columns
from airflow_lake_provider.lake.format.casting import cast_exact
from airflow_lake_provider.lake.format.partitioning import record_keys
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.log_file.avro_decode import decode_avro_data_block, preload_decoder
from airflow_lake_provider.lake.log_file.block_keys import avro_blocks_record_keys, parquet_block_record_keys
from airflow_lake_provider.lake.log_file.data_block import decode_parquet_block
from airflow_lake_provider.lake.log_file.delete_block import DeleteRecord, decode_delete_block
from airflow_lake_provider.lake.log_file.log_format import BlockType, LogBlock
from airflow_lake_provider.lake.log_file.scanner import read_log_blocks, visible_blocks
from airflow_lake_provider.lake.table.merge import DataItem, DeleteItem, LogItem, LogMerge
from airflow_lake_provider.lake.table.stream import read_ahead, stream_slices
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import validate_instant_time

log = logging.getLogger(__name__)
RECORD_KEY = "_hoodie_record_key"
# A slice's log files at least this large are almost surely Avro data to decode: its decoder starts
# loading while they are read.
PRELOAD_DECODER_LOG_BYTES = 1 << 20


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Shape ``table`` as ``schema``: reorder, cast, and fill columns it lacks with nulls.

    :raises SchemaError: when a value would not survive the cast exactly (naming column and value).
    """
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(cast_exact(table.column(field.name), field.type, field.name))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


@contextlib.contextmanager
def _naming(table: LakeTable, rel: str) -> Iterator[None]:
    """Arrow and OS errors reading base file ``rel`` as one ``CorruptDataFileError`` naming it."""
    try:
        yield
    except (StorageAccessError, StorageUnavailableError):
        raise  # the store, not the file: already names the URI, and is not corruption
    except (pa.ArrowException, OSError) as exc:
        # Arrow's message names no file; a reader of many slices needs to know which one.
        message = " ".join(str(exc).split())
        raise CorruptDataFileError(f"cannot read base file {table.storage.uri(rel)}: {message}") from exc


def check_base_columns(table: LakeTable, rel: str, columns: Collection[str]) -> None:
    """Refuse a parquet file that cannot be a base file of ``table``: every base file holds the
    Hudi meta columns or, with ``hoodie.populate.meta.fields=false``, the record key fields. A
    foreign file put in a base file's place would otherwise read as rows of nulls."""
    config = table.config
    needed = META_FIELDS if config.populate_meta_fields else config.record_key_fields
    missing = [c for c in needed if c not in columns]
    if missing:
        shown = ", ".join(list(columns)[:8]) + (", ..." if len(columns) > 8 else "")
        raise CorruptDataFileError(
            f"{table.storage.uri(rel)} is not a base file of {table.uri}: it lacks column(s) "
            f"{', '.join(missing)} (its columns: {shown or 'none'})"
        )


def check_base_files(table: LakeTable, rels: Sequence[str], max_workers: int = 8) -> None:
    """``check_base_columns`` for each file from its footer alone (a service's check before it
    writes anything); a file that is gone is left to the caller, which knows what it means."""

    def check(rel: str) -> None:
        try:
            source = table.storage.open_input(rel)
        except ObjectNotFoundError:
            return
        with _naming(table, rel), source:
            columns = pq.read_schema(source).names
        check_base_columns(table, rel, columns)

    if not rels:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(rels)))) as pool:
        list(pool.map(check, rels))


@dataclass(frozen=True)
class SliceReader:
    """Reads and merges file slices of one table under one timeline and output schema."""

    table: LakeTable
    timeline: Timeline
    schema: pa.Schema
    as_of: str | None = None

    @property
    def config(self) -> TableConfig:
        return self.table.config

    def keys_of(self, batch: pa.Table) -> pa.Array:
        if self.config.populate_meta_fields and RECORD_KEY in batch.column_names:
            return batch.column(RECORD_KEY).combine_chunks().cast(pa.string())
        return record_keys(batch, self.config)

    def read_base(self, slice_: FileSlice) -> pa.Table | None:
        if slice_.base_file is None:
            return None
        parts = list(self.base_parts(slice_))
        return pa.concat_tables(parts) if len(parts) != 1 else parts[0]

    def base_key_column(self, slice_: FileSlice) -> pa.Array | None:
        """The record keys of the slice's base file in file order, read alone (the key column only),
        or None without a base file or a record-key column (keys are then derived part by part)."""
        if slice_.base_file is None or not self.config.populate_meta_fields:
            return None
        rel = slice_.base_file.relative_path
        with _naming(self.table, rel), self.table.storage.open_input(rel) as source:
            parquet = pq.ParquetFile(source)
            if RECORD_KEY not in parquet.schema_arrow.names:
                return None
            keys = parquet.read(columns=[RECORD_KEY]).column(RECORD_KEY)
        if keys.null_count:
            return None  # base_parts names the file as corrupt
        return keys.combine_chunks().cast(pa.string())

    def base_parts(
        self,
        slice_: FileSlice,
        footer: list[Mapping[bytes, bytes]] | None = None,
        keys: pa.Array | None = None,
        skip: Collection[str] = (),
    ) -> Iterator[pa.Table]:
        """The base file's rows one row group at a time (none without a base file), shaped as the
        schema; ``footer`` (if given) receives the file's footer key-value metadata first. ``keys``:
        the file's :meth:`base_key_column`, if already read: its record keys are not decoded again.
        ``skip``: columns the caller replaces, not decoded (nulls)."""
        if slice_.base_file is None:
            return
        # ParquetFile, not read_table: read_table goes through pyarrow.dataset, whose import pulls in
        # pandas (1.5 s in every fresh process, e.g. each Spark Python worker).
        rel = slice_.base_file.relative_path
        with _naming(self.table, rel), self.table.storage.open_input(rel) as source:
            parquet = pq.ParquetFile(source)
            if dictionaries := small_dictionary_columns(parquet.metadata):
                parquet = pq.ParquetFile(source, metadata=parquet.metadata, read_dictionary=dictionaries)
            names = parquet.schema_arrow.names
            check_base_columns(self.table, rel, names)
            if footer is not None:
                footer.append(parquet.metadata.metadata or {})
            present = set(names)
            reuse = keys is not None and RECORD_KEY in present
            wanted = [n for n in self.schema.names if n in present and n not in skip]
            columns = [n for n in wanted if not (reuse and n == RECORD_KEY)]
            groups = range(parquet.metadata.num_row_groups) or [None]
            offset = 0
            for index in groups:
                rows = (
                    parquet.read_row_group(index, columns=columns)
                    if index is not None
                    else parquet.schema_arrow.empty_table().select(columns)
                )
                rows = decode_dictionaries(rows)
                if reuse:
                    rows = rows.append_column(RECORD_KEY, keys.slice(offset, rows.num_rows))
                    offset += rows.num_rows
                if RECORD_KEY in rows.column_names and rows.column(RECORD_KEY).null_count:
                    raise CorruptDataFileError(
                        f"{self.table.storage.uri(rel)}: {rows.column(RECORD_KEY).null_count} rows have "
                        f"no record key ({RECORD_KEY} is null): not a base file Hudi wrote"
                    )
                try:
                    yield conform(rows, self.schema)
                except SchemaError as exc:
                    raise SchemaError(f"base file {self.table.storage.uri(rel)}: {exc}") from None

    def visible_blocks(self, log_files: Sequence[LogFile]) -> list[LogBlock]:
        """Blocks of committed instants (up to ``as_of``), minus those a rollback block targets."""
        blocks: list[LogBlock] = []
        for log_file in log_files:
            blocks.extend(read_log_blocks(self.table.storage, log_file.relative_path))
        return self._visible(blocks)

    def _visible(self, blocks: Sequence[LogBlock]) -> list[LogBlock]:
        """Of the blocks of one slice's log files, those :meth:`visible_blocks` keeps."""
        return visible_blocks(blocks, self.timeline.is_committed, self.as_of)

    def log_items(self, log_files: Sequence[LogFile]) -> list[LogItem]:
        items: list[LogItem] = []
        for block in self.visible_blocks(log_files):
            if block.block_type is BlockType.AVRO_DATA:
                data = conform(decode_avro_data_block(block), self.schema)
            elif block.block_type is BlockType.PARQUET_DATA:
                data = conform(decode_parquet_block(block), self.schema)
            elif block.block_type is BlockType.DELETE:
                items.append(self._delete_item(decode_delete_block(block)))
                continue
            elif block.block_type is BlockType.CDC_DATA:
                continue
            else:
                raise CorruptLogBlockError(
                    f"log block at offset {block.offset} of type {block.block_type.name} is not supported"
                )
            items.append(DataItem(data, self.keys_of(data)))
        return items

    def log_keys(self, log_files: Sequence[LogFile]) -> pa.Array:
        """Every record key the visible blocks of ``log_files`` (one slice's) name: data records and
        deletes alike (a deleted key may still be live, e.g. an event-time delete older than its
        base row). For the key lookup of a write: only the key of each record is decoded where the
        block allows."""
        return self.log_keys_of([[f.relative_path for f in log_files]])[0]

    def log_keys_of(self, slices: Sequence[Sequence[str]], readers: int = 1) -> list[pa.Array]:
        """:meth:`log_keys` of several slices, given their log files' relative paths: the files are
        read by up to ``readers`` threads (on S3 each is a GET), the Avro blocks of all of them
        walked at once."""
        storage = self.table.storage
        flat = [rel for logs in slices for rel in logs]
        if readers > 1 and len(flat) > 1:
            with ThreadPoolExecutor(max_workers=min(readers, len(flat))) as pool:
                parsed = list(pool.map(lambda rel: read_log_blocks(storage, rel), flat))
        else:
            parsed = [read_log_blocks(storage, rel) for rel in flat]
        per_slice: list[list[LogBlock]] = []
        at = 0
        for logs in slices:
            per_slice.append(self._visible([b for found in parsed[at : at + len(logs)] for b in found]))
            at += len(logs)
        avro = [b for blocks in per_slice for b in blocks if b.block_type is BlockType.AVRO_DATA]
        avro_keys = dict(zip(map(id, avro), avro_blocks_record_keys(avro), strict=True)) if avro else {}
        out = []
        for blocks in per_slice:
            parts = []
            for block in blocks:
                if block.block_type is BlockType.AVRO_DATA:
                    parts.append(avro_keys[id(block)])
                elif block.block_type is BlockType.DELETE:
                    parts.append(pa.array([r.record_key for r in decode_delete_block(block)], pa.string()))
                elif block.block_type is BlockType.PARQUET_DATA:
                    parts.append(parquet_block_record_keys(block))
                elif block.block_type is not BlockType.CDC_DATA:
                    raise CorruptLogBlockError(
                        f"log block at offset {block.offset} of type {block.block_type.name} is not supported"
                    )
            if any(keys.null_count for keys in parts):  # records without the key meta field
                out.append(self._derived_keys(blocks))
            else:
                out.append(pa.concat_arrays(parts) if parts else pa.array([], pa.string()))
        return out

    def _derived_keys(self, blocks: Sequence[LogBlock]) -> pa.Array:
        """The keys of data blocks whose records lack the key meta field, derived as readers do."""
        parts = []
        for block in blocks:
            if block.block_type is BlockType.DELETE:
                parts.append(pa.array([r.record_key for r in decode_delete_block(block)], pa.string()))
            elif block.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
                decoded = (
                    decode_avro_data_block(block)
                    if block.block_type is BlockType.AVRO_DATA
                    else decode_parquet_block(block)
                )
                parts.append(record_keys(decoded, self.config).cast(pa.string()))
        return pa.concat_arrays(parts) if parts else pa.array([], pa.string())

    def _delete_item(self, records: Sequence[DeleteRecord]) -> DeleteItem:
        ordering = self.config.precombine_field
        typ = self.schema.field(ordering).type if ordering and ordering in self.schema.names else pa.null()
        values = [_ordering_or_none(r, typ) for r in records]
        try:
            ords = pa.array(values, type=typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            log.warning("delete block ordering values do not fit %s; treating them as natural order", typ)
            ords = pa.nulls(len(values), typ)
        return DeleteItem(pa.array([r.record_key for r in records], pa.string()), ords)

    def read_slice(self, slice_: FileSlice) -> pa.Table:
        """The slice's live rows (:meth:`slice_parts` concatenated)."""
        parts = list(self.slice_parts(slice_))
        if not parts:
            return self.schema.empty_table()
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def slice_parts(self, slice_: FileSlice) -> Iterator[pa.Table]:
        """The slice's live rows, a part at a time: the base file streamed a row group at a time
        through the merge with the log (surviving rows in base order), then the log's rows. Only the
        log's merged records and a few row groups of the base (one being merged, two read ahead while the
        log is decoded and merged) are held while parts are produced."""
        if not slice_.log_files:
            yield from self.base_parts(slice_)
            return
        if sum(f.size for f in slice_.log_files) >= PRELOAD_DECODER_LOG_BYTES:
            preload_decoder()
        with ThreadPoolExecutor(max_workers=1) as pool:
            # The log decoding and the parquet reads of the base file (its keys, then its row groups,
            # a few ahead) release the GIL: the base is decoded while the log is.
            pending = pool.submit(self.log_items, slice_.log_files)
            all_keys = self.base_key_column(slice_)
            with read_ahead(functools.partial(self.base_parts, slice_, keys=all_keys)) as parts:
                merge = self._log_merge(pending.result())
                if merge is None:
                    yield from parts
                    return
                # The base file's keys matched against the log's at once: per row group the log's
                # keys would be hashed again each time.
                match_all = merge.match(all_keys) if all_keys is not None else None
                offset = 0
                for part in parts:
                    match = match_all.slice(offset, part.num_rows) if match_all is not None else None
                    offset += part.num_rows
                    kept = merge.kept_base(part, self.keys_of(part), match)
                    if kept.num_rows:
                        yield kept
        del match_all, all_keys
        yield merge.log_rows()

    def _log_merge(self, items: Sequence[LogItem]) -> LogMerge | None:
        if not items:
            return None
        config = self.config
        return LogMerge(items, mode=config.merge_mode, ordering=config.precombine_field, schema=self.schema)


def _ordering_or_none(record: DeleteRecord, column_type: pa.DataType) -> object:
    """None for natural-order deletes: a null, an int 0 (Java's marker) or a 0 of the column's type."""
    value = record.ordering_value
    if value is None:
        return None
    if value == 0 and not isinstance(value, bool):
        if record.ordering_type == "int" or _same_kind(record.ordering_type, column_type):
            return None
    return value


def _same_kind(avro_type: str | None, column_type: pa.DataType) -> bool:
    kinds = {
        "long": pa.types.is_int64,
        "int": pa.types.is_int32,
        "double": pa.types.is_float64,
        "float": pa.types.is_float32,
    }
    check = kinds.get(avro_type or "")
    return bool(check and check(column_type))


def read_snapshot(
    table: LakeTable,
    as_of: str | None = None,
    partitions: Iterable[str] | None = None,
    max_workers: int = 4,
) -> pa.Table:
    """The table's rows as of ``as_of`` (default: latest), meta columns first."""
    reader, slices = _snapshot(table, as_of, partitions)
    if reader is None:
        return pa.table({})
    if not slices:
        return reader.schema.empty_table()
    release_freed_memory()
    # Arrow and the Avro decoder release the GIL, so slices read in parallel threads.
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(slices)))) as pool:
        parts = list(pool.map(reader.read_slice, slices))
    result = pa.concat_tables(parts)
    result = result.combine_chunks() if result.num_rows < 1_000_000 else result
    del parts
    release_freed_memory()
    return result


def release_freed_memory() -> None:
    """Hand the memory a read freed back to the OS. Arrow's allocator keeps freed pages for reuse,
    a read's decoded row groups and log blocks included (about the size of the table read): a
    process reading again, or doing other work, would otherwise hold them on top of what it
    allocates next (the fourth read of a slice in one process peaked 15-28% above the first). A few
    ms."""
    pa.default_memory_pool().release_unused()


def snapshot_parts(
    table: LakeTable,
    as_of: str | None = None,
    partitions: Iterable[str] | None = None,
    max_workers: int = 4,
) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """:func:`read_snapshot`'s rows as a stream of parts (the same rows in the same order), with
    their schema (no columns when the table has no commit yet): to write them out while reading,
    holding a few parts instead of the table. Errors surface from the iterator, in slice order."""
    reader, slices = _snapshot(table, as_of, partitions)
    if reader is None:
        return pa.schema([]), iter(())
    return reader.schema, stream_slices(reader.slice_parts, slices, max_workers)


def _snapshot(
    table: LakeTable, as_of: str | None, partitions: Iterable[str] | None
) -> tuple[SliceReader | None, list[FileSlice]]:
    """The reader and latest slices of a snapshot (no reader while the table has no schema)."""
    if isinstance(partitions, str):  # iterated, a string is its letters: no partition, no rows
        raise ConfigError(
            f"{table.uri}: partitions must be a list of partition paths, not the string {partitions!r}"
        )
    timeline = table.timeline()
    if as_of is not None:
        validate_instant_time(as_of)
        timeline = _timeline_as_of(table, timeline, as_of)
    schema = table.arrow_schema(timeline, as_of)
    if schema is None:
        return None, []
    wanted = list(partitions) if partitions is not None else None
    view = table.file_system_view(timeline, wanted)
    if as_of is not None:
        _check_readable(table, view, as_of, wanted)
    return SliceReader(table, timeline, schema, as_of), view.latest_slices(as_of)


def _timeline_as_of(table: LakeTable, timeline: Timeline, as_of: str) -> Timeline:
    """The timeline a read as of ``as_of`` needs. Older than the active timeline: in layout 2 the
    archived commits up to it from the LSM history (their metadata says which files they wrote);
    in layout 1 refused once instants were archived (``.hoodie/archived/`` is not read for it)."""
    first = timeline.instants[0].timestamp if timeline.instants else None
    if first is None or as_of >= first:
        return timeline
    if timeline.history is not None:
        return timeline.with_history(as_of)
    if timeline.has_archive():
        commits = timeline.completed_commits
        raise InstantArchivedError(
            f"{table.uri}: cannot read as of {as_of}: the timeline up to it is archived; the earliest "
            f"instant that can still be read is {commits[0].timestamp if commits else first}"
        )
    return timeline


def _check_readable(table: LakeTable, view: FileSystemView, as_of: str, partitions: list[str] | None) -> None:
    """Refuse time travel to an instant whose files a clean removed: reading what is left would
    silently return partial rows."""
    timeline = view.timeline
    missing = view.missing_slices(as_of, partitions)
    if not missing:
        return
    partition, file_id, at = missing[0]
    earliest = _earliest_readable(timeline)
    points = [i.timestamp for i in timeline.savepoints()]
    count = f"{len(missing)} slice" + ("" if len(missing) == 1 else "s")
    raise SnapshotCleanedError(
        f"{table.uri}: cannot read as of {as_of}: a clean removed the file slice {at} of file group "
        f"{file_id} in partition {partition or '<root>'} ({count} in all); instants from "
        f"{earliest or 'unknown'} on can still be read (the last clean's oldest retained commit)"
        + (f", or a savepoint: {', '.join(points)}" if points else "")
    )


def _earliest_readable(timeline: Timeline) -> str | None:
    """The first completed commit at or after the last clean's earliest retained commit (a restore
    may have rolled that one back since), else the latest completed commit: an instant on the
    timeline that a read as of finds whole."""
    earliest = timeline.earliest_retained()
    commits = [i.timestamp for i in timeline.completed_commits]
    if earliest is None or not commits:
        return earliest
    return next((t for t in commits if t >= earliest), commits[-1])


def sort_by_key(table: pa.Table) -> pa.Table:
    """Rows ordered by record key (and partition path): a stable order for comparisons."""
    keys = [(c, "ascending") for c in ("_hoodie_partition_path", RECORD_KEY) if c in table.column_names]
    return table.take(pc.sort_indices(table, sort_keys=keys)) if keys else table
