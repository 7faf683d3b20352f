"""Markers: before a write creates or appends a data file, it records so under
``.hoodie/.temp/<instant>/``; a rollback of a failed write deletes what the markers name. Ours and
Hudi's DIRECT markers are one empty file per data file; Hudi's TIMELINE_SERVER_BASED markers list
marker paths in ``MARKERS<n>`` files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import UnsafePathError
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage

TEMP_DIR = ".temp"
# Hudi's TIMELINE_SERVER_BASED markers: MARKERS.type names the kind, MARKERS<n> list marker paths.
MARKERS_TYPE_FILE = "MARKERS.type"
_MARKERS_FILE_PREFIX = "MARKERS"


class IOType:
    """Marker suffixes: what a write did to a data file."""

    CREATE = "CREATE"
    MERGE = "MERGE"
    APPEND = "APPEND"


@dataclass(frozen=True)
class Marker:
    """A record that instant ``instant`` created or appended ``partition/file_name``."""

    instant: str
    partition: str
    file_name: str
    io_type: str

    @property
    def relative_path(self) -> str:
        return f"{self.partition}/{self.file_name}" if self.partition else self.file_name


class Markers:
    """The markers of a table's instants (written through the timeline store: ``store.markers``)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def folder(self, timestamp: str) -> str:
        return f"{HOODIE_DIR}/{TEMP_DIR}/{timestamp}"

    def create(self, timestamp: str, partition: str, file_name: str, io_type: str) -> Marker:
        """Record, before a data file is created or appended, that this instant touches it."""
        parts = partition.split("/")
        if partition.startswith("/") or ".." in parts:
            raise UnsafePathError(f"partition {partition!r} leaves the table base path")
        folder = f"{self.folder(timestamp)}/{partition}" if partition else self.folder(timestamp)
        self.storage.touch(f"{folder}/{file_name}.marker.{io_type}")
        return Marker(timestamp, partition, file_name, io_type)

    def read(self, timestamp: str) -> list[Marker]:
        """Markers of an instant: one file per marker (ours, Hudi's DIRECT) and the ``MARKERS<n>``
        files of Hudi's TIMELINE_SERVER_BASED markers (one marker path per line)."""
        root = self.folder(timestamp)
        found: set[Marker] = set()
        for folder, files in self.storage.walk(root):
            partition = folder[len(root) + 1 :]
            for name, _size in files:
                stem, sep, io_type = name.rpartition(".marker.")
                if sep:
                    found.add(Marker(timestamp, partition, stem, io_type))
                elif not partition and name.startswith(_MARKERS_FILE_PREFIX) and name[7:].isdigit():
                    text = self.storage.read(f"{root}/{name}").decode("utf-8", "replace")
                    found.update(_server_markers(timestamp, text))
        return sorted(found, key=lambda m: (m.partition, m.file_name))

    def delete(self, timestamp: str) -> None:
        self.storage.delete_tree(self.folder(timestamp))


def _server_markers(timestamp: str, text: str) -> Iterator[Marker]:
    for line in text.splitlines():
        path = line.strip()
        stem, sep, io_type = path.rpartition(".marker.")
        if not sep:
            continue
        partition, _, name = stem.rpartition("/")
        yield Marker(timestamp, partition, name, io_type)
