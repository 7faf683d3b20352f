"""Names of base files and log files (Hudi v6 grammar)."""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import InvalidFileNameError
from airflow_lake_provider.lake.timeline.instant import validate_instant_time, validate_timeline_time

# Java's grammar: file ids and tokens use [A-Za-z0-9-] only; a "_" would make hudi-rs drop the file.
_FILE_ID_RE = re.compile(r"^[A-Za-z0-9-]+$")
_TOKEN_RE = re.compile(r"^\d+-\d+-\d+$")
BASE_FILE_RE = re.compile(r"^([A-Za-z0-9-]+)_([A-Za-z0-9-]+)_(\d{14}(?:\d{3})?)\.parquet$")
# A base file of another format (a metadata table's HFile) without its extension: on a v6 table's
# metadata table its instant may carry operation suffixes (instant.TIMELINE_TIME_RE).
_OTHER_BASE_RE = re.compile(r"^([A-Za-z0-9-]+)_([A-Za-z0-9-]+)_(\d{14}(?:\d{3}){0,3})$")
# A log's base instant may carry a v6 metadata table's operation suffixes (instant.TIMELINE_TIME_RE).
_LOG_RE = re.compile(r"^\.([A-Za-z0-9-]+)_(\d{14}(?:\d{3}){0,3})\.log\.(\d+)(?:_(\d+-\d+-\d+))?$")
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"


def validate_file_id(file_id: str) -> str:
    if not _FILE_ID_RE.match(file_id or ""):
        raise InvalidFileNameError(
            f"file id {file_id!r} must be non-empty and use only letters, digits and '-'"
        )
    return file_id


def new_file_id() -> str:
    """A fresh file group id in Java's ``<uuid>-<n>`` form."""
    return f"{uuid.uuid4()}-0"


def write_token(task_partition: int = 0, stage: int = 0, attempt: int = 0) -> str:
    """Java's ``<taskPartitionId>-<stageId>-<taskAttemptId>`` token; the log grammar needs digits."""
    return f"{task_partition}-{stage}-{attempt}"


@dataclass(frozen=True, slots=True)
class BaseFileName:
    file_id: str
    write_token: str
    instant: str
    # ``hfile`` for a metadata table's base files (its ``hoodie.table.base.file.format=HFILE``).
    extension: str = "parquet"

    @property
    def name(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant}.{self.extension}"

    @classmethod
    def parse(cls, name: str, extension: str = "parquet") -> BaseFileName | None:
        """The parts of a base file name with ``extension`` (None for any other name)."""
        if extension == "parquet":
            return _parse_base(name)
        stem, dot, ext = name.rpartition(".")
        m = _OTHER_BASE_RE.match(stem) if dot and ext == extension else None
        return cls(m.group(1), m.group(2), m.group(3), extension) if m else None

    @classmethod
    def create(cls, file_id: str, token: str, instant: str) -> BaseFileName:
        validate_file_id(file_id)
        if not _TOKEN_RE.match(token):
            raise InvalidFileNameError(f"write token {token!r} must look like <digits>-<digits>-<digits>")
        return cls(file_id, token, validate_instant_time(instant))


@dataclass(frozen=True, slots=True)
class LogFileName:
    file_id: str
    base_instant: str
    version: int
    write_token: str

    @property
    def name(self) -> str:
        return f".{self.file_id}_{self.base_instant}.log.{self.version}_{self.write_token}"

    @property
    def sort_key(self) -> tuple[str, int, str]:
        """Order of log files within a slice (Hudi's): the instant in the name, version, write token.
        A slice's logs share the instant in table version 6; in 8 and 9 each deltacommit writes its
        own, named after it, and their write tokens say nothing of their order."""
        return (self.base_instant, self.version, self.write_token)

    @classmethod
    def parse(cls, name: str) -> LogFileName | None:
        return _parse_log(name)

    @classmethod
    def create(cls, file_id: str, base_instant: str, version: int, token: str) -> LogFileName:
        validate_file_id(file_id)
        if version < 1 or not _TOKEN_RE.match(token):
            raise InvalidFileNameError(f"log version {version} must be >= 1 and token {token!r} <d>-<d>-<d>")
        return cls(file_id, validate_timeline_time(base_instant), version, token)


# Every write lists its partitions again and parses the same (immutable) names: remember them. The
# parsed names are frozen, so sharing one object between callers is safe.
_PARSED_NAMES = 1 << 18


@functools.lru_cache(maxsize=_PARSED_NAMES)
def _parse_base(name: str) -> BaseFileName | None:
    m = BASE_FILE_RE.match(name)
    return BaseFileName(m.group(1), m.group(2), m.group(3)) if m else None


@functools.lru_cache(maxsize=_PARSED_NAMES)
def _parse_log(name: str) -> LogFileName | None:
    m = _LOG_RE.match(name)
    return LogFileName(m.group(1), m.group(2), int(m.group(3)), m.group(4) or "") if m else None
