"""The data table's storage as the MDT's ``files`` partition should list it (the files of
completed instants), and the check of the partition against it (Hudi's
``HoodieMetadataTableValidator`` role for ``files``; ``lake metadata-table --check``). Read-only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.file_group.file_names import PARTITION_METADATA_FILE, LogFileName
from airflow_lake_provider.lake.log_file.log_format import HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.files import (
    NON_PARTITIONED,
    FilesListing,
    open_timeline,
    read_files_partition,
)
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import State
from airflow_lake_provider.lake.timeline.markers import Markers

_BASE_RE = re.compile(r"^([A-Za-z0-9-]+)_(\d+-\d+-\d+)_(\d{14}(?:\d{3})?)\.[A-Za-z0-9]+$")


# ---------------------------------------------------------------------------------------------
# The listing the MDT should equal: the data table's storage, files of completed instants only
# ---------------------------------------------------------------------------------------------


def list_table_files(storage: Storage) -> dict[str, dict[str, int]]:
    """partition (``.`` for the table's root) -> base and log file name -> size, for the files of
    completed data instants (a log of layout 2 by its deltacommit, of layout 1 by its slice's base
    instant, which may also be a pending compaction's, but not one a pending write created),
    archived ones (older than the active timeline) included. A pending compaction's base files are
    listed once it completes, as its deltacommit adds them to the MDT. A layout-1 log whose slice's
    base instant was rolled back since (a restore past a data compaction, by an earlier version
    whose compaction rollback deleted only base files) is listed while a block in it is a completed
    instant's: the command block of the rollback that kept it (the MDT lists the size that rollback
    left; a compaction's rollback now deletes such logs, ``rollback/written.py``)."""
    _, timeline = open_timeline(storage, mdt=False)
    completed = {i.timestamp for i in timeline.filter(states=[State.COMPLETED])}
    compacting: set[str] = set()
    if not timeline.layout.has_completion_times:
        compacting = {i.timestamp for i in timeline.pending_compactions()}
    # A file older than the active timeline is of an archived, so completed, instant.
    first = timeline.instants[0].timestamp if timeline.instants else None

    def done(t: str | None) -> bool:
        return t is not None and (t in completed or (first is not None and t < first))

    pending = set() if timeline.layout.has_completion_times else _pending_logs(storage, timeline)
    out: dict[str, dict[str, int]] = {}
    for folder, listing in storage.walk("", lambda rel: not rel.rsplit("/", 1)[-1].startswith(".")):
        names = {name for name, _ in listing}
        if PARTITION_METADATA_FILE not in names and not any(
            n.startswith(PARTITION_METADATA_FILE) for n in names
        ):
            continue
        kept = {}
        for name, size in listing:
            base = _BASE_RE.match(name)
            log = LogFileName.parse(name)
            instant = base.group(3) if base else log.base_instant if log else None
            listed = done(instant) or (log is not None and instant in compacting)
            rel = f"{folder}/{name}".lstrip("/")
            if log is not None and not listed and not timeline.layout.has_completion_times:
                listed = any(done(t) for t in _block_instants(storage, rel))
            if listed and (log is None or rel not in pending):
                kept[name] = size
        out[folder or NON_PARTITIONED] = dict(sorted(kept.items()))
    return dict(sorted(out.items()))


def _block_instants(storage: Storage, rel: str) -> list[str | None]:
    """The instant times of a log file's blocks (none if it is gone or cannot be read)."""
    try:
        blocks = parse_log_bytes(storage.read(rel), storage.uri(rel))
    except (FileNotFoundError, CorruptDataFileError):
        return []
    return [b.header.get(HeaderKey.INSTANT_TIME) for b in blocks]


def _pending_logs(storage: Storage, timeline: Timeline) -> set[str]:
    """Layout 1: the log files (table-relative) a pending write created, which are named after a
    completed slice but hold no completed instant's block: those its markers name whose first block
    is its own (or that are empty or cut short). A log it appended to after others' blocks stays."""
    markers = Markers(storage)
    out: set[str] = set()
    for instant in timeline.instants:
        if instant.is_completed:
            continue
        for marker in markers.read(instant.timestamp):
            if LogFileName.parse(marker.file_name) is None:
                continue
            rel = marker.relative_path
            try:
                blocks = parse_log_bytes(storage.read(rel), storage.uri(rel))
            except FileNotFoundError:
                continue
            except CorruptDataFileError:
                blocks = []
            if not blocks or blocks[0].header.get(HeaderKey.INSTANT_TIME) == instant.timestamp:
                out.add(rel)
    return out


# ---------------------------------------------------------------------------------------------
# The check (Hudi's HoodieMetadataTableValidator role, files partition)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilesCheck:
    """How the MDT ``files`` partition differs from the data table's storage.

    Files are ``<partition>/<name>`` (``<name>`` alone at the root of a non-partitioned table).
    ``missing_*``: in storage, not in the MDT; ``extra_*``: in the MDT, not in storage.
    """

    table: str
    listing: FilesListing
    missing_files: tuple[tuple[str, int], ...]
    extra_files: tuple[tuple[str, int], ...]
    size_mismatches: tuple[tuple[str, int, int], ...]  # (file, MDT size, storage size)
    missing_partitions: tuple[str, ...]
    extra_partitions: tuple[str, ...]

    @property
    def consistent(self) -> bool:
        return not (
            self.missing_files
            or self.extra_files
            or self.size_mismatches
            or self.missing_partitions
            or self.extra_partitions
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "consistent": self.consistent,
            "base_file": self.listing.base_file,
            "log_files": list(self.listing.log_files),
            "partitions": len(self.listing.partitions),
            "files": sum(len(f) for f in self.listing.files.values()),
            "missing_files": [{"file": f, "size": s} for f, s in self.missing_files],
            "extra_files": [{"file": f, "size": s} for f, s in self.extra_files],
            "size_mismatches": [
                {"file": f, "metadata_size": m, "storage_size": s} for f, m, s in self.size_mismatches
            ],
            "missing_partitions": list(self.missing_partitions),
            "extra_partitions": list(self.extra_partitions),
        }


def _path(partition: str, name: str) -> str:
    return name if partition == NON_PARTITIONED else f"{partition}/{name}"


def check_files_partition(storage: Storage) -> FilesCheck:
    """Compare the MDT ``files`` partition with a full listing of the data table's storage (files of
    completed instants). Read-only.

    :raises TableNotFoundError: if there is no table at ``storage``.
    :raises TableConfigError: if the table has no MDT ``files`` partition.
    """
    listing = read_files_partition(storage)
    actual = list_table_files(storage)
    missing, extra, sizes = [], [], []
    for partition in sorted(set(actual) | set(listing.files)):
        have = listing.files.get(partition, {})
        want = actual.get(partition, {})
        for name in sorted(set(have) | set(want)):
            path = _path(partition, name)
            if name not in have:
                missing.append((path, want[name]))
            elif name not in want:
                extra.append((path, have[name]))
            elif have[name] != want[name]:
                sizes.append((path, have[name], want[name]))
    listed = set(listing.partitions)
    return FilesCheck(
        table=storage.root,
        listing=listing,
        missing_files=tuple(missing),
        extra_files=tuple(extra),
        size_mismatches=tuple(sizes),
        # A folder holding no file of a completed instant (a rolled-back write's new partition, its
        # partition metadata left as Hudi leaves it) is listed by neither Hudi's MDT nor ours.
        missing_partitions=tuple(sorted({p for p, files in actual.items() if files} - listed)),
        extra_partitions=tuple(sorted(listed - set(actual))),
    )
