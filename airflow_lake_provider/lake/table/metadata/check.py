"""``lake metadata-table --check``: the MDT's ``files`` partition against a full listing
(``files.check_files_partition``), and its ``column_stats`` and ``partition_stats`` each against a
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
from airflow_lake_provider.lake.table.metadata.files import (
    check_files_partition,
    list_table_files,
    properties_text,
    read_partition_records,
)
from airflow_lake_provider.lake.table.metadata.policy import PARTITIONS_KEY
from airflow_lake_provider.lake.table.metadata.stats import (
    log_column_stats,
    parquet_column_stats,
    partition_stats,
    slices_seen_by,
)
from airflow_lake_provider.lake.table.table import LakeTable

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
    # "<partition>: <why>": its stored record cannot be recomputed (the files it covered are gone)
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
    storage = table.storage
    listing = list_table_files(storage)
    out = []
    if COLUMN_STATS in kept:
        out.append(_check_column_stats(table, listing))
    if PARTITION_STATS in kept:
        out.append(_check_partition_stats(table, listing))
    return out


def _stats_of(storage: Storage, partition: str, name: str) -> dict[str, dict[str, Any]]:
    rel = "" if partition == "." else partition
    if name.endswith(".parquet"):
        return parquet_column_stats(storage, rel, name)
    return log_column_stats(storage, rel, name)


def _path(partition: str, name: str) -> str:
    return name if partition == "." else f"{partition}/{name}"


def _operations(table: LakeTable) -> dict[str, str]:
    """Completed commit time -> its operation type (``DELETE``, ``UPSERT``, ...)."""
    timeline = table.timeline()
    return {i.timestamp: timeline.commit_metadata(i).operation_type for i in timeline.completed_commits}


# Hudi 1.x's writer records no column or partition stats for the files a delete writes.
_NO_STATS = ("DELETE", "DELETE_PREPPED")


def _check_column_stats(table: LakeTable, listing: Mapping[str, Mapping[str, int]]) -> StatsCheck:
    storage = table.storage
    operations = _operations(table)
    by_file: dict[str, dict[str, dict[str, Any]]] = {}
    for key, record in read_partition_records(storage, COLUMN_STATS).items():
        stats = record.get("ColumnStatsMetadata")
        if stats:
            by_file.setdefault(stats["fileName"], {})[key] = stats
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


def _check_partition_stats(table: LakeTable, listing: Mapping[str, Mapping[str, int]]) -> StatsCheck:
    storage = table.storage
    stored: dict[str, dict[str, dict[str, Any]]] = {}
    for key, record in read_partition_records(storage, PARTITION_STATS).items():
        stats = record.get("ColumnStatsMetadata")
        if stats:
            stored.setdefault(stats["fileName"], {})[key] = stats
    timeline = table.timeline()
    operations = _operations(table)
    view = FileSystemView.build(table.config, timeline)
    last_write: dict[str, str] = {}
    for instant in timeline.completed_commits:
        for partition in timeline.commit_metadata(instant).partitions:
            last_write[partition] = instant.timestamp
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
        if have != partition_stats(partition, files):
            mismatched.append(partition)
    checked = sum(1 for files in listing.values() if files)
    return StatsCheck(
        PARTITION_STATS, checked, tuple(missing), tuple(mismatched), tuple(unreadable), tuple(skipped)
    )
