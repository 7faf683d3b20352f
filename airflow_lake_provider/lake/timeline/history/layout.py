"""The files of the LSM history (``.hoodie/timeline/history/``) and what the bookkeeping ones hold.

- ``<min>_<max>_<level>.parquet``: archived instants whose requested times run from ``min`` to
  ``max``; level 0 files come from archival, level ``n+1`` files from compacting level ``n`` ones.
- ``manifest_<N>``: snapshot ``N`` of the tree, the JSON object ``{"files": [{"fileName",
  "fileLen"}, ...]}`` naming every parquet file that counts (Hudi's ``HoodieLSMTimelineManifest``,
  written by Jackson's default pretty printer).
- ``_version_``: the number ``N`` of the latest snapshot, as decimal text. A reader that cannot read
  it takes the greatest ``N`` among the manifest files (Hudi's ``LSMTimeline.latestSnapshotVersion``).

A parquet file that the latest manifest does not name does not count (a crash left it, or a
compaction replaced it); the cleaner deletes it later.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import CorruptTimelineFileError

HISTORY_DIR = ".hoodie/timeline/history"
VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
_MANIFEST_RE = re.compile(r"^manifest_(\d+)$")
# Hudi's ARCHIVE_FILE_PATTERN: the level is one digit.
_DATA_RE = re.compile(r"^(\d+)_(\d+)_(\d)\.parquet$")


@dataclass(frozen=True)
class DataFile:
    """One parquet file of the tree, by name: the range of requested times it holds and its level."""

    min_time: str
    max_time: str
    level: int
    size: int = 0

    @property
    def name(self) -> str:
        return data_file_name(self.min_time, self.max_time, self.level)

    def overlaps(self, start: str | None, end: str | None) -> bool:
        """Whether an instant with a requested time in ``[start, end]`` (inclusive, open where None)
        can be in this file."""
        return (start is None or self.max_time >= start) and (end is None or self.min_time <= end)


@dataclass(frozen=True)
class Snapshot:
    """One version of the tree: its number (0 when there is none yet) and the files that count."""

    version: int
    files: tuple[DataFile, ...]

    def by_level(self, level: int) -> list[DataFile]:
        """The files of ``level`` in name order (Hudi's order: by min time for same-length times)."""
        return sorted((f for f in self.files if f.level == level), key=lambda f: f.name)


EMPTY = Snapshot(0, ())


def data_file_name(min_time: str, max_time: str, level: int) -> str:
    return f"{min_time}_{max_time}_{level}.parquet"


def parse_data_file(name: str, size: int = 0) -> DataFile | None:
    """The file a history parquet name names; ``None`` for any other name."""
    match = _DATA_RE.match(name)
    return DataFile(match[1], match[2], int(match[3]), size) if match else None


def manifest_name(version: int) -> str:
    return f"{MANIFEST_PREFIX}{version}"


def manifest_version(name: str) -> int | None:
    match = _MANIFEST_RE.match(name)
    return int(match[1]) if match else None


def encode_manifest(files: tuple[DataFile, ...]) -> bytes:
    """The manifest JSON as Hudi's Jackson writer lays it out (readers only need valid JSON)."""
    if not files:
        return b'{\n  "files" : [ ]\n}'
    entries = ", ".join(
        f'{{\n    "fileName" : {json.dumps(f.name)},\n    "fileLen" : {f.size}\n  }}' for f in files
    )
    return f'{{\n  "files" : [ {entries} ]\n}}'.encode()


def decode_manifest(data: bytes, where: str) -> tuple[DataFile, ...]:
    """The files a manifest names, in its order; ``CorruptTimelineFileError`` naming ``where``."""
    if not data.strip():
        return ()  # Hudi reads an empty manifest as one without files
    try:
        entries = json.loads(data).get("files") or []
        files = []
        for entry in entries:
            parsed = parse_data_file(entry["fileName"], int(entry.get("fileLen", 0)))
            if parsed is None:
                raise ValueError(f"{entry['fileName']!r} is not a <min>_<max>_<level>.parquet name")
            files.append(parsed)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptTimelineFileError(f"{where}: not an LSM timeline manifest: {exc}") from None
    return tuple(files)


def decode_version(data: bytes) -> int | None:
    """The snapshot number ``_version_`` holds, or ``None`` if it holds no number (then the
    manifests' names decide)."""
    try:
        return int(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
