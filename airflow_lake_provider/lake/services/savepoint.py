"""Savepoints: a completed commit whose files every clean keeps, until the savepoint is deleted."""

from __future__ import annotations

import getpass
import time
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import SavepointError
from airflow_lake_provider.lake.format import timeline_avro
from airflow_lake_provider.lake.format.commit_metadata import WriteStat, join_partition
from airflow_lake_provider.lake.format.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.format.instant import COMMIT_ACTIONS, Action, State, validate_instant_time
from airflow_lake_provider.lake.table.fs_view import FileSystemView
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.timeline import Timeline


@dataclass(frozen=True)
class Savepoint:
    instant: str
    files: frozenset[str]  # table-relative paths


def savepoints(timeline: Timeline) -> list[Savepoint]:
    """Every completed savepoint with the files it keeps."""
    out = []
    for instant in timeline.savepoints():
        record = timeline.avro_record(instant)
        files = {
            join_partition(meta.get("partitionPath") or partition, name)
            for partition, meta in (record.get("partitionMetadata") or {}).items()
            for name in meta.get("savepointDataFile") or []
        }
        out.append(Savepoint(instant.timestamp, frozenset(files)))
    return out


def savepointed_files(timeline: Timeline) -> frozenset[str]:
    return frozenset(f for sp in savepoints(timeline) for f in sp.files)


def create_savepoint(table: LakeTable, instant: str, user: str | None = None, comment: str = "") -> Savepoint:
    """Savepoint the completed commit ``instant``: record the files of every slice it reads."""
    validate_instant_time(instant)
    timeline = table.timeline()
    target = timeline.get(instant)
    if target is None or target.action not in COMMIT_ACTIONS or target.state is not State.COMPLETED:
        raise SavepointError(f"{table.uri}: {instant} is not a completed commit on the timeline")
    last_clean = timeline.last_completed(Action.CLEAN)
    if last_clean is not None:
        retained = timeline.avro_record(last_clean).get("earliestCommitToRetain") or ""
        if retained and instant < retained:
            raise SavepointError(
                f"{table.uri}: {instant} is older than {retained}, the earliest commit the last clean "
                f"({last_clean.timestamp}) retained; its files may be gone"
            )
    view = table.file_system_view(timeline)
    _check_slices_present(timeline, view, instant, table)
    per_partition: dict[str, list[str]] = {}
    for slice_ in view.latest_slices(as_of=instant):
        for f in slice_.files:
            per_partition.setdefault(slice_.partition, []).append(f.file_name)
    record = {
        "savepointedBy": user or getpass.getuser(),
        "savepointedAt": int(time.time()),
        "comments": comment,
        "partitionMetadata": {
            p: {"partitionPath": p, "savepointDataFile": sorted(names)}
            for p, names in sorted(per_partition.items())
        },
        "version": 1,
    }
    table.store.create_savepoint(instant, timeline_avro.write_avro(timeline_avro.SAVEPOINT_METADATA, record))
    files = frozenset(join_partition(p, n) for p, names in per_partition.items() for n in names)
    return Savepoint(instant, files)


def _slice_instant(stat: WriteStat) -> str | None:
    """The base instant of the slice a write stat wrote to (base file or log file name)."""
    name = stat.path.rsplit("/", 1)[-1]
    base = BaseFileName.parse(name)
    if base is not None:
        return base.instant
    log_name = LogFileName.parse(name)
    return log_name.base_instant if log_name is not None else None


def _check_slices_present(timeline: Timeline, view: FileSystemView, instant: str, table: LakeTable) -> None:
    """Refuse a savepoint whose snapshot a clean already broke: every file group live at ``instant``
    must still hold the slice that instant read (commit write stats say which one that was)."""
    expected: dict[tuple[str, str], str] = {}
    for commit in timeline.completed_commits:
        if commit.timestamp > instant:
            break
        for stat in timeline.commit_metadata(commit).write_stats():
            at = _slice_instant(stat)
            key = (stat.partition_path, stat.file_id)
            if at is not None and at > expected.get(key, ""):
                expected[key] = at
    for key, at in sorted(expected.items()):
        group = view.groups.get(key)
        if group is not None and view.is_replaced(group, instant):
            continue
        if group is None or not any(s.base_instant == at for s in group.slices):
            raise SavepointError(
                f"{table.uri}: cannot savepoint {instant}: the file slice {at} of file group "
                f"{key[1]} in partition {key[0] or '<root>'} it reads was already cleaned"
            )


def delete_savepoint(table: LakeTable, instant: str) -> None:
    """Drop the savepoint at ``instant``; its files become cleanable by the next clean."""
    validate_instant_time(instant)
    if not any(i.timestamp == instant for i in table.timeline().savepoints()):
        raise SavepointError(f"{table.uri}: there is no completed savepoint at {instant}")
    table.store.remove_savepoint(instant)


__all__ = ["Savepoint", "create_savepoint", "delete_savepoint", "savepointed_files", "savepoints"]
