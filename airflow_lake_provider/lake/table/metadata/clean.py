"""Clean of Hudi's metadata table (MDT) under the maintain policy, as Hudi 1.x's Java writer cleans
it (``HoodieBackedTableMetadataWriter.cleanIfNecessary``, the MDT write config of
``HoodieMetadataWriteUtils.createMetadataWriteConfig``).

When: before the MDT compaction check, unless the MDT's last completed compaction has fewer than 3
completed MDT instants after it (Java leaves a just-compacted MDT's old slices to readers that may
still be reading them). What: Java's ``KEEP_LATEST_COMMITS`` with ``min(hoodie.cleaner.commits.retained,
20)`` commits retained (the data table's option; 10 by default): the earliest commit to retain is
the oldest of the newest that many completed MDT commits (deltacommits and compactions), or the
last one before the earliest pending one; in every MDT file group, the latest slice and the newest slice
older than that commit stay, every older slice's base file and log files go. Nothing to delete:
no instant (as Java's planner).

The instant is a fresh time (on a version 6 table the latest MDT deltacommit's time plus ``002``,
as Hudi 0.14/0.15 take it); durable order on the MDT: requested (``HoodieCleanerPlan``), inflight,
the deletions, completed (``HoodieCleanMetadata``). Readers only read the latest slices, which a
clean never touches: a crash anywhere leaves every listing as it was, and the next run finishes the
pending clean (its deletions again, a file already gone counting as deleted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lake_provider.lake.file_group.model import FileGroup
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
from airflow_lake_provider.lake.table.metadata.files import file_groups_of
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State

log = logging.getLogger(__name__)

FaultHook = Callable[[str], None]
POLICY = "KEEP_LATEST_COMMITS"
MAX_RETAINED = 20  # HoodieMetadataConfig's DEFAULT_METADATA_CLEANER_COMMITS_RETAINED
V6_CLEAN_SUFFIX = "002"  # Hudi's OperationSuffix.CLEAN
INSTANTS_AFTER_COMPACTION = 3  # Java leaves the MDT uncleaned until this many follow a compaction
_COMMIT_ACTIONS = (Action.COMMIT, Action.DELTACOMMIT, Action.REPLACECOMMIT)


def _no_fault(_point: str) -> None:
    return None


@dataclass(frozen=True)
class MetadataCleanPlan:
    """The MDT files a clean deletes (partition -> MDT-relative paths) and the commit it retains."""

    earliest_retained: Instant
    last_completed: str
    files: Mapping[str, tuple[str, ...]]

    def to_avro(self, base_path: str) -> dict[str, Any]:
        ecr = self.earliest_retained
        return {
            "earliestInstantToRetain": {
                "timestamp": ecr.timestamp,
                "action": ecr.action.value,
                "state": ecr.state.name,
            },
            "lastCompletedCommitTimestamp": self.last_completed,
            "policy": POLICY,
            "filesToBeDeletedPerPartition": {},
            "version": 2,
            "filePathsToBeDeletedPerPartition": {
                part: [
                    {"filePath": f"{base_path.rstrip('/')}/{p}", "isBootstrapBaseFile": False} for p in paths
                ]
                for part, paths in self.files.items()
            },
            "partitionsToBeDeleted": [],
            "extraMetadata": None,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, Any], base_path: str) -> MetadataCleanPlan:
        ecr = record.get("earliestInstantToRetain") or {}
        earliest = Instant(
            str(ecr.get("timestamp") or ""), State.COMPLETED, Action(ecr.get("action") or "deltacommit")
        )
        prefix = base_path.rstrip("/") + "/"
        files = {
            part: tuple(i["filePath"].removeprefix(prefix) for i in infos)
            for part, infos in (record.get("filePathsToBeDeletedPerPartition") or {}).items()
        }
        return cls(earliest, record.get("lastCompletedCommitTimestamp") or "", files)


def why_not_due(mdt: Timeline) -> str | None:
    """Why the MDT is not cleaned now (None: it may be), by Java's rule."""
    compactions = mdt.filter([Action.COMMIT], [State.COMPLETED])
    if not compactions:
        return None
    last = compactions[-1].timestamp
    after = sum(1 for i in mdt.instants if i.is_completed and i.timestamp > last)
    if after < INSTANTS_AFTER_COMPACTION:
        least = INSTANTS_AFTER_COMPACTION
        return f"{after} completed instants since its last compaction {last} (fewer than {least})"
    return None


def plan_clean(storage: Storage, mdt: Timeline, retained: int) -> MetadataCleanPlan | None:
    """Java's ``KEEP_LATEST_COMMITS`` plan over every MDT file group (None: nothing to delete)."""
    commits = mdt.filter(_COMMIT_ACTIONS, [State.COMPLETED])
    if len(commits) <= retained:
        return None
    earliest = commits[len(commits) - retained]
    # Never later than the earliest pending commit (CleanerUtils.getEarliestCommitToRetain).
    pending = mdt.filter((*_COMMIT_ACTIONS, Action.COMPACTION), [State.REQUESTED, State.INFLIGHT])
    if pending and pending[0].timestamp < earliest.timestamp:
        earliest = next((c for c in reversed(commits) if c.timestamp < pending[0].timestamp), earliest)
    if _left_nothing(mdt, earliest.timestamp):
        return None
    files: dict[str, tuple[str, ...]] = {}
    partitions = sorted(p for p in storage.list_dir("")[1] if not p.startswith("."))
    for partition, groups in file_groups_of(storage, partitions, mdt).items():
        doomed = [f for group in groups for f in _doomed(group, earliest.timestamp)]
        if doomed:
            files[partition] = tuple(f"{partition}/{name}" for name in sorted(doomed))
    if not files:
        return None
    return MetadataCleanPlan(earliest, commits[-1].timestamp, files)


def _left_nothing(mdt: Timeline, earliest: str) -> bool:
    """Whether the last completed clean left nothing for a clean retaining from ``earliest``, read
    off the timeline without listing the MDT's files (most runs: a listing of every partition).

    That clean left each file group its latest slice and at most the one slice current at the
    commit it retained from. A slice starts at a compaction's base file, so a file can be due again
    only once ``earliest`` has passed a compaction at or after that commit: the slice before it is
    then no longer current (a compaction that started later, and one pending then, are at or after
    it too). A wrong True would only leave files until the next clean that lists; it deletes none."""
    retained = mdt.earliest_retained()
    if retained is None:
        return False
    compactions = mdt.filter([Action.COMMIT, Action.COMPACTION])
    return not any(retained <= c.timestamp < earliest for c in compactions)


def _doomed(group: FileGroup, earliest: str) -> list[str]:
    """The files of ``group``'s slices that neither are its latest nor were current at ``earliest``."""
    # Newest first; a group's logs before its first base file are one slice, as Java's (the view's).
    slices = [(piece.base_instant, [f.file_name for f in piece.files]) for piece in reversed(group.slices)]
    before = next((base for base, _ in slices if base < earliest), None)
    out: list[str] = []
    for base, names in slices[1:]:
        if base == before or base >= earliest:
            continue
        out.extend(names)
    return out


def clean_metadata_table(
    mdt: MetadataTableWriter, retained: int, fault: FaultHook = _no_fault, timeline: Timeline | None = None
) -> str | None:
    """Finish a pending MDT clean, or plan and run one when due and there is something to delete;
    the clean instant (None: none). The caller holds the locks of every MDT writer; ``timeline``:
    the MDT's, if the caller has read it under them."""
    timeline = timeline if timeline is not None else mdt.timeline()
    base = mdt.storage.root
    pending = timeline.filter([Action.CLEAN], [State.REQUESTED, State.INFLIGHT])
    if pending:
        requested = Instant(pending[0].timestamp, State.REQUESTED, Action.CLEAN)
        plan = MetadataCleanPlan.from_avro(timeline.avro_record(requested), base)
        _execute(mdt, timeline, pending[0].timestamp, plan, fault)
        return pending[0].timestamp
    if why_not_due(timeline) is not None:
        return None
    plan = plan_clean(mdt.storage, timeline, retained)
    if plan is None:
        return None
    instant = clean_instant(mdt, timeline)
    if instant is None:
        return None
    body = timeline_avro.write_avro(timeline_avro.CLEANER_PLAN, plan.to_avro(base))
    mdt.store.create_requested(instant, Action.CLEAN, body)
    fault("requested")
    _execute(mdt, mdt.timeline(), instant, plan, fault)
    return instant


def clean_instant(mdt: MetadataTableWriter, timeline: Timeline) -> str | None:
    """The time of a new MDT clean: on table version 6 (layout 1) the latest completed MDT
    deltacommit's time plus Hudi's clean suffix ``002`` (``createCleanTimestamp``), None when an
    instant already has it (Java then skips the clean: a clean ran since that deltacommit); on 8 and
    9 a fresh time later than every MDT instant."""
    if not timeline.layout.has_completion_times:
        latest = max(i.timestamp for i in timeline.filter([Action.DELTACOMMIT], [State.COMPLETED]))
        instant = latest + V6_CLEAN_SUFFIX
        return None if any(i.timestamp == instant for i in timeline.instants) else instant
    latest = max(t for i in timeline.instants for t in (i.timestamp, i.completion_time or ""))
    return mdt.store.clock.next(after=latest)


def _execute(
    mdt: MetadataTableWriter, timeline: Timeline, instant: str, plan: MetadataCleanPlan, fault: FaultHook
) -> None:
    started = time.monotonic()
    states = {i.state: i for i in timeline.instants if i.timestamp == instant and i.action is Action.CLEAN}
    current = states.get(State.INFLIGHT)
    if current is None:
        requested = Instant(instant, State.REQUESTED, Action.CLEAN)
        current = mdt.store.transition_to_inflight(requested, timeline.read_bytes(requested))
        fault("inflight")
    for paths in plan.files.values():
        for rel in paths:
            mdt.storage.delete(rel)  # a file already gone (a crashed attempt) counts as deleted
    metadata = _metadata(plan, instant, started)
    mdt.store.transition_to_completed(
        current, timeline_avro.write_avro(timeline_avro.CLEAN_METADATA, metadata)
    )
    fault("commit")
    log.info("cleaned the metadata table at %s: %d files", instant, metadata["totalFilesDeleted"])


def _metadata(plan: MetadataCleanPlan, instant: str, started: float) -> dict[str, Any]:
    def names(paths: Sequence[str]) -> list[str]:
        return [p.rsplit("/", 1)[-1] for p in paths]

    return {
        "startCleanTime": instant,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": sum(len(p) for p in plan.files.values()),
        "earliestCommitToRetain": plan.earliest_retained.timestamp,
        "lastCompletedCommitTimestamp": plan.last_completed,
        "partitionMetadata": {
            part: {
                "partitionPath": part,
                "policy": POLICY,
                "deletePathPatterns": names(paths),
                "successDeleteFiles": names(paths),
                "failedDeleteFiles": [],
                "isPartitionDeleted": False,
            }
            for part, paths in plan.files.items()
        },
        "version": 2,
        "bootstrapPartitionMetadata": None,
        "extraMetadata": None,
    }
