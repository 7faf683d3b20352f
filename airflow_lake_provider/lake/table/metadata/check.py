"""``lake metadata-table --check``: the MDT's ``files`` partition against a full listing
(``listing.check_files_partition``), and its ``column_stats`` and ``partition_stats`` each against a
recomputation from the data files themselves (Hudi's ``HoodieMetadataTableValidator`` role).

``column_stats``: every base and log file of a completed instant in storage must have the records
its footer (base file) or records (log file) give. ``partition_stats``: every partition with files
must have the record its last write computed, over the slices that write saw
(``slices_seen_by``). Records of files no longer in storage (a clean's deleted stubs) are not
compared. Read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.file_group.file_names import BaseFileName
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.table.metadata.files import properties_text, read_partition_records
from airflow_lake_provider.lake.table.metadata.listing import check_files_partition, list_table_files
from airflow_lake_provider.lake.table.metadata.policy import PARTITIONS_KEY
from airflow_lake_provider.lake.table.metadata.stats import (
    log_column_stats,
    parquet_column_stats,
    partition_stats,
    slices_seen_by,
)
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline

# What reading a damaged data file raises (pyarrow's errors are ValueError or OSError subclasses).
_UNREADABLE = (LakeError, OSError, ValueError)
COLUMN_STATS = "column_stats"
PARTITION_STATS = "partition_stats"


@dataclass(frozen=True)
class StatsCheck:
    """How one stats partition differs from a recomputation: ``checked`` files (``column_stats``)
    or partitions (``partition_stats``), those without any record and those whose records differ."""

    partition: str
    checked: int
    missing: tuple[str, ...]
    mismatched: tuple[str, ...]
    unreadable: tuple[str, ...] = ()  # "<file or partition>: <why>": a data file that cannot be read
    # "<file or partition>: <why>": its record cannot be recomputed (a delete wrote it, or the files
    # it covered are gone)
    skipped: tuple[str, ...] = ()

    @property
    def consistent(self) -> bool:
        return not (self.missing or self.mismatched or self.unreadable)

    def to_dict(self) -> dict[str, object]:
        unit = "files" if self.partition == COLUMN_STATS else "partitions"
        return {
            "consistent": self.consistent,
            unit: self.checked,
            f"missing_{unit}": list(self.missing),
            "stats_mismatches": list(self.mismatched),
            f"unreadable_{unit}": list(self.unreadable),
            f"unverifiable_{unit}": list(self.skipped),
        }


def check_report(storage: Storage) -> dict[str, object]:
    """``--check``'s report: the ``files`` partition against a full listing (``FilesCheck``), and
    each stats partition the table lists (``hoodie.table.metadata.partitions``) against a
    recomputation; ``consistent`` only when all are."""
    found = check_files_partition(storage)
    report = found.to_dict()
    properties = parse_properties(properties_text(storage, f"{HOODIE_DIR}/hoodie.properties"))
    kept = set(str(properties.get(PARTITIONS_KEY) or "").split(","))
    table = None
    if kept & {COLUMN_STATS, PARTITION_STATS}:
        table = LakeTable.open(storage)
        checks = check_stats_partitions(table, kept)
        report.update({check.partition: check.to_dict() for check in checks})
        report["consistent"] = found.consistent and all(check.consistent for check in checks)
    if not report["consistent"]:
        # What may explain a difference: an action that crashed before it completed (a clean's
        # deletions, say, are in the MDT before the clean completes) is finished by its next run.
        try:
            pending = (table or LakeTable.open(storage)).timeline().pending
        except LakeError:  # (the files check reads tables this engine does not open)
            pending = ()
        report["pending_instants"] = [
            f"{i.action.value} {i.timestamp} ({i.state.name.lower()})" for i in pending
        ]
    return report


def check_stats_partitions(table: LakeTable, kept: set[str]) -> list[StatsCheck]:
    """The checks of the stats partitions among ``kept`` (the MDT partitions the table lists)."""
    listing = list_table_files(table.storage)
    timeline = table.timeline()
    commits = _commits(timeline)
    out = []
    if COLUMN_STATS in kept:
        out.append(_check_column_stats(table, listing, commits))
    if PARTITION_STATS in kept:
        out.append(_check_partition_stats(table, listing, timeline, commits))
    return out


@dataclass(frozen=True)
class _Commits:
    """The completed commits' operation types and each partition's last write (:func:`_commits`)."""

    operations: dict[str, str]  # commit time -> its operation type (DELETE, UPSERT, ...)
    last_write: dict[str, str]  # partition -> the time of the last commit that wrote it
    # partition -> an earlier-requested commit that wrote it and completed after its last write
    overtaken: dict[str, str]


def _commits(timeline: Timeline) -> _Commits:
    """One read of every completed commit's metadata, for both stats partitions' checks."""
    operations: dict[str, str] = {}
    last_write: dict[str, str] = {}
    last_done: dict[str, str] = {}  # partition -> its last write's completion time
    latest: dict[str, tuple[str, str]] = {}  # partition -> (completion time, time) of the last to complete
    for instant in timeline.completed_commits:
        metadata = timeline.commit_metadata(instant)
        operations[instant.timestamp] = metadata.operation_type
        done = instant.completion_time or ""
        for partition in metadata.partitions:
            last_write[partition], last_done[partition] = instant.timestamp, done
            latest[partition] = max(latest.get(partition, ("", "")), (done, instant.timestamp))
    overtaken = {p: at for p, (done, at) in latest.items() if done > last_done[p]}
    return _Commits(operations, last_write, overtaken)


def _stats_of(storage: Storage, partition: str, name: str) -> dict[str, dict[str, Any]]:
    rel = "" if partition == "." else partition
    if name.endswith(".parquet"):
        return parquet_column_stats(storage, rel, name)
    return log_column_stats(storage, rel, name)


def _stored(storage: Storage, partition: str) -> dict[str, dict[str, dict[str, Any]]]:
    """The stats records of MDT ``partition``, by their ``fileName`` (a file, or a partition's path
    in ``partition_stats``), then key."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for key, record in read_partition_records(storage, partition).items():
        stats = record.get("ColumnStatsMetadata")
        if stats:
            out.setdefault(stats["fileName"], {})[key] = stats
    return out


def _path(partition: str, name: str) -> str:
    return name if partition == "." else f"{partition}/{name}"


# Hudi 1.x's writer records no column or partition stats for the files a delete writes.
_NO_STATS = ("DELETE", "DELETE_PREPPED")


def _check_column_stats(
    table: LakeTable, listing: Mapping[str, Mapping[str, int]], commits: _Commits
) -> StatsCheck:
    storage = table.storage
    operations = commits.operations
    by_file = _stored(storage, COLUMN_STATS)
    missing, mismatched, unreadable, skipped, checked = [], [], [], [], 0
    for partition, files in sorted(listing.items()):
        for name in sorted(files):
            checked += 1
            stored = by_file.get(name)
            base = BaseFileName.parse(name)
            operation = operations.get(base.instant, "") if base is not None else ""
            if stored is None and operation in _NO_STATS:
                skipped.append(f"{_path(partition, name)}: written by a {operation} ({base.instant})")  # type: ignore[union-attr]
                continue
            if stored is None:
                missing.append(_path(partition, name))
                continue
            try:
                recomputed = _stats_of(storage, partition, name)
            except _UNREADABLE as exc:
                unreadable.append(f"{_path(partition, name)}: {exc}")
                continue
            if stored != recomputed:
                mismatched.append(_path(partition, name))
    return StatsCheck(
        COLUMN_STATS, checked, tuple(missing), tuple(mismatched), tuple(unreadable), tuple(skipped)
    )


def _check_partition_stats(
    table: LakeTable, listing: Mapping[str, Mapping[str, int]], timeline: Timeline, commits: _Commits
) -> StatsCheck:
    storage = table.storage
    stored = _stored(storage, PARTITION_STATS)
    operations, last_write = commits.operations, commits.last_write
    view = FileSystemView.build(table.config, timeline)
    missing, mismatched, unreadable, skipped = [], [], [], []
    for partition in sorted(p for p, files in listing.items() if files):
        rel = "" if partition == "." else partition
        have = stored.get(partition)
        if have is None:
            missing.append(partition)
            continue
        # A last write that replaced file groups (clustering, insert_overwrite) covered them too; a
        # clean may have removed their files since, and the record with them (rightly kept).
        at = last_write.get(rel)
        if operations.get(at or "", "") in _NO_STATS:
            skipped.append(f"{partition}: its last write {at} is a {operations[at or '']}")
            continue
        if rel in commits.overtaken:
            # Readers merge MDT logs by requested time: the record kept is the last write's, over the
            # slices before the earlier-requested commit (a compaction) that completed after it.
            skipped.append(
                f"{partition}: its last write {at} completed before {commits.overtaken[rel]}, requested "
                "earlier, which the metadata table's readers merge first"
            )
            continue
        gone = sorted(
            fid
            for (p, fid), replaced_at in view.replaced.items()
            if p == rel and replaced_at == at and not any(fid in name for name in listing[partition])
        )
        if gone:
            skipped.append(f"{partition}: its last write {at} replaced file groups a clean has removed since")
            continue
        try:
            files = [
                stats
                for piece in slices_seen_by(view, rel, last_write.get(rel))
                for file in piece.files
                for stats in _stats_of(storage, partition, file.file_name).values()
            ]
        except _UNREADABLE as exc:
            unreadable.append(f"{partition}: {exc}")
            continue
        if have == partition_stats(partition, files):
            continue
        if at is None:
            # Archived: whether it replaced file groups, was a delete or was overtaken (above) is
            # no longer on the active timeline.
            skipped.append(
                f"{partition}: its last write is archived, and the record differs from the latest slices"
            )
        else:
            mismatched.append(partition)
    checked = sum(1 for files in listing.values() if files)
    return StatsCheck(
        PARTITION_STATS, checked, tuple(missing), tuple(mismatched), tuple(unreadable), tuple(skipped)
    )
