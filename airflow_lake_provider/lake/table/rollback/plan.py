"""A rollback plan: Hudi's ``HoodieRollbackPlan`` (stored in ``<r>.rollback.requested``) as frozen
dataclasses, and the ``HoodieRollbackMetadata`` of a completed rollback."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_lake_provider.lake.errors import CorruptTimelineFileError, UnsafePathError
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition
from airflow_lake_provider.lake.timeline.instant import Action

PLAN_VERSION = 1


@dataclass(frozen=True)
class RollbackRequest:
    """What one file group of the target loses: files to delete, log files to append a rollback
    command block to (path -> size when planned). Paths are table-relative."""

    partition: str
    file_id: str | None
    latest_base_instant: str | None
    files_to_delete: tuple[str, ...] = ()
    logs_to_mark: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class RollbackPlan:
    """Roll back ``target`` (time and action); ``requests`` name every file it touched."""

    target_time: str
    target_action: Action
    requests: tuple[RollbackRequest, ...]

    @property
    def files_to_delete(self) -> list[str]:
        return [f for r in self.requests for f in r.files_to_delete]

    @property
    def logs_to_mark(self) -> list[str]:
        return [f for r in self.requests for f, _ in r.logs_to_mark]

    def to_avro(self, storage: Storage) -> bytes:
        """Hudi stores absolute paths in the plan; ours are the table's ``uri`` of each file."""
        record = {
            "instantToRollback": {"commitTime": self.target_time, "action": self.target_action.value},
            "RollbackRequests": [
                {
                    "partitionPath": r.partition,
                    "fileId": r.file_id,
                    "latestBaseInstant": r.latest_base_instant,
                    "filesToBeDeleted": [storage.uri(f) for f in r.files_to_delete],
                    "logBlocksToBeDeleted": {storage.uri(f): size for f, size in r.logs_to_mark} or None,
                }
                for r in self.requests
            ],
            "version": PLAN_VERSION,
        }
        return timeline_avro.write_avro(timeline_avro.ROLLBACK_PLAN, record)

    @classmethod
    def from_record(cls, record: Mapping[str, Any], source: str, storage: Storage) -> RollbackPlan:
        """Read a stored plan; every path must lie inside the table (``UnsafePathError`` names it)."""
        target = record.get("instantToRollback")
        if not target:
            raise CorruptTimelineFileError(f"{source}: the rollback plan names no instant to roll back")
        try:
            action = Action(target["action"])
        except ValueError:
            raise CorruptTimelineFileError(f"{source}: unknown action {target['action']!r}") from None
        requests = []
        for r in record.get("RollbackRequests") or []:
            requests.append(
                RollbackRequest(
                    partition=r["partitionPath"],
                    file_id=r.get("fileId"),
                    latest_base_instant=r.get("latestBaseInstant"),
                    files_to_delete=tuple(
                        in_table(storage, f, r["partitionPath"]) for f in r.get("filesToBeDeleted") or ()
                    ),
                    logs_to_mark=tuple(
                        (in_table(storage, f, r["partitionPath"]), size)
                        for f, size in sorted((r.get("logBlocksToBeDeleted") or {}).items())
                    ),
                )
            )
        return cls(target["commitTime"], action, tuple(requests))


def in_table(storage: Storage, path: str, partition: str) -> str:
    """A plan's path, table-relative. A plan written where the table lived before (it was copied or
    moved: Hudi's plans hold absolute paths) names files elsewhere; a Hudi data file name in the
    request's partition is that file here. Anything else outside the table is refused."""
    try:
        return storage.check_deletable(path)
    except UnsafePathError:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if BaseFileName.parse(name) is None and LogFileName.parse(name) is None:
            raise
        return storage.check_deletable(join_partition(partition, name))


@dataclass(frozen=True)
class RollbackOutcome:
    """What executing a plan did (per file, table-relative)."""

    deleted: tuple[str, ...]
    failed: tuple[str, ...]
    marked: tuple[tuple[str, int], ...]  # log file -> its size after the rollback block


def rollback_metadata(
    rollback_time: str,
    plan: RollbackPlan,
    outcome: RollbackOutcome,
    millis: int,
    storage: Storage,
    hudi_1x: bool = False,
) -> bytes:
    """``HoodieRollbackMetadata`` (absolute paths, as Hudi writes them). ``hudi_1x`` (versions 8/9):
    under Hudi 1.x's schema, with empty ``rollbackLogFiles``/``logFilesFromFailedCommit`` maps as a
    Hudi 1.x rollback that deleted the failed write's files writes them (no log is ever marked)."""
    partitions: dict[str, dict[str, Any]] = {}
    empty_maps: dict[str, Any] = (
        {"rollbackLogFiles": {}, "logFilesFromFailedCommit": {}} if hudi_1x else {"rollbackLogFiles": None}
    )

    def entry(partition: str) -> dict[str, Any]:
        return partitions.setdefault(
            partition,
            {
                "partitionPath": partition,
                "successDeleteFiles": [],
                "failedDeleteFiles": [],
                **empty_maps,
            },
        )

    def partition_of(rel: str) -> str:
        return rel.rpartition("/")[0]

    for rel in outcome.deleted:
        entry(partition_of(rel))["successDeleteFiles"].append(storage.uri(rel))
    for rel in outcome.failed:
        entry(partition_of(rel))["failedDeleteFiles"].append(storage.uri(rel))
    for rel, size in outcome.marked:
        meta = entry(partition_of(rel))
        meta["rollbackLogFiles"] = {**(meta["rollbackLogFiles"] or {}), storage.uri(rel): size}
    for request in plan.requests:
        entry(request.partition)
    record = {
        "startRollbackTime": rollback_time,
        "timeTakenInMillis": millis,
        "totalFilesDeleted": len(outcome.deleted),
        "commitsRollback": [plan.target_time],
        "partitionMetadata": partitions,
        "version": PLAN_VERSION,
        "instantsRollback": [{"commitTime": plan.target_time, "action": plan.target_action.value}],
    }
    return timeline_avro.write_avro_for(timeline_avro.ROLLBACK_METADATA, record, hudi_1x)
