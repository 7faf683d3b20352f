"""Rollback planning (pure: no I/O). Which instants may be rolled back, and from the files an
instant wrote, which to delete and which log files get a rollback command block.

A base file named with the instant is its own output: deleted. A log file holding only the
instant's blocks was created by it (our writer makes a new log version per write): deleted. A log
file also holding other instants' blocks was appended to (Hudi's writers append): it keeps them,
and a rollback command block hides the instant's blocks from every reader, even after archival.

Table versions 8 and 9 (Hudi 1.x) write one new log file per deltacommit, named by its instant, and
never append across commits: a rollback deletes the instant's log files and marks none (Hudi 1.x's
rollback helper makes append requests only for table version 6 and below).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.table.rollback.plan import RollbackPlan, RollbackRequest
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant

# Writes a rollback undoes; pending compactions are finished by their executor instead.
ROLLBACK_ACTIONS = frozenset({Action.COMMIT, Action.DELTACOMMIT, Action.REPLACECOMMIT})


@dataclass(frozen=True)
class WrittenFile:
    """A file the target instant wrote (table-relative path), and for log files the INSTANT_TIME
    of every block in it."""

    path: str
    size: int
    block_instants: frozenset[str] = frozenset()


def failed_writes(timeline: Timeline) -> list[Instant]:
    """Pending commits, deltacommits and replacecommits, oldest first."""
    return [i for i in timeline.pending if i.action in ROLLBACK_ACTIONS]


def check_target(
    timeline: Timeline,
    instant_time: str,
    force: bool = False,
    compaction: bool = False,
    *,
    any_order: bool = False,
) -> Instant:
    """The instant to roll back, or ``RollbackError`` saying why it may not be.

    ``compaction``: a pending compaction or clustering may be rolled back too (a restore does).
    ``any_order``: a completed commit need not be the latest (a v8/v9 restore's plan orders them).
    """
    instant = timeline.get(instant_time)
    where = timeline.base_path
    if instant is None:
        raise RollbackError(f"{where}: there is no instant {instant_time} on the timeline")
    if instant.action is Action.COMPACTION and compaction:
        return instant
    if instant.action is Action.CLUSTERING and not instant.is_completed:
        # (versions 8/9) a restore rolls back a pending clustering after its savepoint; named, one a
        # crash left pending (a write to its file groups is refused until it is gone or executed)
        return instant
    if instant.action is Action.COMPACTION:
        raise RollbackError(
            f"{where}: {instant_time} is a pending compaction; it is finished, not rolled back "
            f"(lake compact {where} --mode execute --instant {instant_time})"
        )
    if instant.action is Action.ROLLBACK and not instant.is_completed:
        raise RollbackError(
            f"{where}: {instant_time} is a pending rollback; it is finished, not rolled back "
            f"(lake rollback {where})"
        )
    if instant.action not in ROLLBACK_ACTIONS:
        raise RollbackError(
            f"{where}: {instant_time} is a {instant.action.value}; only writes are rolled back"
        )
    if not instant.is_completed:
        return instant
    if not force:
        raise RollbackError(
            f"{where}: {instant_time} is a completed {instant.action.value}; pass --force (force=True) "
            "to roll back the latest completed commit"
        )
    latest = latest_completed_commit(timeline)
    if not any_order and (latest is None or latest.timestamp != instant_time):
        raise RollbackError(
            f"{where}: {instant_time} is not the latest completed commit "
            f"({latest.timestamp if latest else 'none'}); only that one may be rolled back"
        )
    if any(s.timestamp == instant_time for s in timeline.savepoints()):
        raise RollbackError(f"{where}: {instant_time} is savepointed; delete the savepoint first")
    later = [
        i
        for i in timeline.pending
        if i.timestamp > instant_time and i.action in (*ROLLBACK_ACTIONS, Action.COMPACTION)
    ]
    if later:
        what = "compaction" if timeline.is_compaction(instant) else instant.action.value
        # A pending compaction is finished, never rolled back; pending writes are rolled back.
        how = (
            f"finish them first (lake compact {where} --mode execute)"
            if all(i.action is Action.COMPACTION for i in later)
            else f"roll them back first (lake rollback {where})"
        )
        raise RollbackError(
            f"{where}: pending instant(s) {', '.join(i.timestamp for i in later)} started after the "
            f"{what} {instant_time} and may depend on it; {how}"
        )
    return instant


def latest_completed_commit(timeline: Timeline) -> Instant | None:
    """The completed commit a forced rollback may take: the last one made visible. Versions 8/9 order
    by completion time (a compaction scheduled before a deltacommit may complete after it)."""
    commits = timeline.completed_commits
    if not commits:
        return None
    if timeline.layout.has_completion_times:
        return max(commits, key=lambda i: (i.completion_time or "", i.timestamp))
    return commits[-1]


def plan(
    target: Instant,
    written: Iterable[WrittenFile],
    logs_per_instant: bool = False,
    keep_logs: bool = False,
    *,
    slice_logs: bool = False,
) -> RollbackPlan:
    """The plan undoing ``target``: per file group, files to delete and log files to mark.
    ``logs_per_instant`` (versions 8/9): the log files named with ``target`` are deleted, no other.
    ``keep_logs`` (version 6): a log holding only ``target``'s blocks is marked too, not deleted, as
    Java 0.14 rolls back a merge-on-read commit; a metadata table that keeps the log's size in a
    base file would otherwise give that size to the next log of the same name (a smaller one).
    ``slice_logs`` (a version 6 compaction): the logs named after ``target``'s slices are deleted
    whole, whatever blocks they hold: the slice goes, and no later log can take their names (a
    compaction's time is never written again)."""
    # keyed by (partition, file id), both parsed from file names
    deletes: dict[tuple[str, str], list[str]] = {}
    marks: dict[tuple[str, str], list[tuple[str, int]]] = {}
    base_of: dict[tuple[str, str], str | None] = {}
    t = target.timestamp
    for f in sorted(written, key=lambda w: w.path):
        partition, _, name = f.path.rpartition("/")
        base = BaseFileName.parse(name)
        if base is not None:
            if base.instant != t:
                continue  # another instant's file: never ours to delete
            key = (partition, base.file_id)
            deletes.setdefault(key, []).append(f.path)
            base_of.setdefault(key, t)
            continue
        log = LogFileName.parse(name)
        if log is None:
            continue
        key = (partition, log.file_id)
        if slice_logs and log.base_instant == t:
            deletes.setdefault(key, []).append(f.path)
            base_of.setdefault(key, t)
            continue
        if logs_per_instant:
            if log.base_instant == t:  # (in 1.x the name's instant is the deltacommit's)
                deletes.setdefault(key, []).append(f.path)
                base_of.setdefault(key, t)
            continue
        base_of.setdefault(key, log.base_instant)
        others = f.block_instants - {t}
        if not others and not (keep_logs and t in f.block_instants):
            deletes.setdefault(key, []).append(f.path)
        elif t in f.block_instants:
            marks.setdefault(key, []).append((f.path, f.size))
    requests = tuple(
        RollbackRequest(
            partition=key[0],
            file_id=key[1],
            latest_base_instant=base_of.get(key),
            files_to_delete=tuple(deletes.get(key, ())),
            logs_to_mark=tuple(marks.get(key, ())),
        )
        for key in sorted(set(deletes) | set(marks))
    )
    return RollbackPlan(t, target.action, requests)
