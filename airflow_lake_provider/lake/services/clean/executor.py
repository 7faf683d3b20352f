"""Running a clean: finish pending cleans, plan, persist the plan, delete, complete.

Durable order: ``<t>.clean.requested`` (the plan) -> ``<t>.clean.inflight`` -> deletes ->
``<t>.clean`` (metadata). A crash before completion leaves a pending clean that the next run
finishes from its stored plan; it is never planned twice. Deleting a file that is already gone
counts as deleted, so finishing twice is harmless.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from airflow_lake_provider.lake.errors import CommitConflictError, LakeError
from airflow_lake_provider.lake.file_group.builder import Lister
from airflow_lake_provider.lake.services.clean.config import CleanConfig
from airflow_lake_provider.lake.services.clean.plan import CleanPlan
from airflow_lake_provider.lake.services.clean.planner import (
    earliest_commit_to_retain,
    held_back_by,
    partitions_to_scan,
    plan_clean,
)
from airflow_lake_provider.lake.services.clean.result import CleanResult, DeleteOutcome, Outcome
from airflow_lake_provider.lake.services.savepoint import savepointed_files, savepoints
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.policy import guard_mutation, kept_metadata_table
from airflow_lake_provider.lake.table.metadata.services import services_after_commit
from airflow_lake_provider.lake.table.rollback.executor import (
    ROLLBACK_LOCK_WAIT_SECONDS,
    describe_failed_writes,
    eligible_failed_writes,
    rollback_failed_writes_locked,
)
from airflow_lake_provider.lake.table.rollback.policy import FailedWritesConfig, FailedWritesPolicy
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

log = logging.getLogger(__name__)
PARALLEL_DELETE_THRESHOLD = 64
# Times a clean takes a new instant when another process created the one it chose first.
_INSTANT_ATTEMPTS = 5


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def clean_config(table: LakeTable, options: Mapping[str, object] | None = None) -> CleanConfig:
    """Table properties, overridden by the caller's options."""
    return CleanConfig.from_options(table.config.properties, options or {})


STATE_FILE = "lake-clean-state.json"


def _last_clean(timeline: Timeline) -> Mapping[str, Any] | None:
    """What incremental planning needs of the last completed clean: its earliest retained commit and
    our bookkeeping (policy, savepoints). Read from a small state file the clean leaves beside the
    timeline when it matches; the clean metadata itself lists every deleted file and can be large."""
    last = timeline.last_completed(Action.CLEAN)
    if last is None:
        return None
    state = timeline.read_aux(STATE_FILE)
    if state:
        try:
            loaded = json.loads(state)
        except (ValueError, RecursionError):
            loaded = {}
        if isinstance(loaded, dict) and loaded.get("instant") == last.timestamp:
            return loaded
    return timeline_avro.read_avro_fields(
        timeline.read_bytes(last),
        timeline.path_of(last),
        timeline_avro.CLEAN_METADATA,
        ("partitionMetadata", "bootstrapPartitionMetadata"),
    )


def _record_state(table: LakeTable, instant: str, metadata: Mapping[str, Any]) -> None:
    state = {
        "instant": instant,
        "earliestCommitToRetain": metadata["earliestCommitToRetain"],
        "extraMetadata": metadata.get("extraMetadata") or {},
    }
    table.store.write_aux(STATE_FILE, json.dumps(state).encode())


def commits_since_last_clean(timeline: Timeline) -> int:
    last = timeline.last_completed(Action.CLEAN)
    return sum(1 for c in timeline.completed_commits if last is None or c.timestamp > last.timestamp)


def plan(
    table: LakeTable,
    config: CleanConfig,
    timeline: Timeline | None = None,
    now: dt.datetime | None = None,
    lister: Lister | None = None,
    *,
    log_scan: bool = True,
) -> CleanPlan | None:
    """Compute a clean plan (writes nothing). ``lister`` may replace local partition listing.

    ``log_scan=False`` logs the scan at debug level only: a preview its caller follows with a real run.
    """
    timeline = timeline or table.timeline()
    earliest = earliest_commit_to_retain(timeline, config, now or _now())
    points = savepoints(timeline)
    scan = partitions_to_scan(
        timeline, config, earliest, _last_clean(timeline), [sp.instant for sp in points]
    )
    if scan == []:
        log.info("clean of %s: nothing to scan (earliest commit to retain: %s)", table.uri, earliest)
        return None
    view = table.file_system_view(timeline, scan, lister)
    log.log(
        logging.INFO if log_scan else logging.DEBUG,
        "clean of %s: scanned %d partitions, %d file groups",
        table.uri,
        len(view.partitions),
        len(view.groups),
    )
    extra = {
        "lake.policy": config.policy.value,
        "lake.savepoints": ",".join(sorted(sp.instant for sp in points)),
    }
    return plan_clean(view, config, earliest, frozenset(f for sp in points for f in sp.files), extra)


def delete_files(storage: Storage, paths: Sequence[str], workers: int = 8) -> DeleteOutcome:
    """Delete table-relative ``paths`` (all checked first); a file already gone counts as deleted."""
    targets = [(p, storage.check_deletable(p)) for p in paths]
    if storage.supports_bulk_delete:  # object stores: 1,000 files a request
        failed = set(storage.delete_many([target for _, target in targets]))
        for target in sorted(failed):
            log.warning("could not delete %s", storage.uri(target))
        return DeleteOutcome(
            tuple(r for r, t in targets if t not in failed), tuple(r for r, t in targets if t in failed)
        )

    def remove(item: tuple[str, str]) -> tuple[str, bool]:
        rel, target = item
        try:
            storage.delete(target)
        except (LakeError, OSError) as exc:
            log.warning("could not delete %s: %s", storage.uri(target), exc)
            return rel, False
        return rel, True

    if len(targets) >= PARALLEL_DELETE_THRESHOLD:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(remove, targets))
    else:
        results = [remove(t) for t in targets]
    return DeleteOutcome(tuple(r for r, ok in results if ok), tuple(r for r, ok in results if not ok))


def clean_metadata(
    plan: CleanPlan,
    instant: str,
    outcomes: Mapping[str, DeleteOutcome],
    started: float,
    kept_for_savepoints: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``HoodieCleanMetadata`` record of a finished clean."""
    partitions = {}
    for part, paths in plan.files_per_partition.items():
        outcome = outcomes.get(part, DeleteOutcome((), tuple(paths)))
        partitions[part] = {
            "partitionPath": part,
            "policy": plan.policy.value,
            "deletePathPatterns": [p.rsplit("/", 1)[-1] for p in paths],
            "successDeleteFiles": [p.rsplit("/", 1)[-1] for p in outcome.deleted],
            "failedDeleteFiles": [p.rsplit("/", 1)[-1] for p in outcome.failed],
            "isPartitionDeleted": False,
        }
    ecr = plan.earliest_instant_to_retain
    extra = dict(plan.extra_metadata)
    if kept_for_savepoints:  # Hudi's metadata has no field for it; extraMetadata is free-form
        extra["lake.keptForSavepoints"] = ",".join(kept_for_savepoints)
    return {
        "startCleanTime": instant,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": sum(len(o.deleted) for o in outcomes.values()),
        "earliestCommitToRetain": ecr.timestamp if ecr else "",
        "lastCompletedCommitTimestamp": plan.last_completed_commit,
        "partitionMetadata": partitions,
        "version": 2,
        "bootstrapPartitionMetadata": None,
        "extraMetadata": extra or None,
    }


def pending_cleans(timeline: Timeline) -> list[Instant]:
    return timeline.filter([Action.CLEAN], [State.REQUESTED, State.INFLIGHT])


def stored_plan(table: LakeTable, timeline: Timeline, instant: Instant) -> CleanPlan:
    requested = Instant(instant.timestamp, State.REQUESTED, Action.CLEAN)
    return CleanPlan.from_avro(timeline.avro_record(requested), table.uri)


Deleter = Callable[[LakeTable, CleanPlan], Mapping[str, DeleteOutcome]]


def local_deleter(table: LakeTable, plan: CleanPlan) -> dict[str, DeleteOutcome]:
    # Validate every path of the plan before the first delete: a bad plan deletes nothing.
    for paths in plan.files_per_partition.values():
        for p in paths:
            table.storage.check_deletable(p)
    return {part: delete_files(table.storage, paths) for part, paths in plan.files_per_partition.items()}


def execute_pending(
    table: LakeTable, instant: Instant, timeline: Timeline, deleter: Deleter = local_deleter
) -> CleanResult:
    """Finish one requested or inflight clean from its stored plan.

    Savepoints win over the plan: files a savepoint made after the plan needs are kept (and
    reported), never deleted. The savepoints are read from a fresh timeline here, under the clean
    lock that savepoint creation takes too, so none can appear between this check and the deletes.
    """
    started = time.monotonic()
    stored = stored_plan(table, timeline, instant)
    for paths in stored.files_per_partition.values():
        for p in paths:
            table.storage.check_deletable(p)  # refuse before the instant moves on
    kept = _kept_for_savepoints(stored, savepointed_files(table.timeline()))
    plan_ = stored.without(frozenset(kept)) if kept else stored
    if kept:
        log.warning(
            "clean %s of %s: keeping %d planned files that savepoints need: %s",
            instant.timestamp,
            table.uri,
            len(kept),
            ", ".join(kept[:10]) + (" ..." if len(kept) > 10 else ""),
        )
    if instant.state is State.REQUESTED:
        instant = table.store.transition_to_inflight(instant, timeline.read_bytes(instant))
    outcomes = deleter(table, plan_)
    metadata = clean_metadata(plan_, instant.timestamp, outcomes, started, kept)
    mdt = kept_metadata_table(table)
    if mdt is not None:  # maintained: the deletions' MDT deltacommit completes first, as Hudi's
        mdt.commit_clean(table.storage, table.config, timeline, instant.timestamp, metadata)
    table.store.transition_to_completed(
        instant, timeline_avro.write_avro(timeline_avro.CLEAN_METADATA, metadata)
    )
    _record_state(table, instant.timestamp, metadata)
    deleted = sum(len(o.deleted) for o in outcomes.values())
    failed = sum(len(o.failed) for o in outcomes.values())
    log.info(
        "clean %s of %s completed: %d files deleted, %d failed",
        instant.timestamp,
        table.uri,
        deleted,
        failed,
    )
    return CleanResult(
        Outcome.CLEANED,
        instant.timestamp,
        plan_,
        deleted,
        failed,
        duration_seconds=time.monotonic() - started,
        kept_for_savepoints=kept,
    )


def _kept_for_savepoints(plan: CleanPlan, protected: frozenset[str]) -> tuple[str, ...]:
    """The planned files that savepoints need, sorted."""
    return tuple(sorted(p for paths in plan.files_per_partition.values() for p in paths if p in protected))


def run_clean(
    table: LakeTable,
    options: Mapping[str, object] | None = None,
    *,
    mode: str = "schedule_and_execute",
    dry_run: bool = False,
    now: dt.datetime | None = None,
    instant: str | None = None,
    deleter: Deleter = local_deleter,
    lister: Lister | None = None,
    log_scan: bool = True,
) -> CleanResult:
    """One clean run. ``mode``: ``schedule``, ``execute`` or ``schedule_and_execute``.

    Pending cleans are finished first (never re-planned). ``dry_run`` writes and deletes nothing and
    returns the plan a run would make now. ``execute`` finishes ``instant`` or every pending clean.
    Pending writes that hold the clean back are named in the result (``held_back_by``, ``reason``)
    with the command that rolls failed ones back. ``log_scan=False``: the partition scan is logged at
    debug level (a dry-run preview that a real run, logging its own scan, follows).

    Tables of versions 8 and 9 are cleaned too (their timeline layout, Avro files and completion-time
    slicing live in the timeline and file-group layers).
    """
    config = clean_config(table, options)  # bad options fail before anything changes
    guard_mutation(table, "clean", options, dry_run=dry_run, maintains=True, moves_keys=False)
    if not dry_run and mode != "execute":
        _roll_back_expired_writes(table, options)
    timeline = table.timeline()
    held = held_back_by(timeline, config, now or _now())
    result = _run_clean(table, options, mode, dry_run, now, instant, deleter, lister, log_scan)
    if result.outcome is Outcome.CLEANED:  # a clean instant completed: the MDT's own services, when due
        services_after_commit(table, options)
    if result.plan is None:
        result = replace(result, policy=config.policy)
    if not held:
        return result
    advice = describe_failed_writes(table.uri, held)
    log.warning("clean of %s keeps files older than pending write(s): %s", table.uri, advice)
    reason = f"{result.reason}; {advice}" if result.reason else advice
    return replace(result, held_back_by=tuple(i.timestamp for i in held), reason=reason)


def _roll_back_expired_writes(table: LakeTable, options: Mapping[str, object] | None) -> None:
    """Under ``LAZY`` the cleaner rolls back failed writes whose heartbeat expired (as Hudi's does);
    ``EAGER`` leaves that to writers, ``NEVER`` to the user."""
    config = FailedWritesConfig.from_options(table.config.properties, dict(options or {}))
    if config.policy is not FailedWritesPolicy.LAZY or not eligible_failed_writes(
        table, table.timeline(), config
    ):
        return
    with table.store.exclusive(WRITE_LOCK, wait_seconds=ROLLBACK_LOCK_WAIT_SECONDS):
        for done in rollback_failed_writes_locked(table, config):
            log.info("clean of %s rolled back failed write %s (heartbeat expired)", table.uri, done.target)


def _run_clean(
    table: LakeTable,
    options: Mapping[str, object] | None,
    mode: str,
    dry_run: bool,
    now: dt.datetime | None,
    instant: str | None,
    deleter: Deleter,
    lister: Lister | None,
    log_scan: bool = True,
) -> CleanResult:
    if mode not in ("schedule", "execute", "schedule_and_execute"):
        raise ValueError(f"unknown clean mode {mode!r}")
    config = clean_config(table, options)
    started = time.monotonic()
    if dry_run:
        return _dry_run(table, config, now, lister, started, log_scan)
    with table.store.exclusive("clean"):
        timeline = table.timeline()
        finished: list[str] = []
        last: CleanResult | None = None
        if mode != "schedule":
            for pending in pending_cleans(timeline):
                if instant is not None and pending.timestamp != instant:
                    continue
                last = execute_pending(table, pending, timeline, deleter)
                finished.append(pending.timestamp)
            if mode == "execute":
                return _after_pending(last, finished, started, "" if last else "no pending clean to execute")
            timeline = table.timeline()
        if pending_cleans(timeline) and not config.allow_multiple:
            return _after_pending(
                last, finished, started, "a clean is pending and hoodie.clean.allow.multiple=false"
            )
        if commits_since_last_clean(timeline) < config.max_commits:
            return _after_pending(
                last, finished, started, f"fewer than {config.max_commits} commits since the last clean"
            )
        new_plan = plan(table, config, timeline, now, lister)
        if new_plan is None:
            return _after_pending(last, finished, started, "nothing to delete")
        t, requested = _request_clean(table, new_plan, timeline)
        log.info(
            "clean %s of %s planned: %d files in %d partitions",
            t,
            table.uri,
            new_plan.file_count,
            len(new_plan.files_per_partition),
        )
        if mode == "schedule":
            return CleanResult(
                Outcome.SCHEDULED,
                t,
                new_plan,
                finished_pending=tuple(finished),
                duration_seconds=time.monotonic() - started,
            )
        done = execute_pending(table, requested, table.timeline(), deleter)
        # The plan as made (with file sizes): under the lock no savepoint can appear since planning.
        return replace(
            done, plan=new_plan, finished_pending=tuple(finished), duration_seconds=time.monotonic() - started
        )


def _dry_run(
    table: LakeTable,
    config: CleanConfig,
    now: dt.datetime | None,
    lister: Lister | None,
    started: float,
    log_scan: bool,
) -> CleanResult:
    """What a run would do, changing nothing: finish the oldest pending clean, else plan a new one."""
    timeline = table.timeline()
    pending = pending_cleans(timeline)
    if pending:
        stored = stored_plan(table, timeline, pending[0])
        kept = _kept_for_savepoints(stored, savepointed_files(timeline))
        return CleanResult(
            Outcome.PLANNED,
            pending[0].timestamp,
            stored.without(frozenset(kept)) if kept else stored,
            reason="a pending clean would be finished",
            kept_for_savepoints=kept,
        )
    found = plan(table, config, timeline, now, lister, log_scan=log_scan)
    return CleanResult(
        Outcome.PLANNED if found else Outcome.NO_WORK,
        None,
        found,
        duration_seconds=time.monotonic() - started,
        reason="" if found else "nothing to delete",
    )


def _request_clean(table: LakeTable, new_plan: CleanPlan, timeline: Timeline) -> tuple[str, Instant]:
    """Store ``new_plan`` as a requested clean at the next free instant time; return both."""
    body = timeline_avro.write_avro(timeline_avro.CLEANER_PLAN, new_plan.to_avro(table.uri))
    t = table.clock.next(after=timeline.latest_time)
    for attempt in range(1, _INSTANT_ATTEMPTS + 1):
        try:
            return t, table.store.create_requested(t, Action.CLEAN, body)
        except CommitConflictError:
            # A write in another process took this millisecond first: take a later one (the
            # plan deletes only slices already replaced, which later commits do not read).
            if attempt == _INSTANT_ATTEMPTS:
                raise
            t = table.clock.next(after=max(t, table.timeline().latest_time or t))
    raise AssertionError("unreachable: the last attempt returns or raises")


def _after_pending(last: CleanResult | None, finished: list[str], started: float, reason: str) -> CleanResult:
    """Nothing new to plan (``reason``): report the pending cleans this run finished, if any."""
    if reason:
        log.info("clean: no new plan: %s", reason)
    if last is None:
        return CleanResult(Outcome.NO_WORK, duration_seconds=time.monotonic() - started, reason=reason)
    return replace(
        last, finished_pending=tuple(finished), duration_seconds=time.monotonic() - started, reason=reason
    )


__all__ = ["CleanResult", "Outcome", "delete_files", "plan", "run_clean", "savepointed_files"]
