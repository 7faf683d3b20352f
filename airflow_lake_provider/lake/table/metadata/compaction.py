"""Compaction of Hudi's metadata table (MDT) under the maintain policy, as Hudi 1.x's Java writer
runs it (``HoodieBackedTableMetadataWriter.performTableServices``, ``compactIfNecessary``).

When: after a maintained data instant completes, once the MDT has at least
``hoodie.metadata.compact.max.delta.commits`` (default 10) completed deltacommits since its last
compaction (all of them before its first), and no data instant at or before the MDT's latest
completed deltacommit is pending (Java's rule: a base file at time T must hold every data instant up
to T, and a pending one's records may still be rolled back). A pending MDT compaction (a crashed
run) is finished first, at its own time, from its own plan, as Java's ``runAnyPendingCompactions``.

The instant: a fresh time, later than every instant of both timelines (table versions 8 and 9: Java
takes ``createNewInstantTime``; the 1.x test tables show such times, no suffix); on a version 6
table the latest MDT deltacommit's time plus ``001``, as Hudi 0.14/0.15 (and 1.x's
``HoodieBackedTableMetadataWriterTableVersionSix``) take it. The plan: one
operation per file group of every MDT partition whose latest slice has log files (a slice with only
a base file has nothing to merge), with its base file and every log file of the slice, in
``HoodieCompactionPlan`` form. Executing an operation merges the base file's records with those of
the slice's log blocks whose instants readers count (the same validity rule as the readers,
``metadata.files``), record by record as ``HoodieMetadataPayload`` combines them
(``metadata.merge``), and writes the result as a new HFile base file
``<fileId>_<token>_<instant>.hfile`` in the MDT's own HFile dialect with the file info and bloom
filter Java's MDT base files carry. A slice without a base file whose merge holds no record gets no
file (as Java's compactor returns nothing for it).

Durable order, on the MDT's timeline and storage: requested (the plan), inflight, the base files,
then the completed ``commit`` (one write stat per base file). Until it completes, every reader (ours,
hudi-rs, Java's) ignores the new base files: they belong to a pending instant; so a crash at any
step leaves both tables as they were, and the next run finishes it (its base files written again,
after those another attempt left at that instant under other names are deleted).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_lake_provider.lake.file_group.file_names import write_token
from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.format import bloom_filter
from airflow_lake_provider.lake.format.hfile import (
    Dialect,
    HFileContent,
    HFileSettings,
    read_hfile,
    write_hfile,
)
from airflow_lake_provider.lake.log_file.delete_block import decode_delete_block
from airflow_lake_provider.lake.log_file.hfile_block import (
    SCHEMA_INFO,
    decode_hfile_block,
    decode_hfile_cells,
    encode_records,
)
from airflow_lake_provider.lake.log_file.log_format import BlockType, LogBlock
from airflow_lake_provider.lake.log_file.scanner import read_log_blocks, visible_blocks
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.bases import files_bases
from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
from airflow_lake_provider.lake.table.metadata.files import (
    FILES_PARTITION,
    latest_slices,
    slice_blocks,
    valid_instants,
)
from airflow_lake_provider.lake.table.metadata.merge import Record, as_read, combine
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock, State

log = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
COMPACT_OPERATION = "COMPACT"
V6_COMPACTION_SUFFIX = "001"  # Hudi's OperationSuffix.COMPACTION
# What Java's MDT base files carry besides the cells (file info names, meta block name).
BLOOM_TYPE_INFO, MIN_KEY_INFO, MAX_KEY_INFO = b"bloomFilterTypeCode", b"minRecordKey", b"maxRecordKey"
BLOOM_BLOCK = b"bloomFilter"
_FILE_NAME_FIELD = "_hoodie_file_name"
_META_FIELDS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    _FILE_NAME_FIELD,
)
_MB = 1024 * 1024


def _no_fault(_point: str) -> None:
    return None


@dataclass(frozen=True)
class MetadataCompactionOperation:
    """One MDT file group to compact: its latest slice's base file and log files, by name."""

    partition: str
    file_id: str
    base_instant: str
    base_file: str | None
    log_files: tuple[str, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of_slice(cls, piece: FileSlice) -> MetadataCompactionOperation:
        logs = sorted(piece.log_files, key=lambda f: f.name.sort_key)
        base = piece.base_file.size if piece.base_file else 0
        log_size = sum(f.size for f in logs)
        read_mb = (base + log_size) / _MB
        metrics = {
            "TOTAL_LOG_FILES": float(len(logs)),
            "TOTAL_IO_MB": read_mb + base / _MB,
            "TOTAL_IO_READ_MB": read_mb,
            "TOTAL_LOG_FILES_SIZE": float(log_size),
            "TOTAL_IO_WRITE_MB": base / _MB,
        }
        base_name = piece.base_file.file_name if piece.base_file else None
        return cls(
            piece.partition,
            piece.file_id,
            piece.base_instant,
            base_name,
            tuple(f.file_name for f in logs),
            metrics,
        )

    def to_avro(self) -> dict[str, Any]:
        return {
            "baseInstantTime": self.base_instant,
            "deltaFilePaths": list(self.log_files),
            "dataFilePath": self.base_file,
            "fileId": self.file_id,
            "partitionPath": self.partition,
            "metrics": dict(self.metrics),
            "bootstrapFilePath": None,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> MetadataCompactionOperation:
        return cls(
            record.get("partitionPath") or "",
            str(record["fileId"]),
            str(record["baseInstantTime"]),
            record.get("dataFilePath"),
            tuple(record.get("deltaFilePaths") or ()),
            dict(record.get("metrics") or {}),
        )


def plan_record(operations: Sequence[MetadataCompactionOperation]) -> dict[str, Any]:
    """The ``HoodieCompactionPlan`` of ``operations`` (Java's MDT plans: version 2, no strategy)."""
    return {
        "operations": [op.to_avro() for op in operations],
        "extraMetadata": {},
        "version": 2,
        "strategy": None,
        "preserveHoodieMetadata": False,
        "missingSchedulePartitions": [],
    }


def deltacommits_since_compaction(mdt: Timeline) -> int:
    """Completed MDT deltacommits after its last completed compaction (all, before the first)."""
    compactions = [i.timestamp for i in mdt.filter([Action.COMMIT], [State.COMPLETED])]
    last = max(compactions, default="")
    return sum(1 for i in mdt.filter([Action.DELTACOMMIT], [State.COMPLETED]) if i.timestamp > last)


def why_not_due(data_timeline: Callable[[], Timeline], mdt: Timeline, max_delta_commits: int) -> str | None:
    """Why the MDT needs no compaction now (None: it is due), by Java's rule; ``data_timeline`` reads
    the data table's timeline (only once the count is reached: most runs need none)."""
    count = deltacommits_since_compaction(mdt)
    if count < max_delta_commits:
        return f"{count} deltacommits since its last compaction (fewer than {max_delta_commits})"
    latest = max(i.timestamp for i in mdt.filter([Action.DELTACOMMIT], [State.COMPLETED]))
    pending = [i.timestamp for i in data_timeline().instants if not i.is_completed and i.timestamp <= latest]
    if pending:
        return (
            f"data instant(s) {', '.join(pending)} at or before its latest deltacommit {latest} are pending"
        )
    return None


def plan_operations(mdt: MetadataTableWriter) -> list[MetadataCompactionOperation]:
    """One operation per MDT file group whose latest slice has log files, partitions in name order."""
    ops = []
    for partition in _partitions(mdt.storage):
        slices = latest_slices(mdt.storage, partition)
        ops.extend(MetadataCompactionOperation.of_slice(s) for _, s in sorted(slices.items()) if s.log_files)
    return ops


def _partitions(storage: Storage) -> list[str]:
    return sorted(p for p in storage.list_dir("")[1] if not p.startswith("."))


def compact_metadata_table(
    data_storage: Storage,
    mdt: MetadataTableWriter,
    data_timeline: Callable[[], Timeline],
    max_delta_commits: int,
    fault: FaultHook = _no_fault,
    timeline: Timeline | None = None,
) -> str | None:
    """Finish a pending MDT compaction, or schedule and run one when due; the instant compacted
    (None: nothing to do). The caller holds the locks that keep other writers of the MDT out;
    ``data_timeline`` reads the data table's timeline (called only when a compaction may run);
    ``timeline``: the MDT's, if the caller has read it under them."""
    timeline = timeline if timeline is not None else mdt.timeline()
    pending = timeline.filter([Action.COMPACTION], [State.REQUESTED, State.INFLIGHT])
    if pending:
        instant = pending[0].timestamp
        record = timeline.compaction_plan(instant)
        ops = [MetadataCompactionOperation.from_avro(op) for op in record.get("operations") or ()]
        log.info("finishing the metadata table's pending compaction %s", instant)
        _execute(data_storage, mdt, data_timeline(), timeline, instant, ops, fault)
        return instant
    why = why_not_due(data_timeline, timeline, max_delta_commits)
    if why is not None:
        log.debug("metadata table compaction not due: %s", why)
        return None
    ops = plan_operations(mdt)
    if not ops:
        return None
    # Read before the plan: a damaged log that hides a completed deltacommit refuses the compaction
    # (it would write the loss into the base file) and must not leave a plan behind.
    data = data_timeline()
    deltacommits, valid = valid_instants(data, timeline)
    blocks = [_blocks(mdt.storage, op, deltacommits & valid, timeline) for op in ops]
    instant = compaction_instant(timeline, data, mdt.store.clock)
    mdt.store.create_requested(
        instant, Action.COMPACTION, mdt.store.encode_plan(timeline_avro.COMPACTION_PLAN, plan_record(ops))
    )
    fault("requested")
    _execute(data_storage, mdt, data, mdt.timeline(), instant, ops, fault, blocks)
    return instant


def _blocks(
    storage: Storage, op: MetadataCompactionOperation, committed: set[str], mdt: Timeline
) -> list[LogBlock]:
    piece = (op.partition, op.base_instant, op.log_files)
    return slice_blocks(storage, op.partition, piece, committed, mdt.layout.has_completion_times)


def compaction_instant(timeline: Timeline, data: Timeline, clock: InstantClock) -> str:
    """The time of a new MDT compaction: on table version 6 (layout 1) the latest completed MDT
    deltacommit's time plus Hudi's compaction suffix ``001`` (``createCompactionTimestamp``: later
    deltacommits, at later data times, sort after it; after an initialisation at ``<t>010`` it is
    ``<t>010001``); on 8 and 9 a fresh time later than every instant of both timelines (Java's
    ``createNewInstantTime``)."""
    if not timeline.layout.has_completion_times:
        latest = max(i.timestamp for i in timeline.filter([Action.DELTACOMMIT], [State.COMPLETED]))
        return latest + V6_COMPACTION_SUFFIX
    latest = max(
        t for i in (*timeline.instants, *data.instants) for t in (i.timestamp, i.completion_time or "")
    )
    return clock.next(after=latest)


def _execute(
    data_storage: Storage,
    mdt: MetadataTableWriter,
    data: Timeline,
    timeline: Timeline,
    instant: str,
    ops: Sequence[MetadataCompactionOperation],
    fault: FaultHook,
    blocks: Sequence[list[LogBlock]] | None = None,
) -> None:
    """Run the compaction ``instant`` of ``ops`` (requested or inflight) to completion; ``blocks``:
    each op's log blocks, if read already."""
    states = {
        i.state: i for i in timeline.instants if i.timestamp == instant and i.action is Action.COMPACTION
    }
    current = states.get(State.INFLIGHT)
    if current is None:
        current = mdt.store.start_planned(
            states[State.REQUESTED], timeline.read_bytes(states[State.REQUESTED])
        )
        fault("inflight")
    deltacommits, valid = valid_instants(data, timeline)

    def committed(t: str) -> bool:
        return t in deltacommits and t in valid

    _drop_other_attempts(mdt.storage, ops, instant)
    bloom = _bloom_settings(mdt.storage, timeline)
    stats: dict[str, list[WriteStat]] = {}
    for index, op in enumerate(ops):
        read = (
            blocks[index] if blocks is not None else _blocks(mdt.storage, op, deltacommits & valid, timeline)
        )
        stat = _compact_one(mdt, op, instant, write_token(index, 0, 0), committed, bloom, read)
        if stat is not None:
            stats.setdefault(op.partition, []).append(stat)
        fault("file")
    body = CommitMetadata(
        COMPACT_OPERATION,
        {p: tuple(s) for p, s in stats.items()},
        {"schema": mdt.commit_schema},
        compacted=True,
    )
    # Layout 1 (table version 6) keeps JSON commit metadata; its plans are Avro as layout 2's.
    mdt.store.transition_to_completed(current, body.to_bytes(timeline.layout.has_completion_times))
    fault("commit")
    log.info(
        "compacted the metadata table at %s: %d base files", instant, sum(len(s) for s in stats.values())
    )


def merged_records(
    storage: Storage,
    op: MetadataCompactionOperation,
    committed: Callable[[str], bool],
    blocks: Sequence[LogBlock] | None = None,
) -> tuple[dict[str, Record], int, int, int]:
    """The records of ``op``'s slice merged as Hudi merges them (sorted by key), the base file's
    record count, the keys the log blocks hold and the log records read. ``blocks``: the slice's
    log blocks, if read already."""
    merged: dict[str, Record | None] = {}
    if blocks is None:
        blocks = [b for name in op.log_files for b in read_log_blocks(storage, f"{op.partition}/{name}")]
    log_records = 0
    for block in visible_blocks(blocks, committed):
        if block.block_type == BlockType.HFILE_DATA:
            for key, decoded in decode_hfile_block(block):
                record = as_read(decoded)
                merged[key] = combine(merged.get(key), record, key) if key in merged else record
                log_records += 1
        elif block.block_type == BlockType.DELETE:
            for entry in decode_delete_block(block):
                merged[entry.record_key] = None
                log_records += 1
    base: dict[str, Record] = {}
    if op.base_file is not None:
        rel = f"{op.partition}/{op.base_file}"
        hfile = read_hfile(storage.read(rel), storage.uri(rel))
        cells = decode_hfile_cells(hfile, hfile.content.info(SCHEMA_INFO), storage.uri(rel))
        base = {key: as_read(record) for key, record in cells}
    out = dict(base)
    for key, record in merged.items():
        combined = combine(base[key], record, key) if key in base else record
        if combined is None:
            out.pop(key, None)
        else:
            out[key] = combined
    return dict(sorted(out.items())), len(base), len(merged), log_records


def base_file_bytes(
    records: Mapping[str, Record],
    name: str,
    schema_text: str,
    settings: HFileSettings,
    bloom_settings: bloom_filter.BloomSettings,
) -> bytes:
    """The MDT base file ``name`` of ``records`` (sorted by key) as Java's MDT compaction writes it:
    the cells (``key`` empty: the key lives in the cell; the ``_hoodie_file_name`` meta field the
    file's name, the other meta fields null), file info (bloom filter type, max and min key, the
    record schema) and a ``bloomFilter`` meta block holding every key."""
    cells = encode_records([(k, _as_base_record(r, name)) for k, r in records.items()], schema_text)
    keys = list(records)
    bloom = bloom_filter.build(pa.array(keys, pa.string()), bloom_settings)
    info = (
        (BLOOM_TYPE_INFO, bloom.type_code.encode()),
        (MAX_KEY_INFO, keys[-1].encode() if keys else b""),
        (MIN_KEY_INFO, keys[0].encode() if keys else b""),
        (SCHEMA_INFO, schema_text.encode("utf-8")),
    )
    content = HFileContent(tuple(cells), info, ((BLOOM_BLOCK, bloom.serialize().encode()),))
    return write_hfile(content, settings)


def _as_base_record(record: Record, name: str) -> Record:
    out = {**as_read(record), "key": ""}
    for meta in _META_FIELDS:
        if meta in out:
            out[meta] = name if meta == _FILE_NAME_FIELD else None
    return out


def bloom_settings_of(storage: Storage, base_file: str) -> bloom_filter.BloomSettings:
    """The bloom filter sizing of an MDT base file (Java sizes them from the MDT write config, which
    differs between releases: 60,000 keys in the 1.0 test tables, 10,000 in the 1.1 ones)."""
    hfile = read_hfile(storage.read(base_file), storage.uri(base_file))
    block = dict(hfile.content.meta_blocks).get(BLOOM_BLOCK)
    if block is None:
        return bloom_filter.DEFAULT_SETTINGS
    found = bloom_filter.decode(block, hfile.content.info(BLOOM_TYPE_INFO), storage.uri(base_file))
    capacity = found.row_capacity or bloom_filter.DEFAULT_SETTINGS.num_entries
    return dataclasses.replace(bloom_filter.DEFAULT_SETTINGS, num_entries=capacity, type_code=found.type_code)


def _bloom_settings(storage: Storage, timeline: Timeline) -> bloom_filter.BloomSettings:
    """The bloom filter sizing of the latest ``files`` base file (the one the writer took its
    dialect from)."""
    bases = files_bases(storage, {i.timestamp for i in timeline.pending})
    if not bases:
        return bloom_filter.DEFAULT_SETTINGS
    return bloom_settings_of(storage, f"{FILES_PARTITION}/{bases[0]}")


def _drop_other_attempts(storage: Storage, ops: Sequence[MetadataCompactionOperation], instant: str) -> None:
    """Delete the base files at ``instant`` of the planned file groups that this run does not write
    under their names: another writer's attempt (Java's write tokens differ from ours) left them, some
    maybe partial. Readers ignore them while the compaction is pending; once it completes, a second
    base file of a slice would be read in place of ours (Java rolls a failed compaction's files back
    before running it again)."""
    ours = {f"{op.file_id}_{write_token(i, 0, 0)}_{instant}.hfile" for i, op in enumerate(ops)}
    for partition in sorted({op.partition for op in ops}):
        ids = {op.file_id for op in ops if op.partition == partition}
        for name in storage.list_names(partition):
            if name.endswith(f"_{instant}.hfile") and name.split("_", 1)[0] in ids and name not in ours:
                log.info(
                    "deleting %s/%s, left by an earlier attempt of compaction %s", partition, name, instant
                )
                storage.delete(f"{partition}/{name}")


def _settings(mdt: MetadataTableWriter) -> HFileSettings:
    if mdt.settings.dialect is Dialect.HUDI:  # hudi-io's writer stamps the creation time
        now_ms = int(mdt.store.clock.now().timestamp() * 1000)
        return dataclasses.replace(mdt.settings, create_time_ms=now_ms)
    return mdt.settings


def _compact_one(
    mdt: MetadataTableWriter,
    op: MetadataCompactionOperation,
    instant: str,
    token: str,
    committed: Callable[[str], bool],
    bloom: bloom_filter.BloomSettings,
    blocks: Sequence[LogBlock],
) -> WriteStat | None:
    records, base_count, log_keys, log_records = merged_records(mdt.storage, op, committed, blocks)
    if not records and op.base_file is None:
        return None  # nothing to write: Java's compactor writes no file for it either
    name = f"{op.file_id}_{token}_{instant}.hfile"
    rel = f"{op.partition}/{name}"
    data = base_file_bytes(records, name, mdt.block_schema, _settings(mdt), bloom)
    mdt.storage.write(rel, data)  # a rerun after a crash writes it again
    return WriteStat(
        file_id=op.file_id,
        partition_path=op.partition,
        path=rel,
        prev_commit=op.base_instant if op.base_file else "null",
        num_writes=len(records),
        num_deletes=max(0, base_count - len(records)) if op.base_file else 0,
        num_inserts=len(records) - min(base_count, len(records)),
        num_update_writes=min(base_count, len(records)),
        total_write_bytes=len(data),
        file_size_in_bytes=len(data),
        total_log_records=log_records,
        total_log_files_compacted=len(op.log_files),
        total_log_size_compacted=int(op.metrics.get("TOTAL_LOG_FILES_SIZE", 0)),
        total_updated_records_compacted=log_keys,
        prev_base_file=op.base_file,
    )
