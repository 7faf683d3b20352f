"""Which pending compactions a rollback undid for good, and Hudi's retry of a failed compaction,
which undoes none: it rolls the pending compaction back (recorded with action ``compaction``) and
requests it again from its plan (``rollbackInflightCompaction``), keeping the logs on its slices.

A compaction undone for good is never executed again and its pending files go; one Hudi is
retrying runs again. Mixing the two up loses rows either way: a compaction redone after its rollback
completed hides the writes since, and one removed while logs of completed writes lie on its slices
hides those logs (their slice is on no timeline)."""

from __future__ import annotations

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.file_group.builder import list_table
from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes
from airflow_lake_provider.lake.table.rollback.plan import RollbackPlan
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State


def completed_rollback_of(timeline: Timeline, t: str) -> str | None:
    """The completed rollback that undid ``t`` for good, if any (newest first): not Hudi's retry of
    a compaction (its record names ``t`` with action ``compaction``; ours of a pending compaction,
    a restore's, remove it before completing). A record without ``t``'s action (its
    ``instantsRollback`` left empty) counts as a retry if ``t`` is a compaction requested again:
    one a rollback undid for good keeps its inflight file (``remove_completed``)."""
    current = timeline.get(t)
    requested_again = current is not None and current.action is Action.COMPACTION and current.is_requested
    for r in reversed(timeline.filter([Action.ROLLBACK], [State.COMPLETED])):
        record = timeline.avro_record(r)
        if t not in (record.get("commitsRollback") or ()):
            continue
        actions = {i.get("action") for i in record.get("instantsRollback") or () if i.get("commitTime") == t}
        if actions != {Action.COMPACTION.value} and not (requested_again and not actions):
            return r.timestamp
    return None


def rolled_back_compactions(timeline: Timeline) -> list[tuple[Instant, str]]:
    """Pending compactions a completed rollback undid, each with that rollback: a crash came after
    the forced rollback of a completed compaction that corrected the MDT completed and before the
    compaction's requested and inflight files went. Such a compaction is never executed again."""
    if not timeline.filter([Action.ROLLBACK], [State.COMPLETED]):
        return []
    found = []
    for compaction in timeline.pending_compactions():
        r = completed_rollback_of(timeline, compaction.timestamp)
        if r is not None:
            found.append((compaction, r))
    return found


def undone_compactions(timeline: Timeline) -> dict[str, str]:
    """Pending compactions a rollback undid (``rolled_back_compactions``) or is undoing (a forced
    rollback of a completed compaction un-completes it first; a crash leaves that rollback pending;
    or Hudi's retry, interrupted): compaction time -> rollback time. None of them may run now."""
    pending = {c.timestamp for c in timeline.pending_compactions()}
    if not pending:
        return {}
    found = {c.timestamp: r for c, r in rolled_back_compactions(timeline)}
    found |= {t: r for t, r in pending_rollback_targets(timeline).items() if t in pending}
    return found


def pending_rollback_targets(timeline: Timeline) -> dict[str, str]:
    """The instants pending rollbacks undo: target time -> rollback time (a crash interrupted them;
    the next rollback, write or restore finishes them)."""
    found = {}
    for r in timeline.filter([Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT]):
        plan = timeline.avro_record(Instant(r.timestamp, State.REQUESTED, Action.ROLLBACK))
        target = (plan.get("instantToRollback") or {}).get("commitTime")
        if target:
            found[target] = r.timestamp
    return found


def is_hudi_retry(
    table: LakeTable, timeline: Timeline, r: str, rollback_plan: RollbackPlan, target: Instant | None
) -> bool:
    """Whether the pending rollback ``r`` being finished is Hudi's retry of a failed compaction,
    interrupted: it undoes a pending compaction (action ``compaction``) and was not started by a
    pending restore (ours roll a pending compaction back only there: after that restore began,
    undoing a compaction its plan names).
    Hudi ends it with the compaction requested again: ``True`` if its plan is there to run.
    Without one (a damaged timeline) the compaction can only go, which is refused while logs on its
    slices hold completed writes: those would be hidden (``RollbackError``, nothing changed)."""
    if target is None or target.is_completed or target.action is not Action.COMPACTION:
        return False
    if rollback_plan.target_action is not Action.COMPACTION:
        return False
    t = target.timestamp
    restoring = timeline.filter([Action.RESTORE], [State.REQUESTED, State.INFLIGHT])
    if restoring and r > restoring[0].timestamp:
        plan = timeline.avro_record(Instant(restoring[0].timestamp, State.REQUESTED, Action.RESTORE))
        if any(i.get("commitTime") == t for i in plan.get("instantsToRollback") or ()):
            return False
    try:
        if timeline.read_bytes(Instant(t, State.REQUESTED, Action.COMPACTION)):
            return True
    except FileNotFoundError:
        pass
    kept = _completed_logs_named_after(table, timeline, t)
    if kept:
        raise RollbackError(
            f"{table.uri}: rollback {r} retries compaction {t}, whose plan (its requested file) is "
            f"missing or empty, and logs on its slices hold completed writes: {', '.join(kept)}. "
            f"Removing {t} would hide them; put its requested file back, then run lake rollback {table.uri}"
        )
    return False


def _completed_logs_named_after(table: LakeTable, timeline: Timeline, t: str) -> list[str]:
    """The log files named after base instant ``t`` that hold blocks of completed writes."""
    storage, found = table.storage, []
    for partition, files in sorted(list_table(storage, table.config).items()):
        for name, _size in sorted(files):
            log_name = LogFileName.parse(name)
            if log_name is None or log_name.base_instant != t:
                continue
            rel = f"{partition}/{name}" if partition else name
            blocks = parse_log_bytes(storage.read(rel), storage.uri(rel))
            written = {b.instant_time for b in blocks if b.instant_time and not b.is_rollback}
            if any((w := timeline.get(i)) is not None and w.is_completed for i in written):
                found.append(storage.uri(rel))
    return found
