"""File groups and file slices: the base and log files of a table, grouped as readers see them."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName


class _DataFile:
    """Names derived from a parsed file name (computed on use: views hold 100,000s of files)."""

    __slots__ = ()
    partition: str
    name: BaseFileName | LogFileName

    @property
    def file_name(self) -> str:
        return self.name.name

    @property
    def relative_path(self) -> str:
        return f"{self.partition}/{self.name.name}" if self.partition else self.name.name


@dataclass(frozen=True, slots=True)
class BaseFile(_DataFile):
    partition: str
    name: BaseFileName
    size: int


@dataclass(frozen=True, slots=True)
class LogFile(_DataFile):
    partition: str
    name: LogFileName
    size: int


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A base file (absent while a compaction is pending) and the log files written against it."""

    partition: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None
    log_files: tuple[LogFile, ...] = ()

    @property
    def files(self) -> list[BaseFile | LogFile]:
        return ([self.base_file] if self.base_file else []) + list(self.log_files)

    @property
    def total_log_size(self) -> int:
        return sum(f.size for f in self.log_files)


@dataclass(frozen=True)
class FileGroup:
    partition: str
    file_id: str
    slices: tuple[FileSlice, ...]  # oldest first

    @property
    def latest_slice(self) -> FileSlice:
        return self.slices[-1]
