"""File system view: file groups and file slices of a table, as of an instant.

Discovery is by listing, like every Hudi reader of table version 6. Only files of committed instants
count. Following Java Hudi (hudi-rs is narrower here), log files written against a *pending*
compaction's instant are merged into the slice that compaction is rewriting.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from airflow_lake_provider.lake.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.instant import Action, State
from airflow_lake_provider.lake.table_config import TableConfig
from airflow_lake_provider.lake.timeline import HOODIE_DIR, Timeline

_SKIPPED_TOP_LEVEL = {HOODIE_DIR, "_delta_log", "metadata"}
Lister = Callable[[Sequence[str]], Mapping[str, Sequence[tuple[str, int]]]]


@dataclass(frozen=True)
class BaseFile:
    partition: str
    name: BaseFileName
    size: int

    @property
    def file_name(self) -> str:
        return self.name.name

    @property
    def relative_path(self) -> str:
        return f"{self.partition}/{self.file_name}" if self.partition else self.file_name


@dataclass(frozen=True)
class LogFile:
    partition: str
    name: LogFileName
    size: int

    @property
    def file_name(self) -> str:
        return self.name.name

    @property
    def relative_path(self) -> str:
        return f"{self.partition}/{self.file_name}" if self.partition else self.file_name


@dataclass(frozen=True)
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
    groups: dict[tuple[str, str], FileGroup]
    partitions: tuple[str, ...]
    replaced: dict[tuple[str, str], str] = field(default_factory=dict)
    pending_compaction: dict[tuple[str, str], str] = field(default_factory=dict)
    # Base instant of the slice each pending compaction rewrites.
    pending_compaction_base: dict[tuple[str, str], str] = field(default_factory=dict)
    uncommitted_files: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        config: TableConfig,
        timeline: Timeline,
        partitions: Iterable[str] | None = None,
        lister: Lister | None = None,
    ) -> FileSystemView:
        """List ``partitions`` (default: all) and group their committed files.

        ``lister`` may replace the local listing (e.g. to spread it over Spark executors): it maps
        partition paths to ``(file name, size)`` pairs.
        """
        base = timeline.base_path
        names = sorted(set(partitions)) if partitions is not None else list_partitions(base, config)
        listing = lister(names) if lister is not None else {p: list_files(base / p if p else base) for p in names}
        pending = {i.timestamp for i in timeline.pending_compactions()}
        bases: dict[tuple[str, str], dict[str, BaseFile]] = defaultdict(dict)
        logs: dict[tuple[str, str], dict[str, list[LogFile]]] = defaultdict(lambda: defaultdict(list))
        uncommitted: list[str] = []
        for partition in names:
            for name, size in listing.get(partition, ()):
                parsed_base = BaseFileName.parse(name)
                if parsed_base is not None:
                    rel = f"{partition}/{name}" if partition else name
                    if timeline.is_committed(parsed_base.instant):
                        key = (partition, parsed_base.file_id)
                        bases[key][parsed_base.instant] = BaseFile(partition, parsed_base, size)
                    else:
                        uncommitted.append(rel)
                    continue
                parsed_log = LogFileName.parse(name)
                if parsed_log is None:
                    continue
                if timeline.is_committed(parsed_log.base_instant) or parsed_log.base_instant in pending:
                    logs[(partition, parsed_log.file_id)][parsed_log.base_instant].append(
                        LogFile(partition, parsed_log, size)
                    )
                else:
                    uncommitted.append(f"{partition}/{name}" if partition else name)
        compacting = _pending_compaction_groups(timeline)
        groups: dict[tuple[str, str], FileGroup] = {}
        for key in set(bases) | set(logs):
            instants = set(bases.get(key, {})) | set(logs.get(key, {}))
            if key in compacting:
                # Java adds an empty slice at a pending compaction's instant, so writers append their
                # logs against it (named with that instant) and readers fold it into the slice before.
                instants.add(compacting[key][0])
            slices = tuple(
                FileSlice(
                    key[0],
                    key[1],
                    t,
                    bases.get(key, {}).get(t),
                    tuple(sorted(logs.get(key, {}).get(t, []), key=lambda f: f.name.sort_key)),
                )
                for t in sorted(instants)
            )
            groups[key] = FileGroup(key[0], key[1], slices)
        return cls(
            config=config,
            timeline=timeline,
            groups=groups,
            partitions=tuple(names),
            replaced=_replaced_file_groups(timeline),
            pending_compaction={k: v[0] for k, v in compacting.items()},
            pending_compaction_base={k: v[1] for k, v in compacting.items()},
            uncommitted_files=tuple(sorted(uncommitted)),
        )

    def file_groups(self, partition: str | None = None) -> list[FileGroup]:
        return sorted(
            (g for g in self.groups.values() if partition is None or g.partition == partition),
            key=lambda g: (g.partition, g.file_id),
        )

    def is_replaced(self, group: FileGroup, as_of: str | None = None) -> bool:
        at = self.replaced.get((group.partition, group.file_id))
        return at is not None and (as_of is None or at <= as_of)

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


def list_partitions(base: Path, config: TableConfig) -> list[str]:
    """Relative paths of the folders holding data files (the root for non-partitioned tables)."""
    if not config.is_partitioned:
        return [""]
    found: list[str] = []
    for dirpath, dirs, files in os.walk(base):
        rel = os.path.relpath(dirpath, base)
        if rel == ".":
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_TOP_LEVEL and not d.startswith("."))
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if any(BaseFileName.parse(f) or LogFileName.parse(f) for f in files):
            found.append(rel.replace(os.sep, "/"))
    return sorted(found)


def list_files(folder: Path) -> list[tuple[str, int]]:
    """Names and sizes of the files directly in ``folder`` (none if it does not exist)."""
    try:
        with os.scandir(folder) as entries:
            return [(e.name, e.stat().st_size) for e in entries if e.is_file()]
    except FileNotFoundError:
        return []


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
