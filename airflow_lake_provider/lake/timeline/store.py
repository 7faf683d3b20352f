"""The timeline store: the only code that writes under ``.hoodie/`` (with its ``markers`` and
``heartbeats``, kept in modules of their own).

Every file is written to a hidden temporary name and linked into place, so a reader never sees a
half-written file and an existing file is never overwritten (a second writer gets
``CommitConflictError``). Transitions are checked against the instant's current state.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    InvalidStateTransitionError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    UnsafePathError,
)
from airflow_lake_provider.lake.format.properties import format_properties
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage, open_storage
from airflow_lake_provider.lake.timeline.heartbeat import Heartbeats
from airflow_lake_provider.lake.timeline.instant import (
    DEFAULT_CLOCK,
    Action,
    Instant,
    InstantClock,
    State,
    validate_timeline_time,
)
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout
from airflow_lake_provider.lake.timeline.markers import TEMP_DIR, Markers

PROPERTIES_FILE = "hoodie.properties"
# Hudi's update protocol keeps the old properties here while ``hoodie.properties`` is rewritten.
PROPERTIES_BACKUP_FILE = "hoodie.properties.backup"
# Hudi's metadata table: a Hudi table of its own under the data table's ``.hoodie/``.
METADATA_DIR = "metadata"
# Held only while an instant time is checked and its requested file created. Longer than an S3
# lock lives (LOCK_TTL_SECONDS): a holder that died is waited out and its lock taken over.
INSTANT_LOCK_WAIT_SECONDS = 65.0
# Writers and compaction scheduling share this lock (see ``writer.write``).
WRITE_LOCK = "write"
# Folders Java creates at init; hudi-rs ignores them (layout 2 adds its timeline folders).
_INIT_DIRS = (TEMP_DIR, ".aux/.bootstrap/.partitions", ".aux/.bootstrap/.fileids", ".schema")


class TimelineStore:
    """Writes timeline files and ``hoodie.properties`` of one table; ``markers`` and ``heartbeats``
    write theirs."""

    def __init__(
        self,
        location: str | os.PathLike[str] | Storage,
        timeline_layout: TimelineLayout | None = None,
        clock: InstantClock = DEFAULT_CLOCK,
    ) -> None:
        self.storage = open_storage(location)
        self._layout = timeline_layout
        # Layout 2's completion times come from the same clock as the table's instant times.
        self.clock = clock
        self.base_path = self.storage.root
        self.markers = Markers(self.storage)
        self.heartbeats = Heartbeats(self.storage)

    @property
    def layout(self) -> TimelineLayout:
        """The table's timeline layout (read from ``hoodie.properties`` on first use when not given)."""
        if self._layout is None:
            self._layout = TimelineLayout.detect(self.storage)
        return self._layout

    def _create(self, name: str, content: bytes, folder: str = HOODIE_DIR) -> None:
        """Create ``<folder>/<name>`` once; a second writer of the same file loses loudly."""
        try:
            self.storage.create(f"{folder}/{name}", content)
        except ObjectExistsError:
            raise CommitConflictError(
                f"{self.storage.uri(folder + '/' + name)} already exists; not overwriting it"
            ) from None

    def _create_instant(self, instant: Instant, content: bytes) -> None:
        self._create(self.layout.file_name(instant), content, self.layout.folder)

    def _instant_files(self, timestamp: str | None = None) -> list[Instant]:
        """The instants the timeline folder's files name (those of ``timestamp`` only, if given)."""
        found = []
        # Only names starting with the time are parsed: parsing every file of a long timeline for
        # each state change made a table's history quadratic to write.
        for name in self.storage.list_names(self.layout.folder):
            if timestamp is None or (
                name.startswith(timestamp) and name[len(timestamp) : len(timestamp) + 1] in (".", "_")
            ):
                instant = self.layout.parse_file_name(name)
                if instant is not None and (timestamp is None or instant.timestamp == timestamp):
                    found.append(instant)
        return found

    # -- table config -----------------------------------------------------------------------
    def initialize(self, props: Mapping[str, str]) -> None:
        """Create ``.hoodie/`` with its folders and ``hoodie.properties`` (create-only)."""
        if self.layout.history_folder is None:
            folders = ["archived", *_INIT_DIRS]
        else:
            folders = [*_INIT_DIRS, self.layout.folder, self.layout.history_folder]
        for sub in folders:
            self.storage.make_folder(sub if sub.startswith(HOODIE_DIR + "/") else f"{HOODIE_DIR}/{sub}")
        self._create(PROPERTIES_FILE, format_properties(props).encode())

    def update_properties(self, props: Mapping[str, str]) -> None:
        self.storage.write(f"{HOODIE_DIR}/{PROPERTIES_FILE}", format_properties(props).encode())

    def read_properties_text(self) -> str:
        """``hoodie.properties``, else (an update interrupted after its delete) the backup, as Hudi's
        readers fall back to it; ``ObjectNotFoundError`` if neither exists."""
        try:
            return self.storage.read(f"{HOODIE_DIR}/{PROPERTIES_FILE}").decode("utf-8")
        except FileNotFoundError:
            try:
                return self.storage.read(f"{HOODIE_DIR}/{PROPERTIES_BACKUP_FILE}").decode("utf-8")
            except FileNotFoundError:
                raise ObjectNotFoundError(self.storage.uri(f"{HOODIE_DIR}/{PROPERTIES_FILE}")) from None

    def modify_properties(self, props: Mapping[str, str]) -> None:
        """Replace ``hoodie.properties`` with ``props`` keeping Hudi's backup protocol
        (``HoodieTableConfig.modify``): finish an interrupted update, copy the current file to the
        backup, write the new one (checksum last), delete the backup. Hudi deletes the file before
        writing the new one (HDFS has no atomic overwrite); our storages replace a file atomically,
        so the delete is left out: a reader that does not know the backup (hudi-rs) finds a complete
        ``hoodie.properties`` after a crash at any step, and Java's recovery still finds the backup."""
        current = f"{HOODIE_DIR}/{PROPERTIES_FILE}"
        backup = f"{HOODIE_DIR}/{PROPERTIES_BACKUP_FILE}"
        self.recover_properties()
        self.storage.write(backup, self.storage.read(current))
        self.storage.write(current, format_properties(props).encode())
        self.storage.delete(backup)

    def recover_properties(self) -> bool:
        """Hudi's recovery of an interrupted update: no ``hoodie.properties`` -> copy the backup back;
        then the backup goes. True if anything was changed."""
        current = f"{HOODIE_DIR}/{PROPERTIES_FILE}"
        backup = f"{HOODIE_DIR}/{PROPERTIES_BACKUP_FILE}"
        if not self.storage.exists(backup):
            return False
        if not self.storage.exists(current):
            self.storage.create(current, self.storage.read(backup))
        self.storage.delete(backup)
        return True

    def metadata_table_files(self) -> list[str]:
        """Every file under ``.hoodie/metadata/`` (relative to the table), deepest folders first;
        none when it is a link (its files are not the table's: only the link is deleted)."""
        root = f"{HOODIE_DIR}/{METADATA_DIR}"
        if self.storage.is_link(root):
            return []
        found = [f"{folder}/{name}" for folder, files in self.storage.walk(root) for name, _ in files]
        return sorted(found, key=lambda rel: (-rel.count("/"), rel))

    def delete_metadata_table(self) -> None:
        """Delete ``.hoodie/metadata/`` (Hudi's ``deleteMetadataTable`` after the partitions are cleared):
        file by file, so a crash leaves a smaller folder that the next drop finishes, then the folder."""
        root = f"{HOODIE_DIR}/{METADATA_DIR}"
        for rel in self.metadata_table_files():
            self.storage.delete(rel)
        self.storage.delete_tree(root)
        if self.storage.exists(root):  # never report a drop that left something behind
            raise StorageError(f"{self.storage.uri(root)} is still there after deleting it")

    # -- instants ---------------------------------------------------------------------------
    def _states_present(self, timestamp: str, savepoint: bool = False) -> dict[State, Instant]:
        """States of the instant at ``timestamp``; savepoints (which reuse a commit's time) apart."""
        found: dict[State, Instant] = {}
        for instant in self._instant_files(timestamp):
            if (instant.action is Action.SAVEPOINT) == savepoint:
                found[instant.state] = instant
        return found

    def create_requested(self, timestamp: str, action: Action, content: bytes = b"") -> Instant:
        """Start a new instant; its time must not be used by any other timeline file."""
        validate_timeline_time(timestamp)  # a v6 metadata table's may carry operation suffixes
        # Check and create under one lock: two processes starting different actions in the same
        # millisecond would otherwise both see the time free (create-once only guards one name).
        with self.exclusive("instant", INSTANT_LOCK_WAIT_SECONDS):
            self._refuse_used(timestamp)
            instant = Instant(timestamp, State.REQUESTED, action)
            self._create_instant(instant, content)
        return instant

    def start(self, timestamp: str, action: Action, content: bytes = b"") -> Instant:
        """:meth:`create_requested` (empty) and :meth:`transition_to_inflight` with ``content`` in one
        step, for an action that does nothing between the two (an MDT deltacommit): both files made
        durable together, the time checked free once; the inflight instant."""
        validate_timeline_time(timestamp)
        with self.exclusive("instant", INSTANT_LOCK_WAIT_SECONDS):
            self._refuse_used(timestamp)
            requested = Instant(timestamp, State.REQUESTED, action)
            inflight = Instant(timestamp, State.INFLIGHT, action)
            folder = self.layout.folder
            files = [
                (f"{folder}/{self.layout.file_name(requested)}", b""),
                (f"{folder}/{self.layout.file_name(inflight)}", content),
            ]
            try:
                self.storage.create_in_order(files)
            except ObjectExistsError as exc:  # another writer took the time since the check
                raise CommitConflictError(f"instant time {timestamp} is already used: {exc}") from None
        return inflight

    def _refuse_used(self, timestamp: str) -> None:
        """``CommitConflictError`` if a timeline file already uses ``timestamp`` (under the instant lock)."""
        present = self._states_present(timestamp)
        if present:
            used = sorted(self.layout.file_name(i) for i in present.values())
            raise CommitConflictError(f"instant time {timestamp} is already used by {used}")

    def transition_to_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        """requested -> inflight; an instant without a requested file is refused (savepoints excepted)."""
        present = self._states_present(instant.timestamp)
        if State.INFLIGHT in present or State.COMPLETED in present:
            raise InvalidStateTransitionError(
                f"{instant.timestamp}: cannot move to inflight, it is already {max(present).name.lower()}"
            )
        requested = present.get(State.REQUESTED)
        if requested is None or requested.action is not instant.action:
            raise InvalidStateTransitionError(
                f"{instant.timestamp}: no requested {instant.action.value} to move to inflight"
            )
        inflight = Instant(instant.timestamp, State.INFLIGHT, instant.action)
        self._create_instant(inflight, content)
        return inflight

    def encode_plan(self, full_name: str, record: Mapping[str, Any]) -> bytes:
        """A plan record (e.g. ``avro.COMPACTION_PLAN``) as this table's timeline holds it: under Hudi
        1.x's schema in layout 2 where it differs from 0.x's (a ``*.1x.avsc`` is shipped), else under
        0.x's. Fields a schema does not have are left out."""
        from airflow_lake_provider.lake.timeline import avro as timeline_avro  # fastavro: on use only

        return timeline_avro.write_avro_for(full_name, record, self.layout.has_completion_times)

    def start_planned(self, requested: Instant, plan: bytes) -> Instant:
        """requested -> inflight of an action whose requested file is its plan (a compaction): layout
        1 copies the plan into the inflight file (as this package always has), layout 2 leaves it
        empty as Hudi 1.x does (its readers, like ours, take the plan from the requested file)."""
        return self.transition_to_inflight(requested, b"" if self.layout.has_completion_times else plan)

    def transition_to_completed(self, instant: Instant, content: bytes) -> Instant:
        """inflight -> completed: the step that makes the instant's work visible; never overwrites.

        In layout 2 the completed file also carries the completion time: a new time from the clock,
        later than every requested and completion time on the timeline (Hudi 1.x keeps both
        monotonic), taken under the instant lock so no other instant starts or completes at it."""
        if not self.layout.has_completion_times:
            completed = self._completed(instant, self._states_present(instant.timestamp))
            self._create_instant(completed, content)
            return completed
        with self.exclusive("instant", INSTANT_LOCK_WAIT_SECONDS):
            on_timeline = self._instant_files()
            present = {
                i.state: i
                for i in on_timeline
                if i.timestamp == instant.timestamp and i.action is not Action.SAVEPOINT
            }
            return self._create_completed(self._completed(instant, present), content, on_timeline)

    def _create_completed(self, completed: Instant, content: bytes, on_timeline: list[Instant]) -> Instant:
        """Layout 2 (under the instant lock): create ``completed`` with a completion time later than
        every requested and completion time of ``on_timeline``."""
        latest = max(t for i in on_timeline for t in (i.timestamp, i.completion_time or ""))
        completed = replace(completed, completion_time=self.clock.next(after=latest))
        self._create_instant(completed, content)
        return completed

    def _completed(self, instant: Instant, present: Mapping[State, Instant]) -> Instant:
        inflight = present.get(State.INFLIGHT)
        if inflight is None or inflight.action is not instant.action:
            raise InvalidStateTransitionError(
                f"{instant.timestamp}: no inflight {instant.action.value} to complete "
                f"(found {sorted(self.layout.file_name(i) for i in present.values())})"
            )
        if State.COMPLETED in present:
            raise CommitConflictError(f"{instant.timestamp}: already completed; a completed instant is final")
        return inflight.with_state(State.COMPLETED)

    def update_pending(self, instant: Instant, content: bytes) -> None:
        """Rewrite the content of a requested or inflight file (never a completed one)."""
        if instant.is_completed:
            raise InvalidStateTransitionError(f"{instant}: completed timeline files are never rewritten")
        self.storage.write(self.layout.instant_path(instant), content)

    def remove_pending(self, timestamp: str) -> list[str]:
        """Delete the requested/inflight files of a pending instant (rollback); refuse a completed one."""
        present = self._states_present(timestamp)
        if State.COMPLETED in present:
            raise InvalidStateTransitionError(f"{timestamp}: is completed; only pending instants are removed")
        removed = []
        # Inflight first, so a crash leaves a requested instant (still pending), never an orphan inflight.
        for state in (State.INFLIGHT, State.REQUESTED):
            if state in present:
                self.storage.delete(self.layout.instant_path(present[state]))
                removed.append(self.layout.file_name(present[state]))
        return removed

    def revert_to_requested(self, timestamp: str) -> Instant:
        """Delete the inflight file of a pending instant whose requested file holds its plan, so it
        runs again from that plan (how Hudi's retry of a failed compaction ends); refuse a completed
        instant or one with no plan to run again."""
        present = self._states_present(timestamp)
        requested = present.get(State.REQUESTED)
        if State.COMPLETED in present:
            raise InvalidStateTransitionError(
                f"{timestamp}: is completed; only pending instants are reverted"
            )
        if requested is None or not self.storage.read(self.layout.instant_path(requested)):
            raise InvalidStateTransitionError(f"{timestamp}: has no requested plan to run again")
        if State.INFLIGHT in present:
            self.storage.delete(self.layout.instant_path(present[State.INFLIGHT]))
        return requested

    def remove_completed(self, instant: Instant) -> None:
        """Delete the completed file of a write being rolled back (forced): the instant turns
        pending again (its inflight file stays), so its files stop being visible at once."""
        if not instant.is_completed or instant.action not in (
            Action.COMMIT,
            Action.DELTACOMMIT,
            Action.REPLACECOMMIT,
        ):
            raise InvalidStateTransitionError(f"{instant}: only a completed write is un-completed")
        present = self._states_present(instant.timestamp)
        if State.INFLIGHT not in present:  # keep it pending, never an orphan completed-less instant
            self._create_instant(instant.with_state(State.INFLIGHT), b"")
        self.storage.delete(self.layout.instant_path(present.get(State.COMPLETED, instant)))

    def create_savepoint(self, timestamp: str, content: bytes) -> Instant:
        """Write ``<t>.savepoint.inflight`` then the completed savepoint for the commit at
        ``timestamp``: ``<t>.savepoint``, in layout 2 ``<t>_<completion>.savepoint`` (a new
        completion time, as for any instant that completes)."""
        present = self._states_present(timestamp, savepoint=True)
        if State.COMPLETED in present:
            raise CommitConflictError(f"{timestamp}: a savepoint already exists")
        inflight = Instant(timestamp, State.INFLIGHT, Action.SAVEPOINT)
        if State.INFLIGHT not in present:  # an interrupted create left it: finish it
            self._create_instant(inflight, b"")
        completed = inflight.with_state(State.COMPLETED)
        if not self.layout.has_completion_times:
            self._create_instant(completed, content)
            return completed
        with self.exclusive("instant", INSTANT_LOCK_WAIT_SECONDS):
            on_timeline = self._instant_files()
            if any(
                i.timestamp == timestamp and i.action is Action.SAVEPOINT and i.is_completed
                for i in on_timeline
            ):
                raise CommitConflictError(f"{timestamp}: a savepoint already exists")
            return self._create_completed(completed, content, on_timeline)

    def remove_savepoint(self, timestamp: str) -> None:
        """Delete a savepoint's files (savepoints are the one completed instant users may drop):
        the completed file first, so a crash leaves a half-made savepoint, which protects nothing."""
        present = self._states_present(timestamp, savepoint=True)
        if not present:
            raise InvalidStateTransitionError(f"{timestamp}: there is no savepoint at this instant")
        for state in (State.COMPLETED, State.INFLIGHT):
            if state in present:
                self.storage.delete(self.layout.instant_path(present[state]))

    def write_archive(self, name: str, data: bytes) -> None:
        """Create one archived-timeline file under ``.hoodie/archived/`` (never overwritten)."""
        if "/" in name or not name.startswith(".commits_.archive."):
            raise UnsafePathError(f"archive file name {name!r} is not an archived-timeline file name")
        self._create(f"archived/{name}", data)

    def remove_archived(self, timestamps: list[str]) -> list[str]:
        """Delete the active-timeline files of archived (completed) instants, oldest first; per instant
        its requested and inflight files before the completed one, so it never looks pending."""
        by_time: dict[str, list[Instant]] = {}
        for instant in self._instant_files():
            if instant.action is not Action.SAVEPOINT:
                by_time.setdefault(instant.timestamp, []).append(instant)
        removed = []
        for timestamp in sorted(timestamps):
            files = by_time.get(timestamp, [])
            if not any(i.state is State.COMPLETED for i in files):
                raise InvalidStateTransitionError(f"{timestamp}: only completed instants are archived")
            for instant in sorted(files, key=lambda i: i.state is State.COMPLETED):
                self.storage.delete(self.layout.instant_path(instant))
                removed.append(self.layout.file_name(instant))
        return removed

    def append_history(self, instants: Sequence[Instant]) -> str | None:
        """Layout 2: add the completed ``instants`` (oldest first) to the LSM history as one level-0
        file, each with the bytes of its active files (Hudi's ``HoodieLSMTimelineInstant``), before
        any of those files is deleted. Instants the history already holds (an archival that crashed
        after this step) are not added twice; returns the new file's name, None if none was needed."""
        from airflow_lake_provider.lake.timeline.history import archive_records

        folder = self._history_folder()
        entries = archive_records.entries_to_append(self.storage, self.layout, folder, instants)
        if not entries:
            return None
        from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter

        return HistoryWriter(self.storage, folder).append(entries)

    def compact_history(self) -> None:
        """Layout 2: compact the LSM history's full levels and clean what no snapshot kept names
        (Hudi runs this after each archival)."""
        from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter

        HistoryWriter(self.storage, self._history_folder()).compact()

    def _history_folder(self) -> str:
        folder = self.layout.history_folder
        if folder is None:
            raise InvalidStateTransitionError(
                f"{self.storage.uri(HOODIE_DIR)}: timeline layout {self.layout.version} has no LSM history"
            )
        return folder

    def write_aux(self, name: str, data: bytes, folder: str = "") -> None:
        """Replace a small bookkeeping file under ``.hoodie/.aux/`` (Hudi readers ignore the folder),
        optionally in one sub-folder ``folder`` of it (a service's many small state files)."""
        for part in (name, folder) if folder else (name,):
            if "/" in part or part.startswith(".") or "\x00" in part or not part:
                raise UnsafePathError(f"aux file name {part!r} must be a plain, visible file name")
        self.storage.write(f"{HOODIE_DIR}/.aux/{folder + '/' if folder else ''}{name}", data)

    @contextlib.contextmanager
    def exclusive(self, service: str, wait_seconds: float = 0.0) -> Iterator[None]:
        """Hold the table's lock for ``service`` (one clean, one compaction, one write at a time).

        Waits up to ``wait_seconds`` for a holder to finish, then raises ``ServiceBusyError``.
        """
        busy = f"another {service} is running on this table"
        with self.storage.lock(f"{HOODIE_DIR}/.aux/.lake-{service}.lock", busy, wait_seconds):
            yield
