"""Durable bookkeeping of partition commit, under ``.hoodie/.aux/`` (Hudi readers ignore it).

- The write index (``lake-partition-index.json``): per partition the completed write instants that
  put data there, and the largest event time writers recorded. Built from commit metadata and
  refreshed incrementally: only instants after ``through`` (every completed write up to it is in)
  are read again, so a poke reads a handful of commit files, not the whole timeline. Archival (ours
  at the end of every write, or any Hudi writer's) may move writes out of the active timeline before
  a poke sees them: when the active timeline's first instant has moved since the last refresh, the
  archive bytes added since are read too (archive files only grow, by appended blocks or new
  files). It is a cache: a missing or unreadable index is rebuilt, from the archived timeline too.
- The commit state (``lake-partition-commit/<partition>.json``, one small file per partition): which
  policies were applied and which writes the commit covered. One file per partition keeps a commit's
  cost independent of how many partitions were committed before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from airflow_lake_provider.lake.errors import LakeError, ObjectNotFoundError
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes
from airflow_lake_provider.lake.storage import HOODIE_DIR
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.archived import ARCHIVE_FOLDER, archive_version, decode_archive_block
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata
from airflow_lake_provider.lake.timeline.instant import COMMIT_ACTIONS, Action, State
from airflow_lake_provider.lake.timeline.store import TimelineStore

log = logging.getLogger(__name__)

INDEX_FILE = "lake-partition-index.json"
STATE_FOLDER = "lake-partition-commit"
# Commit metadata keys our writer fills when an event-time field is configured (epoch milliseconds).
MIN_EVENT_TIME = "lake.minEventTime"
MAX_EVENT_TIME = "lake.maxEventTime"
# Table services rewrite data without adding any: they are not "data arriving" in a partition.
_SERVICE_OPERATIONS = frozenset({"COMPACT", "CLUSTER", "LOG_COMPACT"})
# The actions of the LSM history's records that completed writes (compactions among the commits).
_ARCHIVED_WRITES = frozenset(a.value for a in COMMIT_ACTIONS)


@dataclass(frozen=True)
class WriteIndex:
    through: str | None = None  # every completed write with a time <= through is indexed
    seen_after: frozenset[str] = frozenset()  # completed writes after ``through`` already indexed
    partitions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # partition -> write instants
    max_event_time_ms: int | None = None
    # The active timeline's first instant at the last refresh: while it stays, nothing was archived.
    active_from: str | None = None
    # How far the archived timeline is read: (archive file version, bytes of it read). Java appends
    # blocks to its newest archive file, ours writes a new one per run; older files never change.
    archive_read: tuple[int, int] | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "through": self.through,
                "seenAfter": sorted(self.seen_after),
                "partitions": {p: list(ws) for p, ws in self.partitions.items()},
                "maxEventTimeMs": self.max_event_time_ms,
                "activeFrom": self.active_from,
                "archiveRead": list(self.archive_read) if self.archive_read else None,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes | None) -> WriteIndex | None:
        if not data:
            return None
        try:
            body = json.loads(data)
            if body.get("version") != 1:
                return None
            # (activeFrom and archiveRead are absent from indexes written before archival was followed:
            # the archive is then read once, what the index has skipped.)
            active_from, read = body.get("activeFrom"), body.get("archiveRead")
            if not isinstance(active_from, (str, type(None))) or not isinstance(read, (list, type(None))):
                raise TypeError("activeFrom or archiveRead of the wrong type")
            version, size = (int(read[0]), int(read[1])) if read else (0, 0)
            return cls(
                through=body["through"],
                seen_after=frozenset(body["seenAfter"]),
                partitions={str(p): tuple(ws) for p, ws in body["partitions"].items()},
                max_event_time_ms=body["maxEventTimeMs"],
                active_from=active_from,
                archive_read=(version, size) if read else None,
            )
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError):
            log.warning("partition write index %s is unreadable: rebuilding it", INDEX_FILE)
            return None


def refresh_index(timeline: Timeline, index: WriteIndex | None) -> tuple[WriteIndex, bool]:
    """The index with every completed write of ``timeline`` in it; ``True`` if anything changed.

    A rollback or restore completed since the index was last brought up to date may have removed
    indexed writes: the index is then rebuilt (rare; otherwise a poke reads only new instants).
    Writes archived since the last refresh come from the archived timeline (only what was added to
    it), and so do all archived writes when rebuilding.
    """
    undone = [
        i.timestamp
        for i in timeline.filter([Action.ROLLBACK, Action.RESTORE], [State.COMPLETED])
        if index is not None
        and (index.through is None or i.timestamp > index.through)
        and i.timestamp not in index.seen_after
    ]
    before, start = index, (timeline.instants[0].timestamp if timeline.instants else None)
    if index is not None and not undone and (start is None or start != index.active_from):
        # The first active instant moved (or is unknown): archival may have moved writes out.
        index, archived_undo = _with_archived(timeline, index)
        undone += archived_undo
    if index is not None and undone:
        log.info("partition write index: rollback/restore %s since it was built: rebuilding it", undone[-1])
        rebuilt, _ = refresh_index(timeline, None)
        seen = frozenset(
            t for t in rebuilt.seen_after.union(undone) if rebuilt.through is None or t > rebuilt.through
        )
        return replace(rebuilt, seen_after=seen), True
    if index is None:
        index, _ = _with_archived(timeline, WriteIndex())
    new_instants = [
        i
        for i in timeline.completed_commits
        if (index.through is None or i.timestamp > index.through) and i.timestamp not in index.seen_after
    ]
    # Only the partitions new writes touch are copied: a poke with nothing new costs no per-partition work.
    partitions: dict[str, Any] = dict(index.partitions)
    max_event = index.max_event_time_ms
    added: list[str] = []
    for instant in new_instants:
        t = instant.timestamp
        added.append(t)
        if timeline.is_compaction(instant):
            continue
        metadata = timeline.commit_metadata(instant)
        if metadata.operation_type.upper() in _SERVICE_OPERATIONS:
            continue
        for partition in metadata.partition_to_write_stats:
            writes = partitions.get(partition, ())
            if t not in writes:
                partitions[partition] = tuple(sorted((*writes, t)))
        raw = metadata.extra_metadata.get(MAX_EVENT_TIME)
        if raw is not None:
            try:
                value = int(raw)
            except ValueError:
                log.warning("%s: %s=%r is not epoch milliseconds; ignored", instant, MAX_EVENT_TIME, raw)
            else:
                max_event = value if max_event is None else max(max_event, value)
    # Completed writes are indexed up to the first pending write: one may still complete with an
    # earlier time than writes already indexed, so ``through`` never passes it.
    pending = [i.timestamp for i in timeline.pending if i.action in COMMIT_ACTIONS]
    completed = [i.timestamp for i in timeline.completed_commits]
    through = index.through
    if completed:
        limit = min(pending) if pending else None
        below = [t for t in completed if limit is None or t < limit]
        if below and (through is None or below[-1] > through):
            through = below[-1]
    seen = frozenset(t for t in index.seen_after.union(added) if through is None or t > through)
    new = WriteIndex(through, seen, partitions, max_event, start, index.archive_read)
    return new, bool(added) or new != (before or WriteIndex())


def load_index(timeline: Timeline) -> WriteIndex | None:
    return WriteIndex.from_json(timeline.read_aux(INDEX_FILE))


def save_index(store: TimelineStore, index: WriteIndex) -> None:
    store.write_aux(INDEX_FILE, index.to_json())


# -- commit state -----------------------------------------------------------------------------------
COMMITTING = "COMMITTING"  # some policies applied (a crash left it): the next run applies the rest
COMMITTED = "COMMITTED"


@dataclass(frozen=True)
class PartitionState:
    partition: str
    status: str
    applied: tuple[str, ...] = ()  # policies applied in this (re)commit, in order
    covered: tuple[str, ...] = ()  # write instants the commit covers
    commits: int = 0  # completed commits of this partition (re-commits of late data count)
    committed_at: str | None = None  # ISO time of the last completed commit
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "partition": self.partition,
                "status": self.status,
                "applied": list(self.applied),
                "covered": list(self.covered),
                "commits": self.commits,
                "committedAt": self.committed_at,
            },
            separators=(",", ":"),
        ).encode()

    def with_(self, **changes: Any) -> PartitionState:
        return replace(self, **changes)


def state_file_name(partition: str) -> str:
    """A plain, visible file name for ``partition`` (quoted; hashed when too long for a name)."""
    quoted = "p-" + urllib.parse.quote(partition, safe="=-_")
    if len(quoted) > 200:
        quoted = "h-" + hashlib.sha256(partition.encode()).hexdigest()
    return quoted + ".json"


def load_state(timeline: Timeline, partition: str) -> PartitionState | None:
    name = f"{STATE_FOLDER}/{state_file_name(partition)}"
    data = timeline.read_aux(name)
    if data is None:
        return None
    return parse_state(data, partition, timeline.storage.uri(".hoodie/.aux/" + name))


def parse_state(data: bytes, partition: str, where: str) -> PartitionState:
    """A commit state file's content; ``LakeError`` naming ``where`` if it is not ``partition``'s."""
    try:
        body = json.loads(data)
        # Exactly the types written: tuple("success-file") would read as policies 's', 'u', ...
        applied, covered, commits = body["applied"], body["covered"], body["commits"]
        if not (
            isinstance(applied, list)
            and isinstance(covered, list)
            and all(isinstance(x, str) for x in (*applied, *covered))
            and type(commits) is int  # noqa: E721 (bool is an int too)
            and commits >= 0
            and isinstance(body.get("committedAt"), (str, type(None)))
        ):
            raise TypeError("a field of the wrong type")
        state = PartitionState(
            partition=str(body["partition"]),
            status=str(body["status"]),
            applied=tuple(applied),
            covered=tuple(covered),
            commits=commits,
            committed_at=body.get("committedAt"),
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise LakeError(f"{where}: unreadable commit state ({exc})") from None
    if state.partition != partition or state.status not in (COMMITTING, COMMITTED):
        raise LakeError(f"{where}: commit state of another partition")
    return state


def save_state(store: TimelineStore, state: PartitionState) -> None:
    store.write_aux(state_file_name(state.partition), state.to_json(), folder=STATE_FOLDER)


def _with_archived(timeline: Timeline, index: WriteIndex) -> tuple[WriteIndex, list[str]]:
    """``index`` plus the writes archived since it last read the archived timeline (``.hoodie/archived/``),
    and the rollbacks and restores archived unseen (they may have undone indexed writes).

    Only archive bytes added since ``index.archive_read`` are read; of their entries, those the index
    has (up to ``through``, or in ``seen_after``) are skipped. Table versions 8 and 9: from the LSM
    history (``_with_history``).
    """
    if timeline.history is not None:
        return _with_history(timeline, index)
    storage = timeline.storage
    folder = f"{HOODIE_DIR}/{ARCHIVE_FOLDER}"
    files = sorted(
        (version, name, size)
        for name, size in storage.list(folder)
        if (version := archive_version(name)) is not None
    )
    read_version, read_bytes = index.archive_read or (0, 0)
    partitions = dict(index.partitions)
    max_event = index.max_event_time_ms
    added: set[str] = set()
    undone: list[str] = []
    mark = index.archive_read
    for version, name, size in files:
        offset = read_bytes if version == read_version and size >= read_bytes else 0
        if version < read_version or (version == read_version and size == read_bytes):
            continue
        rel = f"{folder}/{name}"
        try:
            data = storage.read_range(rel, offset, size - offset) if size > offset else b""
        except ObjectNotFoundError:  # merged into a newer archive file since the listing (Java)
            continue
        blocks = parse_log_bytes(data, storage.uri(rel))
        # Up to the end of the last whole block: a block still being appended is read next time.
        mark = (version, offset + max((b.offset + b.size for b in blocks), default=0))
        for block in blocks:
            for entry in decode_archive_block(block):
                t = entry["commitTime"]
                if (index.through is not None and t <= index.through) or t in index.seen_after:
                    continue
                if entry.get("actionType") in (Action.ROLLBACK.value, Action.RESTORE.value):
                    undone.append(t)
                meta = entry.get("hoodieCommitMetadata") or entry.get("hoodieReplaceCommitMetadata")
                if entry.get("actionState") != State.COMPLETED.name or not meta:
                    continue
                added.add(t)
                if str(meta.get("operationType") or "").upper() in _SERVICE_OPERATIONS:
                    continue
                for partition in meta.get("partitionToWriteStats") or {}:
                    partitions[partition] = tuple(sorted({*partitions.get(partition, ()), t}))
                raw = (meta.get("extraMetadata") or {}).get(MAX_EVENT_TIME)
                if raw is not None and str(raw).lstrip("-").isdigit():
                    max_event = int(raw) if max_event is None else max(max_event, int(raw))
    if added:
        log.info("partition write index: %d archived write(s) indexed", len(added))
    seen = frozenset(t for t in index.seen_after | added if index.through is None or t > index.through)
    return replace(
        index, seen_after=seen, partitions=partitions, max_event_time_ms=max_event, archive_read=mark
    ), sorted(undone)


def _with_history(timeline: Timeline, index: WriteIndex) -> tuple[WriteIndex, list[str]]:
    """Layout 2: ``index`` plus the writes of the LSM history it lacks, and the rollbacks and
    restores archived unseen. Only what is requested after ``through`` can be missing, and only
    older than the active timeline is archived: the history is read over that range alone (nothing
    when ``through`` is not older than the active timeline's first instant)."""
    history = timeline.history
    assert history is not None
    start = timeline.instants[0].timestamp if timeline.instants else None
    if index.through is not None and start is not None and index.through >= start:
        return index, []
    partitions = dict(index.partitions)
    max_event = index.max_event_time_ms
    added: set[str] = set()
    undone: list[str] = []
    for entry in history.history.entries_between(index.through, None):
        t, action = entry.instant.instant_time, entry.instant.action
        if (
            not history.holds(t)
            or (index.through is not None and t <= index.through)
            or t in index.seen_after
        ):
            continue  # (still active: an interrupted archival's; or indexed already)
        if action in (Action.ROLLBACK.value, Action.RESTORE.value):
            undone.append(t)
        if action not in _ARCHIVED_WRITES or not entry.metadata:
            continue
        added.add(t)
        if action != Action.COMMIT.value or not entry.plan:  # a commit with a plan is a compaction
            meta = CommitMetadata.from_avro_bytes(entry.metadata, f"{history.where} (archived {t} {action})")
            if meta.operation_type.upper() in _SERVICE_OPERATIONS:
                continue
            for partition in meta.partition_to_write_stats:
                partitions[partition] = tuple(sorted({*partitions.get(partition, ()), t}))
            raw = meta.extra_metadata.get(MAX_EVENT_TIME)
            if raw is not None and str(raw).lstrip("-").isdigit():
                max_event = int(raw) if max_event is None else max(max_event, int(raw))
    if added:
        log.info("partition write index: %d archived write(s) indexed", len(added))
    seen = frozenset(t for t in index.seen_after | added if index.through is None or t > index.through)
    return replace(index, seen_after=seen, partitions=partitions, max_event_time_ms=max_event), sorted(undone)
