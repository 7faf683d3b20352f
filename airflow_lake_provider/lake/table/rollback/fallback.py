"""What a forced rollback falls back to, and the refusal when a clean removed it.

Rolling back the latest completed commit ``t`` deletes the files ``t`` wrote: every file group ``t``
gave a new slice (a COW rewrite, a compaction) reads its slice from before ``t`` again, and the file
groups a replacecommit replaced come back. A clean that ran after ``t`` may have removed those
slices (``KEEP_LATEST_FILE_VERSIONS`` keeps only ``t``'s): the rollback would then delete the only
version left and the rows would be gone. It is refused, as time travel to before ``t`` is.

Which slices the table falls back to comes from the active timeline's write stats (exactly the
files, as a read as of the commit before ``t`` needs them), and, for history archival moved out, from
``t`` itself: each write stat's ``prevCommit`` names the slice ``t`` rewrote, and its replaced file
groups must still have files.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.file_group.builder import slice_instant
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Instant


def lost_fallback(table: LakeTable, timeline: Timeline, target: Instant) -> dict[tuple[str, str], str | None]:
    """(partition, file id) -> base instant (``None``: not known) of every slice a rollback of the
    completed ``target`` would fall back to but which is no longer on disk."""
    t = target.timestamp
    meta = timeline.commit_metadata(target)
    partitions = sorted(meta.partitions)
    view = table.file_system_view(timeline, partitions)
    before = [c.timestamp for c in timeline.completed_commits if c.timestamp < t]
    lost: dict[tuple[str, str], str | None] = {}
    if before:
        for partition, file_id, at in view.missing_slices(before[-1], partitions):
            lost[(partition, file_id)] = at
    for stat in meta.write_stats():
        prev = stat.prev_commit
        if slice_instant(stat.path.rsplit("/", 1)[-1]) != t or not prev.isdigit() or prev >= t:
            continue  # t appended to an older slice (nothing of it goes), or made a new file group
        if not _has_slice(view, (stat.partition_path, stat.file_id), lambda at, p=prev: at == p):
            lost.setdefault((stat.partition_path, stat.file_id), prev)
    for partition, file_ids in (meta.partition_to_replace_file_ids or {}).items():
        for file_id in file_ids:
            if not _has_slice(view, (partition, file_id), lambda at: at < t):
                lost.setdefault((partition, file_id), None)
    return lost


def check_fallback(table: LakeTable, timeline: Timeline, target: Instant) -> None:
    """Refuse (``RollbackError``, nothing changed) a forced rollback of ``target`` whose fallback
    slices a clean removed; the message names the savepoint or restore that keeps them. Refuse too
    the rollback of the only completed commit on the active timeline once older ones are archived:
    Hudi readers (hudi-rs, Spark) read a table whose active timeline holds no commit as empty,
    whatever files the archived commits left."""
    t = target.timestamp
    if not any(c.timestamp < t for c in timeline.completed_commits) and timeline.has_archive():
        raise RollbackError(
            f"{table.uri}: cannot roll back {t}: it is the only completed commit on the active timeline "
            "and the ones before it are archived; without it Hudi readers (hudi-rs, Spark) read the "
            "table as empty, though the archived commits' files stay"
        )
    lost = lost_fallback(table, timeline, target)
    if not lost:
        return
    where = table.uri
    (partition, file_id), at = min(lost.items())
    before = [c.timestamp for c in timeline.completed_commits if c.timestamp < t]
    keep = (
        f"a savepoint of {before[-1]} made before the clean (lake savepoint create {where} "
        f"--instant {before[-1]}) would have kept it"
        if before
        else "a savepoint made before the clean would have kept it"
    )
    points = [s.timestamp for s in timeline.savepoints() if s.timestamp < t]
    restore = (
        f"; to undo {t} now, restore the savepoint {points[-1]} (lake restore {where} --savepoint "
        f"{points[-1]}), which no clean removed"
        if points
        else ""
    )
    what = f"the file slice {at}" if at else "every file"
    count = f"{len(lost)} slice" + ("" if len(lost) == 1 else "s")
    raise RollbackError(
        f"{where}: cannot roll back {t}: a clean removed {what} of file group {file_id} in partition "
        f"{partition or '<root>'} ({count} in all) that the table would fall back to, so the "
        f"rollback would delete the only version left; {keep}{restore}"
    )


def _has_slice(view: FileSystemView, key: tuple[str, str], wanted: Callable[[str], bool]) -> bool:
    """Whether the file group has files of a slice whose base instant is ``wanted``."""
    group = view.groups.get(key)
    return group is not None and any(s.files and wanted(s.base_instant) for s in group.slices)
