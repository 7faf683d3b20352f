"""Executing rollbacks.

Durable order of one rollback ``r`` of instant ``t``:

1. ``<r>.rollback.requested`` holding the plan (from here on the plan is never made again),
2. ``<r>.rollback.inflight``,
3. forced rollback of a completed ``t``: its completed file goes (its files stop being visible),
4. ``t``'s files deleted, rollback command blocks appended to log files other instants share
   (versions 8/9: none, ``t``'s log files are its own and deleted; a version 6 compaction's: also
   the logs later, rolled-back writes put on its slices, ``written.py``),
5. ``t``'s inflight and requested files, markers and heartbeat removed,
6. ``<r>.rollback`` (``HoodieRollbackMetadata``).

A crash anywhere leaves the table reading as before ``t`` (or as with ``t``, before step 3), and the
next rollback of any kind first finishes the pending one from its stored plan: deleting a file
already gone counts as deleted, and a log file already carrying ``r``'s block is not marked twice.
Callers hold the table's write lock (``rollback`` takes it; the writer already holds it).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import (
    LakeError,
    ObjectNotFoundError,
    RollbackError,
    StorageError,
    UnsafePathError,
)
from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes, rollback_command_block
from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
from airflow_lake_provider.lake.table.metadata.policy import (
    drops_metadata_table,
    guard_mutation,
    kept_metadata_table,
)
from airflow_lake_provider.lake.table.metadata.services import services_after_commit
from airflow_lake_provider.lake.table.metadata.undo import why_not_forgettable
from airflow_lake_provider.lake.table.rollback.fallback import check_fallback
from airflow_lake_provider.lake.table.rollback.plan import (
    RollbackOutcome,
    RollbackPlan,
    rollback_metadata,
)
from airflow_lake_provider.lake.table.rollback.planner import check_target, failed_writes, plan
from airflow_lake_provider.lake.table.rollback.policy import (
    FailedWritesConfig,
    FailedWritesPolicy,
    heartbeat_expired,
    now_ms,
)
from airflow_lake_provider.lake.table.rollback.undone import (
    completed_rollback_of,
    is_hudi_retry,
    rolled_back_compactions,
)
from airflow_lake_provider.lake.table.rollback.written import drops_slice, gather, logs_per_instant
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

log = logging.getLogger(__name__)
ROLLBACK_LOCK_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class RollbackResult:
    """One completed rollback: its instant, what it undid and which files it deleted or marked."""

    instant: str
    target: str
    target_action: str
    deleted: tuple[str, ...]
    marked: tuple[str, ...]
    resumed: bool = False  # finished from a plan an earlier run stored
    failed: tuple[str, ...] = ()  # files that could not be deleted (HoodieRollbackMetadata.failedDeleteFiles)

    def to_dict(self) -> dict[str, object]:
        return {
            "instant": self.instant,
            "rolled_back": self.target,
            "action": self.target_action,
            "deleted": list(self.deleted),
            "marked": list(self.marked),
            "resumed": self.resumed,
            "failed": list(self.failed),
        }


def rollback(
    table: LakeTable,
    instant: str | None = None,
    *,
    force: bool = False,
    options: dict[str, str] | None = None,
) -> list[RollbackResult]:
    """Roll back ``instant``, or (none given) every failed write the failed-writes policy allows.

    Pending rollbacks are finished first. Takes the table's write lock (waiting up to 60 s). Once a
    rollback instant completed, the MDT's own services run when due, after the lock (as after a
    write: ``metadata.services``; a failure there is logged, the rollback stands).
    """
    # Parsed first: a bad value changes nothing (no lock file, no metadata table dropped).
    config = FailedWritesConfig.from_options(table.config.properties, options or {})
    if instant is not None and drops_metadata_table(table, options):  # refused anyway: before the drop
        timeline = table.timeline()
        if not any(p[1].target_time == instant for p in _pending_rollbacks(table, timeline)):
            _check(table, timeline, instant, force, False, fallback=True)
    # Kept under the maintain policy: the target's MDT deltacommit goes while it is still pending,
    # or the rollback's own records the files it deletes (metadata/undo.py).
    guard_mutation(table, "rollback", options, maintains=True)
    with table.store.exclusive(WRITE_LOCK, wait_seconds=ROLLBACK_LOCK_WAIT_SECONDS):
        if instant is not None:
            done = rollback_instant_locked(table, instant, force=force)
        else:
            done = rollback_failed_writes_locked(table, config)
    if done:  # a rollback instant completed (the services take the write lock themselves)
        services_after_commit(table, options)
    return done


def eligible_failed_writes(table: LakeTable, timeline: Timeline, config: FailedWritesConfig) -> list[Instant]:
    """Failed writes the policy lets a rollback take now (heartbeats are read before any change)."""
    if config.policy is FailedWritesPolicy.NEVER:
        return []
    # A pending clustering is a table service, finished by its own runner: never a failed write.
    pending = [i for i in failed_writes(timeline) if not is_clustering(timeline, i)]
    if config.policy is FailedWritesPolicy.LAZY:
        now = now_ms()
        pending = [i for i in pending if heartbeat_expired(table.store, i.timestamp, config, now)]
    return pending


def is_clustering(timeline: Timeline, instant: Instant) -> bool:
    """A clustering: a ``clustering`` instant (versions 8/9), or a replacecommit whose requested
    file holds a clustering plan (an insert_overwrite's holds none)."""
    if instant.action is Action.CLUSTERING:
        return True
    if instant.action is not Action.REPLACECOMMIT:
        return False
    requested = Instant(instant.timestamp, State.REQUESTED, Action.REPLACECOMMIT)
    try:
        data = timeline.read_bytes(requested)
    except ObjectNotFoundError:
        return False
    if not data:
        return False
    record = timeline_avro.read_avro_fields(
        data, timeline.path_of(requested), timeline_avro.REQUESTED_REPLACE_METADATA, ("clusteringPlan",)
    )
    return str(record.get("operationType") or "").upper() == "CLUSTER"


def rollback_failed_writes_locked(table: LakeTable, config: FailedWritesConfig) -> list[RollbackResult]:
    timeline = table.timeline()
    eligible = eligible_failed_writes(table, timeline, config)
    done = finish_pending_locked(table)
    finished = {r.target for r in done}
    for instant in eligible:
        # Read after the heartbeats: a writer that is not ours (no write lock) may have committed
        # since, then dropped its heartbeat, which made it look expired. Its commit stays.
        timeline = table.timeline()
        current = timeline.get(instant.timestamp)
        if instant.timestamp in finished or current is None or current.is_completed:
            continue
        done.append(_rollback_one(table, timeline, current))
    return done


def rollback_instant_locked(
    table: LakeTable,
    instant_time: str,
    *,
    force: bool = False,
    compaction: bool = False,
    restoring: bool = False,
) -> list[RollbackResult]:
    """Roll back one instant (pending, or with ``force`` the latest completed commit).

    ``restoring``: a step of a restore, which ends on a savepoint no clean removed; a forced
    rollback on its own must find the slices it falls back to on disk (``fallback``).
    """
    timeline = table.timeline()
    pending = _pending_rollbacks(table, timeline)
    resumed = [p for p in pending if p[1].target_time == instant_time]
    if not resumed:  # refuse before finishing anything else
        _check(table, timeline, instant_time, force, compaction, fallback=not restoring, restoring=restoring)
    done = finish_pending_locked(table)
    if resumed:
        return done
    timeline = table.timeline()
    # The fallback is looked at again only if finishing pending rollbacks changed the table.
    fallback = bool(done) and not restoring
    target = _check(table, timeline, instant_time, force, compaction, fallback=fallback, restoring=restoring)
    return [*done, _rollback_one(table, timeline, target)]


def _check(
    table: LakeTable,
    timeline: Timeline,
    instant_time: str,
    force: bool,
    compaction: bool,
    *,
    fallback: bool,
    restoring: bool = False,
) -> Instant:
    # A restore's plan orders its rollbacks; on v8/9 by Hudi 1.x's rules, under which a kept MOR
    # compaction may have completed after a write the restore undoes (not "the latest" then).
    any_order = restoring and table.layout.has_completion_times
    target = check_target(timeline, instant_time, force, compaction, any_order=any_order)
    if fallback and target.is_completed:
        check_fallback(table, timeline, target)
    return target


def refuse_while_restoring(
    table: LakeTable, timeline: Timeline, doing: str, error: type[LakeError] = RollbackError
) -> None:
    """``error`` while a restore is pending, naming the command that finishes it: its plan was fixed
    when it started, so nothing may change the instants it rolls back meanwhile."""
    restoring = timeline.filter([Action.RESTORE], [State.REQUESTED, State.INFLIGHT])
    if not restoring:
        return
    r = restoring[0].timestamp
    point = "..."
    with contextlib.suppress(LakeError):  # the refusal stands whatever its plan holds
        plan = timeline.avro_record(Instant(r, State.REQUESTED, Action.RESTORE))
        point = str(plan.get("savepointToRestoreTimestamp") or point)
    raise error(
        f"{table.uri}: restore {r} is pending; finish it before {doing} "
        f"(lake restore {table.uri} --savepoint {point})"
    )


def discard_failed_write(table: LakeTable, instant_time: str) -> bool:
    """Undo the pending write ``instant_time`` that the caller started and saw fail, leaving no
    trace (an error changes nothing): no rollback instant is written. ``False`` (nothing done) if a
    log file it touched holds other instants' blocks: those need a rollback block, so a rollback.

    The writer marks every file before making it, so its markers name all it wrote (none: nothing).
    Durable order: its files, its markers, its inflight then requested file, its heartbeat. A crash
    anywhere leaves the instant pending with markers naming what is left, and the next rollback
    finishes it as any failed write's. Callers hold the write lock.
    """
    timeline = table.timeline()
    target = timeline.get(instant_time)
    if target is None or target.is_completed:
        return False
    written = gather(table, timeline, target) if table.store.markers.read(instant_time) else []
    rollback_plan = plan(target, written, logs_per_instant(table))
    if rollback_plan.logs_to_mark:
        return False
    for path in rollback_plan.files_to_delete:
        table.storage.delete_data_file(path)  # already gone counts as deleted
    table.store.markers.delete(instant_time)
    _forget_in_metadata_table(table, instant_time)
    table.store.remove_pending(instant_time)
    table.store.heartbeats.delete(instant_time)
    deleted = len(rollback_plan.files_to_delete)
    log.info("discarded failed write %s of %s: %d files deleted", instant_time, table.uri, deleted)
    return True


def _forget_in_metadata_table(table: LakeTable, t: str, mdt: MetadataTableWriter | None = None) -> None:
    """Remove the MDT deltacommit of the pending instant ``t`` being undone (a maintained MDT: past
    the guard, an MDT is left only under that policy) before ``t`` leaves the timeline: Hudi 1.x
    readers merge the MDT deltacommit of an instant gone or rolled back, not of a pending one.
    ``mdt``: the kept MDT's writer, if the caller opened it."""
    mdt = mdt if mdt is not None else kept_metadata_table(table)
    if mdt is not None and mdt.discard(t):
        log.info("removed the metadata table's deltacommit of %s, which is being undone", t)


def _drop_target(table: LakeTable, t: str, *, retry: bool = False) -> None:
    """The rolled-back instant's pending files, markers and heartbeat. ``retry``: its inflight file
    only, its plan stays requested (``undone.is_hudi_retry``)."""
    if retry:
        table.store.revert_to_requested(t)
        log.info("compaction %s of %s is requested again: Hudi's retry of it was interrupted", t, table.uri)
    else:
        table.store.remove_pending(t)
    table.store.markers.delete(t)
    table.store.heartbeats.delete(t)


def _logs_to_mark(table: LakeTable, r: str, rollback_plan: RollbackPlan) -> list[tuple[str, int, bool]]:
    """The plan's logs still there, each with its size once marked and whether the rollback block
    is still to append (a resumed rollback may have appended it)."""
    storage, t = table.storage, rollback_plan.target_time
    out = []
    for path, _size in [m for req in rollback_plan.requests for m in req.logs_to_mark]:
        rel = storage.check_deletable(path)
        if not storage.exists(rel):
            continue
        data = storage.read(rel)
        blocks = parse_log_bytes(data, storage.uri(rel))
        done = any(b.is_rollback and b.instant_time == r and b.target_instant_time == t for b in blocks)
        out.append((rel, len(data) if done else len(data) + len(rollback_command_block(r, t)), not done))
    return out


def finish_pending_locked(table: LakeTable) -> list[RollbackResult]:
    """Finish every pending rollback from its stored plan, oldest first; then remove the pending
    files left of compactions already rolled back (``rolled_back_compactions``)."""
    timeline = table.timeline()
    done = [_execute(table, r, p, resumed=True) for r, p in _pending_rollbacks(table, timeline)]
    for compaction, r in rolled_back_compactions(table.timeline() if done else timeline):
        _drop_target(table, compaction.timestamp)
        log.info("removed compaction %s of %s: rolled back by %s already", compaction.timestamp, table.uri, r)
        done.append(RollbackResult(r, compaction.timestamp, Action.COMPACTION.value, (), (), resumed=True))
    return done


def refuse_unfinishable_locked(table: LakeTable) -> None:
    """What finishing the pending rollbacks would refuse, raised before any of them changes
    anything (a restore asks before it writes its own instant)."""
    timeline = table.timeline()
    for r, rollback_plan in _pending_rollbacks(table, timeline):
        is_hudi_retry(table, timeline, r.timestamp, rollback_plan, timeline.get(rollback_plan.target_time))


def _pending_rollbacks(table: LakeTable, timeline: Timeline) -> list[tuple[Instant, RollbackPlan]]:
    out = []
    for r in timeline.filter([Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT]):
        requested = Instant(r.timestamp, State.REQUESTED, Action.ROLLBACK)
        record = timeline.avro_record(requested)
        out.append((r, RollbackPlan.from_record(record, timeline.path_of(requested), table.storage)))
    return out


def _rollback_one(table: LakeTable, timeline: Timeline, target: Instant) -> RollbackResult:
    t = target.timestamp
    done = None if target.is_completed else completed_rollback_of(timeline, t)
    if done is not None:
        # A rollback that corrected the MDT completed, and a crash came before its target left the
        # timeline (``_execute``): the target's files are undone already (a new plan would delete
        # the logs that rollback marked, which the MDT keeps listed), only its pending files stay.
        _drop_target(table, t)
        log.info("removed %s %s of %s: rolled back by %s already", target.action.value, t, table.uri, done)
        return RollbackResult(done, t, target.action.value, (), (), resumed=True)
    written = gather(table, timeline, target)
    rollback_plan = plan(
        target,
        written,
        logs_per_instant(table),
        _corrected(table, target),
        slice_logs=drops_slice(table, timeline, target),
    )
    # The plan as stored must be readable back: every path inside the table, outside .hoodie/.
    for path in (*rollback_plan.files_to_delete, *rollback_plan.logs_to_mark):
        table.storage.check_deletable(path)
    r = table.clock.next(after=timeline.latest_time)
    requested = table.store.create_requested(r, Action.ROLLBACK, rollback_plan.to_avro(table.storage))
    return _execute(table, requested, rollback_plan, resumed=False)


def _corrected(table: LakeTable, target: Instant) -> bool:
    """Whether the rollback of ``target`` corrects a kept MDT (``metadata/undo.py``) on a table
    whose log files are named after their slice (version 6): then its logs are marked, not deleted."""
    if not target.is_completed or logs_per_instant(table):
        return False
    mdt = kept_metadata_table(table)
    return mdt is not None and why_not_forgettable(mdt, target.timestamp) is not None


def _execute(table: LakeTable, r: Instant, rollback_plan: RollbackPlan, *, resumed: bool) -> RollbackResult:
    started = time.monotonic()
    store, storage = table.store, table.storage
    t = rollback_plan.target_time
    timeline = table.timeline()
    target = timeline.get(t)
    # Decided before any change: a retry whose compaction lost its plan may be refused.
    retry = resumed and is_hudi_retry(table, timeline, r.timestamp, rollback_plan, target)
    inflight = r if r.is_inflight else store.transition_to_inflight(r)  # r: requested or inflight
    to_mark = _logs_to_mark(table, r.timestamp, rollback_plan)
    mdt = kept_metadata_table(table)
    in_mdt = False  # the rollback's MDT deltacommit is written and completed
    if target is not None and target.is_completed:
        # An MDT that cannot forget the target gets the rollback's deltacommit, with the files it
        # deletes, first, while the target is still completed (readers merge it only once the
        # rollback completes); a resumed rollback finds it there and leaves the MDT alone.
        if mdt is not None and why_not_forgettable(mdt, t) is not None:
            marked_sizes = [(rel, size) for rel, size, _ in to_mark]
            context = (storage, table.config, table.timeline(), t)
            mdt.commit_rollback_logs(r.timestamp, marked_sizes, rollback_plan.files_to_delete, context)
            in_mdt = True
        store.remove_completed(target)
    elif mdt is not None:
        in_mdt = mdt.completed(r.timestamp)
    deleted, failed = _delete_files(table, r.timestamp, rollback_plan)
    if mdt is not None and not in_mdt:
        _forget_in_metadata_table(table, t, mdt)
    marked = []
    for rel, size, append in to_mark:
        if append:
            storage.append(rel, rollback_command_block(r.timestamp, t))
        marked.append((rel, size))
    # v6: the logs on a rolled-back compaction's slices, listed by the MDT deltacommits of the
    # writes' rollbacks (they marked them), go from the listing too.
    gone = [p for p in deleted if rollback_plan.target_action is not Action.DELTACOMMIT and _is_log(p)]
    if mdt is not None and (marked or gone) and not in_mdt:
        # v6 only: completed before the rollback, as Java's; readers skip it till then.
        mdt.commit_rollback_logs(r.timestamp, marked, gone)
    if not in_mdt:
        _drop_target(table, t, retry=retry)
    outcome = RollbackOutcome(tuple(deleted), tuple(failed), tuple(marked))
    millis = int((time.monotonic() - started) * 1000)
    hudi_1x = table.layout.has_completion_times
    store.transition_to_completed(
        inflight, rollback_metadata(r.timestamp, rollback_plan, outcome, millis, storage, hudi_1x)
    )
    if in_mdt:
        # Corrected: the target leaves the timeline only once the rollback completed. A Hudi 1.x
        # reader merges the target's MDT deltacommit as soon as the target is gone, and the
        # rollback's correcting one only once the rollback is no longer pending: in between, the MDT
        # would list the files just deleted. (A crash here leaves a pending write with nothing left
        # to delete: the next rollback of failed writes removes it.)
        _drop_target(table, t, retry=retry)
    log.info(
        "rolled back %s %s at %s: %d deleted, %d marked",
        rollback_plan.target_action.value,
        t,
        r.timestamp,
        len(deleted),
        len(marked),
    )
    return RollbackResult(
        r.timestamp,
        t,
        rollback_plan.target_action.value,
        tuple(deleted),
        tuple(m for m, _ in marked),
        resumed,
        tuple(failed),
    )


def _delete_files(table: LakeTable, r: str, rollback_plan: RollbackPlan) -> tuple[list[str], list[str]]:
    """The plan's files deleted, and those that could not be (already gone counts as deleted)."""
    storage, deleted, failed = table.storage, [], []
    for path in rollback_plan.files_to_delete:
        try:
            storage.delete_data_file(path)
        except UnsafePathError:
            raise
        except (StorageError, OSError) as exc:
            # As Hudi does: recorded in failedDeleteFiles and the rollback completes. The file stays
            # invisible (its instant is on no timeline); clean never deletes it, so name it loudly.
            t = rollback_plan.target_time
            log.warning("rollback %s of %s could not delete %s: %s", r, t, storage.uri(path), exc)
            failed.append(storage.check_deletable(path))
            continue
        deleted.append(path)
    return deleted, failed


def _is_log(path: str) -> bool:
    return LogFileName.parse(path.rpartition("/")[2]) is not None


def describe_rollbacks(table: LakeTable, results: Sequence[RollbackResult]) -> list[str]:
    """One line per rollback done, as ``lake rollback`` prints them."""
    timeline, lines = table.timeline(), []
    for result in results:
        counts = f"{len(result.deleted)} files deleted, {len(result.marked)} log files marked"
        if result.target_action == "compaction" and timeline.get(result.target) is not None:
            lines.append(  # Hudi's retry of a failed compaction, finished: to run, not undone
                f"finished rollback {result.instant} of compaction {result.target} (Hudi's retry of "
                f"it): {counts}; the compaction is requested again"
            )
        else:
            resumed = " (finished an interrupted rollback)" if result.resumed else ""
            lines.append(
                f"rolled back {result.target_action} {result.target} at {result.instant}: {counts}{resumed}"
            )
    return lines


def describe_failed_writes(base_path: str, instants: Sequence[Instant]) -> str:
    """The sentence services add when failed writes block them."""
    if not instants:
        return ""
    names = ", ".join(f"{i.timestamp} ({i.action.value})" for i in instants)
    return (
        f"failed or running write(s) {names}; if they failed, roll them back with: lake rollback {base_path}"
    )


__all__ = ["RollbackResult", "describe_failed_writes", "describe_rollbacks", "rollback"]
