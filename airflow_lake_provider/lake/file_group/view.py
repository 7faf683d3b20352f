"""File system view: file groups and file slices of a table, as of an instant.

Discovery is by listing, like every Hudi reader of table version 6. Only files of committed instants
count. Following Java Hudi (hudi-rs is narrower here), log files written against a *pending*
compaction's instant are merged into the slice that compaction is rewriting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, State

_SKIPPED_TOP_LEVEL = {HOODIE_DIR, "_delta_log", "metadata"}
Lister = Callable[[Sequence[str]], Mapping[str, Sequence[tuple[str, int]]]]


class _DataFile:
    """Names derived from a parsed file name (computed on use: views hold 100,000s of files)."""

    __slots__ = ()
    partition: str
    name: BaseFileName | LogFileName

    @property
    def file_name(self) -> str:
        return self.name.name

    @property
    def relative_path(self) -> str:
        return f"{self.partition}/{self.name.name}" if self.partition else self.name.name


@dataclass(frozen=True, slots=True)
class BaseFile(_DataFile):
    partition: str
    name: BaseFileName
    size: int


@dataclass(frozen=True, slots=True)
class LogFile(_DataFile):
    partition: str
    name: LogFileName
    size: int


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A base file (absent while a compaction is pending) and the log files written against it."""

    partition: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None
    log_files: tuple[LogFile, ...] = ()

    @property
    def files(self) -> list[BaseFile | LogFile]:
        return ([self.base_file] if self.base_file else []) + list(self.log_files)

    @property
    def total_log_size(self) -> int:
        return sum(f.size for f in self.log_files)


@dataclass(frozen=True)
class FileGroup:
    partition: str
    file_id: str
    slices: tuple[FileSlice, ...]  # oldest first

    @property
    def latest_slice(self) -> FileSlice:
        return self.slices[-1]


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
    ) -> FileSystemView:
        """List ``partitions`` (default: all) and group their committed files.

        ``lister`` may replace the local listing (e.g. to spread it over Spark executors): it maps
        partition paths to ``(file name, size)`` pairs. ``sizes=False`` (with ``partitions``) lists
        names only where sizes cost a call per file (a local disk) and sizes a file when a group or
        base file holding it is asked for: a write lists every file of its partitions and uses few.
        """
        storage = timeline.storage
        if partitions is not None:
            names = sorted(set(partitions))
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
        return cls._group(config, timeline, names, listing)

    @classmethod
    def _group(
        cls,
        config: TableConfig,
        timeline: Timeline,
        names: list[str],
        listing: Mapping[str, Sequence[tuple[str, int | None]]],
    ) -> FileSystemView:
        pending = {i.timestamp for i in timeline.pending_compactions()}
        # Plain tuples and dicts here: a big table has 100,000s of files, and the clean planner walks
        # this index directly; FileGroup objects are built only for the groups someone asks for.
        index: dict[tuple[str, str], dict[str, SlotEntry]] = {}
        committed: dict[str, bool] = {}  # few instants, many files: decide each instant once
        for partition in names:
            files = listing.get(partition)
            if not files:
                continue
            sizes = dict(files)
            blob = "\n".join(sizes)
            # One regex pass over the partition's names (a C loop) instead of one match per file.
            for name, file_id, at in _BASE_LINES.findall(blob):
                ok = committed.get(at)
                if ok is None:
                    ok = committed[at] = timeline.is_committed(at)
                if ok:  # (the log files are added below)
                    index.setdefault((partition, file_id), {})[at] = ((name, sizes[name]), ())
            logs: dict[tuple[str, str], list[tuple[str, int | None]]] = {}
            for name, file_id, at in _LOG_LINES.findall(blob):
                ok = committed.get(at)
                if ok is None:
                    ok = committed[at] = timeline.is_committed(at)
                if ok or at in pending:
                    logs.setdefault((file_id, at), []).append((name, sizes[name]))
            for (file_id, at), found in logs.items():
                slots = index.setdefault((partition, file_id), {})
                entry = slots.get(at)
                slots[at] = (entry[0] if entry else None, tuple(found))
        compacting = _pending_compaction_groups(timeline)
        for key, (c, _base) in compacting.items():
            # Java adds an empty slice at a pending compaction's instant, so writers append their logs
            # against it (named with that instant) and readers fold it into the slice before.
            if key in index:
                index[key].setdefault(c, (None, ()))
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
        slice (base file and log files) written by commits up to ``instant``.
        """
        expected: dict[tuple[str, str], tuple[str, set[str]]] = {}
        only = set(partitions) if partitions is not None else None
        for commit in self.timeline.completed_commits:
            if commit.timestamp > instant:
                break
            for stat in self.timeline.commit_metadata(commit).write_stats():
                name = stat.path.rsplit("/", 1)[-1]
                at = slice_instant(name)
                if at is None or (only is not None and stat.partition_path not in only):
                    continue
                key = (stat.partition_path, stat.file_id)
                known = expected.get(key)
                if known is None or at > known[0]:
                    expected[key] = (at, {name})
                elif at == known[0]:
                    known[1].add(name)
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


def list_partitions(storage: Storage, config: TableConfig) -> list[str]:
    """Relative paths of the folders holding data files (the root for non-partitioned tables)."""
    if not config.is_partitioned:
        return [""]
    return sorted(list_table(storage, config))


def list_table(storage: Storage, config: TableConfig) -> dict[str, list[tuple[str, int]]]:
    """Every partition folder holding data files, with its files' names and sizes, in one walk."""
    if not config.is_partitioned:
        return {"": storage.list()}
    found: dict[str, list[tuple[str, int]]] = {}
    for rel, files in storage.walk("", _is_partition_folder):
        if rel and any(BaseFileName.parse(n) or LogFileName.parse(n) for n, _ in files):
            found[rel] = files
    return found


def _is_partition_folder(rel: str) -> bool:
    """Folders a partition walk enters: all but ``.hoodie`` and other formats' metadata at the top.

    Hidden folders are entered: a partition value may start with "." (``.x``), and Java Hudi and
    hudi-rs list such partitions. Java skips a folder named ``.hoodie`` at any depth; so do we.
    """
    name = rel.rpartition("/")[2]
    return name != HOODIE_DIR and ("/" in rel or name not in _SKIPPED_TOP_LEVEL)


# BASE_FILE_RE's grammar, one name per line; group 1 the name, 2 the file id, 3 the instant.
_BASE_LINES = re.compile(r"^(([A-Za-z0-9-]+)_[A-Za-z0-9-]+_(\d{14}(?:\d{3})?)\.parquet)$", re.MULTILINE)
# The log grammar (file_names._LOG_RE) likewise: 1 the name, 2 the file id, 3 the base instant.
_LOG_LINES = re.compile(r"^(\.([A-Za-z0-9-]+)_(\d{14}(?:\d{3})?)\.log\.\d+(?:_\d+-\d+-\d+)?)$", re.MULTILINE)


# A size is None where the view was listed without sizes (``build(sizes=False)``).
SlotEntry = tuple[tuple[str, int | None] | None, tuple[tuple[str, int | None], ...]]


class _LazyGroups(Mapping[tuple[str, str], FileGroup]):
    """File groups built from the view's index on first access (most services touch a few)."""

    def __init__(self, index: dict[tuple[str, str], dict[str, SlotEntry]], storage: Storage) -> None:
        self.index = index
        self.storage = storage
        self._built: dict[tuple[str, str], FileGroup] = {}

    def __getitem__(self, key: tuple[str, str]) -> FileGroup:
        group = self._built.get(key)
        if group is None:
            group = self._built[key] = _make_group(key, self.index[key], self.storage)
        return group

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.index)

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, key: object) -> bool:
        return key in self.index


def _sized(storage: Storage, partition: str, name: str, size: int | None) -> int:
    return size if size is not None else storage.size(f"{partition}/{name}" if partition else name)


def _make_group(key: tuple[str, str], slots: Mapping[str, SlotEntry], storage: Storage) -> FileGroup:
    slices = tuple(_make_slice(key, at, slots[at], storage) for at in sorted(slots))
    return FileGroup(key[0], key[1], slices)


def _make_slice(key: tuple[str, str], at: str, entry: SlotEntry, storage: Storage) -> FileSlice:
    partition, file_id = key
    base_entry, log_entries = entry
    base = None
    if base_entry is not None:
        parsed = BaseFileName.parse(base_entry[0])
        assert parsed is not None
        base = BaseFile(partition, parsed, _sized(storage, partition, *base_entry))
    logs = []
    for name, size in log_entries:
        parsed_log = LogFileName.parse(name)
        assert parsed_log is not None
        logs.append(LogFile(partition, parsed_log, _sized(storage, partition, name, size)))
    logs.sort(key=lambda f: f.name.sort_key)
    return FileSlice(partition, file_id, at, base, tuple(logs))


def slice_instant(name: str) -> str | None:
    """The base instant of the slice a data file belongs to (from its base or log file name)."""
    base = BaseFileName.parse(name)
    if base is not None:
        return base.instant
    log_name = LogFileName.parse(name)
    return log_name.base_instant if log_name is not None else None


def _replaced_file_groups(timeline: Timeline) -> dict[tuple[str, str], str]:
    replaced: dict[tuple[str, str], str] = {}
    for instant in timeline.completed_commits:
        if instant.action is not Action.REPLACECOMMIT:
            continue
        meta = timeline.commit_metadata(instant)
        for partition, ids in (meta.partition_to_replace_file_ids or {}).items():
            for file_id in ids:
                replaced.setdefault((partition, file_id), instant.timestamp)
    return replaced


def _pending_compaction_groups(timeline: Timeline) -> dict[tuple[str, str], tuple[str, str]]:
    """(partition, file id) -> (pending compaction instant, base instant of the slice it rewrites)."""
    groups: dict[tuple[str, str], tuple[str, str]] = {}
    for instant in timeline.pending_compactions():
        plan = timeline.compaction_plan(instant.timestamp)
        for op in plan.get("operations") or []:
            key = (op.get("partitionPath") or "", op["fileId"])
            groups[key] = (instant.timestamp, op.get("baseInstantTime") or "")
    return groups
