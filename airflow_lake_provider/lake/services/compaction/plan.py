"""The compaction plan: Hudi's ``HoodieCompactionPlan`` as frozen dataclasses, to and from Avro."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_lake_provider.lake.errors import CorruptTimelineFileError
from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition

# Java's metric names (CompactionStrategy constants); values are doubles in the plan.
TOTAL_LOG_FILES = "TOTAL_LOG_FILES"
TOTAL_LOG_FILES_SIZE = "TOTAL_LOG_FILES_SIZE"
TOTAL_IO_READ_MB = "TOTAL_IO_READ_MB"
TOTAL_IO_WRITE_MB = "TOTAL_IO_WRITE_MB"
TOTAL_IO_MB = "TOTAL_IO_MB"
# Version 2 plans name files relative to their partition (version 1 held full paths).
PLAN_VERSION = 2
_MB = 1024 * 1024


def operation_metrics(base_size: int | None, log_sizes: tuple[int, ...]) -> dict[str, float]:
    """Metrics of one slice: the IO estimate is base read + logs read + base rewritten (in MB)."""
    base = base_size or 0
    log_total = sum(log_sizes)
    read_mb = (base + log_total) / _MB
    write_mb = base / _MB
    return {
        TOTAL_LOG_FILES: float(len(log_sizes)),
        TOTAL_LOG_FILES_SIZE: float(log_total),
        TOTAL_IO_READ_MB: read_mb,
        TOTAL_IO_WRITE_MB: write_mb,
        TOTAL_IO_MB: read_mb + write_mb,
    }


@dataclass(frozen=True)
class CompactionOperation:
    """One file group to compact: its slice's base file and log files, by name."""

    partition: str
    file_id: str
    base_instant: str
    data_file_name: str | None
    delta_file_names: tuple[str, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_slice(cls, slice_: FileSlice) -> CompactionOperation:
        base = slice_.base_file
        logs = tuple(sorted(slice_.log_files, key=lambda f: f.name.sort_key))
        return cls(
            partition=slice_.partition,
            file_id=slice_.file_id,
            base_instant=slice_.base_instant,
            data_file_name=base.file_name if base else None,
            delta_file_names=tuple(f.file_name for f in logs),
            metrics=operation_metrics(base.size if base else None, tuple(f.size for f in logs)),
        )

    @property
    def group(self) -> tuple[str, str]:
        return (self.partition, self.file_id)

    @property
    def log_file_count(self) -> int:
        return len(self.delta_file_names)

    @property
    def log_size(self) -> float:
        return self.metrics.get(TOTAL_LOG_FILES_SIZE, 0.0)

    @property
    def io_mb(self) -> float:
        return self.metrics.get(TOTAL_IO_MB, 0.0)

    @property
    def data_file_path(self) -> str | None:
        """Table-relative path of the base file."""
        return join_partition(self.partition, self.data_file_name) if self.data_file_name else None

    def to_avro(self) -> dict[str, Any]:
        return {
            "baseInstantTime": self.base_instant,
            "deltaFilePaths": list(self.delta_file_names),
            "dataFilePath": self.data_file_name,
            "fileId": self.file_id,
            "partitionPath": self.partition,
            "metrics": dict(self.metrics),
            "bootstrapFilePath": None,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any], source: str) -> CompactionOperation:
        file_id, base_instant = record.get("fileId"), record.get("baseInstantTime")
        if not file_id or not base_instant:
            raise CorruptTimelineFileError(
                f"{source}: a compaction operation lacks fileId or baseInstantTime"
            )
        data = record.get("dataFilePath")
        return cls(
            partition=record.get("partitionPath") or "",
            file_id=file_id,
            base_instant=base_instant,
            # Version 1 plans hold full paths: the name is what identifies the file in its partition.
            data_file_name=posixpath.basename(data) if data else None,
            delta_file_names=tuple(posixpath.basename(p) for p in record.get("deltaFilePaths") or ()),
            metrics=dict(record.get("metrics") or {}),
        )


@dataclass(frozen=True)
class CompactionPlan:
    """What one compaction instant rewrites; one operation per file group."""

    operations: tuple[CompactionOperation, ...]
    extra_metadata: Mapping[str, str] = field(default_factory=dict)
    version: int = PLAN_VERSION
    # Partitions with file slices to compact that this plan leaves out (its strategy's partition
    # filter or bound): Hudi 1.x's incremental scheduling plans them next (table versions 8 and 9).
    missing_partitions: tuple[str, ...] = ()

    @property
    def groups(self) -> frozenset[tuple[str, str]]:
        return frozenset(op.group for op in self.operations)

    @property
    def total_io_mb(self) -> float:
        return sum(op.io_mb for op in self.operations)

    def to_avro(self) -> dict[str, Any]:
        """The record under Hudi 1.x's schema; 0.x's (table version 6) has the first three fields."""
        return {
            "operations": [op.to_avro() for op in self.operations],
            "extraMetadata": dict(self.extra_metadata),
            "version": self.version,
            "strategy": None,
            "preserveHoodieMetadata": False,  # as Hudi 1.x's compaction planner leaves it
            "missingSchedulePartitions": list(self.missing_partitions),
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any], source: str = "compaction plan") -> CompactionPlan:
        ops = tuple(CompactionOperation.from_avro(op, source) for op in record.get("operations") or ())
        missing = tuple(record.get("missingSchedulePartitions") or ())
        return cls(ops, dict(record.get("extraMetadata") or {}), int(record.get("version") or 1), missing)

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly description (CLI output, Airflow XCom)."""
        return {
            "operations": len(self.operations),
            "log_files": sum(op.log_file_count for op in self.operations),
            "total_io_mb": round(self.total_io_mb, 6),
            "file_groups": [
                {
                    "partition": op.partition,
                    "file_id": op.file_id,
                    "base_instant": op.base_instant,
                    "base_file": op.data_file_name,
                    "log_files": list(op.delta_file_names),
                }
                for op in self.operations
            ],
        }
