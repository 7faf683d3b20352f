"""Which instants archival moves out of the active timeline (pure: reads nothing, writes nothing).

Hudi's rules: once more than ``max_commits`` completed commits are active, the oldest are archived
until ``min_commits`` remain, together with every other completed instant older than the first
commit kept. Archival never passes the earliest commit the last clean retained (files of older
slices may still be listed), a savepoint, or any pending instant (a pending write's files must stay
distinguishable from committed ones: files older than the active timeline count as committed).
No replacecommit whose replaced file groups still have files is archived (``live_replaces``, found
by the executor): readers know a group is replaced only from the active timeline, so archived, its
old rows would be read again besides their rewritten copies, and no clean would remove them any
more. Neither the last clean's bound (a clean by file versions retains no commit) nor a savepoint
(deleted after the clean it held back) is enough to keep such a replacecommit active.

On a merge-on-read table whose compaction trigger counts delta commits, archival keeps the delta
commits since the last completed compaction active while fewer than ``max_delta_commits`` of them
are (else the newest ``max_delta_commits``), and that compaction with them: archived, they would no
longer be counted and compaction would come late (Hudi's ``CompactionUtils``
``getOldestInstantToRetainForCompaction``, 1.x ``getEarliestInstantToRetainForCompaction``: pending
delta commits count too). Hudi applies it for NUM_COMMITS and NUM_AND_TIME only and its 0.x line
also takes a replacecommit as the last compaction; here every trigger that counts delta commits
keeps them, and only a ``commit`` ends the count, as the compaction trigger counts: both keep at
least what Hudi keeps.

A table that keeps Hudi's metadata table (MDT) archives nothing at all before the MDT's first
completed compaction, and after one nothing from the first commit that completed after the last one
was requested (Java's archivers, 0.14 ``HoodieTimelineArchiver`` by requested time and 1.x
``TimelineArchiverV2``, step 4, by completion time; ``metadata_bound``, found by the executor): an
MDT reader merges the log blocks of active instants only, so an instant archived before its records
are in an MDT base file would drop out of the listing.

Table versions 8 and 9 (Hudi 1.x's ``TimelineArchiverV2``) also keep the last completed commit
before the earliest pending write active. Unlike Hudi 1.x, which archives only commits, cleans and
rollbacks, every completed instant older than the first kept commit is archived on every version:
this core's readers take every write older than the active timeline's first instant as committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airflow_lake_provider.lake.config.registry import COMPACT_MAX_DELTA_COMMITS, KEEP_MIN_COMMITS
from airflow_lake_provider.lake.config.values import TriggerStrategy
from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State

# Hudi's write timeline: the pending actions that write data files.
_WRITE_ACTIONS = frozenset(
    {
        Action.COMMIT,
        Action.DELTACOMMIT,
        Action.REPLACECOMMIT,
        Action.COMPACTION,
        Action.LOGCOMPACTION,
        Action.CLUSTERING,
    }
)


@dataclass(frozen=True)
class ArchivalPlan:
    """Instants to archive (completed, oldest first) and the first instant time that stays active;
    no instants: archival is due by the commit count, but ``limited_by`` keeps every one active."""

    instants: tuple[Instant, ...]
    keep_from: str
    limited_by: str  # what stopped archival earlier than the commit count alone would


def plan_archival(
    timeline: Timeline,
    config: ArchivalConfig,
    earliest_retained: str | None,
    live_replaces: Iterable[str] = (),
    *,
    merge_on_read: bool = False,
    metadata_bound: tuple[str, str] | None = None,
) -> ArchivalPlan | None:
    """The archival a table is due, or ``None`` when the commit count does not call for one.

    :param earliest_retained: the earliest commit the last completed clean retained, if any.
    :param live_replaces: completed replacecommits whose replaced file groups still have files.
    :param merge_on_read: keep the delta commits the compaction trigger counts (see above).
    :param metadata_bound: (first instant to keep, why) when the table keeps a metadata table: Java's
        archiver never archives a commit that completed after the metadata table's last compaction
        was requested.
    """
    commits = timeline.completed_commits
    if len(commits) <= config.max_commits:
        return None
    cut, why = commits[len(commits) - config.min_commits].timestamp, KEEP_MIN_COMMITS.key
    bounds = [(earliest_retained, "the earliest commit the last clean retained")]
    pending = [i for i in timeline.instants if i.state is not State.COMPLETED]
    if pending:
        bounds.append((pending[0].timestamp, f"pending {pending[0].action.value} {pending[0].timestamp}"))
    writes = [i for i in pending if i.action in _WRITE_ACTIONS]
    if timeline.layout.has_completion_times and writes:
        # Hudi 1.x keeps the last completed commit before the earliest pending write active too: if
        # that write is rolled back later, files it left stay older than the active timeline's
        # start, not counted as committed.
        before = [c for c in commits if c.timestamp < writes[0].timestamp]
        if before:
            bounds.append(
                (
                    before[-1].timestamp,
                    f"the last commit before pending {writes[0].action.value} {writes[0].timestamp}",
                )
            )
    if merge_on_read and config.compaction_trigger is not TriggerStrategy.TIME_ELAPSED:
        kept = _kept_for_compaction(timeline, config.max_delta_commits)
        if kept is not None:
            bounds.append(
                (
                    kept,
                    f"the delta commits the compaction trigger counts ({config.compaction_trigger.value}, "
                    f"{COMPACT_MAX_DELTA_COMMITS.key}={config.max_delta_commits})",
                )
            )
    if metadata_bound is not None:
        bounds.append(metadata_bound)
    points = timeline.savepoints()
    if points:
        bounds.append((points[0].timestamp, f"savepoint {points[0].timestamp}"))
    live = min(live_replaces, default=None)
    if live is not None:
        bounds.append((live, f"replacecommit {live} (its replaced file groups still have files)"))
    for bound, reason in bounds:
        if bound is not None and bound < cut:
            cut, why = bound, reason
    cut, why = _kept_completing_later(commits, cut, why)
    archived = tuple(
        i
        for i in timeline.instants
        if i.timestamp < cut and i.state is State.COMPLETED and i.action is not Action.SAVEPOINT
    )
    return ArchivalPlan(archived, cut, why)


def _kept_completing_later(commits: tuple[Instant, ...], cut: str, why: str) -> tuple[str, str]:
    """``cut`` lowered (with why) so that no commit goes that completed after one that stays (layout
    2; Hudi 1.x's archiver goes by completion time too): a compaction that a later-requested write
    overtook stays with it, so the metadata table's readers and the partition_stats merge still see
    that the compaction completed last."""
    while True:
        kept = [c.completion_time for c in commits if c.timestamp >= cut and c.completion_time]
        first_done = min(kept, default=None)
        later = [
            c for c in commits if c.timestamp < cut and first_done and (c.completion_time or "") > first_done
        ]
        if not later:
            return cut, why
        cut = later[0].timestamp
        why = f"{later[0].action.value} {cut} completed after a commit that stays"


def _kept_for_compaction(timeline: Timeline, max_delta_commits: int) -> str | None:
    """The first instant to keep so that the delta commits since the last completed compaction (any
    state) stay countable: that compaction (or the first delta commit) while fewer than
    ``max_delta_commits`` follow it, else the oldest of the newest ``max_delta_commits``."""
    compactions = timeline.filter([Action.COMMIT], [State.COMPLETED])
    anchor = compactions[-1].timestamp if compactions else None
    deltas = [
        i.timestamp for i in timeline.filter([Action.DELTACOMMIT]) if anchor is None or i.timestamp > anchor
    ]
    if len(deltas) < max_delta_commits or not deltas:
        return anchor if anchor is not None else (deltas[0] if deltas else None)
    return deltas[min(len(deltas) - max_delta_commits, len(deltas) - 1)]
