"""The ``files`` partition of Hudi's metadata table (MDT), read as Hudi's readers merge it.

The partition is one file group, ``files-0000-0``: an HFile base file plus log files of HFILE_DATA
blocks, each record a ``HoodieMetadataRecord`` keyed by a partition path (``.`` for a
non-partitioned table) or ``__all_partitions__``. The latest slice's base records are merged with
those of its log blocks whose instant is valid (Hudi's ``getValidInstantTimestamps``): a completed MDT
deltacommit whose data instant completed too, or one of the MDT's own initialisation instants; in
Hudi 1.x (table versions 8, 9) any completed MDT deltacommit whose data instant is not pending, so
one whose data instant is gone or rolled back counts (a writer removes it before that).
Each record's file map merges as ``HoodieMetadataPayload.combineFileSystemMetadata`` does: a newer
deletion removes the file (kept as a tombstone only when the older record lacked it), otherwise the
larger size wins; tombstones are dropped from the result. As Hudi's readers do, the log blocks merge
among themselves first, then over the base file (``FilesStages``).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_lake_provider.lake.errors import CorruptDataFileError, TableConfigError, TableNotFoundError
from airflow_lake_provider.lake.file_group.model import FileGroup, FileSlice
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.hfile import read_hfile
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.format.table_config import (
    TableConfig,
    check_table_version,
    metadata_table_misfit,
)
from airflow_lake_provider.lake.log_file.delete_block import decode_delete_block
from airflow_lake_provider.lake.log_file.hfile_block import (
    SCHEMA_INFO,
    decode_hfile_block,
    decode_hfile_cells,
)
from airflow_lake_provider.lake.log_file.log_format import BlockType, LogBlock
from airflow_lake_provider.lake.log_file.scanner import visible_blocks
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.table.metadata.slice_logs import read_slice_logs
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout

MDT_DIR = f"{HOODIE_DIR}/metadata"
FILES_PARTITION = "files"
FILES_GROUP = "files-0000-0"
ALL_PARTITIONS = "__all_partitions__"
NON_PARTITIONED = "."
PARTITION_LIST, FILE_LIST = 1, 2  # HoodieMetadataRecord.type
# Hudi's SOLO_COMMIT_TIMESTAMP: the MDT's own initialisation instants start with it.
_SOLO = "00000000000000"


@dataclass(frozen=True)
class FilesListing:
    """What the MDT ``files`` partition lists.

    :param partitions: ``__all_partitions__`` (``.`` for a non-partitioned table), sorted.
    :param files: partition -> file name -> size, for every partition with a file record.
    :param base_file: the slice's HFile base file (table-relative), if any.
    :param log_files: the slice's log files merged (table-relative), in merge order.
    """

    partitions: tuple[str, ...]
    files: Mapping[str, Mapping[str, int]]
    base_file: str | None = None
    log_files: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------------------------------------
# The files partition
# ---------------------------------------------------------------------------------------------


def properties_text(storage: Storage, rel: str) -> str:
    """The text of the properties file ``rel``; ``TableConfigError`` naming it if it is not UTF-8
    (``FileNotFoundError`` if absent, for the caller to name)."""
    data = storage.read(rel)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TableConfigError(f"{storage.uri(rel)}: cannot read (not UTF-8 text)") from None


def checked_layout(storage: Storage, data: tuple[int, TimelineLayout, str] | None) -> TimelineLayout:
    """The timeline layout of the MDT at ``storage`` (``<table>/.hoodie/metadata/``), from its
    ``hoodie.properties``; ``TableConfigError`` if there are none, or they do not fit ``data`` (the
    data table's version, timeline layout and name): a folder that is not this table's MDT."""
    rel = f"{HOODIE_DIR}/hoodie.properties"
    try:
        props = parse_properties(properties_text(storage, rel), storage.uri(rel))
    except FileNotFoundError:
        raise TableConfigError(
            f"{storage.uri(rel)} does not exist: the metadata table is incomplete"
        ) from None
    layout = TimelineLayout.from_properties(props, storage.uri(rel))
    if data is not None:
        misfit = metadata_table_misfit(props, data[0], data[2])
        if misfit is None and layout.version != data[1].version:
            misfit = f"timeline layout {layout.version}, not its data table's {data[1].version}"
        if misfit is not None:
            raise TableConfigError(f"{storage.uri(rel)}: not the metadata table of this table: {misfit}")
    return layout


def open_timeline(
    storage: Storage, mdt: bool, timeline: Timeline | None = None
) -> tuple[dict[str, str], Timeline]:
    """The ``hoodie.properties`` and active timeline (``timeline``, if the caller has read it) of
    the data table at ``storage`` or of its MDT."""
    props_rel = f"{HOODIE_DIR}/hoodie.properties"
    try:
        text = properties_text(storage, props_rel)
    except FileNotFoundError:
        if mdt:
            table = storage.root.rstrip("/").removesuffix(f"/{MDT_DIR}")
            raise TableConfigError(f"{table} has no metadata table ({storage.root})") from None
        missing = storage.uri(HOODIE_DIR)
        raise TableNotFoundError(f"{storage.root} is not a Hudi table: no {missing}") from None
    source = storage.uri(props_rel)
    props = parse_properties(text, source)
    if not mdt:
        check_table_version(props, source)
    if timeline is None:
        timeline = Timeline.load(storage, TimelineLayout.from_properties(props, source))
    return props, timeline


def latest_slices(
    mdt: Storage, partition: str, opened: tuple[dict[str, str], Timeline] | None = None
) -> dict[str, FileSlice]:
    """file id -> the latest (merged) slice of each file group of an MDT partition (``mdt``: the
    MDT's own storage), built as the data table's views are (committed files only; layout 2 places
    each log by its deltacommit's completion time). ``opened``: the MDT's properties and timeline,
    when the caller has just read them."""
    props, timeline = opened or open_timeline(mdt, mdt=True)
    config = TableConfig.of_metadata_table(props, mdt.uri(f"{HOODIE_DIR}/hoodie.properties"))
    view = FileSystemView.build(config, timeline, partitions=[partition], base_extension="hfile")
    slices = (view.merged_latest_slice(group) for group in view.file_groups(partition))
    return {s.file_id: s for s in slices if s is not None}


def file_groups_of(
    mdt: Storage, partitions: Sequence[str], timeline: Timeline | None = None
) -> dict[str, list[FileGroup]]:
    """Every file group of each MDT partition (``mdt``: the MDT's own storage), all its slices: one
    read of the MDT's properties and timeline for them all (``timeline``: the MDT's, when the
    caller has just read it)."""
    props, timeline = open_timeline(mdt, mdt=True, timeline=timeline)
    config = TableConfig.of_metadata_table(props, mdt.uri(f"{HOODIE_DIR}/hoodie.properties"))
    view = FileSystemView.build(config, timeline, partitions=list(partitions), base_extension="hfile")
    return {partition: view.file_groups(partition) for partition in partitions}


def read_partition_records(
    storage: Storage, partition: str, keys: Container[str] | None = None, *, data: Timeline | None = None
) -> dict[str, dict[str, Any]]:
    """Every record of an MDT partition (e.g. ``column_stats``), by key: the latest slice of each
    file group, its base file's records replaced by those of its valid log blocks in order (a later
    record of a key replaces an earlier one; a delete block removes it). Only the records of
    ``keys``, if given (the others are not decoded). ``data``: the data table's timeline as reading it
    now would give it, when the caller holds it (read here otherwise).

    :raises TableConfigError: if the table has no MDT.
    :raises CorruptDataFileError: if a base file or log block is unreadable.
    """
    if data is None:
        _, data = open_timeline(storage, mdt=False)
    mdt_storage = storage.child(MDT_DIR)
    opened = open_timeline(mdt_storage, mdt=True)
    deltacommits, valid = valid_instants(data, opened[1])

    def committed(instant: str) -> bool:
        return instant in deltacommits and instant in valid

    merged: dict[str, dict[str, Any] | None] = {}
    for piece in latest_slices(mdt_storage, partition, opened).values():
        if piece.base_file is not None:
            rel = f"{MDT_DIR}/{piece.base_file.relative_path}"
            hfile = read_hfile(storage.read(rel), storage.uri(rel))
            merged.update(decode_hfile_cells(hfile, hfile.content.info(SCHEMA_INFO), storage.uri(rel), keys))
        names = [f.file_name for f in piece.log_files]
        by_name = opened[1].layout.has_completion_times
        blocks = slice_blocks(
            storage,
            f"{MDT_DIR}/{partition}",
            (partition, piece.base_instant, names),
            deltacommits & valid,
            by_name,
        )
        for block in visible_blocks(blocks, committed):
            if block.block_type == BlockType.HFILE_DATA:
                merged.update(decode_hfile_block(block, keys))
            elif block.block_type == BlockType.DELETE:
                merged.update(
                    (e.record_key, None)
                    for e in decode_delete_block(block)
                    if keys is None or e.record_key in keys
                )
    return {key: record for key, record in merged.items() if record is not None}


# Hudi's v6 MDT stamps its own actions with a 17-digit data instant time plus a 3-digit operation
# suffix (``OperationSuffix``: 001 to 006; partition initialisation 010 and up). Hudi 0.14/0.15 merge
# the blocks of such a completed deltacommit (``HoodieTableMetadataUtil.isValidInstant``).
_OPERATION_SUFFIXES = frozenset({"001", "002", "003", "004", "005", "006"})
_INIT_SUFFIX = "010"


def slice_blocks(
    storage: Storage, folder: str, piece: tuple[str, str, Sequence[str]], committed: set[str], by_name: bool
) -> list[LogBlock]:
    """The blocks of the logs of MDT slice ``piece`` (partition, base instant, log names) in
    ``folder``; a damaged one that hides a deltacommit in ``committed`` is refused. ``by_name``:
    layout 2's logs are named after their deltacommits. In table version 6 every deltacommit after
    a ``files`` slice's base (but an initialisation, which writes base files) writes a block to it."""
    partition, base, names = piece
    expected: set[str] = set()
    if partition == FILES_PARTITION and not by_name:
        expected = {t for t in committed if t > base and not (mdt_own_instant(t) and t[17:] >= _INIT_SUFFIX)}
    return read_slice_logs(storage, folder, names, committed, named_by_instant=by_name, expected=expected)


def mdt_own_instant(instant: str) -> bool:
    """Whether ``instant`` is one of a v6 MDT's own (suffixed) times, as Hudi 0.14/0.15 tell them."""
    suffix = instant[17:]
    return len(instant) == 20 and (suffix in _OPERATION_SUFFIXES or suffix >= _INIT_SUFFIX)


def valid_instants(data: Timeline, mdt: Timeline) -> tuple[set[str], set[str]]:
    """(completed MDT deltacommits, the instants whose MDT blocks readers merge): Hudi's
    ``getValidInstantTimestamps``, a data instant that completed or one of the MDT's own; in Hudi
    1.x (layout 2) also every completed MDT deltacommit whose data instant is not pending (gone, or
    a service's), the instants data rollbacks and restores rolled back, and MDT rollbacks."""
    deltacommits = {i.timestamp for i in mdt.filter([Action.DELTACOMMIT], [State.COMPLETED])}
    valid = {i.timestamp for i in data.filter(states=[State.COMPLETED])}
    valid |= {r for r in deltacommits if r.startswith(_SOLO)}
    if data.layout.has_completion_times:
        pending = {i.timestamp for i in data.instants if not i.is_completed}
        valid |= deltacommits - pending
        valid |= _rolled_back(data, min(valid, default=_SOLO))
        valid |= {i.timestamp for i in mdt.filter([Action.ROLLBACK, Action.RESTORE], [State.COMPLETED])}
    else:
        valid |= {r for r in deltacommits if mdt_own_instant(r)}
    return deltacommits, valid


def _rolled_back(data: Timeline, after: str) -> set[str]:
    """The instants the completed rollbacks and restores after ``after`` rolled back."""
    out: set[str] = set()
    for instant in data.filter([Action.ROLLBACK, Action.RESTORE], [State.COMPLETED]):
        if instant.timestamp <= after:
            continue
        record = data.avro_record(instant)
        if instant.action is Action.ROLLBACK:
            out.update(record.get("commitsRollback") or ())
            continue
        for rollbacks in (record.get("hoodieRestoreMetadata") or {}).values():
            for rollback in rollbacks:
                out.update(rollback.get("commitsRollback") or ())
    return out


def read_files_partition(storage: Storage) -> FilesListing:
    """Merge the latest slice of the MDT ``files`` partition of the table at ``storage``.

    :raises TableConfigError: if the table has no MDT ``files`` partition.
    :raises CorruptDataFileError: if a base file or log block is unreadable.
    """
    stages = files_stages(storage)
    merged: dict[str, dict[str, Any] | None] = dict(stages.base)
    for key, record in stages.logged.items():
        older = merged.get(key)
        merged[key] = _combine(older, record, key) if record is not None and older is not None else record
    return _listing(merged, stages.base_file, stages.log_files)


@dataclass(frozen=True)
class FilesStages:
    """The ``files`` partition's latest slice in Hudi's two merge stages: the base file's records,
    and its valid log blocks' records merged among themselves (None: a delete block's key). Readers
    and compaction merge the second over the first, so a tombstone that met a live entry of the
    same file in the logs is gone before the base file's entry is reached."""

    base: dict[str, dict[str, Any]]
    logged: dict[str, dict[str, Any] | None]
    base_file: str | None
    log_files: tuple[str, ...]


def files_stages(storage: Storage) -> FilesStages:
    """The two stages :func:`read_files_partition` merges (same errors)."""
    _, data = open_timeline(storage, mdt=False)
    mdt_storage = storage.child(MDT_DIR)
    _, mdt = open_timeline(mdt_storage, mdt=True)
    folder = f"{MDT_DIR}/{FILES_PARTITION}"
    if not storage.list_names(folder):
        raise TableConfigError(f"{storage.uri(folder)}: the metadata table has no files partition")
    latest = latest_slices(mdt_storage, FILES_PARTITION).get(FILES_GROUP)
    base_name = latest.base_file.file_name if latest and latest.base_file else None
    logs = tuple(f.file_name for f in latest.log_files) if latest else ()
    base: dict[str, dict[str, Any]] = {}
    if base_name is not None:
        rel = f"{folder}/{base_name}"
        hfile = read_hfile(storage.read(rel), storage.uri(rel))
        base.update(decode_hfile_cells(hfile, hfile.content.info(SCHEMA_INFO), storage.uri(rel)))
    deltacommits, valid = valid_instants(data, mdt)
    piece = (FILES_PARTITION, latest.base_instant if latest else "", logs)
    blocks = slice_blocks(storage, folder, piece, deltacommits & valid, mdt.layout.has_completion_times)

    def committed(instant: str) -> bool:
        return instant in deltacommits and instant in valid

    logged: dict[str, dict[str, Any] | None] = {}
    for block in visible_blocks(blocks, committed):
        if block.block_type == BlockType.HFILE_DATA:
            for key, record in decode_hfile_block(block):
                older = logged.get(key)
                logged[key] = _combine(older, record, key) if older is not None else record
        elif block.block_type == BlockType.DELETE:
            for entry in decode_delete_block(block):
                logged[entry.record_key] = None
        else:
            raise CorruptDataFileError(
                f"{block.location}: a {block.block_type.name} block in the files partition"
            )
    base_rel = f"{folder}/{base_name}" if base_name else None
    return FilesStages(base, logged, base_rel, tuple(f"{folder}/{n}" for n in logs))


def _file_map(record: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    files = (record or {}).get("filesystemMetadata") or {}
    return {name: dict(info) for name, info in files.items()}


def _combine(older: Mapping[str, Any] | None, newer: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``HoodieMetadataPayload.combineFileSystemMetadata``: the newer record with merged file maps."""
    combined = _file_map(older)
    for name, info in _file_map(newer).items():
        old = combined.get(name)
        if old is None:
            combined[name] = info  # a tombstone for a file the older record lacks is kept
        elif info.get("isDeleted"):
            if old.get("isDeleted"):
                combined[name] = info  # deleted twice: Java keeps the tombstone for the base file
            else:
                del combined[name]
        else:
            combined[name] = {"size": max(int(info["size"]), int(old["size"])), "isDeleted": False}
    return {**newer, "filesystemMetadata": combined}


def _listing(
    merged: Mapping[str, Mapping[str, Any] | None], base: str | None, logs: tuple[str, ...]
) -> FilesListing:
    partitions: tuple[str, ...] = ()
    files: dict[str, dict[str, int]] = {}
    for key, record in merged.items():
        if record is None:
            continue
        live = {n: int(i["size"]) for n, i in _file_map(record).items() if not i.get("isDeleted")}
        if record.get("type") == PARTITION_LIST and key == ALL_PARTITIONS:
            partitions = tuple(sorted(live))
        elif record.get("type") == FILE_LIST:
            files[key] = dict(sorted(live.items()))
    return FilesListing(partitions, dict(sorted(files.items())), base, logs)
