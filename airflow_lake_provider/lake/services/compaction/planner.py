"""Pure compaction planning: is a compaction due (trigger), and what would it rewrite (selection).

Nothing here touches the disk beyond what the timeline and file system view already loaded.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.services.compaction.config import CompactionConfig, TriggerStrategy
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation, CompactionPlan  # noqa: F401  (re-exported: the planner's API)
from airflow_lake_provider.lake.services.compaction.strategy import strategy_for
from airflow_lake_provider.lake.table.clustering import pending_clustering_groups
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, State, instant_to_datetime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TriggerState:
    """What the trigger looked at: delta commits counted, seconds elapsed, and the verdict."""

    delta_commits: int
    elapsed_seconds: float | None
    due: bool
    reason: str


def _last_completed_compaction(timeline: Timeline) -> str | None:
    # On a merge-on-read table every completed ``commit`` is a compaction's result.
    done = timeline.filter([Action.COMMIT], [State.COMPLETED])
    return done[-1].timestamp if done else None


def _last_requested_compaction(timeline: Timeline) -> str | None:
    times = [i.timestamp for i in timeline.pending_compactions()]
    last_done = _last_completed_compaction(timeline)
    times += [last_done] if last_done else []
    return max(times, default=None)


def trigger_state(timeline: Timeline, config: CompactionConfig, now: dt.datetime) -> TriggerState:
    """Evaluate ``config.trigger`` at ``now`` (an aware datetime); only *completed* delta commits count."""
    deltas = [i.timestamp for i in timeline.filter([Action.DELTACOMMIT], [State.COMPLETED])]
    last_done = _last_completed_compaction(timeline)
    anchor = (
        _last_requested_compaction(timeline)
        if (config.trigger is TriggerStrategy.NUM_COMMITS_AFTER_LAST_REQUEST)
        else last_done
    )
    count = sum(1 for t in deltas if anchor is None or t > anchor)
    # Time runs from the last completed compaction, or from the first delta commit of the table.
    since = last_done or (deltas[0] if deltas else None)
    elapsed = (now - instant_to_datetime(since)).total_seconds() if since else None
    num_due = count >= config.max_delta_commits
    time_due = elapsed is not None and elapsed >= config.max_delta_seconds
    due = {
        TriggerStrategy.NUM_COMMITS: num_due,
        TriggerStrategy.NUM_COMMITS_AFTER_LAST_REQUEST: num_due,
        TriggerStrategy.TIME_ELAPSED: time_due,
        TriggerStrategy.NUM_AND_TIME: num_due and time_due,
        TriggerStrategy.NUM_OR_TIME: num_due or time_due,
    }[config.trigger]
    elapsed_text = "n/a" if elapsed is None else f"{elapsed:.0f}s"
    reason = (
        f"{config.trigger.value}: {count} delta commit(s) since {anchor or 'the start'} "
        f"(need {config.max_delta_commits}), {elapsed_text} elapsed since {since or '-'} "
        f"(need {config.max_delta_seconds}s)"
    )
    return TriggerState(count, elapsed, due, reason)


def should_compact(timeline: Timeline, config: CompactionConfig, now: dt.datetime) -> bool:
    """True if the trigger strategy says a compaction is due at ``now``."""
    return trigger_state(timeline, config, now).due


def plan_compaction(
    timeline: Timeline, view: FileSystemView, config: CompactionConfig, *, now: dt.datetime | None = None
) -> CompactionPlan | None:
    """The plan the configured strategy selects, or ``None`` if there is nothing to compact.

    Candidates: the latest slice of every live file group that has log files, skipping groups in a
    pending compaction or clustering. ``now`` fixes "today" for partition-aware strategies.
    """
    strategy = strategy_for(config, now)
    busy = set(view.pending_compaction) | pending_clustering_groups(timeline)
    allowed = set(strategy.filter_partitions(view.partitions))
    candidates = []
    for group in view.file_groups():
        if (
            group.partition not in allowed
            or (group.partition, group.file_id) in busy
            or view.is_replaced(group)
        ):
            continue
        latest = group.latest_slice
        if latest.log_files:
            candidates.append(CompactionOperation.from_slice(latest))
    operations = strategy.order_and_filter(candidates)
    log.debug(
        "compaction planning: %d candidates, %d selected by %s",
        len(candidates),
        len(operations),
        config.strategy,
    )
    if not operations:
        return None
    # As Hudi 1.x records them for its incremental scheduling: the partitions the strategy's filter
    # left out, and those of candidates it did not select.
    selected = {op.group for op in operations}
    missing = {p for p in view.partitions if p not in allowed}
    missing.update(op.partition for op in candidates if op.group not in selected)
    return CompactionPlan(tuple(operations), missing_partitions=tuple(sorted(missing)))
