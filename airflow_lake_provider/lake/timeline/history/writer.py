"""Writing the LSM history as Hudi 1.x's ``LSMTimelineWriter`` does: append, compact, clean.

Every change publishes a new snapshot in this order, each step one durable write:

1. the new parquet file (an archival's level-0 file, or a compaction's next-level file);
2. ``manifest_<N+1>``, naming the files of snapshot ``N`` plus the new one, minus those it replaces;
3. ``_version_`` = ``N+1``: the one switch from the old snapshot to the new one.

A crash before step 3 leaves snapshot ``N`` in force: readers take ``_version_``, so the new
parquet file and the new manifest do not count. The next change deletes such leftovers of its own
names before writing them again, and the cleaner deletes every parquet file that no retained
manifest names. Callers hold the table's lock (one writer at a time, as in Hudi).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

import pyarrow as pa

from airflow_lake_provider.lake.errors import ArchivalError
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.timeline.history import records
from airflow_lake_provider.lake.timeline.history.layout import (
    HISTORY_DIR,
    VERSION_FILE,
    DataFile,
    Snapshot,
    data_file_name,
    encode_manifest,
    manifest_name,
    manifest_version,
    parse_data_file,
)
from airflow_lake_provider.lake.timeline.history.reader import History, latest_version, read_snapshot
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry

# hoodie.timeline.compaction.batch.size: a level is compacted once it holds this many files.
COMPACTION_BATCH = 10
# Hudi 1.0/1.1's LSMTimelineWriter.MAX_FILE_SIZE_IN_BYTES: a compaction stops taking files once
# those taken add up to more than this.
MAX_COMPACTION_BYTES = 1024 * 1024 * 1000
# Snapshots the cleaner keeps besides one per level compacted in the same run (Hudi keeps 3).
RETAINED_SNAPSHOTS = 3


@dataclass(frozen=True)
class CompactionResult:
    """What one ``compact`` did: the files written, per level, and the snapshot now in force."""

    written: tuple[str, ...]
    replaced: tuple[tuple[str, ...], ...]
    version: int


class HistoryWriter:
    """Appends to, compacts and cleans one table's LSM history (through ``storage`` only)."""

    def __init__(
        self,
        storage: Storage,
        folder: str = HISTORY_DIR,
        batch: int = COMPACTION_BATCH,
        max_compaction_bytes: int = MAX_COMPACTION_BYTES,
        retained: int = RETAINED_SNAPSHOTS,
    ) -> None:
        if batch < 2:
            raise ArchivalError(f"the LSM timeline compaction batch must be at least 2 files, not {batch}")
        self.storage = storage
        self.folder = folder
        self.batch = batch
        self.max_compaction_bytes = max_compaction_bytes
        self.retained = retained

    def _rel(self, name: str) -> str:
        return f"{self.folder}/{name}"

    def current(self) -> Snapshot:
        return read_snapshot(self.storage, latest_version(self.storage, self.folder), self.folder)

    # -- archival -----------------------------------------------------------------------------
    def append(self, entries: Sequence[ArchivedEntry]) -> str:
        """Add ``entries`` (in requested-time order) as one level-0 file; returns its name.

        Rerunning an append whose file the latest snapshot already names does nothing (its
        archival crashed after publishing, before the active files were deleted).
        """
        if not entries:
            raise ArchivalError(f"{self.storage.uri(self.folder)}: nothing to archive")
        times = [e.instant.instant_time for e in entries]
        if times != sorted(times):
            raise ArchivalError(
                f"{self.storage.uri(self.folder)}: instants to archive must come in requested-time "
                f"order, got {times}"
            )
        name = data_file_name(times[0], times[-1], 0)
        snapshot = self.current()
        if any(f.name == name for f in snapshot.files):
            return name
        self._write_data(name, lambda sink: records.write_records(sink, entries))
        self._publish(snapshot, (), name)
        return name

    # -- compaction ---------------------------------------------------------------------------
    def compact(self) -> CompactionResult:
        """Compact level 0 into level 1 once it holds ``batch`` files, then level 1 into 2, and so
        on while a level fills up; then clean (Hudi runs this after every archival)."""
        written: list[str] = []
        replaced: list[tuple[str, ...]] = []
        level = 0
        while True:
            snapshot = self.current()
            candidates = self._candidates(snapshot, level)
            if not candidates:
                break
            name = self._compact(snapshot, candidates)
            written.append(name)
            replaced.append(tuple(f.name for f in candidates))
            level += 1
        self.clean(compacted_levels=level)
        return CompactionResult(tuple(written), tuple(replaced), latest_version(self.storage, self.folder))

    def _candidates(self, snapshot: Snapshot, level: int) -> list[DataFile]:
        files = snapshot.by_level(level)
        if len(files) < self.batch:
            return []
        taken: list[DataFile] = []
        total = 0
        for data_file in files[: self.batch]:
            if total > self.max_compaction_bytes:
                break
            total += data_file.size
            taken.append(data_file)
        return taken if len(taken) >= 2 else []

    def _compact(self, snapshot: Snapshot, candidates: list[DataFile]) -> str:
        name = data_file_name(
            min(f.min_time for f in candidates),
            max(f.max_time for f in candidates),
            candidates[0].level + 1,
        )
        reader = History(self.storage, self.folder)
        tables = [reader.read_file(f).select(records.ARROW_SCHEMA.names) for f in candidates]
        merged = pa.concat_tables(tables, promote_options="permissive")
        self._write_data(name, lambda sink: records.write_table(sink, merged))
        self._publish(snapshot, tuple(f.name for f in candidates), name)
        return name

    # -- cleaning -----------------------------------------------------------------------------
    def clean(self, compacted_levels: int = 0) -> list[str]:
        """Delete the manifests of all but the newest ``retained + compacted_levels`` snapshots,
        then every parquet file none of the kept manifests names; returns the deleted names."""
        names = self.storage.list_names(self.folder)
        current = latest_version(self.storage, self.folder)
        found = sorted((v for v in map(manifest_version, names) if v is not None), reverse=True)
        # A manifest newer than the one in force is a crashed change's, never published: it does
        # not count among the kept ones (keeping it instead of the one in force would leave
        # ``_version_`` naming a deleted manifest).
        versions = [v for v in found if v <= current]
        keep = versions[: self.retained + compacted_levels]
        unpublished = [v for v in found if v > current]
        if len(versions) <= len(keep) and not unpublished:
            return []
        kept_files = {f.name for v in keep for f in read_snapshot(self.storage, v, self.folder).files}
        doomed = [manifest_name(v) for v in unpublished + versions[len(keep) :]]
        # Manifests first: a crash midway leaves no manifest naming a deleted file.
        doomed += sorted(n for n in names if parse_data_file(n) is not None and n not in kept_files)
        for name in doomed:
            self.storage.delete(self._rel(name))
        return doomed

    # -- steps --------------------------------------------------------------------------------
    def _write_data(self, name: str, write: Callable[[IO[bytes]], None]) -> None:
        rel = self._rel(name)
        self._delete_leftover(rel)  # a crashed earlier attempt's file, never published
        with self.storage.open_output(rel) as sink:
            write(sink)

    def _delete_leftover(self, rel: str) -> None:
        if self.storage.exists(rel):
            self.storage.delete(rel)

    def _publish(self, snapshot: Snapshot, removed: tuple[str, ...], added: str) -> None:
        size = self.storage.size(self._rel(added))
        files = tuple(f for f in snapshot.files if f.name not in removed)
        files += (DataFile(*_name_parts(added), size=size),)
        version = snapshot.version + 1
        manifest = self._rel(manifest_name(version))
        self._delete_leftover(manifest)  # left by a crash before the version switch
        self.storage.create(manifest, encode_manifest(files))
        self.storage.write(self._rel(VERSION_FILE), str(version).encode())


def _name_parts(name: str) -> tuple[str, str, int]:
    parsed = parse_data_file(name)
    assert parsed is not None, name
    return parsed.min_time, parsed.max_time, parsed.level
