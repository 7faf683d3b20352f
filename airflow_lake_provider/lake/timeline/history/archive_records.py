"""The LSM history records an archival of a layout-2 table appends, built from the active files.

Hudi's ``TimelineArchiverV2`` archives, per completed instant, one ``HoodieLSMTimelineInstant``
record: its requested and completion times, the completed file's bytes as ``metadata`` and, for a
clean, compaction or clustering, its plan (see ``records.archived_entry``). An instant the history
already holds is left out: an archival that crashed after publishing its history file, before the
active files were deleted, is rerun, and Hudi's readers must not find an instant twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_lake_provider.lake.errors import InvalidStateTransitionError
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant, archived_entry
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout


def entries_to_append(
    storage: Storage, layout: TimelineLayout, folder: str, instants: Sequence[Instant]
) -> list[ArchivedEntry]:
    """The records of the completed ``instants`` (oldest first) that the history at ``folder`` does
    not hold yet, each with the bytes of its files on the active timeline."""
    if not instants:
        return []
    times = [i.timestamp for i in instants]
    held = {(i.instant_time, i.action) for i in History(storage, folder).instants(min(times), max(times))}
    files: dict[str, list[Instant]] = {}
    for name in storage.list_names(layout.folder):
        found = layout.parse_file_name(name)
        if found is not None and found.action is not Action.SAVEPOINT:
            files.setdefault(found.timestamp, []).append(found)
    entries = []
    for instant in instants:
        if not instant.is_completed or instant.completion_time is None:
            raise InvalidStateTransitionError(
                f"{instant}: only completed instants with a completion time are archived"
            )
        if (instant.timestamp, instant.action.value) in held:
            continue
        pending = sorted(
            (i for i in files.get(instant.timestamp, ()) if not i.is_completed), key=lambda i: i.state
        )
        by_state = {i.state: storage.read(layout.instant_path(i)) for i in pending}
        entries.append(
            archived_entry(
                ArchivedInstant(instant.timestamp, instant.completion_time, instant.action.value),
                pending[0].action.value if pending else instant.action.value,
                storage.read(layout.instant_path(instant)),
                by_state.get(State.REQUESTED),
                by_state.get(State.INFLIGHT),
            )
        )
    return entries
