"""The files an instant being rolled back wrote, read from its markers, its commit metadata or a
listing, with the instants of the blocks in each log file (the planner decides from these)."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.file_group.builder import list_table
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.rollback.planner import WrittenFile
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant


def logs_per_instant(table: LakeTable) -> bool:
    """Whether each deltacommit writes log files of its own (versions 8/9, timeline layout 2)."""
    return table.layout.has_completion_times


def drops_slice(table: LakeTable, timeline: Timeline, target: Instant) -> bool:
    """Whether rolling back ``target`` removes the file slices it began: a compaction of a version
    6 table, whose new slices later writes may have put logs on (versions 8/9 name logs by their
    own deltacommit)."""
    compaction = target.action is Action.COMPACTION or timeline.is_compaction(target)
    return compaction and not logs_per_instant(table)


def _slice_logs(table: LakeTable, timeline: Timeline, t: str) -> set[str]:
    """The log files of the slices compaction ``t`` began (named after ``t``, in the file groups its
    plan names): only writes after ``t`` put blocks there, and those are rolled back before ``t``
    may be (``check_target``). Left behind, once archival passes ``t``'s rollback such a log reads
    as a committed slice without a base file, hiding the file group's older slice from readers."""
    groups: dict[str, set[str]] = {}
    for op in timeline.compaction_plan(t).get("operations") or ():
        groups.setdefault(op.get("partitionPath") or "", set()).add(op["fileId"])
    return set(logs_on_slices(table.storage, t, groups))


def logs_on_slices(storage: Storage, t: str, groups: Mapping[str, set[str]]) -> list[str]:
    """The log files named after base instant ``t`` in the file groups ``groups`` names (partition
    -> file ids), table-relative, by partition and name: one listing per partition."""
    found = []
    for partition, file_ids in sorted(groups.items()):
        for name in sorted(storage.list_names(partition)):
            log_name = LogFileName.parse(name)
            if log_name is not None and log_name.base_instant == t and log_name.file_id in file_ids:
                found.append(f"{partition}/{name}" if partition else name)
    return found


def gather(table: LakeTable, timeline: Timeline, target: Instant) -> list[WrittenFile]:
    """The files ``target`` wrote: from its markers, else (completed) its write stats, else by
    listing the table for files named with it and log files holding its blocks. For a compaction
    on version 6, also the logs later writes put on the slices it began (``_slice_logs``); a
    completed write's block in one is refused (``RollbackError``): it would be lost."""
    storage = table.storage
    t = target.timestamp
    per_instant = logs_per_instant(table)
    markers = table.store.markers.read(t)
    if markers:
        paths = {m.relative_path for m in markers}
    elif target.is_completed:
        paths = {s.path for s in timeline.commit_metadata(target).write_stats()}
    else:
        paths = set()
        for partition, files in list_table(storage, table.config).items():
            for name, _size in files:
                base = BaseFileName.parse(name)
                log_name = LogFileName.parse(name) if base is None else None
                # v6: an older slice's log may hold t's blocks; v8/9: only logs named with t are t's.
                if (base is not None and base.instant == t) or (
                    log_name is not None
                    and (log_name.base_instant == t if per_instant else log_name.base_instant <= t)
                ):
                    paths.add(f"{partition}/{name}" if partition else name)
    slice_logs = _slice_logs(table, timeline, t) if drops_slice(table, timeline, target) else set()
    paths |= slice_logs
    written = []
    for path in sorted(paths):
        rel = storage.check_deletable(path)
        if not storage.exists(rel):
            if markers:  # its file not made yet: a writer still running (a late executor) may make
                written.append(WrittenFile(rel, 0))  # it, so the plan and metadata name it
            continue
        log_name = LogFileName.parse(rel.rpartition("/")[2])
        instants: frozenset[str] = frozenset()
        if log_name is not None and not per_instant:  # (v8/9: the plan goes by the log's name)
            blocks = parse_log_bytes(storage.read(rel), storage.uri(rel))
            instants = frozenset(b.instant_time for b in blocks if b.instant_time and not b.is_rollback)
            if not markers and not target.is_completed and log_name.base_instant != t and t not in instants:
                continue  # listing fallback: an older slice's log the instant never appended to
            if rel in slice_logs:
                _refuse_committed_blocks(timeline, t, rel, instants, storage)
        written.append(WrittenFile(rel, storage.size(rel), instants))
    return written


def _refuse_committed_blocks(
    timeline: Timeline, t: str, rel: str, instants: frozenset[str], storage: Storage
) -> None:
    """A log on compaction ``t``'s slice goes with ``t``: refused if a completed write's blocks are
    in it (only a restore rolls back a pending compaction, after every write since)."""
    kept = sorted(i for i in instants if (w := timeline.get(i)) is not None and w.is_completed)
    if kept:
        raise RollbackError(
            f"{storage.uri(rel)} is on the slice compaction {t} began and holds blocks of completed "
            f"write(s) {', '.join(kept)}: roll those back first"
        )
