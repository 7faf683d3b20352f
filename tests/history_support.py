"""Archiving a Hudi 1.x (layout 2) table's oldest completed instants into its LSM history as Hudi's
archiver does, for tests: any count of the oldest instants, regardless of the retention rules the
product's archival (``table/archival``) applies.

Hudi's ``TimelineArchiverV2``: one ``HoodieLSMTimelineInstant`` record per completed instant, built
from its active files (the completed file's bytes as metadata, the plan of a clean, compaction or
clustering), written as one level-0 file of the history with ``LSMTimelineWriter`` (then compacted
and cleaned), and only then the instant's files deleted from the active timeline (pending files
before the completed one, so that a crash leaves an instant that still reads as completed).
Not applied: Hudi's gate that keeps data instants newer than the metadata table's last compaction
active (our reads list storage, not the metadata table).
"""

from __future__ import annotations

from pathlib import Path

from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.history.records import ArchivedInstant, archived_entry
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout


def archive_oldest(path: Path, count: int) -> list[str]:
    """Archive the ``count`` oldest completed instants of the table at ``path``; returns their
    times. Refuses what Hudi's archiver would not archive: an instant after a pending one, and a
    replacecommit whose replaced file groups still have files."""
    storage = LocalStorage(path)
    layout = TimelineLayout.detect(storage)
    assert layout.history_folder is not None, f"{path} is not a layout-2 table"
    timeline = Timeline.load(storage, layout)
    chosen = list(timeline.instants[:count])
    assert len(chosen) == count and all(i.is_completed for i in chosen), chosen
    names = storage.list_names(layout.folder)
    entries = []
    for instant in chosen:
        if instant.action is Action.REPLACECOMMIT:
            _check_replaced_gone(path, timeline, instant)
        pending = _pending_files(names, layout, instant.timestamp)
        pending_action = pending[0][0].action.value if pending else instant.action.value
        by_state = {i.state: storage.read(f"{layout.folder}/{n}") for i, n in pending}
        entries.append(
            archived_entry(
                ArchivedInstant(instant.timestamp, instant.completion_time, instant.action.value),
                pending_action,
                timeline.read_bytes(instant),
                by_state.get(State.REQUESTED),
                by_state.get(State.INFLIGHT),
            )
        )
    writer = HistoryWriter(storage, layout.history_folder)
    writer.append(entries)
    writer.compact()
    for instant in chosen:
        for _, name in _pending_files(names, layout, instant.timestamp):
            storage.delete(f"{layout.folder}/{name}")
        storage.delete(layout.instant_path(instant))
    return [i.timestamp for i in chosen]


def _pending_files(names: list[str], layout: TimelineLayout, time: str) -> list[tuple[Instant, str]]:
    """The requested and inflight files of the instant at ``time``, requested first."""
    found = [(layout.parse_file_name(n), n) for n in names if n.startswith(f"{time}.")]
    pending = [(i, n) for i, n in found if i is not None and not i.is_completed]
    return sorted(pending, key=lambda p: p[0].state)


def _check_replaced_gone(path: Path, timeline: Timeline, instant: Instant) -> None:
    replaced = timeline.commit_metadata(instant).partition_to_replace_file_ids or {}
    for partition, ids in replaced.items():
        folder = path / partition if partition else path
        live = [p.name for p in folder.iterdir() for f in ids if f in p.name]
        assert not live, f"Hudi does not archive replacecommit {instant.timestamp}: {live} still exist"
