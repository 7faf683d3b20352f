"""The active timeline of a table (read side): which instants exist and what they hold.

Timeline layout 1 (table version 6) and layout 2 (8 and 9: completion times, Avro commit metadata).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_lake_provider.lake.errors import CorruptTimelineFileError, InvalidInstantError
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage, open_storage
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata
from airflow_lake_provider.lake.timeline.history.lookup import ArchivedLookup, completed_instant
from airflow_lake_provider.lake.timeline.instant import COMMIT_ACTIONS, Action, Instant, State
from airflow_lake_provider.lake.timeline.layouts import LAYOUT_V1, TimelineLayout

if TYPE_CHECKING:
    from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry


@dataclass(frozen=True)
class Timeline:
    """Every instant of the active timeline at its latest state, in timeline order.

    A completed compaction shows as a completed ``commit``; ``compaction_times`` remembers which
    commits were compactions (their requested/inflight files say so). In layout 2 a completed
    instant carries its completion time, and ``history`` answers for the instants the LSM history
    holds (nothing is read from it until a reader asks about an instant older than the active
    timeline); :meth:`with_history` puts the archived instants up to a time in front.
    """

    storage: Storage
    instants: tuple[Instant, ...]
    compaction_times: frozenset[str] = frozenset()
    layout: TimelineLayout = LAYOUT_V1
    history: ArchivedLookup | None = field(default=None, compare=False, repr=False)
    # The archived entries of the first ``len(archived)`` instants (set by ``with_history`` only).
    archived: tuple[ArchivedEntry, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def load(
        cls, location: str | os.PathLike[str] | Storage, layout: TimelineLayout | None = None
    ) -> Timeline:
        """Load the active timeline; ``layout`` (default: what ``hoodie.properties`` declares)."""
        storage = open_storage(location)
        if layout is None:
            layout = TimelineLayout.detect(storage)
        # A savepoint shares its time with the commit it protects, so it is keyed apart.
        latest: dict[tuple[str, bool], Instant] = {}
        compactions: set[str] = set()
        for name in storage.list_names(layout.folder):
            try:
                instant = layout.parse_file_name(name)
            except InvalidInstantError as exc:
                raise CorruptTimelineFileError(f"{storage.uri(f'{layout.folder}/{name}')}: {exc}") from None
            if instant is None:
                continue
            if instant.action is Action.COMPACTION:
                compactions.add(instant.timestamp)
            key = (instant.timestamp, instant.action is Action.SAVEPOINT)
            known = latest.get(key)
            if known is None or instant.state > known.state:
                latest[key] = instant
        instants = tuple(sorted(latest.values()))
        history = None
        if layout.history_folder is not None:  # opening it reads nothing
            first = instants[0].timestamp if instants else None
            history = ArchivedLookup(storage, first, layout.history_folder)
        return cls(storage, instants, frozenset(compactions), layout, history)

    def with_history(self, until: str) -> Timeline:
        """This timeline with the completed instants of the LSM history requested at or before
        ``until`` in front, their metadata read from the history: what a read as of an archived
        instant needs (layout 2; the same timeline when the history holds none of them)."""
        if self.history is None or self.archived or not self.history.holds(until):
            return self
        pairs = [(e, completed_instant(e.instant)) for e in self.history.entries_until(until)]
        known = [(e, i) for e, i in pairs if i is not None]
        if not known:
            return self
        compactions = {i.timestamp for e, i in known if i.action is Action.COMMIT and e.plan}
        return replace(
            self,
            instants=tuple(i for _, i in known) + self.instants,
            compaction_times=self.compaction_times | compactions,
            archived=tuple(e for e, _ in known),
        )

    # -- selections -------------------------------------------------------------------------
    def filter(
        self, actions: Iterable[Action] | None = None, states: Iterable[State] | None = None
    ) -> list[Instant]:
        acts = set(actions) if actions is not None else None
        sts = set(states) if states is not None else None
        return [
            i for i in self.instants if (acts is None or i.action in acts) and (sts is None or i.state in sts)
        ]

    @cached_property
    def completed_commits(self) -> tuple[Instant, ...]:
        """The commit timeline: completed commit, deltacommit and replacecommit instants."""
        return tuple(self.filter(COMMIT_ACTIONS, [State.COMPLETED]))

    @cached_property
    def _committed_times(self) -> frozenset[str]:
        return frozenset(i.timestamp for i in self.completed_commits)

    @cached_property
    def _all_times(self) -> frozenset[str]:
        return frozenset(i.timestamp for i in self.instants)

    @property
    def pending(self) -> list[Instant]:
        return [i for i in self.instants if not i.is_completed]

    @property
    def last_completed_commit(self) -> Instant | None:
        return self.completed_commits[-1] if self.completed_commits else None

    @property
    def latest_time(self) -> str | None:
        """The newest instant time of any action or state (new instants must be later); in layout 2
        completion times count too (Hudi 1.x keeps both monotonic)."""
        if not self.instants:
            return None
        if not self.layout.has_completion_times:
            return self.instants[-1].timestamp
        return max(self.instants[-1].timestamp, *(i.completion_time or "" for i in self.instants))

    @cached_property
    def _completion_times(self) -> dict[str, str]:
        return {i.timestamp: i.completion_time for i in self.completed_commits if i.completion_time}

    def completion_time(self, timestamp: str) -> str | None:
        """When the completed write requested at ``timestamp`` completed (layout 2; else None);
        for an instant older than the active timeline, as the LSM history records it."""
        found = self._completion_times.get(timestamp)
        if found is None and self.history is not None and self.history.holds(timestamp):
            return self.history.completion_time(timestamp)
        return found

    def get(self, timestamp: str) -> Instant | None:
        """The instant at ``timestamp`` (savepoints, which share a commit's time, are not returned)."""
        for instant in self.instants:
            if instant.timestamp == timestamp and instant.action is not Action.SAVEPOINT:
                return instant
        return None

    def is_compaction(self, instant: Instant) -> bool:
        return instant.timestamp in self.compaction_times

    def is_committed(self, timestamp: str) -> bool:
        """True if data stamped ``timestamp`` is visible: a completed write, or archived history.

        Instants older than the whole active timeline were archived, and only completed instants are
        ever archived; a missing time between active instants is a failed, removed write.
        """
        if timestamp in self._committed_times:
            return True
        if timestamp in self._all_times or len(self.instants) <= len(self.archived):
            return False
        return timestamp < self.instants[len(self.archived)].timestamp

    def last_completed(self, action: Action) -> Instant | None:
        done = self.filter([action], [State.COMPLETED])
        return done[-1] if done else None

    def pending_compactions(self) -> list[Instant]:
        return self.filter([Action.COMPACTION], [State.REQUESTED, State.INFLIGHT])

    def savepoints(self) -> list[Instant]:
        return self.filter([Action.SAVEPOINT], [State.COMPLETED])

    # -- contents ---------------------------------------------------------------------------
    @property
    def base_path(self) -> str:
        return self.storage.root

    def path_of(self, instant: Instant) -> str:
        """The full location of an instant's file, for messages."""
        if self.history is not None and self._archived_entry(instant) is not None:
            return f"{self.history.where} (archived {instant.timestamp} {instant.action.value})"
        return self.storage.uri(self.layout.instant_path(instant))

    def read_bytes(self, instant: Instant) -> bytes:
        """The bytes of an instant's file; of an archived one (see :meth:`with_history`), what the
        history kept: a completed instant's metadata, a pending state's plan."""
        entry = self._archived_entry(instant)
        if entry is not None:
            return (entry.metadata if instant.is_completed else entry.plan) or b""
        return self.storage.read(self.layout.instant_path(instant))

    @cached_property
    def _archived_by_time(self) -> Mapping[str, tuple[tuple[Action, ArchivedEntry], ...]]:
        # The first len(archived) instants are the archived entries' (see with_history).
        found: dict[str, tuple[tuple[Action, ArchivedEntry], ...]] = {}
        for instant, entry in zip(self.instants, self.archived, strict=False):
            found[instant.timestamp] = (*found.get(instant.timestamp, ()), (instant.action, entry))
        return found

    def _archived_entry(self, instant: Instant) -> ArchivedEntry | None:
        """The history's entry of an archived instant: of its action once completed; for a pending
        state (a compaction's plan), the instant's at that time (not a savepoint's)."""
        if not self.archived:
            return None
        for action, entry in self._archived_by_time.get(instant.timestamp, ()):
            if action is instant.action or (not instant.is_completed and action is not Action.SAVEPOINT):
                return entry
        return None

    def commit_metadata(self, instant: Instant) -> CommitMetadata:
        """The metadata of a completed write instant (JSON in layout 1, Avro in layout 2)."""
        if instant.action not in COMMIT_ACTIONS or not instant.is_completed:
            raise InvalidInstantError(f"{instant}: only completed commit actions carry commit metadata")
        return self._decode_commit(instant)

    def inflight_commit_metadata(self, instant: Instant) -> CommitMetadata | None:
        """The metadata an inflight write instant holds (what it planned to write), or None when
        its file is empty."""
        if instant.action not in COMMIT_ACTIONS or not instant.is_inflight:
            raise InvalidInstantError(f"{instant}: only inflight commit actions carry inflight metadata")
        if not self.read_bytes(instant):
            return None
        return self._decode_commit(instant)

    def _decode_commit(self, instant: Instant) -> CommitMetadata:
        data, source = self.read_bytes(instant), self.path_of(instant)
        if self.layout.has_completion_times:
            return CommitMetadata.from_avro_bytes(data, source)
        return CommitMetadata.from_json_bytes(data, source)

    def avro_record(self, instant: Instant) -> dict[str, Any]:
        """The Avro record of a plan or metadata file (clean, compaction, rollback, savepoint...)."""
        path = self.path_of(instant)
        data = self.read_bytes(instant)
        if not data:
            raise CorruptTimelineFileError(f"{path}: the Avro timeline file is empty")
        return timeline_avro.read_avro(data, path)

    def read_aux(self, name: str) -> bytes | None:
        """A bookkeeping file under ``.hoodie/.aux/``, or ``None`` if there is none."""
        try:
            return self.storage.read(f"{HOODIE_DIR}/.aux/{name}")
        except FileNotFoundError:
            return None

    def earliest_retained(self) -> str | None:
        """The earliest commit the last completed clean retained (reads from it on are whole)."""
        last = self.last_completed(Action.CLEAN)
        if last is None:
            return None
        record = timeline_avro.read_avro_fields(
            self.read_bytes(last),
            self.path_of(last),
            timeline_avro.CLEAN_METADATA,
            ("partitionMetadata", "bootstrapPartitionMetadata"),
        )
        return record.get("earliestCommitToRetain") or None

    def has_archive(self) -> bool:
        """Whether instants were archived: to ``.hoodie/archived/`` (layout 1), or to the LSM
        history's parquet files (layout 2; an empty history holds a version file at most)."""
        if self.layout.history_folder is not None:
            return any(n.endswith(".parquet") for n in self.storage.list_names(self.layout.history_folder))
        return any(
            n.startswith(".commits_.archive.") for n in self.storage.list_names(f"{HOODIE_DIR}/archived")
        )

    def compaction_plan(self, timestamp: str) -> dict[str, Any]:
        """The ``HoodieCompactionPlan`` of a compaction instant, pending or completed."""
        requested = Instant(timestamp, State.REQUESTED, Action.COMPACTION)
        return self.avro_record(requested)

    def latest_schema(self) -> str | None:
        """The table schema recorded by the newest completed commit that carries one."""
        for instant in reversed(self.completed_commits):
            schema = self.commit_metadata(instant).schema
            if schema:
                return schema
        return None
