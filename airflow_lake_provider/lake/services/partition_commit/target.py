"""Where a partition commit applies its policies: a Hudi table, or a plain parquet directory.

The executor runs one protocol over either (plan under a lock, then each due partition's policies
in order, each recorded in the partition's commit state so a crash never repeats one); a target
says where that state lives, what a partition's writes are, and how its small files are merged.

- A Hudi table: writes are completed write instants (from the write index under ``.hoodie/.aux/``),
  state files under ``.hoodie/.aux/``, merge-small-files a clustering ``replacecommit``.
- A plain directory (no ``.hoodie/``): writes are a partition's visible data files, its first write
  their earliest modification time, state under ``.lake-partition-commit/``, merge-small-files the
  in-progress -> pending -> finished protocol of ``plain``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence

from airflow_lake_provider.lake.errors import ObjectNotFoundError
from airflow_lake_provider.lake.services.partition_commit.config import PartitionCommitConfig, Trigger
from airflow_lake_provider.lake.services.partition_commit.extractor import PartitionValues
from airflow_lake_provider.lake.services.partition_commit.plain import (
    LOCK_FILE,
    STATE_DIR,
    _check_outer,
    _join,
    _merge_locked,
    is_hidden,
    recover_plain_merges,
)
from airflow_lake_provider.lake.services.partition_commit.plan import CommitPlan, PartitionDecision
from airflow_lake_provider.lake.services.partition_commit.planner import plan_commit, table_watermark
from airflow_lake_provider.lake.services.partition_commit.state import (
    PartitionState,
    WriteIndex,
    load_index,
    load_state,
    parse_state,
    refresh_index,
    save_index,
    save_state,
    state_file_name,
)
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import instant_to_datetime

log = logging.getLogger(__name__)

LOCK = "partition-commit"
LOCK_WAIT_SECONDS = 60.0
Extractor = Callable[[str, PartitionValues], dt.datetime]


class CommitTarget(ABC):
    """A table or directory whose partitions a commit run plans and commits."""

    storage: Storage
    uri: str  # for messages and the policies' context
    name: str  # the table's name (a directory's last path segment)
    kind: str  # "the table" / "the directory", in refusals
    late_noun: str  # what the late-data warning lists ("writes" / "files")
    missing_text: str  # why a partition counts as missing

    @abstractmethod
    def lock(self) -> contextlib.AbstractContextManager[None]:
        """One commit run at a time per target."""

    def prepare(self, dry_run: bool) -> None:  # noqa: B027 (nothing to prepare by default)
        """Under the lock, before planning."""

    @abstractmethod
    def plan(
        self,
        config: PartitionCommitConfig,
        names: Sequence[str],
        now: dt.datetime | None,
        watermark: dt.datetime | None,
        values_of: Callable[[str], PartitionValues],
        extractor: Extractor | None,
        force: bool,
    ) -> tuple[CommitPlan, dict[str, PartitionState | None]]:
        """The plan for ``names`` (``now``: the caller's clock, else the target's) and their states."""

    def keep_planning_inputs(self) -> None:  # noqa: B027 (nothing cached by default)
        """Save what planning refreshed, once the input passed every check."""

    @abstractmethod
    def save_state(self, state: PartitionState) -> None: ...

    @abstractmethod
    def merge_small_files(self, partition: str, target_bytes: int) -> None: ...

    @abstractmethod
    def covered(self, decision: PartitionDecision) -> tuple[str, ...]:
        """The writes a commit of ``decision`` covers now (what the policies' context names)."""

    def committed_note(self, config: PartitionCommitConfig) -> str:
        """What the "committed partition" log line adds."""
        return ""


class TableTarget(CommitTarget):
    kind, late_noun, missing_text = "the table", "writes", "have no completed write"

    def __init__(self, table: LakeTable, options: Mapping[str, object] | None = None) -> None:
        self.table = table
        self.options = options  # the run's: the MDT's services after a merge read them
        self.storage, self.uri, self.name = table.storage, table.uri, table.config.name
        self._index: WriteIndex | None = None

    def lock(self) -> contextlib.AbstractContextManager[None]:
        return self.table.store.exclusive(LOCK, wait_seconds=LOCK_WAIT_SECONDS)

    def plan(
        self,
        config: PartitionCommitConfig,
        names: Sequence[str],
        now: dt.datetime | None,
        watermark: dt.datetime | None,
        values_of: Callable[[str], PartitionValues],
        extractor: Extractor | None,
        force: bool,
    ) -> tuple[CommitPlan, dict[str, PartitionState | None]]:
        timeline = self.table.timeline()
        moment = now or _now(self.table, timeline)
        index, changed = refresh_index(timeline, load_index(timeline))
        self._index = index if changed else None
        states = {p: load_state(timeline, p) for p in names}
        if watermark is None and config.trigger is Trigger.PARTITION_TIME:
            watermark = table_watermark(index, config)
        plan = plan_commit(config, names, index, states, moment, watermark, values_of, extractor, force)
        return plan, states

    def keep_planning_inputs(self) -> None:
        if self._index is not None:  # a cache (dry runs and sensor pokes keep it fresh too)
            save_index(self.table.store, self._index)

    def save_state(self, state: PartitionState) -> None:
        save_state(self.table.store, state)

    def merge_small_files(self, partition: str, target_bytes: int) -> None:
        # Imported here: it loads polars (the compaction merge), which planning and Airflow's
        # triggerer never need (loading its native library holds the interpreter lock 0.1-0.5 s).
        from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files

        merged = merge_small_files(self.table, partition, target_bytes, options=self.options)
        if merged.instant:
            log.info(
                "partition %s: %d small files merged at %s", partition, len(merged.replaced), merged.instant
            )

    def covered(self, decision: PartitionDecision) -> tuple[str, ...]:
        return decision.writes

    def committed_note(self, config: PartitionCommitConfig) -> str:
        return " with " + ", ".join(k.value for k in config.policies)


class DirectoryTarget(CommitTarget):
    kind, late_noun, missing_text = "the directory", "files", "hold no visible file"

    def __init__(self, storage: Storage) -> None:
        self.storage, self.uri = storage, storage.root
        self.name = storage.root.rstrip("/").rsplit("/", 1)[-1]

    def lock(self) -> contextlib.AbstractContextManager[None]:
        return self.storage.lock(LOCK_FILE, "partition commit of a plain directory", LOCK_WAIT_SECONDS)

    def prepare(self, dry_run: bool) -> None:
        _check_outer(self.storage, hudi=False)  # again under the lock: a nested run holds its own by now
        if not dry_run:  # a look (sensor poke, trigger) changes no data; the commit rolls forward
            recover_plain_merges(self.storage)

    def plan(
        self,
        config: PartitionCommitConfig,
        names: Sequence[str],
        now: dt.datetime | None,
        watermark: dt.datetime | None,
        values_of: Callable[[str], PartitionValues],
        extractor: Extractor | None,
        force: bool,
    ) -> tuple[CommitPlan, dict[str, PartitionState | None]]:
        moment = now or dt.datetime.now(dt.timezone.utc)
        writes = {p: found for p in names if (found := self._visible(p))}
        states = {p: self._load_state(p) for p in names}
        decisions: list[PartitionDecision] = []
        for p in names:  # one partition at a time: modification times belong to its files
            one = plan_commit(
                config,
                [p],
                WriteIndex(partitions={p: writes[p]} if p in writes else {}),
                states,
                moment,
                watermark,
                values_of,
                extractor,
                force,
                self._write_time(p),
            )
            decisions.extend(one.decisions)
        return CommitPlan(config.trigger, moment, watermark, tuple(decisions)), states

    def _write_time(self, partition: str) -> Callable[[Sequence[str]], dt.datetime]:
        # Modification times only of the partitions whose trigger is asked (one stat/HEAD a file).
        def earliest(files: Sequence[str]) -> dt.datetime:
            ms = min(self.storage.modified_ms(_join(partition, f)) for f in files)
            return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)

        return earliest

    def _load_state(self, partition: str) -> PartitionState | None:
        rel = _state_rel(partition)
        try:
            data = self.storage.read(rel)
        except ObjectNotFoundError:
            return None
        return parse_state(data, partition, self.storage.uri(rel))

    def save_state(self, state: PartitionState) -> None:
        self.storage.write(_state_rel(state.partition), state.to_json())

    def merge_small_files(self, partition: str, target_bytes: int) -> None:
        _merge_locked(self.storage, partition, target_bytes, None)

    def covered(self, decision: PartitionDecision) -> tuple[str, ...]:
        # The files there now (a merge replaced its inputs): later ones are late.
        return self._visible(decision.partition)

    def _visible(self, partition: str) -> tuple[str, ...]:
        return tuple(sorted(n for n, _ in self.storage.list(partition) if not is_hidden(n)))


def _state_rel(partition: str) -> str:
    return f"{STATE_DIR}/{state_file_name(partition)}"


def _now(table: LakeTable, timeline: Timeline) -> dt.datetime:
    """The clock's time, never before the newest instant: instant times run a few milliseconds ahead
    of the clock when many are handed out within one millisecond."""
    moment = table.clock.now()
    latest = timeline.latest_time
    if latest is not None:
        moment = max(moment, instant_to_datetime(latest if len(latest) == 17 else latest + "000"))
    return moment
