"""The timeline store: the only code that writes under ``.hoodie/``.

Every file is written to a hidden temporary name and linked into place, so a reader never sees a
half-written file and an existing file is never overwritten (a second writer gets
``CommitConflictError``). Transitions are checked against the instant's current state.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    InvalidStateTransitionError,
    ServiceBusyError,
    UnsafePathError,
)
from airflow_lake_provider.lake.format.base_file import fsync_file
from airflow_lake_provider.lake.format.instant import Action, Instant, State, validate_instant_time
from airflow_lake_provider.lake.format.properties import format_properties
from airflow_lake_provider.lake.table.timeline import HOODIE_DIR

PROPERTIES_FILE = "hoodie.properties"
TEMP_DIR = ".temp"
# Writers and compaction scheduling share this lock (see ``writer.write``).
WRITE_LOCK = "write"
# Folders Java creates at init; hudi-rs ignores them.
_INIT_DIRS = ("archived", TEMP_DIR, ".aux/.bootstrap/.partitions", ".aux/.bootstrap/.fileids", ".schema")


class IOType:
    """Marker suffixes: what a write did to a data file."""

    CREATE = "CREATE"
    MERGE = "MERGE"
    APPEND = "APPEND"


@dataclass(frozen=True)
class Marker:
    """A record that instant ``instant`` created or appended ``partition/file_name``."""

    instant: str
    partition: str
    file_name: str
    io_type: str

    @property
    def relative_path(self) -> str:
        return f"{self.partition}/{self.file_name}" if self.partition else self.file_name


def write_file_atomically(path: Path, data: bytes, *, overwrite: bool) -> None:
    """Write ``data`` to a hidden temp file beside ``path`` and move it into place."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if path exists: create-only, atomic
            except FileExistsError:
                raise CommitConflictError(f"{path} already exists; not overwriting it") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_file(path.parent)


class TimelineStore:
    """Writes timeline files, ``hoodie.properties`` and markers of one table."""

    def __init__(self, base_path: str | os.PathLike[str]) -> None:
        self.base_path = Path(base_path)
        self.hoodie = self.base_path / HOODIE_DIR

    # -- table config -----------------------------------------------------------------------
    def initialize(self, props: Mapping[str, str]) -> None:
        """Create ``.hoodie/`` with its folders and ``hoodie.properties`` (create-only)."""
        self.hoodie.mkdir(parents=True, exist_ok=True)
        for sub in _INIT_DIRS:
            (self.hoodie / sub).mkdir(parents=True, exist_ok=True)
        write_file_atomically(
            self.hoodie / PROPERTIES_FILE, format_properties(props).encode(), overwrite=False
        )

    def update_properties(self, props: Mapping[str, str]) -> None:
        write_file_atomically(
            self.hoodie / PROPERTIES_FILE, format_properties(props).encode(), overwrite=True
        )

    # -- instants ---------------------------------------------------------------------------
    def _states_present(self, timestamp: str, savepoint: bool = False) -> dict[State, Instant]:
        """States of the instant at ``timestamp``; savepoints (which reuse a commit's time) apart."""
        found: dict[State, Instant] = {}
        prefix = timestamp + "."
        for name in os.listdir(self.hoodie):
            if name.startswith(prefix):
                instant = Instant.from_file_name(name)
                if instant is not None and (instant.action is Action.SAVEPOINT) == savepoint:
                    found[instant.state] = instant
        return found

    def create_requested(self, timestamp: str, action: Action, content: bytes = b"") -> Instant:
        """Start a new instant; its time must not be used by any other timeline file."""
        validate_instant_time(timestamp)
        present = self._states_present(timestamp)
        if present:
            raise CommitConflictError(
                f"instant time {timestamp} is already used by {sorted(i.file_name for i in present.values())}"
            )
        instant = Instant(timestamp, State.REQUESTED, action)
        write_file_atomically(self.hoodie / instant.file_name, content, overwrite=False)
        return instant

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
        write_file_atomically(self.hoodie / inflight.file_name, content, overwrite=False)
        return inflight

    def transition_to_completed(self, instant: Instant, content: bytes) -> Instant:
        """inflight -> completed: the step that makes the instant's work visible; never overwrites."""
        present = self._states_present(instant.timestamp)
        inflight = present.get(State.INFLIGHT)
        if inflight is None or inflight.action is not instant.action:
            raise InvalidStateTransitionError(
                f"{instant.timestamp}: no inflight {instant.action.value} to complete "
                f"(found {sorted(i.file_name for i in present.values())})"
            )
        if State.COMPLETED in present:
            raise CommitConflictError(f"{instant.timestamp}: already completed; a completed instant is final")
        completed = inflight.with_state(State.COMPLETED)
        write_file_atomically(self.hoodie / completed.file_name, content, overwrite=False)
        return completed

    def update_pending(self, instant: Instant, content: bytes) -> None:
        """Rewrite the content of a requested or inflight file (never a completed one)."""
        if instant.is_completed:
            raise InvalidStateTransitionError(f"{instant}: completed timeline files are never rewritten")
        write_file_atomically(self.hoodie / instant.file_name, content, overwrite=True)

    def remove_pending(self, timestamp: str) -> list[str]:
        """Delete the requested/inflight files of a pending instant (rollback); refuse a completed one."""
        present = self._states_present(timestamp)
        if State.COMPLETED in present:
            raise InvalidStateTransitionError(f"{timestamp}: is completed; only pending instants are removed")
        removed = []
        # Inflight first, so a crash leaves a requested instant (still pending), never an orphan inflight.
        for state in (State.INFLIGHT, State.REQUESTED):
            if state in present:
                (self.hoodie / present[state].file_name).unlink(missing_ok=True)
                removed.append(present[state].file_name)
        return removed

    def create_savepoint(self, timestamp: str, content: bytes) -> Instant:
        """Write ``<t>.savepoint.inflight`` then ``<t>.savepoint`` for the commit at ``timestamp``."""
        present = self._states_present(timestamp, savepoint=True)
        if State.COMPLETED in present:
            raise CommitConflictError(f"{timestamp}: a savepoint already exists")
        inflight = Instant(timestamp, State.INFLIGHT, Action.SAVEPOINT)
        if State.INFLIGHT not in present:  # an interrupted create left it: finish it
            write_file_atomically(self.hoodie / inflight.file_name, b"", overwrite=False)
        completed = inflight.with_state(State.COMPLETED)
        write_file_atomically(self.hoodie / completed.file_name, content, overwrite=False)
        return completed

    def remove_savepoint(self, timestamp: str) -> None:
        """Delete a savepoint's files (savepoints are the one completed instant users may drop)."""
        present = self._states_present(timestamp, savepoint=True)
        if not present:
            raise InvalidStateTransitionError(f"{timestamp}: there is no savepoint at this instant")
        for state in (State.COMPLETED, State.INFLIGHT):
            (self.hoodie / Instant(timestamp, state, Action.SAVEPOINT).file_name).unlink(missing_ok=True)
        fsync_file(self.hoodie)

    def write_aux(self, name: str, data: bytes) -> None:
        """Replace a small bookkeeping file under ``.hoodie/.aux/`` (Hudi readers ignore the folder)."""
        if "/" in name or name.startswith("."):
            raise UnsafePathError(f"aux file name {name!r} must be a plain, visible file name")
        folder = self.hoodie / ".aux"
        folder.mkdir(parents=True, exist_ok=True)
        write_file_atomically(folder / name, data, overwrite=True)

    @contextlib.contextmanager
    def exclusive(self, service: str, wait_seconds: float = 0.0) -> Iterator[None]:
        """Hold the table's lock for ``service`` (one clean, one compaction, one write at a time).

        Waits up to ``wait_seconds`` for a holder to finish, then raises ``ServiceBusyError``.
        """
        folder = self.hoodie / ".aux"
        folder.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + wait_seconds
        with open(folder / f".lake-{service}.lock", "a+") as fh:
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        waited = f" (waited {wait_seconds:g} s)" if wait_seconds else ""
                        raise ServiceBusyError(
                            f"{self.base_path}: another {service} is running on this table{waited}"
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    # -- markers ----------------------------------------------------------------------------
    def marker_dir(self, timestamp: str) -> Path:
        return self.hoodie / TEMP_DIR / timestamp

    def create_marker(self, timestamp: str, partition: str, file_name: str, io_type: str) -> Marker:
        """Record, before a data file is created or appended, that this instant touches it."""
        if ".." in Path(partition).parts or Path(partition).is_absolute():
            raise UnsafePathError(f"partition {partition!r} leaves the table base path")
        folder = self.marker_dir(timestamp) / partition if partition else self.marker_dir(timestamp)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{file_name}.marker.{io_type}", "ab"):
            pass
        return Marker(timestamp, partition, file_name, io_type)

    def read_markers(self, timestamp: str) -> list[Marker]:
        root = self.marker_dir(timestamp)
        markers = []
        if not root.is_dir():
            return markers
        for dirpath, _dirs, files in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            partition = "" if rel == "." else rel.replace(os.sep, "/")
            for name in files:
                stem, sep, io_type = name.rpartition(".marker.")
                if sep:
                    markers.append(Marker(timestamp, partition, stem, io_type))
        return sorted(markers, key=lambda m: (m.partition, m.file_name))

    def delete_markers(self, timestamp: str) -> None:
        shutil.rmtree(self.marker_dir(timestamp), ignore_errors=True)
