"""Restore: roll the table back to a savepoint (Hudi's ``restore`` action).

Durable order: ``<r>.restore.requested`` (``HoodieRestorePlan``: every write and compaction after the
savepoint, pending clusterings first, then newest first) -> ``<r>.restore.inflight`` -> one
rollback per instant, in the plan's order (each its own resumable ``.rollback``) -> ``<r>.restore``
(``HoodieRestoreMetadata`` holding each rollback's metadata). A crash leaves a pending restore that
``restore`` finishes from its plan; writers refuse to start while one is pending. Irreversible: the
rolled-back writes are gone.

Under ``lake.metadata-table.maintain`` (v8/v9, an MDT of ``files``, ``column_stats``,
``partition_stats``) each of those rollbacks removes its instant's MDT deltacommit while the instant
is pending, as the rollback of one instant does (its completed file, its files, its MDT deltacommit,
its pending files): the MDT then lists the savepoint's files again, with their stats, and no MDT
deltacommit of a rolled-back instant is left for Hudi 1.x readers to merge (they count the instants a
completed restore rolled back as valid). Java restores the MDT to the savepoint instead and resyncs
it from a listing; the listing is the same. A restore that would roll back a completed instant an
MDT compaction (or log compaction, indexing, partition initialisation) came after is refused before
anything is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.table.metadata.policy import (
    drops_metadata_table,
    guard_mutation,
)
from airflow_lake_provider.lake.table.metadata.services import services_after_commit
from airflow_lake_provider.lake.table.rollback.executor import (
    ROLLBACK_LOCK_WAIT_SECONDS,
    finish_pending_locked,
    is_clustering,
    refuse_unfinishable_locked,
    rollback_instant_locked,
)
from airflow_lake_provider.lake.table.rollback.planner import ROLLBACK_ACTIONS
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreResult:
    instant: str | None  # the restore instant (None: nothing after the savepoint)
    savepoint: str
    rolled_back: tuple[str, ...]  # newest first
    resumed: bool = False


def _to_undo(timeline: Timeline, savepoint: str, is_mor: bool) -> list[Instant]:
    """What a restore rolls back, in order: as Hudi's restore planner (0.x and 1.x), first the
    pending clusterings requested after the savepoint, newest first, then every other write and
    compaction after the savepoint, newest first.

    Versions 8/9 (as Hudi 1.x's restore planner): "after" and "newest" by completion time, pending
    instants (no completion time) newest of all; on a merge-on-read table a compaction compares by
    requested time (completing after a later deltacommit, it still came before it: that
    deltacommit's logs belong to its slice)."""
    clustering = [
        i for i in reversed(timeline.pending) if i.timestamp > savepoint and is_clustering(timeline, i)
    ]
    first = {i.timestamp for i in clustering}
    writes = [
        i
        for i in timeline.instants
        if (i.action in ROLLBACK_ACTIONS or i.action is Action.COMPACTION or timeline.is_compaction(i))
        and i.timestamp not in first
    ]
    if not timeline.layout.has_completion_times:
        return clustering + [i for i in reversed(writes) if i.timestamp > savepoint]
    point = timeline.completion_time(savepoint) or savepoint

    def after(i: Instant) -> bool:
        if i.completion_time is None or (is_mor and timeline.is_compaction(i)):
            return i.timestamp > savepoint
        return i.completion_time > point

    pending = [i for i in writes if i.completion_time is None]
    completed = [i for i in writes if i.completion_time is not None]
    ordered = sorted(completed, key=lambda i: (i.completion_time or "", i.timestamp)) + sorted(
        pending, key=lambda i: i.timestamp
    )
    return clustering + [i for i in reversed(ordered) if after(i)]


def _check(table: LakeTable, timeline: Timeline, savepoint: str) -> list[Instant]:
    if not any(s.timestamp == savepoint for s in timeline.savepoints()):
        known = ", ".join(s.timestamp for s in timeline.savepoints()) or "none"
        raise RollbackError(f"{table.uri}: there is no savepoint at {savepoint} (savepoints: {known})")
    commit = timeline.get(savepoint)
    archived = commit is None and not any(i.timestamp < savepoint for i in timeline.instants)
    if not archived and (commit is None or not commit.is_completed):
        # An earlier version let a savepoint be made on a commit a pending rollback then undid.
        raise RollbackError(f"{table.uri}: the commit of savepoint {savepoint} is no longer on the timeline")
    later = [s.timestamp for s in timeline.savepoints() if s.timestamp > savepoint]
    if later:
        raise RollbackError(
            f"{table.uri}: savepoint(s) {', '.join(later)} are later than {savepoint}; delete them first "
            "(lake savepoint delete)"
        )
    return _to_undo(timeline, savepoint, table.config.is_mor)


def pending_restore(timeline: Timeline) -> tuple[Instant, dict[str, Any]] | None:
    pending = timeline.filter([Action.RESTORE], [State.REQUESTED, State.INFLIGHT])
    if not pending:
        return None
    requested = Instant(pending[0].timestamp, State.REQUESTED, Action.RESTORE)
    return pending[0], timeline.avro_record(requested)


def restore(table: LakeTable, savepoint: str, options: Mapping[str, object] | None = None) -> RestoreResult:
    """Roll back every instant after ``savepoint`` (newest first); finish a pending restore first.
    ``options`` are read only for the metadata table's (see ``metadata.policy``): once the restore
    instant completed, the MDT's own services run when due (``metadata.services``; a failure there
    is logged, the restore stands)."""
    result = _restore(table, savepoint, options)
    if result.instant is not None:  # after the write lock: the services take it themselves
        services_after_commit(table, options)
    return result


def _restore(table: LakeTable, savepoint: str, options: Mapping[str, object] | None) -> RestoreResult:
    if drops_metadata_table(table, options):  # a savepoint it refuses anyway: refused before the drop
        before = table.timeline()
        if pending_restore(before) is None:
            _check(table, before, savepoint)
    # Kept under maintain: each rollback below removes its instant's MDT deltacommit, or records
    # the files it deletes in its own (metadata/undo.py).
    guard_mutation(table, "restore", options, maintains=True)
    with table.store.exclusive(WRITE_LOCK, wait_seconds=ROLLBACK_LOCK_WAIT_SECONDS):
        started = time.monotonic()
        timeline = table.timeline()
        found = pending_restore(timeline)
        resumed = found is not None
        if found is not None:
            r, plan = found
            planned = plan.get("savepointToRestoreTimestamp")
            if planned != savepoint:
                raise RollbackError(
                    f"{table.uri}: a restore to savepoint {planned} is pending (instant {r.timestamp}); "
                    f"finish it first: lake restore {table.uri} --savepoint {planned}"
                )
            targets = [i["commitTime"] for i in plan.get("instantsToRollback") or []]
        else:
            undo = _check(table, timeline, savepoint)
            if not undo:
                return RestoreResult(None, savepoint, ())
            # A pending rollback its finishing (below) would refuse: refused before the restore starts.
            refuse_unfinishable_locked(table)
            targets = [i.timestamp for i in undo]
            record = {
                "instantsToRollback": [{"commitTime": i.timestamp, "action": i.action.value} for i in undo],
                "version": 2,
                "savepointToRestoreTimestamp": savepoint,
            }
            r = table.store.create_requested(
                table.clock.next(after=timeline.latest_time),
                Action.RESTORE,
                timeline_avro.write_avro(timeline_avro.RESTORE_PLAN, record),
            )
        if r.is_requested:
            r = table.store.transition_to_inflight(r, b"")
        finish_pending_locked(table)
        for target in targets:
            current = table.timeline().get(target)
            if current is None:
                continue  # rolled back before a crash
            # Intermediate states need not read whole: the restore ends on the savepoint's files.
            rollback_instant_locked(
                table, target, force=current.is_completed, compaction=True, restoring=True
            )
        metadata = _metadata(table, r.timestamp, targets, int((time.monotonic() - started) * 1000))
        hudi_1x = table.layout.has_completion_times  # its rollback metadata has 1.x's schema
        table.store.transition_to_completed(
            r, timeline_avro.write_avro_for(timeline_avro.RESTORE_METADATA, metadata, hudi_1x)
        )
        log.info("restored %s to savepoint %s: rolled back %s", table.uri, savepoint, targets)
        return RestoreResult(r.timestamp, savepoint, tuple(targets), resumed)


def _metadata(table: LakeTable, r: str, targets: list[str], millis: int) -> dict[str, Any]:
    timeline = table.timeline()
    by_target: dict[str, list[dict[str, Any]]] = {}
    actions: dict[str, str] = {}
    for rb in timeline.filter([Action.ROLLBACK], [State.COMPLETED]):
        if rb.timestamp <= r:
            continue
        record = timeline.avro_record(rb)
        for info in record.get("instantsRollback") or []:
            actions[info["commitTime"]] = info["action"]
        for t in record.get("commitsRollback") or []:
            if t in targets:
                by_target.setdefault(t, []).append(record)
    return {
        "startRestoreTime": r,
        "timeTakenInMillis": millis,
        "instantsToRollback": targets,
        "hoodieRestoreMetadata": by_target,
        "version": 1,
        "restoreInstantInfo": [{"commitTime": t, "action": actions.get(t, "commit")} for t in targets],
        "extraMetadata": None,
    }
