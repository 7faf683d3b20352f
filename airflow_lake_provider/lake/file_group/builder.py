"""Building file groups from a listing: which folders are partitions, which files are committed, and
the slice index (plain tuples: a big table lists 100,000s of files) with groups built on demand."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence

from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.file_group.model import BaseFile, FileGroup, FileSlice, LogFile
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action

_SKIPPED_TOP_LEVEL = {HOODIE_DIR, "_delta_log", "metadata"}
Lister = Callable[[Sequence[str]], Mapping[str, Sequence[tuple[str, int]]]]


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
# The same for a metadata table, whose base files are HFiles (and, on a v6 table, whose instants may
# carry operation suffixes: instant.TIMELINE_TIME_RE).
_HFILE_BASE_LINES = re.compile(
    r"^(([A-Za-z0-9-]+)_[A-Za-z0-9-]+_(\d{14}(?:\d{3}){0,3})\.hfile)$", re.MULTILINE
)
_BASE_GRAMMARS = {"parquet": _BASE_LINES, "hfile": _HFILE_BASE_LINES}
# The log grammar (file_names._LOG_RE) likewise: 1 the name, 2 the file id, 3 the base instant.
_LOG_LINES = re.compile(
    r"^(\.([A-Za-z0-9-]+)_(\d{14}(?:\d{3}){0,3})\.log\.\d+(?:_\d+-\d+-\d+)?)$", re.MULTILINE
)


# A size is None where the view was listed without sizes (``build(sizes=False)``).
SlotEntry = tuple[tuple[str, int | None] | None, tuple[tuple[str, int | None], ...]]


def index_slices(
    timeline: Timeline,
    names: Sequence[str],
    listing: Mapping[str, Sequence[tuple[str, int | None]]],
    base_extension: str = "parquet",
) -> tuple[dict[tuple[str, str], dict[str, SlotEntry]], dict[tuple[str, str], tuple[str, str]]]:
    """The committed files of the listed partitions by (partition, file id) and base instant, and
    the groups pending compactions rewrite (their instant and the base instant they read).

    Timeline layout 1 names each log file after its slice's base instant. In layout 2 (table
    versions 8 and 9) a log file is named after the deltacommit that wrote it and belongs to the
    slice with the greatest base instant not after that deltacommit's completion time."""
    pending = {i.timestamp for i in timeline.pending_compactions()}
    compacting = _pending_compaction_groups(timeline)
    by_completion = timeline.layout.has_completion_times
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
        for name, file_id, at in _BASE_GRAMMARS[base_extension].findall(blob):
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
        if by_completion:
            logs = _slot_by_completion(logs, partition, index, compacting, timeline)
        for (file_id, at), found in logs.items():
            slots = index.setdefault((partition, file_id), {})
            entry = slots.get(at)
            slots[at] = (entry[0] if entry else None, tuple(found))
    for key, (c, _base) in compacting.items():
        # Java adds an empty slice at a pending compaction's instant, so writers append their logs
        # against it (named with that instant) and readers fold it into the slice before.
        if key in index:
            index[key].setdefault(c, (None, ()))
    return index, compacting


def _slot_by_completion(
    logs: Mapping[tuple[str, str], list[tuple[str, int | None]]],
    partition: str,
    index: Mapping[tuple[str, str], Mapping[str, SlotEntry]],
    compacting: Mapping[tuple[str, str], tuple[str, str]],
    timeline: Timeline,
) -> dict[tuple[str, str], list[tuple[str, int | None]]]:
    """Layout 2: the committed log files of one partition by (file id, slice instant), each slice's
    logs in Hudi's log order (deltacommit time, version, write token). A pending compaction's
    instant is a slice too (as in layout 1, folded into the slice before it by the view)."""
    slotted: dict[tuple[str, str], list[tuple[str, int | None]]] = {}
    slices: dict[str, list[str]] = {}  # per file id: its slices so far, as Java's group grows
    # In deltacommit order, as Java adds them: a log may join a slice an earlier log opened.
    for (file_id, at), found in sorted(logs.items(), key=lambda item: item[0][1]):
        bases = slices.get(file_id)
        if bases is None:
            key = (partition, file_id)
            bases = slices[file_id] = sorted({*index.get(key, {}), *compacting.get(key, ())[:1]})
        slot = open_slot(bases, at, timeline)
        slotted.setdefault((file_id, slot), []).extend(found)
    for found in slotted.values():
        found.sort(key=lambda entry: _log_order(entry[0]))
    return slotted


def slot_for_log(bases: Sequence[str], completion: str, own: str) -> str:
    """The slice (base instant) a layout-2 log completed at ``completion`` belongs to: the greatest
    of the sorted ``bases`` not after it; a log before every base file starts a slice of its own."""
    at = bisect.bisect_right(bases, completion)
    return bases[at - 1] if at else own


def open_slot(slices: list[str], at: str, timeline: Timeline) -> str:
    """:func:`log_slot` among a group's sorted ``slices`` (updated): a log before all of them opens
    a slice at its own instant, which later logs of the group join (Java's
    ``HoodieFileGroup.addLogFile``, logs added in deltacommit order): a group of log files only (as
    Flink and bucket-index writers leave) is one slice, not one per log."""
    slot = log_slot(slices, at, timeline)
    if slot == at and at not in slices:
        bisect.insort(slices, at)
    return slot


def log_slot(bases: Sequence[str], at: str, timeline: Timeline) -> str:
    """:func:`slot_for_log` of the layout-2 log written by the deltacommit requested at ``at``. Its
    completion time is asked for only when a base file is later than ``at`` (a log completes after
    its request, so only then can it belong to a later slice): for an archived deltacommit that
    reads the LSM history, which most reads thus never open."""
    if not bases or bases[-1] <= at:
        return slot_for_log(bases, at, at)
    return slot_for_log(bases, timeline.completion_time(at) or at, at)


def _log_order(name: str) -> tuple[str, int, str]:
    parsed = LogFileName.parse(name)
    assert parsed is not None  # the names come from the log grammar
    return (parsed.base_instant, parsed.version, parsed.write_token)


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
        parsed = BaseFileName.parse(base_entry[0], base_entry[0].rpartition(".")[2])
        assert parsed is not None
        base = BaseFile(partition, parsed, _sized(storage, partition, *base_entry))
    logs = []
    for name, size in log_entries:
        parsed_log = LogFileName.parse(name)
        assert parsed_log is not None
        logs.append(LogFile(partition, parsed_log, _sized(storage, partition, name, size)))
    # Layout 1's logs of a slice share its base instant; layout 2's are named after their writes.
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
