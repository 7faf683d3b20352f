"""Read-only views of instants for ``lake timeline -v`` and ``lake show`` (what hudi-cli shows).

Everything comes from the timeline files: commit metadata for writes and compactions, the stored
plans of pending services, the metadata of completed cleans and rollbacks. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.services.clean.executor import stored_plan
from airflow_lake_provider.lake.services.compaction.operation import load_plan
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, join_partition
from airflow_lake_provider.lake.timeline.instant import (
    COMMIT_ACTIONS,
    Action,
    Instant,
    State,
    validate_instant_time,
)

# The per-instant facts of ``lake timeline -v`` (``None`` where the instant records no such fact).
STAT_FIELDS = (
    "operation",
    "records_written",
    "records_updated",
    "records_deleted",
    "files_added",
    "files_removed",
)


def _partition_files(metadata: Mapping[str, Any]) -> dict[str, list[str]]:
    """``{partition: [table-relative paths]}`` of a clean's or rollback's ``successDeleteFiles``."""
    files: dict[str, list[str]] = {}
    for part, entry in sorted((metadata or {}).items()):
        names = [n.rsplit("/", 1)[-1] for n in (entry or {}).get("successDeleteFiles") or ()]
        files[part] = sorted(join_partition(part, n) for n in names)
    return files


def _commit_stats(metadata: CommitMetadata) -> dict[str, Any]:
    stats = metadata.write_stats()
    replaced = metadata.partition_to_replace_file_ids or {}
    return {
        "operation": metadata.operation_type,
        "records_written": sum(s.num_writes for s in stats),
        "records_updated": sum(s.num_update_writes for s in stats),
        "records_deleted": sum(s.num_deletes for s in stats),
        "files_added": len(stats),
        "files_removed": sum(len(ids) for ids in replaced.values()),
    }


def instant_stats(timeline: Timeline, instant: Instant) -> dict[str, Any]:
    """What ``instant`` did, for ``lake timeline -v``: the :data:`STAT_FIELDS`.

    A completed write or compaction: its operation, records written/updated/deleted (summed over its
    write stats), files added (each file it wrote: base or log) and removed (file groups it replaced).
    A completed clean or rollback: the files it deleted. Pending instants and other actions: ``None``s.
    """
    empty: dict[str, Any] = dict.fromkeys(STAT_FIELDS)
    if not instant.is_completed:
        return empty
    if instant.action in COMMIT_ACTIONS:
        return _commit_stats(timeline.commit_metadata(instant))
    if instant.action in (Action.CLEAN, Action.ROLLBACK):
        record = timeline.avro_record(instant)
        return {
            **empty,
            "operation": instant.action.value.upper(),
            "files_removed": int(record.get("totalFilesDeleted") or 0),
        }
    return empty


def find_instant(table: LakeTable, timeline: Timeline, timestamp: str) -> Instant:
    """The instant at ``timestamp`` on the active timeline, or a :class:`LakeError` naming it."""
    found = timeline.get(timestamp)
    if found is None:
        points = [i for i in timeline.savepoints() if i.timestamp == timestamp]
        if points:
            return points[0]
        try:
            validate_instant_time(timestamp)
        except LakeError as exc:  # a malformed time is not "archived": say what is wrong with it
            raise LakeError(f"{table.uri}: no instant {timestamp}: {exc}") from None
        active = timeline.instants[len(timeline.archived) :]
        older = bool(active) and timestamp < active[0].timestamp
        if older and timeline.history is not None:  # versions 8 and 9: the history was asked
            why = " nor in its LSM history (older than its first instant: never written, or rolled back)"
        else:
            why = " (older than its first instant: archived, or never written)" if older else ""
        raise LakeError(f"{table.uri}: no instant {timestamp} on the active timeline{why}")
    return found


def _commit_details(timeline: Timeline, instant: Instant) -> dict[str, Any]:
    metadata = timeline.commit_metadata(instant)
    replaced = metadata.partition_to_replace_file_ids or {}
    partitions: dict[str, Any] = {}
    for part in sorted(metadata.partitions):
        files = [
            {
                "path": s.path,
                "file_id": s.file_id,
                "prev_commit": s.prev_commit,
                "records_written": s.num_writes,
                "records_updated": s.num_update_writes,
                "records_inserted": s.num_inserts,
                "records_deleted": s.num_deletes,
                "bytes_written": s.total_write_bytes,
            }
            for s in sorted(metadata.partition_to_write_stats.get(part, ()), key=lambda s: s.path)
        ]
        partitions[part] = {"files": files, "replaced_file_ids": sorted(replaced.get(part, ()))}
    return {
        **_commit_stats(metadata),
        "records_inserted": sum(s.num_inserts for s in metadata.write_stats()),
        "bytes_written": sum(s.total_write_bytes for s in metadata.write_stats()),
        "compaction": instant.timestamp in timeline.compaction_times,
        "partitions": partitions,
    }


def _compaction_plan(timeline: Timeline, instant: Instant) -> dict[str, Any]:
    plan = load_plan(timeline, instant.timestamp)
    operations = [
        {
            "partition": op.partition,
            "file_id": op.file_id,
            "base_instant": op.base_instant,
            "base_file": op.data_file_name,
            "log_files": list(op.delta_file_names),
            "io_mb": round(op.io_mb, 3),
        }
        for op in sorted(plan.operations, key=lambda op: op.group)
    ]
    return {"operations": operations, "total_io_mb": round(plan.total_io_mb, 3)}


def _clean_plan(table: LakeTable, timeline: Timeline, instant: Instant) -> dict[str, Any]:
    plan = stored_plan(table, timeline, instant)
    retain = plan.earliest_instant_to_retain
    return {
        "policy": plan.policy.value,
        "earliest_commit_to_retain": retain.timestamp if retain else None,
        "files_to_delete": {part: sorted(paths) for part, paths in sorted(plan.files_per_partition.items())},
    }


def _rollback_plan(timeline: Timeline, instant: Instant) -> dict[str, Any]:
    record = timeline.avro_record(Instant(instant.timestamp, State.REQUESTED, Action.ROLLBACK))
    target = record.get("instantToRollback") or {}
    files: dict[str, list[str]] = {}
    for request in record.get("RollbackRequests") or ():
        part = request.get("partitionPath") or ""
        names = [n.rsplit("/", 1)[-1] for n in request.get("filesToBeDeleted") or ()]
        files.setdefault(part, []).extend(join_partition(part, n) for n in names)
    return {
        "rolls_back": {"instant": target.get("commitTime"), "action": target.get("action")},
        "files_to_delete": {part: sorted(paths) for part, paths in sorted(files.items())},
    }


def instant_details(table: LakeTable, timestamp: str) -> dict[str, Any]:
    """What ``lake show PATH INSTANT`` prints: the instant's plan or metadata, JSON-ready.

    A completed write or compaction: its commit metadata (partitions, files, record counts). A
    pending compaction: its plan's operations. A clean: its plan's files (pending) or the files it
    deleted (completed). A rollback: the instant it rolls back and the files of its plan (pending)
    or the files it deleted (completed). A savepoint: the files it keeps (with its commit, whose time
    it shares). A pending write: no details (it records none until it completes).
    """
    timeline = table.timeline()
    archived = timeline.history is not None and timeline.get(timestamp) is None
    if archived and timeline.history is not None and timeline.history.holds(timestamp):
        # Table versions 8 and 9: an instant older than the active timeline, from the LSM history.
        timeline = timeline.with_history(timestamp)
    instant = find_instant(table, timeline, timestamp)
    out: dict[str, Any] = {
        "instant": instant.timestamp,
        "action": instant.action.value,
        "state": instant.state.name,
    }
    if timeline.archived and instant in timeline.instants[: len(timeline.archived)]:
        out["archived"] = True
    if instant.completion_time is not None:  # table versions 8 and 9
        out["completion_time"] = instant.completion_time
    completed = instant.is_completed
    if instant.action in COMMIT_ACTIONS and completed:
        out.update(_commit_details(timeline, instant))
    elif instant.action is Action.COMPACTION:
        out.update(_compaction_plan(timeline, instant))
    elif instant.action is Action.CLEAN and not completed:
        out.update(_clean_plan(table, timeline, instant))
    elif instant.action is Action.CLEAN:
        record = timeline.avro_record(instant)
        out.update(
            earliest_commit_to_retain=record.get("earliestCommitToRetain") or None,
            files_removed=int(record.get("totalFilesDeleted") or 0),
            deleted_files=_partition_files(record.get("partitionMetadata") or {}),
        )
    elif instant.action is Action.ROLLBACK and not completed:
        out.update(_rollback_plan(timeline, instant))
    elif instant.action is Action.ROLLBACK:
        record = timeline.avro_record(instant)
        out.update(
            rolled_back=list(record.get("commitsRollback") or ()),
            files_removed=int(record.get("totalFilesDeleted") or 0),
            deleted_files=_partition_files(record.get("partitionMetadata") or {}),
        )
    elif instant.action is Action.SAVEPOINT and completed:
        out.update(_savepoint_details(timeline, instant))
    if instant.action is not Action.SAVEPOINT:
        # A savepoint has its commit's time: the commit's details carry what the savepoint keeps.
        for point in timeline.savepoints():
            if point.timestamp == instant.timestamp and point.is_completed:
                out.update(_savepoint_details(timeline, point))
    return out


def _savepoint_details(timeline: Timeline, instant: Instant) -> dict[str, Any]:
    record = timeline.avro_record(instant)
    kept = {
        part: sorted(
            join_partition(part, n.rsplit("/", 1)[-1]) for n in (e or {}).get("savepointDataFile") or ()
        )
        for part, e in sorted((record.get("partitionMetadata") or {}).items())
    }
    return {"savepointed_by": record.get("savepointedBy") or None, "files_kept": kept}


def _count(value: object) -> str:
    return "-" if value is None else str(value)


def stats_line(stats: Mapping[str, Any]) -> str:
    """The ``lake timeline -v`` columns after time, action and state."""
    return (
        f"{_count(stats['operation']):<14} written={_count(stats['records_written'])} "
        f"updated={_count(stats['records_updated'])} deleted={_count(stats['records_deleted'])} "
        f"files_added={_count(stats['files_added'])} files_removed={_count(stats['files_removed'])}"
    )


def details_text(details: Mapping[str, Any]) -> list[str]:
    """``lake show``'s readable text: one fact a line, files indented under their partition."""
    lines = [f"instant {details['instant']} {details['action']} {details['state']}"]
    if details.get("archived"):
        lines[0] += " (archived: from the LSM history)"
    if details.get("completion_time"):
        lines.append(f"completed at {details['completion_time']}")
    if "operation" in details and "partitions" in details:
        lines.append(
            f"operation: {details['operation']}" + (" (compaction)" if details["compaction"] else "")
        )
        lines.append(
            f"records: {details['records_written']} written, {details['records_inserted']} inserted, "
            f"{details['records_updated']} updated, {details['records_deleted']} deleted"
        )
        lines.append(
            f"files: {details['files_added']} written ({details['bytes_written']} bytes), "
            f"{details['files_removed']} file groups replaced"
        )
        for part, entry in details["partitions"].items():
            lines.append(f"partition {part or '<root>'}:")
            for f in entry["files"]:
                lines.append(
                    f"  {f['path']}  written={f['records_written']} updated={f['records_updated']} "
                    f"inserted={f['records_inserted']} deleted={f['records_deleted']} "
                    f"bytes={f['bytes_written']} prev_commit={f['prev_commit']}"
                )
            for file_id in entry["replaced_file_ids"]:
                lines.append(f"  replaced file group {file_id}")
    if "operations" in details:
        lines.append(
            f"compaction plan: {len(details['operations'])} operations, {details['total_io_mb']} MB IO"
        )
        for op in details["operations"]:
            lines.append(
                f"  {join_partition(op['partition'], op['file_id'])}: base {op['base_file'] or '-'} "
                f"(instant {op['base_instant']}), {len(op['log_files'])} log files"
            )
            lines.extend(f"    {name}" for name in op["log_files"])
    if "rolls_back" in details:
        target = details["rolls_back"]
        lines.append(f"rolls back: {target['instant']} {target['action']}")
    if "rolled_back" in details:
        lines.append(f"rolled back: {', '.join(details['rolled_back']) or '-'}")
    if "policy" in details:
        lines.append(f"policy: {details['policy']}")
    if "earliest_commit_to_retain" in details:
        lines.append(f"earliest commit to retain: {details['earliest_commit_to_retain'] or '-'}")
    if "savepointed_by" in details:
        lines.append(f"savepointed by: {details['savepointed_by'] or '-'}")
    for key, title in (
        ("files_to_delete", "files to delete"),
        ("deleted_files", "deleted files"),
        ("files_kept", "files kept"),
    ):
        if key in details:
            files = details[key]
            lines.append(f"{title}: {sum(len(v) for v in files.values())}")
            for part, paths in files.items():
                lines.append(f"  partition {part or '<root>'}:")
                lines.extend(f"    {p}" for p in paths)
    return lines
