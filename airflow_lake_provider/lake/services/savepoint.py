"""Savepoints: a completed commit whose files every clean keeps, until the savepoint is deleted."""

from __future__ import annotations

import getpass
import logging
import time
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import SavepointError
from airflow_lake_provider.lake.services.clean.plan import CleanPlan
from airflow_lake_provider.lake.table.rollback.executor import refuse_while_restoring
from airflow_lake_provider.lake.table.rollback.undone import pending_rollback_targets
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition
from airflow_lake_provider.lake.timeline.instant import COMMIT_ACTIONS, Action, State, validate_instant_time

log = logging.getLogger(__name__)
# A running clean holds the lock for its deletes; a savepoint waits that long for it.
SAVEPOINT_LOCK_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class Savepoint:
    instant: str
    files: frozenset[str]  # table-relative paths
    # Pending cleans whose stored plans name some of ``files``: they will keep those files.
    overrides: tuple[str, ...] = ()


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


def create_savepoint(
    table: LakeTable,
    instant: str,
    user: str | None = None,
    comment: str = "",
    wait_seconds: float = SAVEPOINT_LOCK_WAIT_SECONDS,
) -> Savepoint:
    """Savepoint the completed commit ``instant``: record the files of every slice it reads.

    Holds the clean lock, so no clean deletes between the checks below and the savepoint's
    creation; a clean that is pending (planned earlier, or killed half way) re-reads the
    savepoints before it deletes and keeps these files (``Savepoint.overrides`` names it).
    """
    validate_instant_time(instant)
    with table.store.exclusive("clean", wait_seconds):
        return _create(table, instant, user, comment)


def _create(table: LakeTable, instant: str, user: str | None, comment: str) -> Savepoint:
    timeline = table.timeline()
    if any(sp.timestamp == instant for sp in timeline.savepoints()):
        raise SavepointError(f"{table.uri}: a savepoint at {instant} already exists")
    target = timeline.get(instant)
    if target is None or target.action not in COMMIT_ACTIONS or target.state is not State.COMPLETED:
        raise SavepointError(f"{table.uri}: {instant} is not a completed commit on the timeline")
    # A pending restore would roll back what it savepoints, or stop on it (writes are refused too).
    refuse_while_restoring(table, timeline, "making a savepoint", SavepointError)
    rolling = pending_rollback_targets(timeline).get(instant)
    if rolling is not None:
        raise SavepointError(
            f"{table.uri}: {instant} is being rolled back by {rolling}, which a crash interrupted: "
            f"lake rollback {table.uri} finishes that"
        )
    last_clean = timeline.last_completed(Action.CLEAN)
    if last_clean is not None:
        retained = timeline.avro_record(last_clean).get("earliestCommitToRetain") or ""
        if retained and instant < retained:
            raise SavepointError(
                f"{table.uri}: {instant} is older than {retained}, the earliest commit the last clean "
                f"({last_clean.timestamp}) retained; its files may be gone"
            )
    view = table.file_system_view(timeline)
    missing = view.missing_slices(instant)
    if missing:
        partition, file_id, at = missing[0]
        raise SavepointError(
            f"{table.uri}: cannot savepoint {instant}: the file slice {at} of file group "
            f"{file_id} in partition {partition or '<root>'} it reads was already cleaned"
        )
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
    overrides = _pending_cleans_needing(table, timeline, files)
    if overrides:
        log.warning(
            "savepoint %s of %s overrides pending clean(s) %s: they will keep its files",
            instant,
            table.uri,
            ", ".join(overrides),
        )
    return Savepoint(instant, files, overrides)


def _pending_cleans_needing(table: LakeTable, timeline: Timeline, files: frozenset[str]) -> tuple[str, ...]:
    """Pending cleans whose stored plans would delete any of ``files``."""
    found = []
    for pending in timeline.filter([Action.CLEAN], [State.REQUESTED, State.INFLIGHT]):
        requested = pending.with_state(State.REQUESTED)
        plan = CleanPlan.from_avro(timeline.avro_record(requested), table.uri)
        if any(p in files for paths in plan.files_per_partition.values() for p in paths):
            found.append(pending.timestamp)
    return tuple(found)


def delete_savepoint(table: LakeTable, instant: str) -> None:
    """Drop the savepoint at ``instant``; its files become cleanable by the next clean."""
    validate_instant_time(instant)
    if not any(i.timestamp == instant for i in table.timeline().savepoints()):
        raise SavepointError(f"{table.uri}: there is no completed savepoint at {instant}")
    table.store.remove_savepoint(instant)


__all__ = ["Savepoint", "create_savepoint", "delete_savepoint", "savepointed_files", "savepoints"]
