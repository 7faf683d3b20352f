"""File system view: file groups and file slices of a table, as of an instant.

Discovery is by listing, like every Hudi reader of table version 6. Only files of committed instants
count. Following Java Hudi (hudi-rs is narrower here), log files written against a *pending*
compaction's instant are merged into the slice that compaction is rewriting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from airflow_lake_provider.lake.file_group.builder import (
    Lister,
    SlotEntry,
    _LazyGroups,
    _make_slice,
    _replaced_file_groups,
    _sized,
    index_slices,
    list_partitions,
    list_table,
    open_slot,
    slice_instant,
)
from airflow_lake_provider.lake.file_group.file_names import BaseFileName
from airflow_lake_provider.lake.file_group.model import FileGroup, FileSlice
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import WriteStat
from airflow_lake_provider.lake.timeline.instant import COMMIT_ACTIONS, Action, State


@dataclass(frozen=True)
class FileSystemView:
    """Committed file groups of the listed partitions, plus what table services must respect."""

    config: TableConfig
    timeline: Timeline
    groups: Mapping[tuple[str, str], FileGroup]
    partitions: tuple[str, ...]
    replaced: dict[tuple[str, str], str] = field(default_factory=dict)
    pending_compaction: dict[tuple[str, str], str] = field(default_factory=dict)
    # Base instant of the slice each pending compaction rewrites.
    pending_compaction_base: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        config: TableConfig,
        timeline: Timeline,
        partitions: Iterable[str] | None = None,
        lister: Lister | None = None,
        sizes: bool = True,
        base_extension: str = "parquet",
    ) -> FileSystemView:
        """List ``partitions`` (default: all) and group their committed files.

        ``lister`` may replace the local listing (e.g. to spread it over Spark executors): it maps
        partition paths to ``(file name, size)`` pairs. ``sizes=False`` (with ``partitions``) lists
        names only where sizes cost a call per file (a local disk) and sizes a file when a group or
        base file holding it is asked for: a write lists every file of its partitions and uses few.
        ``base_extension`` is ``hfile`` for a metadata table.
        """
        storage = timeline.storage
        if partitions is not None:
            names = sorted({_partition_key(p) for p in partitions})
            if lister is not None:
                listing = lister(names)
            elif sizes:
                listing = {p: storage.list(p) for p in names}
            else:
                listing = {p: storage.list_known_sizes(p) for p in names}
        elif lister is not None:
            names = list_partitions(storage, config)
            listing = lister(names)
        else:
            listing = list_table(storage, config)  # one walk finds partitions and lists them
            names = sorted(listing)
        return cls._group(config, timeline, names, listing, base_extension)

    @classmethod
    def _group(
        cls,
        config: TableConfig,
        timeline: Timeline,
        names: list[str],
        listing: Mapping[str, Sequence[tuple[str, int | None]]],
        base_extension: str = "parquet",
    ) -> FileSystemView:
        index, compacting = index_slices(timeline, names, listing, base_extension)
        return cls(
            config=config,
            timeline=timeline,
            groups=_LazyGroups(index, storage=timeline.storage),
            partitions=tuple(names),
            replaced=_replaced_file_groups(timeline),
            pending_compaction={k: v[0] for k, v in compacting.items()},
            pending_compaction_base={k: v[1] for k, v in compacting.items()},
        )

    @property
    def slice_index(self) -> Mapping[tuple[str, str], Mapping[str, SlotEntry]]:
        """(partition, file id) -> base instant -> ((base name, size) or None, ((log name, size), ...))."""
        return self.groups.index if isinstance(self.groups, _LazyGroups) else {}

    def file_groups(self, partition: str | None = None) -> list[FileGroup]:
        # Filter on the keys: building the other partitions' groups would parse all their files.
        keys = sorted(k for k in self.groups if partition is None or k[0] == partition)
        return [self.groups[k] for k in keys]

    def snapshot_bases(self, partition: str) -> list[tuple[str, tuple[str, int] | None, bool]]:
        """(file id, base file (name, size) or None, has log files) of the slice a snapshot read takes
        in each live file group of ``partition``, by file id, chosen as :meth:`merged_latest_slice`
        chooses. For the key lookup: it reads the index and builds no group (a write touches a few
        groups of a partition, each of which may have many log files)."""
        if not isinstance(self.groups, _LazyGroups):
            out = []
            for group in self.file_groups(partition):
                merged = None if self.is_replaced(group) else self.merged_latest_slice(group)
                if merged is not None:
                    base = (merged.base_file.file_name, merged.base_file.size) if merged.base_file else None
                    out.append((group.file_id, base, bool(merged.log_files)))
            return out
        found = []
        for key in sorted(k for k in self.groups.index if k[0] == partition):
            if key in self.replaced:
                continue
            slots = self.groups.index[key]
            instants = sorted(slots)
            base, logs = slots[instants[-1]]
            if base is None and len(instants) > 1 and self._is_pending_compaction(instants[-1]):
                previous_base, previous_logs = slots[instants[-2]]
                base, logs = previous_base, previous_logs + logs
            elif base is None and not logs:
                continue
            sized = None if base is None else (base[0], _sized(self.groups.storage, partition, *base))
            found.append((key[1], sized, bool(logs)))
        return found

    def snapshot_logs(self, partition: str, file_id: str) -> list[str]:
        """Relative paths of the log files of the slice a snapshot read takes in one file group (as
        :meth:`snapshot_bases` chooses it), from the index: nothing is sized or parsed."""
        if not isinstance(self.groups, _LazyGroups):
            pair = self.latest_pair(partition, file_id)
            return [] if pair is None else [f.relative_path for f in pair[0].log_files]
        slots = self.groups.index[(partition, file_id)]
        instants = sorted(slots)
        names = [name for name, _ in slots[instants[-1]][1]]
        if slots[instants[-1]][0] is None and len(instants) > 1 and self._is_pending_compaction(instants[-1]):
            names = [name for name, _ in slots[instants[-2]][1]] + names
        return [f"{partition}/{name}" if partition else name for name in names]

    def latest_pair(self, partition: str, file_id: str) -> tuple[FileSlice, FileSlice] | None:
        """(the slice a snapshot read takes, the newest slice) of one file group, as
        :meth:`merged_latest_slice` and ``FileGroup.latest_slice`` give them (None: nothing to read).

        Built from the index alone: only the files of those slices are sized, not the older
        slices' files a concurrent clean may be deleting (a write must not fail on a slice it does
        not read)."""
        key = (partition, file_id)
        if not isinstance(self.groups, _LazyGroups):
            group = self.groups[key]
            merged = self.merged_latest_slice(group)
            return None if merged is None else (merged, group.latest_slice)
        slots = self.groups.index[key]
        instants = sorted(slots)
        storage = self.groups.storage
        newest = _make_slice(key, instants[-1], slots[instants[-1]], storage)
        if newest.base_file is None and len(instants) > 1 and self._is_pending_compaction(instants[-1]):
            previous = _make_slice(key, instants[-2], slots[instants[-2]], storage)
            return replace(previous, log_files=previous.log_files + newest.log_files), newest
        if newest.base_file is None and not newest.log_files:
            return None
        return newest, newest

    def is_replaced(self, group: FileGroup, as_of: str | None = None) -> bool:
        at = self.replaced.get((group.partition, group.file_id))
        return at is not None and (as_of is None or at <= as_of)

    def missing_slices(
        self, instant: str, partitions: Iterable[str] | None = None
    ) -> list[tuple[str, str, str]]:
        """(partition, file id, slice instant) of every file slice that a read as of ``instant`` (of
        ``partitions``, default all) needs but a clean removed, wholly or some of its files.

        Commit write stats say which files each file group had at ``instant``: those of its newest
        slice (base file and log files) written by commits up to ``instant``. As of an archived
        instant, only the groups a clean may have taken that slice from are checked
        (:meth:`_at_risk`), and of the commits only those that can have written it: a read as of the
        newest of 10,000 archived instants decodes a few of them, not all.
        """
        only = set(partitions) if partitions is not None else None
        at_risk, floor = self._at_risk(instant, only)
        if at_risk is not None and not at_risk:
            return []
        files: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (name, slice instant) per group
        by_completion = self.timeline.layout.has_completion_times
        for commit in self.timeline.completed_commits:
            if commit.timestamp > instant:
                break
            # Files of a slice at or after ``floor`` come from commits requested (layout 1) or
            # completed (layout 2) at or after it; an unknown completion time is read.
            written = (commit.completion_time or "") if by_completion else commit.timestamp
            if floor and written < floor:
                continue
            for stat in self.timeline.commit_metadata(commit).write_stats():
                key = (stat.partition_path, stat.file_id)
                name = stat.path.rsplit("/", 1)[-1]
                at = slice_instant(name)
                if at is None or (only is not None and stat.partition_path not in only):
                    continue
                if at_risk is None or key in at_risk:
                    files.setdefault(key, []).append((name, at))
        return self._missing_of(instant, files)

    def _at_risk(self, instant: str, only: set[str] | None) -> tuple[set[tuple[str, str]] | None, str]:
        """(the file groups whose slice read as of ``instant`` a clean may have removed, None: every
        group; the earliest base instant their slices read as of ``instant`` can have).

        Every group, unless ``instant`` is archived (the timeline holds the LSM history up to it:
        decoding every archived commit cost seconds). Then: a clean never removes the latest slice
        of a live file group (every policy keeps at least one version; only a replaced group goes
        whole), so a group whose latest slice on storage is not after ``instant`` is read as of it
        as a snapshot read reads it, from the listing. At risk: the groups rewritten since (their
        slice as of ``instant`` is at or after their newest base file not after it, which a commit
        up to ``instant`` wrote) and the groups replaced since. A group with no base file left from
        before ``instant`` is not at risk if the commit of its oldest base file created it (write
        stat ``prevCommit`` "null"); else every commit up to ``instant`` is read. A replace archived
        after ``instant`` is not on this timeline: then every group is checked."""
        if not self.timeline.archived or self._replaced_in_history_after(instant):
            return None, ""
        risky = {k for k, at in self.replaced.items() if at > instant and (only is None or k[0] in only)}
        present: dict[tuple[str, str], list[tuple[str, bool]]] = {}
        for key in self.groups:
            replaced_at = self.replaced.get(key)
            if (only is not None and key[0] not in only) or (
                replaced_at is not None and replaced_at <= instant
            ):
                continue
            present[key] = self._present_slices(key)
            if present[key] and max(at for at, _ in present[key]) > instant:
                risky.add(key)
        floor = None
        stats: dict[str, list[WriteStat]] = {}  # of the commits _created_after read
        for key in sorted(risky):
            bases = [at for at, has_base in present.get(key, ()) if has_base and at <= instant]
            if bases:
                floor = max(bases) if floor is None else min(floor, max(bases))
            elif self._created_after(key, present.get(key, []), instant, stats):
                risky.discard(key)
            else:
                return risky, ""
        return risky, floor or ""

    def _created_after(
        self,
        key: tuple[str, str],
        slices: list[tuple[str, bool]],
        instant: str,
        stats: dict[str, list[WriteStat]],
    ) -> bool:
        """Whether a group whose every slice on storage is after ``instant`` was created after it:
        its oldest base file's commit (on this timeline) says it had no previous version."""
        if not slices or min(at for at, _ in slices) <= instant:
            return False
        first = min((at for at, has_base in slices if has_base), default=None)
        commit = self.timeline.get(first) if first is not None else None
        if commit is None or commit.action not in COMMIT_ACTIONS or not commit.is_completed:
            return False
        if first not in stats:
            stats[first] = self.timeline.commit_metadata(commit).write_stats()
        for stat in stats[first]:
            if (stat.partition_path, stat.file_id) == key and slice_instant(
                stat.path.rsplit("/", 1)[-1]
            ) == first:
                return stat.prev_commit in ("null", "")
        return False

    def _present_slices(self, key: tuple[str, str]) -> list[tuple[str, bool]]:
        """(slice instant, has a base file) of a group's slices on storage (from the index)."""
        if isinstance(self.groups, _LazyGroups):
            return [(at, base is not None) for at, (base, _) in self.groups.index[key].items()]
        return [(s.base_instant, s.base_file is not None) for s in self.groups[key].slices]

    def _replaced_in_history_after(self, instant: str) -> bool:
        """Whether the LSM history holds a replace (or clustering) requested after ``instant``, which
        the timeline as of ``instant`` (archived instants up to it, then the active ones) misses."""
        history = self.timeline.history
        if history is None or not history.holds(instant):
            return False
        return any(i.action in _REPLACING for i in history.instants_after(instant))

    def _missing_of(
        self, instant: str, files: Mapping[tuple[str, str], list[tuple[str, str]]]
    ) -> list[tuple[str, str, str]]:
        """The slices of ``files`` (what commit stats say each group had as of ``instant``) that are
        not whole on storage."""
        expected: dict[tuple[str, str], tuple[str, set[str]]] = {}
        for key, named in files.items():
            if self.timeline.layout.has_completion_times:
                # Among every base of the group: a log that completed after a later base (another
                # writer's, requested after it) belongs to that slice, which a read as of
                # ``instant`` does not reach.
                # A compaction pending on the group starts a slice too (its base is not written yet).
                group = self.groups.get(key)
                later = sorted({s.base_instant for s in group.slices if s.base_file}) if group else []
                if key in self.pending_compaction:
                    later = sorted({*later, self.pending_compaction[key]})
                named = [
                    (n, at) for n, at in _slotted_by_completion(named, self.timeline, later) if at <= instant
                ]
                if not named:
                    continue
            newest = max(at for _, at in named)
            expected[key] = (newest, {name for name, at in named if at == newest})
        missing = []
        for key, (at, names) in sorted(expected.items()):
            replaced_at = self.replaced.get(key)
            if replaced_at is not None and replaced_at <= instant:
                continue  # replaced by then: the read does not need it, cleaned or not
            group = self.groups.get(key)
            present = next((s for s in group.slices if s.base_instant == at), None) if group else None
            if present is None or not names <= {f.file_name for f in present.files}:
                missing.append((key[0], key[1], at))
        return missing

    def latest_slices(self, as_of: str | None = None, partition: str | None = None) -> list[FileSlice]:
        """The slice a snapshot query reads in every live file group (as of ``as_of`` if given)."""
        out = []
        for group in self.file_groups(partition):
            if self.is_replaced(group, as_of):
                continue
            merged = self.merged_latest_slice(group, as_of)
            if merged is not None:
                out.append(merged)
        return out

    def merged_latest_slice(self, group: FileGroup, as_of: str | None = None) -> FileSlice | None:
        """Latest slice at or before ``as_of``; a pending compaction's slice folds into the one before."""
        visible = [s for s in group.slices if as_of is None or s.base_instant <= as_of]
        if not visible:
            return None
        latest = visible[-1]
        if latest.base_file is None and len(visible) > 1 and self._is_pending_compaction(latest.base_instant):
            previous = visible[-2]
            return replace(previous, log_files=previous.log_files + latest.log_files)
        if latest.base_file is None and not latest.log_files:
            return None
        return latest

    def _is_pending_compaction(self, instant: str) -> bool:
        found = self.timeline.get(instant)
        return found is not None and found.action is Action.COMPACTION and found.state is not State.COMPLETED


# Archived actions that replace file groups (clustering completes as a replacecommit).
_REPLACING = frozenset({Action.REPLACECOMMIT.value, Action.CLUSTERING.value})


def _slotted_by_completion(
    named: list[tuple[str, str]], timeline: Timeline, other_bases: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """Layout 2: (name, slice instant) of one group's files, each log placed by its completion time
    among the group's base files and ``other_bases`` (a layout-2 log name carries its own write's time)."""
    slices = sorted({at for name, at in named if BaseFileName.parse(name) is not None} | set(other_bases))
    # Logs in deltacommit order, as :func:`open_slot` needs them (a log may join a slice an earlier opened).
    slot = {at: open_slot(slices, at, timeline) for at in sorted({at for n, at in named if not _is_base(n)})}
    return [(name, at) if _is_base(name) else (name, slot[at]) for name, at in named]


def _is_base(name: str) -> bool:
    return BaseFileName.parse(name) is not None


def _partition_key(path: str) -> str:
    """A partition path as the timeline and the listing key it (``region=eu``, ``""`` at the root):
    ``region=eu/`` or ``/region=eu`` would list the same files under another key, so that the file
    groups a replacecommit replaced there, keyed ``region=eu``, were read as live."""
    return "/".join(part for part in path.split("/") if part not in ("", "."))
