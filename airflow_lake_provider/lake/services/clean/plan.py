"""A clean plan: the files a clean deletes per partition, and the earliest instant it retains; as
Hudi's ``HoodieCleanerPlan`` (Avro, versions 1 and 2) reads and writes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from airflow_lake_provider.lake.services.clean.config import CleanPolicy
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State

PLAN_VERSION = 2


@dataclass(frozen=True)
class CleanPlan:
    """What one clean deletes: table-relative paths per partition (plus, not persisted, their sizes)."""

    earliest_instant_to_retain: Instant | None
    last_completed_commit: str
    policy: CleanPolicy
    files_per_partition: Mapping[str, tuple[str, ...]]
    file_sizes: Mapping[str, int] = field(default_factory=dict, compare=False)
    extra_metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def file_count(self) -> int:
        return sum(len(v) for v in self.files_per_partition.values())

    def without(self, kept: frozenset[str]) -> CleanPlan:
        """The same plan minus the files in ``kept`` (e.g. savepointed after the plan was made)."""
        files = {
            part: tuple(p for p in paths if p not in kept) for part, paths in self.files_per_partition.items()
        }
        return replace(self, files_per_partition=MappingProxyType({p: f for p, f in files.items() if f}))

    def summary(self) -> dict[str, dict[str, int]]:
        """Files and bytes per partition (bytes unknown for plans read back from the timeline: 0)."""
        return {
            part: {"files": len(paths), "bytes": sum(self.file_sizes.get(p, 0) for p in paths)}
            for part, paths in sorted(self.files_per_partition.items())
        }

    def to_avro(self, base_path: str) -> dict[str, Any]:
        """The ``HoodieCleanerPlan`` record (v2): absolute file paths, as Java writes them."""
        ecr = self.earliest_instant_to_retain
        return {
            "earliestInstantToRetain": (
                {"timestamp": ecr.timestamp, "action": ecr.action.value, "state": ecr.state.name}
                if ecr
                else None
            ),
            "lastCompletedCommitTimestamp": self.last_completed_commit,
            "policy": self.policy.value,
            "filesToBeDeletedPerPartition": {},
            "version": PLAN_VERSION,
            "filePathsToBeDeletedPerPartition": {
                part: [
                    {"filePath": f"{base_path.rstrip('/')}/{p}", "isBootstrapBaseFile": False} for p in paths
                ]
                for part, paths in self.files_per_partition.items()
            },
            "partitionsToBeDeleted": [],
            "extraMetadata": dict(self.extra_metadata) or None,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any], base_path: str) -> CleanPlan:
        """Read a stored plan (ours or Java's, v1 file names or v2 paths) back as table-relative paths."""
        ecr = record.get("earliestInstantToRetain")
        earliest = None
        if ecr and ecr.get("timestamp"):
            earliest = Instant(
                ecr["timestamp"], State[ecr.get("state") or "COMPLETED"], Action(ecr["action"])
            )
        files: dict[str, tuple[str, ...]] = {}
        for part, infos in (record.get("filePathsToBeDeletedPerPartition") or {}).items():
            files[part] = tuple(_relative(info.get("filePath") or "", base_path) for info in infos)
        for part, names in (record.get("filesToBeDeletedPerPartition") or {}).items():
            if part not in files:
                files[part] = tuple(f"{part}/{n}" if part else n for n in names)
        return cls(
            earliest_instant_to_retain=earliest,
            last_completed_commit=record.get("lastCompletedCommitTimestamp") or "",
            policy=CleanPolicy(record.get("policy") or CleanPolicy.KEEP_LATEST_COMMITS.value),
            files_per_partition=MappingProxyType(files),
            extra_metadata=MappingProxyType(dict(record.get("extraMetadata") or {})),
        )


def _relative(path: str, base_path: str) -> str:
    """Table-relative form of a plan path; anything else is returned as is for the executor to refuse."""
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            path = path[len(prefix) :]
            break
    base = base_path.rstrip("/") + "/"
    return path[len(base) :] if path.startswith(base) else path
