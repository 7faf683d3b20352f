"""The clean planner (pure): which file slices a clean deletes, and which it must keep.

Rules: services-semantics section 1. Never planned for deletion: a savepointed file, the slice a read
as of a savepoint resolves to, a slice a pending compaction reads or is forming, the latest slice of
a file group, and (by commits or hours) the last slice before the earliest commit to retain, which a
query started earlier may still be reading.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from airflow_lake_provider.lake.file_group.builder import SlotEntry
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.services.clean.config import CleanConfig, CleanPolicy
from airflow_lake_provider.lake.services.clean.plan import CleanPlan
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import COMMIT_ACTIONS, Action, Instant, format_instant

# Pending instants that may still read or form file slices (a clustering is a pending replacecommit
# in timeline layout 1, an action of its own in layout 2).
_GUARDED_PENDING = frozenset({*COMMIT_ACTIONS, Action.COMPACTION, Action.LOGCOMPACTION, Action.CLUSTERING})


def _earliest_by_policy(timeline: Timeline, config: CleanConfig, now: dt.datetime) -> Instant | None:
    commits = timeline.completed_commits
    if config.policy is CleanPolicy.KEEP_LATEST_COMMITS:
        if len(commits) > config.commits_retained:
            return commits[len(commits) - config.commits_retained]
        return None
    if config.policy is CleanPolicy.KEEP_LATEST_BY_HOURS:
        try:
            cutoff = format_instant(now - dt.timedelta(hours=config.hours_retained))
        except OverflowError:  # before year 1: every commit is within the hours retained
            cutoff = ""
        return next((c for c in commits if c.timestamp >= cutoff), None)
    return None


def held_back_by(timeline: Timeline, config: CleanConfig, now: dt.datetime) -> list[Instant]:
    """Pending writes that move the earliest commit to retain back (failed ones hold the clean
    back until rolled back)."""
    earliest = _earliest_by_policy(timeline, config, now)
    if earliest is None:
        return []
    return [i for i in timeline.pending if i.action in COMMIT_ACTIONS and i.timestamp < earliest.timestamp]


def earliest_commit_to_retain(timeline: Timeline, config: CleanConfig, now: dt.datetime) -> Instant | None:
    """The oldest commit whose view must stay readable, or ``None`` (nothing to clean by age)."""
    commits = timeline.completed_commits
    earliest = _earliest_by_policy(timeline, config, now)
    if earliest is None:
        return None
    # A pending write or service older than it may still need older slices: retain from before it.
    pending = [
        i for i in timeline.pending if i.action in _GUARDED_PENDING and i.timestamp < earliest.timestamp
    ]
    if pending:
        oldest = pending[0].timestamp
        before = [c for c in commits if c.timestamp < oldest]
        earliest = before[-1] if before else None
    return earliest


def partitions_to_scan(
    timeline: Timeline,
    config: CleanConfig,
    earliest: Instant | None,
    last_clean: Mapping[str, Any] | None,
    savepoint_times: Iterable[str],
) -> list[str] | None:
    """Partitions worth listing: ``None`` means all of them, ``[]`` means there is nothing to clean.

    Incremental mode only looks at partitions written by commits in [E0, E1): E0 the earliest commit the
    last clean retained, E1 the new one. The first clean, a changed policy or a changed set of
    savepoints (deleting one frees files in old partitions) scans everything.
    """
    if config.policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS:
        return None
    if earliest is None:
        return []
    if not config.incremental or last_clean is None:
        return None
    previous = last_clean.get("earliestCommitToRetain") or ""
    extra = last_clean.get("extraMetadata") or {}
    if not previous or extra.get("lake.policy") != config.policy.value:
        return None
    if extra.get("lake.savepoints", "") != ",".join(sorted(savepoint_times)):
        return None
    touched: set[str] = set()
    for instant in timeline.completed_commits:
        if previous <= instant.timestamp < earliest.timestamp:
            touched |= timeline.commit_metadata(instant).partitions
    return sorted(touched)


def plan_clean(
    view: FileSystemView,
    config: CleanConfig,
    earliest: Instant | None,
    savepointed: frozenset[str],
    extra_metadata: Mapping[str, str] | None = None,
) -> CleanPlan | None:
    """The clean plan for the partitions in ``view``, or ``None`` when nothing would be deleted."""
    if config.policy is not CleanPolicy.KEEP_LATEST_FILE_VERSIONS and earliest is None:
        return None
    files: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    savepoint_times = [i.timestamp for i in view.timeline.savepoints()]
    # The planner walks the view's plain index: a large table has 100,000s of slices.
    for (partition, file_id), slots in view.slice_index.items():
        instants = sorted(slots)
        # The slice a read as of each savepoint resolves to now: a compaction pending when the
        # savepoint was made and completed since (its instant is older) moved that read to a slice
        # the savepoint's file list does not name.
        read_by_savepoints = {
            instants[i - 1] for t in savepoint_times if (i := bisect.bisect_right(instants, t))
        }
        doomed = _doomed_instants(
            view, partition, file_id, instants, slots, config, earliest, savepointed, read_by_savepoints
        )
        if not doomed:
            continue
        prefix = f"{partition}/" if partition else ""
        paths = files.setdefault(partition, [])
        for at in doomed:
            base, logs = slots[at]
            for name, size in ((base,) if base else ()) + logs:
                rel = prefix + name
                paths.append(rel)
                sizes[rel] = size
    if not files:
        return None
    last = view.timeline.last_completed_commit
    return CleanPlan(
        earliest_instant_to_retain=earliest,
        last_completed_commit=last.timestamp if last else "",
        policy=config.policy,
        files_per_partition=MappingProxyType({p: tuple(sorted(v)) for p, v in sorted(files.items())}),
        file_sizes=MappingProxyType(sizes),
        extra_metadata=MappingProxyType(dict(extra_metadata or {})),
    )


def _doomed_instants(
    view: FileSystemView,
    partition: str,
    file_id: str,
    instants: list[str],
    slots: Mapping[str, SlotEntry],
    config: CleanConfig,
    earliest: Instant | None,
    savepointed: frozenset[str],
    read_by_savepoints: set[str],
) -> list[str]:
    """Base instants of the slices of one file group (``instants``: oldest first) to delete."""
    key = (partition, file_id)
    compacting = (view.pending_compaction.get(key), view.pending_compaction_base.get(key))
    prefix = f"{partition}/" if partition else ""

    def protected(at: str) -> bool:
        """Savepointed or read as of a savepoint, or read or formed by a pending compaction."""
        if at in compacting or at in read_by_savepoints:
            return True
        if savepointed:
            base, logs = slots[at]
            return any(prefix + name in savepointed for name, _ in ((base,) if base else ()) + logs)
        return False

    replaced_at = view.replaced.get(key)
    if config.policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS:
        if replaced_at is not None:
            return [at for at in instants if not protected(at)]
        # A pending compaction's new slice counts as one of the versions kept.
        budget = config.file_versions_retained - (compacting[0] is not None)
        doomed = []
        for at in reversed(instants):
            if protected(at):
                continue
            if budget > 0:
                budget -= 1
                continue
            doomed.append(at)
        return doomed
    assert earliest is not None
    e = earliest.timestamp
    if replaced_at is not None and replaced_at < e:
        return [at for at in instants if not protected(at)]
    # All but the last slice before E (a query that began before E may still read it) and the
    # latest slice are candidates.
    n_older = bisect.bisect_left(instants, e)
    candidates = instants[: min(n_older - 1, len(instants) - 1)] if n_older > 1 else []
    return [at for at in candidates if not protected(at)]
