"""What readers of a layout-2 table ask the LSM history, read when first asked and then kept.

The active timeline holds the instants from ``before`` on; the history holds the completed ones
that are older. Loading the active timeline reads nothing here: a read reaches the history only
for a log file whose deltacommit was archived (its completion time decides its file slice) or for
an ``as_of`` older than the active timeline (the archived commits up to it and their metadata).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

from airflow_lake_provider.lake.errors import CorruptTimelineFileError
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.timeline.history.layout import HISTORY_DIR
from airflow_lake_provider.lake.timeline.instant import COMPLETES_AS, Action, Instant, State

if TYPE_CHECKING:  # pyarrow: imported once the history is asked something, not with the timeline
    from airflow_lake_provider.lake.timeline.history.reader import History
    from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant

_ACTIONS = {a.value: a for a in Action}
_T = TypeVar("_T")


class ArchivedLookup:
    """Completion times and entries of the instants a table's LSM history holds (older than
    ``before``, the first instant of the active timeline; all of them when it is None)."""

    def __init__(self, storage: Storage, before: str | None, folder: str = HISTORY_DIR) -> None:
        self.storage = storage
        self.folder = folder
        self.before = before
        self._lock = threading.Lock()
        self._completions: dict[str, str] = {}
        self._loaded_from: str | None = None  # completion times are known for [_loaded_from, before)
        self._entries: list[ArchivedEntry] | None = None
        self._entries_until: str | None = None

    def __getstate__(self) -> dict[str, object]:
        # Shipped with its timeline to Spark tasks (a write's plan): the location only; the lock
        # cannot be pickled, and the caches are rebuilt where they are needed.
        return {"storage": self.storage, "folder": self.folder, "before": self.before}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["storage"], state["before"], state["folder"])  # type: ignore[misc, arg-type]

    @cached_property
    def history(self) -> History:
        from airflow_lake_provider.lake.timeline.history.reader import History

        return History(self.storage, self.folder)

    @property
    def where(self) -> str:
        return self.storage.uri(self.folder)

    def holds(self, timestamp: str) -> bool:
        """Whether ``timestamp`` is older than the active timeline (so only the history can know it)."""
        return self.before is None or timestamp < self.before

    def completion_time(self, timestamp: str) -> str | None:
        """When the archived instant requested at ``timestamp`` completed, or None if the history
        does not hold it. The first miss reads the history's time columns from ``timestamp`` up
        to the active timeline; later misses only what lies below what was read."""
        if not self.holds(timestamp):
            return None
        with self._lock:
            if self._loaded_from is None or timestamp < self._loaded_from:
                end = self._loaded_from or self.before
                for instant in self._read(
                    lambda: self.history.instants(timestamp, end),
                    f"the completion time of archived deltacommit {timestamp}, whose log file a "
                    "later base file may take into its slice",
                ):
                    if instant.completion_time and (end is None or instant.instant_time < end):
                        self._completions.setdefault(instant.instant_time, instant.completion_time)
                self._loaded_from = timestamp
            return self._completions.get(timestamp)

    def instants(self) -> list[Instant]:
        """Every completed instant the history holds, oldest first (reads the time columns only)."""
        found = map(completed_instant, self.history.instants(None, None))
        return [i for i in found if i is not None and self.holds(i.timestamp)]

    def instants_after(self, after: str) -> list[ArchivedInstant]:
        """The archived instants requested after ``after`` (the history's time columns of the
        files whose time range reaches past it)."""
        found = self.history.instants(after, self.before)
        return [i for i in found if i.instant_time > after and self.holds(i.instant_time)]

    def entries_until(self, until: str) -> list[ArchivedEntry]:
        """The archived entries (metadata and plan bytes) requested at or before ``until``."""
        with self._lock:
            if self._entries is None or self._entries_until is None or until > self._entries_until:
                end = until if self.before is None or until < self.before else None
                found = self._read(
                    lambda: self.history.entries_between(None, end),
                    f"the archived commits up to {until}",
                )
                self._entries = [e for e in found if self.holds(e.instant.instant_time)]
                self._entries_until = until
            return [e for e in self._entries if e.instant.instant_time <= until]

    def _read(self, read: Callable[[], list[_T]], needed: str) -> list[_T]:
        """``read()``; a damaged history file is named with what the read needed from it."""
        try:
            return read()
        except CorruptTimelineFileError as exc:
            raise CorruptTimelineFileError(
                f"{exc}; this read needs the LSM history ({self.where}) for {needed}: restore the "
                "damaged file from a backup or replica (Hudi's readers need it too); reads that need "
                "no archived instant do not open the history"
            ) from None


def completed_instant(archived: ArchivedInstant) -> Instant | None:
    """The completed instant an archived record names (None for an action this core does not know)."""
    action = _ACTIONS.get(archived.action)
    if action is None:
        return None
    action = COMPLETES_AS.get(action, action)  # a compaction is known as the commit it completed as
    return Instant(archived.instant_time, State.COMPLETED, action, archived.completion_time)
