"""Running archival: plan, write the archive file, then remove the archived instants' files.

Durable order: the archive file is created whole first (a crash before it changes nothing); then,
oldest instant first, each instant's requested and inflight files go before its completed file, so
no reader ever sees an archived instant as pending. A crash half way leaves instants both archived
and active; the next run archives those again (Java's archived timeline reader tolerates an
instant listed twice), and readers only use the active timeline.

Table versions 8 and 9 (timeline layout 2) archive into the LSM history instead (Hudi 1.x's
``TimelineArchiverV2`` and ``LSMTimelineWriter``, see ``_archive_to_history``): a rerun after a crash
adds only the instants the history does not hold yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from airflow_lake_provider.lake.errors import StorageError, UnsafePathError
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes, rollback_command_block
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.archival.archive_log import write_archive_log
from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
from airflow_lake_provider.lake.table.archival.planner import ArchivalPlan, plan_archival
from airflow_lake_provider.lake.table.metadata.policy import guard_mutation, kept_metadata_table
from airflow_lake_provider.lake.table.rollback.plan import in_table
from airflow_lake_provider.lake.table.rollback.written import logs_on_slices
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.history.writer import COMPACTION_BATCH
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State

log = logging.getLogger(__name__)


class Outcome(str, Enum):
    ARCHIVED = "ARCHIVED"
    NO_WORK = "NO_WORK"


@dataclass(frozen=True)
class ArchivalResult:
    outcome: Outcome
    archived: tuple[str, ...] = ()  # instant times, oldest first
    archive_file: str | None = None  # .hoodie/archived/ file (v6), LSM history file (v8/v9)
    keep_from: str | None = None
    limited_by: str = ""
    duration_seconds: float = 0.0
    reason: str = ""
    actions: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "archived_instants": len(self.archived),
            "first_archived": self.archived[0] if self.archived else None,
            "last_archived": self.archived[-1] if self.archived else None,
            "actions": dict(self.actions),
            "archive_file": self.archive_file,
            "active_timeline_starts_at": self.keep_from,
            "limited_by": self.limited_by,
            "duration_seconds": round(self.duration_seconds, 3),
            "reason": self.reason,
        }


def run_archival(
    table: LakeTable, options: Mapping[str, object] | None = None, *, guarded: bool = False
) -> ArchivalResult:
    """Archive what the table is due (see ``planner``); ``NO_WORK`` when nothing is. ``guarded``:
    the caller is a write that has just committed with the same options, so its own MDT guard
    (stricter than archival's: a write moves keys) has passed and is not repeated."""
    started = time.monotonic()
    config = ArchivalConfig.from_options(table.config.properties, options or {})
    # Java never archives a commit completed after the MDT's last compaction was requested: under
    # maintain we stop there too (archival writes nothing to the MDT, as Java's writes nothing),
    # otherwise we refuse or drop it first.
    if not guarded:
        guard_mutation(table, "archival", options, maintains=True, moves_keys=False)
    with table.store.exclusive("archive"):
        timeline = table.timeline()
        finished = _finish_interrupted(table, timeline)
        if finished:
            timeline = table.timeline()
        plan, reason, live = _plan(table, timeline, config)
        if plan is not None and not plan.instants:  # due by the count, but every instant must stay
            if not live:  # (else the reason names the replacecommit already)
                why = f"nothing older than {plan.keep_from} may go (limited by {plan.limited_by})"
                reason = f"{reason}; {why}"
            if not finished:
                log.info("archival of %s: nothing to archive (%s)", table.uri, reason)
                return ArchivalResult(
                    Outcome.NO_WORK,
                    keep_from=plan.keep_from,
                    limited_by=plan.limited_by,
                    duration_seconds=time.monotonic() - started,
                    reason=reason,
                )
            plan = None
        if plan is None and finished:
            reason = f"finished an interrupted archival; then nothing more to archive ({reason})"
            keep = timeline.instants[0].timestamp if timeline.instants else None
            archived = tuple(i.timestamp for i in finished)
            return ArchivalResult(
                Outcome.ARCHIVED, archived, None, keep, "", time.monotonic() - started, reason
            )
        if plan is None:
            log.info("archival of %s: nothing to archive (%s)", table.uri, reason)
            return ArchivalResult(Outcome.NO_WORK, duration_seconds=time.monotonic() - started, reason=reason)
        stuck = _delete_rolled_back_files(table, timeline, plan.keep_from)
        if stuck:
            reason = (
                f"file(s) of rolled-back write(s) could not be cleaned up: {'; '.join(stuck)}; archiving "
                f"past their instants would make them count as committed"
            )
            log.warning("archival of %s: nothing archived: %s", table.uri, reason)
            return ArchivalResult(Outcome.NO_WORK, duration_seconds=time.monotonic() - started, reason=reason)
        if table.layout.history_folder is not None:
            name = _archive_to_history(table, plan)
        else:
            name = write_archive_log(table.store, timeline, plan.instants, config.batch)
            table.store.remove_archived([i.timestamp for i in plan.instants])
    actions: dict[str, int] = {}
    for instant in (*finished, *plan.instants):
        actions[instant.action.value] = actions.get(instant.action.value, 0) + 1
    log.info(
        "archival of %s: %d instants (%s to %s) -> %s; active timeline starts at %s (limited by %s)",
        table.uri,
        len(plan.instants),
        plan.instants[0].timestamp,
        plan.instants[-1].timestamp,
        name,
        plan.keep_from,
        plan.limited_by,
    )
    return ArchivalResult(
        Outcome.ARCHIVED,
        tuple(i.timestamp for i in (*finished, *plan.instants)),
        name,
        plan.keep_from,
        plan.limited_by,
        time.monotonic() - started,
        actions=actions,
    )


def _plan(
    table: LakeTable, timeline: Timeline, config: ArchivalConfig
) -> tuple[ArchivalPlan | None, str, list[str]]:
    """The archival due (``plan_archival`` with every bound the table sets), why, and the
    replacecommits whose replaced file groups still have files."""
    reason = f"{len(timeline.completed_commits)} completed commits, at most {config.max_commits} kept"
    if len(timeline.completed_commits) <= config.max_commits:
        return None, reason, []  # not due (as plan_archival says): the bounds need no reads
    earliest, mor = timeline.earliest_retained(), table.config.is_mor
    bound = metadata_table_bound(table, timeline)
    plan = plan_archival(timeline, config, earliest, merge_on_read=mor, metadata_bound=bound)
    live = _replaces_with_files(table, timeline, plan.instants) if plan is not None else []
    if live:
        plan = plan_archival(timeline, config, earliest, live, merge_on_read=mor, metadata_bound=bound)
        reason = (
            f"replacecommit {min(live)}: its replaced file groups still have files (a clean "
            f"removes them; archived, it would no longer hide them from readers)"
        )
    return plan, reason, live


def metadata_table_bound(table: LakeTable, timeline: Timeline) -> tuple[str, str] | None:
    """The first instant archival keeps for the table's MDT (None: it has none, or it bounds
    nothing): nothing at all while the MDT has no completed compaction; after one, on table versions
    8 and 9, the first completed commit that completed after that compaction was requested (Java 1.x
    ``TimelineArchiverV2`` step 4, ``findInstantsModifiedAfterByCompletionTime``), else the
    compaction itself (Java 0.x, by requested time).

    By completion time: an MDT deltacommit requested before the compaction but completed after it
    (Spark's writer interleaves the two) has its log in the slice after the compaction's base file,
    and MDT readers merge it only while its data commit is active (it also holds back the MDT's own
    archival, ``metadata.archival``)."""
    mdt = kept_metadata_table(table)
    if mdt is None:
        return None
    compactions = mdt.timeline().filter([Action.COMMIT], [State.COMPLETED])
    if not compactions:
        first = timeline.instants[0].timestamp if timeline.instants else ""
        return first, "no compaction yet on the metadata table"
    last = compactions[-1].timestamp
    if not timeline.layout.has_completion_times:
        return last, f"the metadata table's last compaction {last}"
    later = [
        c.timestamp
        for c in timeline.completed_commits
        if c.completion_time is not None and c.completion_time > last and c.timestamp != last
    ]
    if not later:
        return None
    return min(later), f"commit {min(later)}, completed after the metadata table's last compaction {last}"


def _replaces_with_files(table: LakeTable, timeline: Timeline, instants: Sequence[Instant]) -> list[str]:
    """The replacecommits among ``instants`` whose replaced file groups still have committed files.

    Readers (ours, Hudi's) learn that a file group is replaced from the active timeline only: once its
    replacecommit is archived, files left in the group are read again, besides the rows that replaced
    them, and no clean deletes them any more. Only the partitions those replacecommits name are listed.
    """
    groups: dict[str, set[tuple[str, str]]] = {}
    for instant in instants:
        if instant.action is Action.REPLACECOMMIT:
            replaced = timeline.commit_metadata(instant).partition_to_replace_file_ids or {}
            groups[instant.timestamp] = {(p, f) for p, ids in replaced.items() for f in ids}
    partitions = sorted({p for keys in groups.values() for p, _ in keys})
    if not partitions:
        return []
    on_disk = table.file_system_view(timeline, partitions=partitions, sizes=False).slice_index
    return [t for t, keys in groups.items() if any(k in on_disk for k in keys)]


def _delete_rolled_back_files(table: LakeTable, timeline: Timeline, keep_from: str) -> list[str]:
    """Delete what is left of writes rolled back before ``keep_from``; return what could not be.

    Once the active timeline starts after a rolled-back instant, its files count as committed
    (Hudi's rule for archived instants). A rollback records the files it could not delete
    (``failedDeleteFiles``), and an executor of a killed Spark write may finish a file after the
    rollback (its marker is left): both are deleted here, or archival waits. A log file is deleted
    only while it holds nothing but the instant's blocks (a later write may reuse its name); one
    that holds other blocks too gets the rollback's command block unless one follows the instant's.
    """
    storage, stuck = table.storage, []
    for rollback in timeline.filter([Action.ROLLBACK], [State.COMPLETED]):
        record = timeline.avro_record(rollback)
        for target in record.get("commitsRollback") or ():
            if target >= keep_from or timeline.get(target) is not None:
                continue  # (on the timeline again: redone after a crash, its files are its own)
            paths = set()
            for marker in table.store.markers.read(target):
                try:
                    paths.add(storage.check_deletable(marker.relative_path))
                except UnsafePathError as exc:  # a damaged marker: it names no file of this table
                    log.warning("archival: marker of rolled-back %s ignored: %s", target, exc)
            for partition, meta in (record.get("partitionMetadata") or {}).items():
                for path in (meta.get("successDeleteFiles") or []) + (meta.get("failedDeleteFiles") or []):
                    try:
                        paths.add(in_table(storage, path, partition))
                    except UnsafePathError:
                        continue  # not a file of this table: nothing here can count as committed
            stuck += _drop_slice_leftovers(table, rollback, target, record, paths)
            held = {rel: _holds(storage, rel, target) for rel in sorted(paths)}
            for rel in [r for r, what in held.items() if what == "unmarked"]:
                # A writer appended to a shared log after the rollback listed its files (a late
                # executor of the killed write): archived, the instant reads as committed, and
                # only a rollback block hides those blocks from readers then.
                log.warning(
                    "archival: %s holds blocks of rolled-back %s that no rollback block hides; "
                    "appending one of rollback %s",
                    storage.uri(rel),
                    target,
                    rollback.timestamp,
                )
                try:
                    storage.append(rel, rollback_command_block(rollback.timestamp, target))
                except (StorageError, OSError) as exc:
                    log.warning("cannot mark %s of rolled-back %s: %s", storage.uri(rel), target, exc)
                    stuck.append(
                        f"{storage.uri(rel)} holds other blocks too and needs a rollback block of "
                        f"{target} ({exc}): do not delete it"
                    )
            left = [r for r, what in held.items() if what == "alone"]
            for rel in left:
                try:
                    storage.delete_data_file(rel)
                except (StorageError, OSError) as exc:
                    log.warning("cannot delete %s of rolled-back %s: %s", storage.uri(rel), target, exc)
                    stuck.append(f"{storage.uri(rel)} (delete it, then archive)")
            if not stuck:
                table.store.markers.delete(target)
    return stuck


def _drop_slice_leftovers(
    table: LakeTable, rollback: Instant, target: str, record: Mapping[str, Any], paths: set[str]
) -> list[str]:
    """Delete the logs left on the slices of compaction ``target`` that ``rollback`` rolled back
    (version 6; a rollback of an earlier version deleted only the compaction's base files, whose
    names give the file groups); return what could not be. They hold only rolled-back blocks, and
    once archival passes ``rollback`` each would read as a committed slice without a base file,
    hiding the file group's older rows. A kept metadata table lists them and archival writes
    nothing to it: then archival waits."""
    actions = {i.get("action") for i in record.get("instantsRollback") or ()}
    if not table.config.is_mor or table.layout.has_completion_times or not actions & {"commit", "compaction"}:
        return []
    groups: dict[str, set[str]] = {}
    for rel in paths:
        partition, _, name = rel.rpartition("/")
        base = BaseFileName.parse(name)
        if base is not None and base.instant == target:
            groups.setdefault(partition, set()).add(base.file_id)
    storage = table.storage
    left = logs_on_slices(storage, target, groups)
    if left and kept_metadata_table(table) is not None:
        return [
            f"{storage.uri(rel)} is left on the slices of compaction {target}, rolled back by "
            f"{rollback.timestamp}; the metadata table lists it (drop it: lake metadata-table "
            f"{table.uri} --drop, then archive)"
            for rel in left
        ]
    stuck = []
    for rel in left:
        log.warning(
            "archival: deleting %s, left on the slices of compaction %s that %s rolled back",
            storage.uri(rel),
            target,
            rollback.timestamp,
        )
        try:
            storage.delete_data_file(rel)
        except (StorageError, OSError) as exc:
            stuck.append(f"{storage.uri(rel)} (delete it, then archive: {exc})")
    return stuck


def _holds(storage: Storage, rel: str, instant: str) -> str:
    """What ``rel`` holds of the rolled-back ``instant``: "alone" (it exists and holds that
    instant's data only, and rollback blocks of it: a base file named with it, or such a log),
    "unmarked" (a log that also holds other blocks, with a block of ``instant`` that no later
    rollback block of it follows: Hudi's readers skip only the blocks before one), or "" (nothing
    of it to delete or hide)."""
    name = rel.rpartition("/")[2]
    base = BaseFileName.parse(name)
    if base is not None:
        return "alone" if base.instant == instant and storage.exists(rel) else ""
    if LogFileName.parse(name) is None or not storage.exists(rel):
        return ""
    if storage.size(rel) == 0:
        return "alone"
    blocks = parse_log_bytes(storage.read(rel), storage.uri(rel))
    undoing = [n for n, b in enumerate(blocks) if b.is_rollback and b.target_instant_time == instant]
    own = [n for n, b in enumerate(blocks) if not b.is_rollback and b.instant_time == instant]
    if own and len(undoing) + len(own) == len(blocks):
        return "alone"  # (a block of another rollback, hiding an older instant, would go with it)
    return "unmarked" if own and (not undoing or undoing[-1] < own[-1]) else ""


def _finish_interrupted(table: LakeTable, timeline: Timeline) -> list[Instant]:
    """Layout 2: finish what an interrupted archival left: delete the active files of the instants
    it had already put in the history (the oldest active instants the history holds), and compact
    and clean the history if a level is full; returns those instants. Without this, a crash after
    the history's publication would leave them both active and archived (or a level uncompacted)
    until enough commits pile up for another archival."""
    if timeline.history is None:
        return []
    history = timeline.history.history  # (the manifest it reads is read once for both checks)
    done: list[Instant] = []
    if timeline.instants:
        first, last = timeline.instants[0].timestamp, timeline.instants[-1].timestamp
        held = {(i.instant_time, i.action) for i in history.instants(first, last)}
        for instant in timeline.instants:
            if not instant.is_completed or (instant.timestamp, instant.action.value) not in held:
                break
            done.append(instant)
    if done:
        log.warning(
            "archival of %s: finishing an interrupted archival: %s to %s are in the LSM history already",
            table.uri,
            done[0].timestamp,
            done[-1].timestamp,
        )
        table.store.remove_archived([i.timestamp for i in done])
    levels = {f.level for f in history.snapshot.files}
    if done or any(len(history.snapshot.by_level(n)) >= COMPACTION_BATCH for n in levels):
        table.store.compact_history()
    return done


def _archive_to_history(table: LakeTable, plan: ArchivalPlan) -> str | None:
    """Layout 2, in Hudi 1.x's order: the instants' records published in the LSM history (durable,
    and a crash before it changes nothing), then their active files deleted (an instant is read from
    the active timeline while any of its files is there: readers take the history only for instants
    older than the active timeline), then the history's full levels compacted and cleaned. Returns
    the new history file (None when a crashed run had already published every record)."""
    name = table.store.append_history(plan.instants)
    table.store.remove_archived([i.timestamp for i in plan.instants])
    table.store.compact_history()
    return name
