"""Commit metadata of ``commit``/``deltacommit``/``replacecommit`` instants: JSON in table version 6,
Avro (``HoodieCommitMetadata``/``HoodieReplaceCommitMetadata``, same field names) in 8 and 9."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_lake_provider.lake.errors import CorruptTimelineFileError


def join_partition(partition: str, name: str) -> str:
    """The table-relative path of ``name`` in ``partition`` ("" is the table root)."""
    return f"{partition}/{name}" if partition else name


@dataclass(frozen=True)
class RuntimeStats:
    """Hudi's ``HoodieWriteStat.RuntimeStats`` (milliseconds), as its compaction records them: the
    log scan, and the new base file's write (create without an old base file, upsert with one)."""

    total_scan_time: int = 0
    total_create_time: int = 0
    total_upsert_time: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "totalScanTime": self.total_scan_time,
            "totalUpsertTime": self.total_upsert_time,
            "totalCreateTime": self.total_create_time,
        }


@dataclass(frozen=True)
class WriteStat:
    """What one write did to one file group (Spark 0.14's field set, so Java tools parse it)."""

    file_id: str
    partition_path: str
    path: str
    prev_commit: str = "null"
    num_writes: int = 0
    num_deletes: int = 0
    num_update_writes: int = 0
    num_inserts: int = 0
    total_write_bytes: int = 0
    file_size_in_bytes: int = 0
    base_file: str | None = None
    log_files: tuple[str, ...] | None = None
    log_version: int | None = None
    log_offset: int | None = None
    total_log_records: int = 0
    total_log_files_compacted: int = 0
    total_log_size_compacted: int = 0
    total_updated_records_compacted: int = 0
    prev_base_file: str | None = None  # (compaction) the name of the base file it replaced
    runtime_stats: RuntimeStats | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fileId": self.file_id,
            "path": self.path,
            "cdcStats": None,
            "prevCommit": self.prev_commit,
            "numWrites": self.num_writes,
            "numDeletes": self.num_deletes,
            "numUpdateWrites": self.num_update_writes,
            "numInserts": self.num_inserts,
            "totalWriteBytes": self.total_write_bytes,
            "totalWriteErrors": 0,
            "tempPath": None,
            "partitionPath": self.partition_path,
            "totalLogRecords": self.total_log_records,
            "totalLogFilesCompacted": self.total_log_files_compacted,
            "totalLogSizeCompacted": self.total_log_size_compacted,
            "totalUpdatedRecordsCompacted": self.total_updated_records_compacted,
            "totalLogBlocks": 0,
            "totalCorruptLogBlock": 0,
            "totalRollbackBlocks": 0,
            "fileSizeInBytes": self.file_size_in_bytes,
            "minEventTime": None,
            "maxEventTime": None,
            "runtimeStats": self.runtime_stats.to_json() if self.runtime_stats else None,
        }
        if self.prev_base_file is not None:  # (Jackson readers of 0.14 ignore it, 0.15 on read it)
            out["prevBaseFile"] = self.prev_base_file
        if self.log_files is not None:
            out.update(
                logVersion=self.log_version,
                logOffset=self.log_offset,
                baseFile=self.base_file or "",
                logFiles=list(self.log_files),
                recordsStats={"val": None},
            )
        return out

    def to_avro(self) -> dict[str, Any]:
        """The ``HoodieWriteStat`` record of Hudi 1.x; what we do not track stays null (or 0 where
        Spark writes 0), as Spark leaves it for such files."""
        out = self.to_json()
        for key in ("recordsStats", "totalLogFiles"):
            out.pop(key, None)
        scan = self.runtime_stats.total_scan_time if self.runtime_stats else 0  # (1.x: the log scan's)
        out.update(numUpdates=0, totalLogReadTimeMs=scan, prevBaseFile=self.prev_base_file)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], partition: str) -> WriteStat:
        """Parse one stat; ``TypeError``/``ValueError`` if a field has the wrong type."""
        logs = data.get("logFiles")
        if logs is not None and not (isinstance(logs, list) and all(isinstance(n, str) for n in logs)):
            raise TypeError(f"logFiles is {logs!r}, not a list of file names")
        for key in ("fileId", "partitionPath", "path", "baseFile"):
            if not isinstance(data.get(key), str | None):
                raise TypeError(f"{key} is {data.get(key)!r}, not a string")
        return cls(
            file_id=data.get("fileId") or "",
            partition_path=data.get("partitionPath") or partition,
            path=data.get("path") or "",
            prev_commit=str(data.get("prevCommit") or "null"),
            num_writes=int(data.get("numWrites") or 0),
            num_deletes=int(data.get("numDeletes") or 0),
            num_update_writes=int(data.get("numUpdateWrites") or 0),
            num_inserts=int(data.get("numInserts") or 0),
            total_write_bytes=int(data.get("totalWriteBytes") or 0),
            file_size_in_bytes=int(data.get("fileSizeInBytes") or 0),
            base_file=data.get("baseFile"),
            log_files=tuple(logs) if logs is not None else None,
            log_version=data.get("logVersion"),
            log_offset=data.get("logOffset"),
            total_log_records=int(data.get("totalLogRecords") or 0),
            total_log_files_compacted=int(data.get("totalLogFilesCompacted") or 0),
            total_log_size_compacted=int(data.get("totalLogSizeCompacted") or 0),
            total_updated_records_compacted=int(data.get("totalUpdatedRecordsCompacted") or 0),
            prev_base_file=data.get("prevBaseFile") if isinstance(data.get("prevBaseFile"), str) else None,
            runtime_stats=_runtime_stats(data.get("runtimeStats")),
        )


def _runtime_stats(data: object) -> RuntimeStats | None:
    if not isinstance(data, Mapping):
        return None
    return RuntimeStats(
        int(data.get("totalScanTime") or 0),
        int(data.get("totalCreateTime") or 0),
        int(data.get("totalUpsertTime") or 0),
    )


@dataclass(frozen=True)
class CommitMetadata:
    """The JSON body of a completed write instant."""

    operation_type: str
    partition_to_write_stats: Mapping[str, tuple[WriteStat, ...]] = field(default_factory=dict)
    extra_metadata: Mapping[str, str] = field(default_factory=dict)
    compacted: bool = False
    partition_to_replace_file_ids: Mapping[str, tuple[str, ...]] | None = None

    @property
    def schema(self) -> str | None:
        """The table's Avro schema (data fields only) as this commit recorded it."""
        return self.extra_metadata.get("schema") or None

    @property
    def partitions(self) -> set[str]:
        """Partitions written, plus partitions whose file groups were replaced."""
        touched = set(self.partition_to_write_stats)
        touched.update(self.partition_to_replace_file_ids or {})
        return touched

    def write_stats(self) -> list[WriteStat]:
        return [stat for stats in self.partition_to_write_stats.values() for stat in stats]

    def to_json_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "partitionToWriteStats": {
                part: [stat.to_json() for stat in stats]
                for part, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids is not None:
            body["partitionToReplaceFileIds"] = {
                part: list(ids) for part, ids in self.partition_to_replace_file_ids.items()
            }
        return json.dumps(body, indent=2).encode("utf-8")

    def to_avro_bytes(self) -> bytes:
        """The Avro commit metadata of timeline layout 2 (``HoodieCommitMetadata``, or
        ``HoodieReplaceCommitMetadata`` when file groups are replaced), Hudi 1.x's schemas."""
        from airflow_lake_provider.lake.timeline import avro as timeline_avro

        record: dict[str, Any] = {
            "partitionToWriteStats": {
                part: [stat.to_avro() for stat in stats]
                for part, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "version": None,
            "operationType": self.operation_type,
        }
        name = timeline_avro.COMMIT_METADATA
        if self.partition_to_replace_file_ids is not None:
            name = timeline_avro.REPLACE_COMMIT_METADATA
            record["partitionToReplaceFileIds"] = {
                part: list(ids) for part, ids in self.partition_to_replace_file_ids.items()
            }
        return timeline_avro.write_avro_1x(name, record)

    def to_bytes(self, avro: bool) -> bytes:
        """Avro (timeline layout 2, table versions 8 and 9) or JSON (layout 1, version 6)."""
        return self.to_avro_bytes() if avro else self.to_json_bytes()

    @classmethod
    def from_json_bytes(cls, data: bytes, source: str) -> CommitMetadata:
        """Parse commit JSON; ``source`` (the timeline file) is named in errors."""
        try:
            body = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            # RecursionError: nesting deeper than the decoder's stack (no commit is shaped so).
            raise CorruptTimelineFileError(f"{source}: commit metadata is not JSON ({exc})") from None
        if not isinstance(body, dict):
            raise CorruptTimelineFileError(f"{source}: commit metadata is not a JSON object")
        return cls.from_mapping(body, source)

    @classmethod
    def from_avro_bytes(cls, data: bytes, source: str) -> CommitMetadata:
        """Parse the Avro commit metadata of timeline layout 2; ``source`` is named in errors."""
        from airflow_lake_provider.lake.timeline import avro as timeline_avro

        return cls.from_mapping(timeline_avro.read_commit_metadata(data, source), source)

    @classmethod
    def from_mapping(cls, body: Mapping[str, Any], source: str) -> CommitMetadata:
        """Build from the decoded fields (JSON object or Avro record: Hudi names them alike)."""
        stats: dict[str, tuple[WriteStat, ...]] = {}
        for part, entries in _object(body, "partitionToWriteStats", source).items():
            where = f"partitionToWriteStats[{part!r}]"
            parsed: list[WriteStat] = []
            for entry in _array(entries, where, source):
                if not isinstance(entry, dict):
                    raise CorruptTimelineFileError(
                        f"{source}: {where} holds {entry!r}, not a write stat object"
                    )
                try:
                    parsed.append(WriteStat.from_json(entry, part))
                except (TypeError, ValueError) as exc:
                    raise CorruptTimelineFileError(
                        f"{source}: a write stat in {where} is malformed ({exc})"
                    ) from None
            stats[part] = tuple(parsed)
        replaced = None
        if body.get("partitionToReplaceFileIds") is not None:
            replaced = {
                part: tuple(_strings(ids, f"partitionToReplaceFileIds[{part!r}]", source))
                for part, ids in _object(body, "partitionToReplaceFileIds", source).items()
            }
        extra = _object(body, "extraMetadata", source)
        return cls(
            operation_type=str(body.get("operationType") or "UNKNOWN"),
            partition_to_write_stats=stats,
            extra_metadata={k: v for k, v in extra.items() if isinstance(v, str)},
            compacted=bool(body.get("compacted")),
            partition_to_replace_file_ids=replaced,
        )


# Shape checks of parsed commit JSON: a wrong type is a corrupt file, named, not an AttributeError
# deep inside a reader. A null field reads as empty, as Java's Jackson mapping does.
def _object(body: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CorruptTimelineFileError(f"{source}: {key} is {type(value).__name__}, not a JSON object")
    return value


def _array(value: object, where: str, source: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CorruptTimelineFileError(f"{source}: {where} is {type(value).__name__}, not a JSON array")
    return value


def _strings(value: object, where: str, source: str) -> list[str]:
    items = _array(value, where, source)
    if not all(isinstance(i, str) for i in items):
        raise CorruptTimelineFileError(f"{source}: {where} holds values that are not strings")
    return items
