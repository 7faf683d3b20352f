"""The file groups that pending clustering plans will replace: compaction, merges and writes keep
off them (Hudi's Spark writers refuse such updates: executing the plan later would lose them)."""

from __future__ import annotations

import logging

from airflow_lake_provider.lake.errors import CorruptTimelineFileError
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, State

log = logging.getLogger(__name__)


def pending_clustering_plans(timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) -> the pending clustering instant whose plan replaces that file group: a
    pending replacecommit's plan, or a pending ``clustering``'s (table versions 8 and 9)."""
    groups: dict[tuple[str, str], str] = {}
    pending = timeline.filter([Action.REPLACECOMMIT, Action.CLUSTERING], [State.REQUESTED, State.INFLIGHT])
    for instant in pending:
        requested = instant if instant.is_requested else instant.with_state(State.REQUESTED)
        path = timeline.path_of(requested)
        try:
            record = timeline.avro_record(requested)
        except FileNotFoundError:
            continue
        except CorruptTimelineFileError:
            if not timeline.read_bytes(requested):
                continue  # an insert_overwrite may leave it empty: no clustering plan
            log.warning("%s: unreadable requested replace metadata; its file groups are not excluded", path)
            continue
        plan = record.get("clusteringPlan") or {}
        for group in plan.get("inputGroups") or ():
            for info in group.get("slices") or ():
                key = (info.get("partitionPath") or "", info.get("fileId") or "")
                groups.setdefault(key, instant.timestamp)
    return groups


def pending_clustering_groups(timeline: Timeline) -> set[tuple[str, str]]:
    """The file groups of :func:`pending_clustering_plans`."""
    return set(pending_clustering_plans(timeline))
