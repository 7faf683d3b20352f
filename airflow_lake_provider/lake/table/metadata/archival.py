"""Archival of Hudi's metadata table (MDT) timeline under the maintain policy, as Hudi 1.x's Java
writer archives it (the last of ``performTableServices``; ``TimelineArchiverV2`` with the MDT write
config of ``HoodieMetadataWriteUtils.createMetadataWriteConfig``).

Java's MDT archival config: ``hoodie.keep.min.commits`` and ``hoodie.keep.max.commits`` of the data
table, each plus one; a compaction trigger counting ``hoodie.metadata.compact.max.delta.commits``
deltacommits (the deltacommits since the MDT's last compaction stay active while fewer than that
follow it). Its bounds, besides the data archival's own (``archival.planner``: pending instants, the
last MDT clean's earliest retained commit): nothing at or after the data table's first active
commit or its first pending instant (``TimelineUtils.getEarliestInstantForMetadataArchival``: MDT
readers count an MDT deltacommit valid through its data instant). The instants go to the MDT's LSM
history (layout 2) first, then their active files, oldest first and each instant's completed file
last: a crash leaves them in the history and active, and the next run removes them. On a version 6
table (layout 1, Hudi 0.14/0.15's ``HoodieTimelineArchiver``) they go to a new archive file of
``.hoodie/metadata/.hoodie/archived/`` instead, as the data table's archival writes one.

The data table's archival keeps every commit that completed after the MDT's last compaction was
requested (``archival.executor.metadata_table_bound``, by completion time as Java 1.x), so this bound
keeps the MDT deltacommit of every data commit whose log is in a latest MDT slice, one requested
before the compaction but completed after it included: no such log block loses its instant.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from airflow_lake_provider.lake.config.registry import METADATA_COMPACT_DELTA_COMMITS
from airflow_lake_provider.lake.config.values import TriggerStrategy
from airflow_lake_provider.lake.table.archival.archive_log import write_archive_log
from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
from airflow_lake_provider.lake.table.archival.planner import plan_archival
from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action

log = logging.getLogger(__name__)

_DATA_COMMITS = (Action.COMMIT, Action.DELTACOMMIT, Action.REPLACECOMMIT)


def metadata_archival_config(*layers: Mapping[str, object]) -> ArchivalConfig:
    """Java's MDT archival config from the data table's options."""
    data = ArchivalConfig.from_options(*layers)
    return dataclasses.replace(
        data,
        min_commits=data.min_commits + 1,
        max_commits=data.max_commits + 1,
        compaction_trigger=TriggerStrategy.NUM_COMMITS,
        max_delta_commits=METADATA_COMPACT_DELTA_COMMITS.read(*layers),
    )


def data_bound(data: Timeline) -> tuple[str, str] | None:
    """The first MDT instant its archival keeps for the data table (None: no bound): the earlier of
    the data table's first active commit and its first pending instant."""
    commits = data.filter(_DATA_COMMITS)
    pending = [i for i in data.instants if not i.is_completed]
    candidates = [(commits[0].timestamp, "commit")] if commits else []
    if pending:
        candidates.append((pending[0].timestamp, "pending instant"))
    if not candidates:
        return None
    first, what = min(candidates)
    return first, f"the data table's first active {what} {first}"


def archive_metadata_table(
    mdt: MetadataTableWriter,
    data_timeline: Callable[[], Timeline],
    config: ArchivalConfig,
    timeline: Timeline | None = None,
) -> tuple[str, ...]:
    """Archive the MDT instants due; their times (none: nothing due). The caller holds the locks
    of every MDT writer; ``data_timeline`` reads the data table's timeline (called only when the
    count makes archival due); ``timeline``: the MDT's, if the caller has read it under them."""
    timeline = timeline if timeline is not None else mdt.timeline()
    if len(timeline.completed_commits) <= config.max_commits:
        return ()  # not due (plan_archival's first rule): neither bound is read
    bound = data_bound(data_timeline())
    plan = plan_archival(
        timeline, config, timeline.earliest_retained(), merge_on_read=True, metadata_bound=bound
    )
    if plan is None or not plan.instants:
        return ()
    if timeline.layout.history_folder is None:  # table version 6: layout 1's archive files
        write_archive_log(mdt.store, timeline, plan.instants, config.batch)
        mdt.store.remove_archived([i.timestamp for i in plan.instants])
    else:
        mdt.store.append_history(plan.instants)
        mdt.store.remove_archived([i.timestamp for i in plan.instants])
        mdt.store.compact_history()
    archived = tuple(i.timestamp for i in plan.instants)
    log.info(
        "archived %d metadata table instants (%s to %s); its active timeline starts at %s (limited by %s)",
        len(archived),
        archived[0],
        archived[-1],
        plan.keep_from,
        plan.limited_by,
    )
    return archived
