"""Reading the LSM history: which instants it holds, and one instant's metadata and plan bytes.

A ``History`` does no I/O until asked: a table opens one next to its active timeline and reads the
history only for an instant older than the active timeline. Then it reads ``_version_``, the
manifest it names, and only the parquet files whose ``<min>_<max>`` name range can hold the times
asked for (and of those only the columns needed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import CorruptTimelineFileError, ObjectNotFoundError
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.timeline.history import records
from airflow_lake_provider.lake.timeline.history.layout import (
    EMPTY,
    HISTORY_DIR,
    VERSION_FILE,
    DataFile,
    Snapshot,
    decode_manifest,
    decode_version,
    manifest_name,
    manifest_version,
)
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant


def latest_version(storage: Storage, folder: str = HISTORY_DIR) -> int:
    """The latest snapshot's number: ``_version_``'s, else the greatest manifest's, else 0 (none)."""
    try:
        version = decode_version(storage.read(f"{folder}/{VERSION_FILE}"))
    except ObjectNotFoundError:
        version = None
    if version is not None:
        return version
    versions = [v for v in map(manifest_version, storage.list_names(folder)) if v is not None]
    return max(versions, default=0)


def read_snapshot(storage: Storage, version: int, folder: str = HISTORY_DIR) -> Snapshot:
    """Snapshot ``version`` as its manifest lists it (``EMPTY`` for version 0)."""
    if version <= 0:
        return EMPTY
    rel = f"{folder}/{manifest_name(version)}"
    try:
        data = storage.read(rel)
    except ObjectNotFoundError:
        raise CorruptTimelineFileError(
            f"{storage.uri(rel)}: the LSM timeline's {VERSION_FILE} names snapshot {version}, "
            "whose manifest does not exist"
        ) from None
    return Snapshot(version, decode_manifest(data, storage.uri(rel)))


class History:
    """The archived timeline of a Hudi 1.x table, read lazily (one snapshot per object)."""

    def __init__(self, storage: Storage, folder: str = HISTORY_DIR) -> None:
        self.storage = storage
        self.folder = folder

    @cached_property
    def snapshot(self) -> Snapshot:
        return read_snapshot(self.storage, latest_version(self.storage, self.folder), self.folder)

    def files(self, start: str | None = None, end: str | None = None) -> list[DataFile]:
        """The files that count and may hold requested times in ``[start, end]`` (by their names)."""
        return [f for f in self.snapshot.files if f.overlaps(start, end)]

    @property
    def time_range(self) -> tuple[str, str] | None:
        """(earliest, latest) requested time the history can hold, from file names alone."""
        files = self.snapshot.files
        if not files:
            return None
        return min(f.min_time for f in files), max(f.max_time for f in files)

    def instants(self, start: str | None = None, end: str | None = None) -> list[ArchivedInstant]:
        """The archived instants with requested times in ``[start, end]`` (inclusive), in time order.

        An instant found in two files counts once (an archival retried after its first attempt
        had published would hold it twice; Hudi's archiver avoids that, readers need not trust it).
        """
        found: dict[tuple[str, str, str], ArchivedInstant] = {}
        for data_file in self.files(start, end):
            table = self._read(
                data_file, lambda src: records.read_range(src, start, end, records.TIME_COLUMNS)
            )
            for instant in records.instants_of(table):
                if _within(instant.instant_time, start, end):
                    found.setdefault(instant.sort_key, instant)
        return [found[key] for key in sorted(found)]

    def entries(self, instant_time: str) -> list[ArchivedEntry]:
        """Every archived record with requested time ``instant_time`` (one per action archived at
        that time), with its metadata and plan bytes."""
        return self.entries_between(instant_time, instant_time)

    def entries_between(self, start: str | None, end: str | None) -> list[ArchivedEntry]:
        """Every archived record with a requested time in ``[start, end]`` (inclusive, open where
        None), with its metadata and plan bytes, in time order (each instant once)."""
        out: dict[tuple[str, str, str], ArchivedEntry] = {}
        for data_file in self.files(start, end):
            table = self._read(data_file, lambda src: records.read_range(src, start, end))
            times = table.column("instantTime")
            if start is not None:
                table = table.filter(pc.greater_equal(times, start))
            if end is not None:
                table = table.filter(pc.less_equal(table.column("instantTime"), end))
            metadata, plans = table.column("metadata").to_pylist(), table.column("plan").to_pylist()
            for i, instant in enumerate(records.instants_of(table)):
                out.setdefault(instant.sort_key, ArchivedEntry(instant, metadata[i], plans[i]))
        return [out[key] for key in sorted(out)]

    def entry(self, instant_time: str, action: str | None = None) -> ArchivedEntry | None:
        """The archived record of ``instant_time`` (of ``action`` if given), or ``None``."""
        for found in self.entries(instant_time):
            if action is None or found.instant.action == action:
                return found
        return None

    def read_file(self, data_file: DataFile, columns: Sequence[str] | None = None) -> pa.Table:
        """The rows of one of the snapshot's files (``columns`` only, all if None)."""
        return self._read(data_file, lambda source: records.read_table(source, columns))

    def _read(self, data_file: DataFile, read: Callable[[Any], pa.Table]) -> pa.Table:
        rel = f"{self.folder}/{data_file.name}"
        try:
            with self.storage.open_input(rel) as source:
                return read(source)
        except ObjectNotFoundError:
            raise CorruptTimelineFileError(
                f"{self.storage.uri(rel)}: named by LSM timeline snapshot {self.snapshot.version} "
                "but does not exist"
            ) from None
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise CorruptTimelineFileError(
                f"{self.storage.uri(rel)}: not a readable LSM timeline file: {exc}"
            ) from exc


def _within(time: str, start: str | None, end: str | None) -> bool:
    return (start is None or time >= start) and (end is None or time <= end)
