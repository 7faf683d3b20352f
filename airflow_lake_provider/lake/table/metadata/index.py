"""The ``column_stats`` and ``partition_stats`` records of Hudi's metadata table (MDT) for one data
write, as Hudi 1.x's Java writer adds them to the write's MDT deltacommit.

``column_stats``: one record (type 3) per indexed column of every file the write reports (base
files from their footers, log files from their records; ``metadata.stats``). ``partition_stats``:
per partition written, one record (type 6) per column over the files of the partition's latest
slices as the write sees them (its own files included, as if it had completed). The files written
before keep the ``column_stats`` records the MDT holds; a file without one is read. Each record goes
to the file group of its partition that Java routes its key to (``file_group_index``).

A clean (``clean_index_records``) gives per file it deleted, base or log, one ``column_stats``
record per indexed column marked deleted: Hudi's stub (no values, every count -1), not a removal
(``HoodieTableMetadataUtil.convertMetadataToColumnStatsRecords`` of a clean), and no
``partition_stats`` record (a clean leaves every latest slice as it was).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.hash_id import column_stats_key, file_id, name_id, partition_stats_key
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.log_file.data_block import BlockRows
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.columns import (
    META_COLUMNS,
    column_stats_definition,
    index_version,
    indexed_columns,
)
from airflow_lake_provider.lake.table.metadata.files import MDT_DIR, read_partition_records
from airflow_lake_provider.lake.table.metadata.records import (
    FilesChange,
    Records,
    blank_record,
    file_group_index,
)
from airflow_lake_provider.lake.table.metadata.stats import (
    COLUMN_STATS,
    PARTITION_STATS,
    ValueType,
    log_column_stats,
    parquet_column_stats,
    partition_stats,
    rows_column_stats,
    slices_seen_by,
)
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import COMMIT_ACTIONS, Action, Instant, State

COLUMN_STATS_PARTITION = "column_stats"
PARTITION_STATS_PARTITION = "partition_stats"
GROUP_PREFIXES = {COLUMN_STATS_PARTITION: "col-stats-", PARTITION_STATS_PARTITION: "partition-stats-"}
INDEX_PARTITIONS = frozenset(GROUP_PREFIXES)
# A completion time after every real one: the write's own files join the slices as if completed.
_AS_IF_COMPLETED = "99991231235959999"
Groups = dict[str, dict[str, Records]]  # MDT partition -> file id -> records


def file_groups(mdt: Storage, partition: str) -> list[str]:
    """The file ids of an MDT partition (``col-stats-0000-0``, ...), in index order."""
    prefix = GROUP_PREFIXES[partition]
    ids = {name.lstrip(".").split("_", 1)[0] for name in mdt.list_names(partition)}
    return sorted(i for i in ids if i.startswith(prefix))


def _file_stats(
    storage: Storage,
    partition: str,
    name: str,
    definition: Mapping[str, Any] | None,
    indexed: tuple[str, ...] | None,
    logs: Mapping[str, BlockRows] | None = None,
) -> dict[str, dict[str, Any]]:
    """The ``column_stats`` of one file; ``indexed``: its columns (:func:`indexed_columns`, chosen
    once for the files of a write; None: each file's, from the definition or the table)."""
    if name.endswith(".parquet"):
        return parquet_column_stats(storage, partition, name, indexed, definition=definition)
    held = (logs or {}).get(f"{partition}/{name}" if partition else name)
    if held is not None:  # the writer's rows: the same stats as decoding the block it wrote
        return rows_column_stats(
            storage, partition, name, held.rows, held.schema, indexed, definition=definition
        )
    return log_column_stats(storage, partition, name, indexed, definition=definition)


def _record(blank: Mapping[str, Any], kind: int, stats: Mapping[str, Any]) -> dict[str, Any]:
    """A record of ``kind`` holding ``stats`` (``blank``: :func:`blank_record` of the schema, made
    once per deltacommit rather than once per record)."""
    return {**blank, "type": kind, "ColumnStatsMetadata": dict(stats)}


def _route(records: Mapping[str, dict[str, Any]], ids: list[str]) -> dict[str, Records]:
    out: dict[str, Records] = {}
    for key, record in records.items():
        out.setdefault(ids[file_group_index(key, len(ids))], []).append((key, record))
    return out


def index_records(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    instant: Instant,
    change: FilesChange,
    partitions: frozenset[str],
    schema: Mapping[str, Any],
    logs: Mapping[str, BlockRows] | None = None,
) -> Groups:
    """The records of ``partitions`` (of ``column_stats``, ``partition_stats``) for the pending
    write ``instant`` (of ``timeline``) that made ``change``, by MDT partition and file group.
    ``logs``: the rows of log files the write made, by table-relative path, as its writer held them."""
    mdt = storage.child(MDT_DIR)
    # Read once for the write's files, not once per file (none: each file read reads it, as before).
    added = any(part.added for part in change.partitions.values())
    definition = column_stats_definition(storage) if added else None
    # Chosen once from the table's schema, as Hudi chooses them for every file of a commit.
    indexed = indexed_columns(storage, config, timeline, definition) if definition is not None else None
    new: dict[str, dict[str, Any]] = {}  # column_stats key -> stats, of the write's own files
    by_file: dict[str, list[dict[str, Any]]] = {}  # file name -> its stats
    for partition, part in change.partitions.items():
        for name in part.added:
            stats = _file_stats(storage, partition, name, definition, indexed, logs)
            new.update(stats)
            by_file[name] = list(stats.values())
    groups: Groups = {}
    blank = blank_record(schema)
    if COLUMN_STATS_PARTITION in partitions and new:
        records = {k: _record(blank, COLUMN_STATS, s) for k, s in new.items()}
        groups[COLUMN_STATS_PARTITION] = _route(records, file_groups(mdt, COLUMN_STATS_PARTITION))
    if PARTITION_STATS_PARTITION in partitions and change.partitions:
        columns = sorted({s["columnName"] for s in new.values()})
        stored = COLUMN_STATS_PARTITION in partitions
        sources = _Sources(by_file, columns, stored, blank, definition, indexed)
        records = _partition_records(storage, config, timeline, instant, change, sources)
        if records:
            groups[PARTITION_STATS_PARTITION] = _route(records, file_groups(mdt, PARTITION_STATS_PARTITION))
    return groups


def _stored_stats(storage: Storage, timeline: Timeline, keys: set[str]) -> dict[str, list[dict[str, Any]]]:
    """File name -> the ``column_stats`` records of ``keys`` the MDT holds (a file name is unique
    across partitions: it carries its file group's id); ``timeline``: the data table's."""
    out: dict[str, list[dict[str, Any]]] = {}
    for record in read_partition_records(storage, COLUMN_STATS_PARTITION, keys, data=timeline).values():
        stats = record.get("ColumnStatsMetadata")
        if record.get("type") == COLUMN_STATS and stats and not stats.get("isDeleted"):
            out.setdefault(stats["fileName"], []).append(stats)
    return out


def _column_stats_keys(partition: str, names: list[str], columns: list[str]) -> set[str]:
    """``column_stats_key`` of each of ``columns`` of each file of ``names``, each file's id hashed
    once (not once per column: a write wants the keys of hundreds of files)."""
    prefixes = [name_id(column) + name_id(partition or ".") for column in columns]
    keys: set[str] = set()
    for name in names:
        file = file_id(name)
        keys.update(prefix + file for prefix in prefixes)
    return keys


@dataclasses.dataclass(frozen=True)
class _Sources:
    """Where ``partition_stats`` take a file's stats from: ``written`` (file name -> the stats of a
    file the action made), else the MDT's ``column_stats`` (``stored``; only the keys of ``columns``
    are decoded), else the file itself (``definition``, ``indexed``: :func:`_file_stats`);
    ``blank``: :func:`blank_record` of the MDT's schema."""

    written: Mapping[str, list[dict[str, Any]]]
    columns: list[str]
    stored: bool
    blank: Mapping[str, Any]
    definition: Mapping[str, Any] | None
    indexed: tuple[str, ...] | None


def _partition_records(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    instant: Instant,
    change: FilesChange,
    sources: _Sources,
) -> dict[str, dict[str, Any]]:
    """The ``partition_stats`` records of the partitions ``change`` wrote. The files the write did
    not make take their stats from the MDT's ``column_stats`` (``stored``; only the keys of
    ``columns``, the columns of the write's own files, are decoded) or, lacking a record per column,
    from the file itself."""
    done = dataclasses.replace(instant, state=State.COMPLETED)
    if timeline.layout.has_completion_times and done.completion_time is None:
        done = dataclasses.replace(done, completion_time=_AS_IF_COMPLETED)
    others = tuple(i for i in timeline.instants if i.timestamp != instant.timestamp)
    seen = dataclasses.replace(timeline, instants=tuple(sorted((*others, done))))
    # The data timeline as reading it now shows it (the instant pending), for the MDT's reader.
    now = dataclasses.replace(timeline, instants=tuple(sorted((*others, instant))))
    touched = list(change.partitions)
    listed: dict[str, Sequence[tuple[str, int]]] = {}

    def once(names: Sequence[str]) -> dict[str, Sequence[tuple[str, int]]]:
        listed.update({n: storage.list(n) for n in names if n not in listed})
        return {n: listed[n] for n in names}

    view = FileSystemView.build(config, seen, partitions=touched, lister=once)
    slices = {p: slices_seen_by(view, p, instant.timestamp) for p in touched}
    before = FileSystemView.build(config, now, partitions=touched, lister=once)
    out = _grown_records(storage, now, before, slices, sources)
    rest = {p: pieces for p, pieces in slices.items() if (p or ".") not in out}
    records = _stats_over(storage, now, rest, sources) if rest else {}
    return {key: record for grown in out.values() for key, record in grown.items()} | records


def _grown_records(
    storage: Storage,
    now: Timeline,
    before: FileSystemView,
    slices: Mapping[str, list[FileSlice]],
    sources: _Sources,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Partition (``.`` for the table's root) -> its ``partition_stats`` records, for the partitions
    the write only grew: every file of their latest slices ``before`` it is still in ``slices``; their
    last write was a plain one (``_plainly_written``: no delete, no replacecommit, not overtaken by
    an earlier-requested compaction), so its record covers those latest slices exactly; and the
    MDT holds it, tight, for every column. The
    record then is the stored one merged with the stats of the write's own files, which equals a
    recomputation over every file (minima, maxima and sums compose) without reading the stats of
    the files the write did not make: most of a partition's, more with every write. Others: none."""
    added: dict[str, list[dict[str, Any]]] = {}
    for partition, pieces in slices.items():
        old = {f.file_name for piece in before.latest_slices(partition=partition) for f in piece.files}
        new = [f.file_name for piece in pieces for f in piece.files]
        fresh = [name for name in new if name not in old]
        known = [sources.written.get(name) for name in fresh]
        if old and old <= set(new) and all(k is not None and len(k) >= len(sources.columns) for k in known):
            added[partition] = [stats for k in known for stats in k or ()]
    if added:
        added = {p: stats for p, stats in added.items() if p in _plainly_written(now, set(added))}
    if not added or not sources.columns:
        return {}
    keys = {partition_stats_key(c, p or "."): (p, c) for p in added for c in sources.columns}
    stored = read_partition_records(storage, PARTITION_STATS_PARTITION, set(keys), data=now)
    held: dict[str, list[dict[str, Any]]] = {}
    for key, (partition, _) in keys.items():
        stats = (stored.get(key) or {}).get("ColumnStatsMetadata")
        if stats and not stats.get("isDeleted") and stats.get("isTightBound"):
            held.setdefault(partition, []).append(stats)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for partition, stats in added.items():
        if len(held.get(partition, ())) == len(sources.columns):
            merged = partition_stats(partition or ".", [*held[partition], *stats])
            out[partition or "."] = {k: _record(sources.blank, PARTITION_STATS, s) for k, s in merged.items()}
    return out


def _stats_over(
    storage: Storage, now: Timeline, slices: Mapping[str, list[FileSlice]], sources: _Sources
) -> dict[str, dict[str, Any]]:
    """The ``partition_stats`` records of each partition over its ``slices``, the files' stats
    from ``sources`` (the MDT's ``column_stats`` as reading it at ``now`` shows them)."""
    written, columns, stored, blank = sources.written, sources.columns, sources.stored, sources.blank
    definition, indexed = sources.definition, sources.indexed
    wanted: set[str] = set()
    for partition, pieces in slices.items():
        names = [f.file_name for piece in pieces for f in piece.files if f.file_name not in written]
        wanted |= _column_stats_keys(partition, names, columns)
    known = {**(_stored_stats(storage, now, wanted) if stored and wanted else {}), **written}
    out: dict[str, dict[str, Any]] = {}
    for partition, pieces in slices.items():
        files: list[dict[str, Any]] = []
        for piece in pieces:
            for file in piece.files:
                stats = known.get(file.file_name)
                if stats is None or len(stats) < len(columns):
                    stats = list(
                        _file_stats(storage, partition, file.file_name, definition, indexed).values()
                    )
                files += stats
        for key, stats in partition_stats(partition or ".", files).items():
            out[key] = _record(blank, PARTITION_STATS, stats)
    return out


@dataclasses.dataclass(frozen=True)
class Undoing:
    """The data table as the correction of a completed instant sees it (``undo.py``): ``timeline``
    shows the instant completed, ``without`` shows it undone, and ``view`` is ``without``'s view of
    the partitions ``change`` (the rollback's deletions and marked logs) touches."""

    timeline: Timeline
    without: Timeline
    view: FileSystemView
    change: FilesChange

    @classmethod
    def of(cls, config: TableConfig, timeline: Timeline, target: str, change: FilesChange) -> Undoing:
        # Kept as an inflight write, not removed: the time of an instant missing from the timeline
        # older than all of it passes for archived history, and its files for committed ones.
        instants = tuple(
            dataclasses.replace(i, state=State.INFLIGHT, completion_time=None)
            if i.timestamp == target and i.action in COMMIT_ACTIONS
            else i
            for i in timeline.instants
        )
        without = dataclasses.replace(
            timeline, instants=instants, compaction_times=timeline.compaction_times - {target}
        )
        view = FileSystemView.build(config, without, partitions=list(change.partitions))
        return cls(timeline, without, view, change)

    @property
    def emptied(self) -> tuple[str, ...]:
        """The partitions the rollback leaves without files: it deletes every file of the instant
        there and marks none, and no other committed file group is left (the instant created the
        partition): the MDT lists them no more, as an MDT rollback of the instant would."""
        return tuple(
            p
            for p, part in self.change.partitions.items()
            if part.deleted and not part.added and not self.view.latest_slices(partition=p)
        )


# Operations whose files Hudi 1.x writes no stats for: their partitions' records cover less.
_NOT_PLAIN = ("DELETE", "DELETE_PREPPED")


def _plainly_written(timeline: Timeline, partitions: set[str]) -> set[str]:
    """Those of ``partitions`` whose last completed write (on the active timeline) was a plain one:
    a commit or deltacommit, no delete (no replacecommit: its record also covers the groups it
    replaced), and no earlier-requested write to them completed after it (a compaction a write
    overtook: readers merge MDT logs by requested time, so the stored record is the write's, over
    the slices before the compaction, not over the latest ones)."""
    commits = timeline.completed_commits
    left, plain, done = set(partitions), set(), {}
    for at, instant in reversed(list(enumerate(commits))):
        if not left:
            break
        metadata = timeline.commit_metadata(instant)
        hit = left & set(metadata.partitions)
        if hit:
            left -= hit
            if instant.action is not Action.REPLACECOMMIT and metadata.operation_type not in _NOT_PLAIN:
                plain |= hit
                done.update(dict.fromkeys(hit, (at, instant.completion_time or "")))
    for partition, (at, completed) in done.items():
        for earlier in commits[:at]:
            later = (earlier.completion_time or "") > completed
            if later and partition in timeline.commit_metadata(earlier).partitions:
                plain.discard(partition)
                break
    return plain


def rollback_index_records(
    storage: Storage,
    config: TableConfig,
    undoing: Undoing,
    partitions: frozenset[str],
    schema: Mapping[str, Any],
) -> Groups:
    """The records of ``partitions`` for the rollback that ``undoing`` describes, where the MDT
    cannot forget the instant (``undo.py``): the clean's ``column_stats`` records of every deleted
    file, and per partition it touches the ``partition_stats`` record the partition's last write
    before the instant wrote (over the slices that write saw: the record an MDT rollback of the
    instant would bring back), or, for a partition it leaves without files, each column's record
    marked deleted."""
    timeline, change = undoing.timeline, undoing.change
    groups = clean_index_records(storage, config, timeline, change, partitions, schema)
    if PARTITION_STATS_PARTITION not in partitions or not change.partitions:
        return groups
    definition = column_stats_definition(storage)
    indexed = indexed_columns(storage, config, timeline, definition)
    columns = (
        list(indexed) if indexed is not None else list(META_COLUMNS if config.populate_meta_fields else ())
    )
    without, view = undoing.without, undoing.view
    emptied = set(undoing.emptied)
    last: dict[str, str | None] = dict.fromkeys(p for p in change.partitions if p not in emptied)
    for instant in reversed(without.completed_commits):
        if all(last.values()):
            break
        for partition in without.commit_metadata(instant).partitions:
            if partition in last and last[partition] is None:
                last[partition] = instant.timestamp
    slices = {p: slices_seen_by(view, p, at) for p, at in last.items()}
    stored = COLUMN_STATS_PARTITION in partitions
    blank = blank_record(schema)
    sources = _Sources({}, columns, stored, blank, definition, indexed)
    records = _stats_over(storage, timeline, slices, sources)
    v1 = index_version(storage, definition) == 1
    for partition in sorted(emptied):
        for column in columns:
            key = partition_stats_key(column, partition or ".")
            records[key] = _record(blank, PARTITION_STATS, _stub(partition or ".", column, v1))
    if records:
        mdt = storage.child(MDT_DIR)
        groups[PARTITION_STATS_PARTITION] = _route(records, file_groups(mdt, PARTITION_STATS_PARTITION))
    return groups


def clean_index_records(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    change: FilesChange,
    partitions: frozenset[str],
    schema: Mapping[str, Any],
) -> Groups:
    """The ``column_stats`` records (if among ``partitions``) of a clean that made ``change``: per
    deleted file and indexed column, a record marked deleted, by MDT partition and file group."""
    if COLUMN_STATS_PARTITION not in partitions or not change.file_count:
        return {}
    definition = column_stats_definition(storage)
    columns = indexed_columns(storage, config, timeline, definition)
    if columns is None:  # no schema recorded: the meta columns alone, as Hudi without one
        columns = tuple(META_COLUMNS) if config.populate_meta_fields else ()
    v1 = index_version(storage, definition) == 1
    blank = blank_record(schema)
    records = {
        column_stats_key(column, partition or ".", name): _record(
            blank, COLUMN_STATS, _stub(name, column, v1)
        )
        for partition, part in change.partitions.items()
        for name in part.deleted
        for column in columns
    }
    if not records:
        return {}
    mdt = storage.child(MDT_DIR)
    return {COLUMN_STATS_PARTITION: _route(records, file_groups(mdt, COLUMN_STATS_PARTITION))}


def _stub(file_name: str, column: str, v1: bool) -> dict[str, Any]:
    """``HoodieColumnRangeMetadata.stub`` as a deleted ``column_stats`` entry: no min/max, every
    count -1, the empty value type (none in index version 1)."""
    stats: dict[str, Any] = {
        "fileName": file_name,
        "columnName": column,
        "minValue": None,
        "maxValue": None,
        "valueCount": -1,
        "nullCount": -1,
        "totalSize": -1,
        "totalUncompressedSize": -1,
        "isDeleted": True,
        "isTightBound": False,
    }
    if not v1:
        stats["valueType"] = {"typeOrdinal": int(ValueType.NULL), "additionalInfo": None}
    return stats
