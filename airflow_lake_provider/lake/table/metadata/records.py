"""The ``files`` partition records of Hudi's metadata table (MDT) for one data instant, as Hudi's
Java writer makes them (``HoodieTableMetadataUtil.convertMetadataToFilesPartitionRecords``).

A commit, deltacommit or replacecommit gives one ``__all_partitions__`` record (type 1) naming every
partition it wrote (size 0 each: Hudi cannot tell a new partition from an old one here), and per
partition one record (type 2) mapping each file it wrote to its size: the largest size any write
stat reports for the file; a compaction commit is one of these (its new base files). A clean gives
per partition of its metadata a record of the files it planned to delete (``deletePathPatterns``,
``isDeleted``, size 0; Java does not narrow them to ``successDeleteFiles``) and no partition list.
Keys are partition paths, ``.`` for a non-partitioned table's root. Every other field of
``HoodieMetadataRecord`` is null and ``key`` is empty: the key lives in the HFile cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.format.java_map import string_hash
from airflow_lake_provider.lake.table.metadata.files import (
    ALL_PARTITIONS,
    FILE_LIST,
    NON_PARTITIONED,
    PARTITION_LIST,
)
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat

Records = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class PartitionChange:
    """Files one data instant added to (name -> size) and deleted from one partition."""

    added: Mapping[str, int] = field(default_factory=dict)
    deleted: tuple[str, ...] = ()


@dataclass(frozen=True)
class FilesChange:
    """What one data instant changed in the file listing.

    :param partitions: partition path ("" for the table root) -> its change, in the order the
        instant's metadata lists them.
    :param listed: the partitions the ``__all_partitions__`` record names (``None``: none, no record).
    :param dropped: the partitions it names deleted (``createPartitionListRecord(..., isDeleted)``).
    """

    partitions: Mapping[str, PartitionChange]
    listed: tuple[str, ...] | None = None
    dropped: tuple[str, ...] = ()

    @property
    def file_count(self) -> int:
        return sum(len(c.added) + len(c.deleted) for c in self.partitions.values())


def partition_key(partition: str) -> str:
    """The MDT key of a data partition (``getPartitionIdentifierForFilesPartition``)."""
    return partition or NON_PARTITIONED


def change_of_commit(metadata: CommitMetadata) -> FilesChange:
    """The files a commit/deltacommit wrote: per partition, each file's largest reported size."""
    changes: dict[str, PartitionChange] = {}
    for partition, stats in metadata.partition_to_write_stats.items():
        sizes: dict[str, int] = {}
        for stat in stats:
            if not stat.path:  # Hudi skips a stat without a path (an empty partition)
                continue
            name = stat.path.rsplit("/", 1)[-1]
            sizes[name] = max(sizes.get(name, stat.file_size_in_bytes), stat.file_size_in_bytes)
        changes[partition] = PartitionChange(added=sizes)
    return FilesChange(changes, tuple(changes))


def change_of_clean(metadata: Mapping[str, Any]) -> FilesChange:
    """The files a clean removed (``HoodieCleanMetadata`` as a dict): per partition of its metadata,
    even one with nothing to delete, the planned deletes as Java takes them."""
    changes: dict[str, PartitionChange] = {}
    for partition, part in (metadata.get("partitionMetadata") or {}).items():
        if part.get("isPartitionDeleted"):  # our cleaner never deletes a partition
            raise TableConfigError(
                f"clean {metadata.get('startCleanTime')} deletes partition {partition!r}: the metadata "
                "table's partition list is not kept for that"
            )
        changes[partition] = PartitionChange(deleted=tuple(part.get("deletePathPatterns") or ()))
    return FilesChange(changes)


def file_group_index(key: str, count: int) -> int:
    """The file group (of ``count``) a record key goes to in an MDT partition with several
    (``HoodieTableMetadataUtil.mapRecordKeyToFileGroupIndex``): Java's ``String.hashCode`` of the
    key, then ``abs(abs(h) % count)``."""
    h = string_hash(key)
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return abs(abs(signed) % count)


def blank_record(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A ``HoodieMetadataRecord`` of ``schema`` with every field null and an empty key."""
    return {f["name"]: ("" if f["name"] == "key" else None) for f in schema["fields"]}


def _entries(added: Mapping[str, int], deleted: Sequence[str]) -> dict[str, dict[str, Any]]:
    entries = {name: {"size": int(size), "isDeleted": False} for name, size in added.items()}
    entries.update({name: {"size": 0, "isDeleted": True} for name in deleted})
    return entries


def files_records(change: FilesChange, schema: Mapping[str, Any]) -> Records:
    """The ``files`` partition records of ``change`` (in no particular order: a block sorts them).

    :param schema: the parsed JSON of the MDT's ``HoodieMetadataRecord`` block schema.
    """
    records: Records = []
    if change.listed is not None or change.dropped:
        listing = {partition_key(p): {"size": 0, "isDeleted": False} for p in change.listed or ()}
        listing.update({partition_key(p): {"size": 0, "isDeleted": True} for p in change.dropped})
        records.append(
            (ALL_PARTITIONS, {**blank_record(schema), "type": PARTITION_LIST, "filesystemMetadata": listing})
        )
    for partition, part in change.partitions.items():
        files = _entries(part.added, part.deleted)
        records.append(
            (
                partition_key(partition),
                {**blank_record(schema), "type": FILE_LIST, "filesystemMetadata": files},
            )
        )
    return records


def log_write_stat(
    partition: str, rel: str, name: LogFileName, prev: str, base: str, records: int, size: int
) -> WriteStat:
    """The write stat of a new MDT log file, as Java's append handle reports one (every record an
    update: the MDT has no inserts; as previous commit the slice's base instant, which in Hudi 1.x
    is the file's own instant; the slice's base file, none in Hudi 1.x's stats)."""
    return WriteStat(
        file_id=name.file_id,
        partition_path=partition,
        path=rel,
        prev_commit=prev,
        num_writes=records,
        num_update_writes=records,
        total_write_bytes=size,
        file_size_in_bytes=size,
        base_file=base,
        log_files=(name.name,),
        log_version=name.version,
        log_offset=0,
    )
