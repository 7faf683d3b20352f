"""One data instant's deltacommit on Hudi's metadata table (MDT), written as Hudi 1.x's Java writer
writes it, before the data instant completes (the first piece of the "maintain" policy): the
``files`` records (``metadata.records``) and, where the MDT has those partitions, the
``column_stats`` and ``partition_stats`` records (``metadata.index``).

Hudi 1.x (table versions 8 and 9) gives the MDT deltacommit of a data instant the data instant's
own (requested) time, and its own completion time, earlier than the data instant's
(``HoodieBackedTableMetadataWriter.commitInternal``; the 1.x test tables show both). Durable order,
every step on the MDT's own storage and timeline (``.hoodie/metadata/``, through a ``TimelineStore``
of the MDT): requested (empty), inflight (``HoodieCommitMetadata``, operation ``UPSERT_PREPPED``),
one new log file per MDT file group written (``files/.files-0000-0_<instant>.log.1_0-0-0``, ...),
each one HFILE_DATA block, then completed (the files' write stats and the records' schema without
meta fields). The caller then completes the data instant.

The same deltacommit serves a compaction commit (:meth:`MetadataTableWriter.commit_write` of its
commit metadata: the new base files, their column stats, the partitions' stats) and a clean
(:meth:`MetadataTableWriter.commit_clean`: the deleted files, their column stats marked deleted),
each at its data instant's time, completed before it.

Hudi 1.x readers skip the MDT deltacommit of a pending data instant (``getValidInstantTimestamps``;
our ``metadata.files``), so a crash at any step leaves every listing unchanged; but they merge a
completed one whose data instant is gone or rolled back: undoing a failed write removes its MDT
deltacommit first, while the instant is pending (:meth:`MetadataTableWriter.discard`, called by the
rollback executor). An MDT deltacommit whose data instant is no longer on the data timeline (left by
an older version) is removed by the next maintained write (:meth:`MetadataTableWriter.discard_orphans`),
log files first. A compaction or clean finished
after a crash keeps its instant time: the MDT deltacommit a crashed attempt left at that time is
removed first, as Java rolls back an MDT instant it is about to write again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from airflow_lake_provider.lake.errors import CorruptDataFileError, ObjectExistsError, TableConfigError
from airflow_lake_provider.lake.file_group.file_names import LogFileName, write_token
from airflow_lake_provider.lake.format.hfile import Dialect, HFileSettings
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.log_file.data_block import BlockRows
from airflow_lake_provider.lake.log_file.hfile_block import SCHEMA_INFO, hfile_data_block
from airflow_lake_provider.lake.log_file.log_format import HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.bases import files_bases, newest_readable, pending_bases
from airflow_lake_provider.lake.table.metadata.files import (
    FILES_GROUP,
    FILES_PARTITION,
    MDT_DIR,
    checked_layout,
    file_groups_of,
    files_stages,
    mdt_own_instant,
)
from airflow_lake_provider.lake.table.metadata.index import (
    INDEX_PARTITIONS,
    Undoing,
    clean_index_records,
    file_groups,
    index_records,
    rollback_index_records,
)
from airflow_lake_provider.lake.table.metadata.records import (
    FilesChange,
    PartitionChange,
    Records,
    change_of_clean,
    files_records,
    log_write_stat,
    partition_key,
)
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, Instant, InstantClock, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout
from airflow_lake_provider.lake.timeline.store import TimelineStore

log = logging.getLogger(__name__)

# What Java's MDT write client records as the operation of every MDT deltacommit.
MDT_OPERATION = "UPSERT_PREPPED"
MDT_WRITE_TOKEN = write_token(0, 0, 0)
_SOLO = "00000000000000"  # Hudi's SOLO_COMMIT_TIMESTAMP: the MDT's own initialisation instants
# Every MDT deltacommit is written and completed under this lock of the data table (held for
# seconds at most: waiting a minute means a stuck holder).
MDT_COMMIT_LOCK = ".hoodie/.aux/.lake-metadata-commit.lock"
MDT_COMMIT_WAIT_SECONDS = 60.0
_META_PREFIX = "_hoodie_"
_V6_LOG_ATTEMPTS = 5  # new log versions tried when concurrent MDT deltacommits took the chosen one


@dataclass(frozen=True)
class MetadataTableWriter:
    """Writes MDT deltacommits of a table's data instants (read once, before any write).

    :param storage: the MDT's storage (``<table>/.hoodie/metadata/``).
    :param store: the MDT's timeline store (the only writer of its ``.hoodie/``).
    :param block_schema: the ``HoodieMetadataRecord`` schema text (with meta fields) of its blocks.
    :param settings: the HFile settings of the MDT's own files (the Java writer's dialect).
    :param record_schema: ``block_schema`` parsed.
    :param commit_schema: the schema text an MDT commit records (without the meta fields).
    :param partitions: the MDT partitions kept (``files``, and ``column_stats``/``partition_stats``).
    """

    storage: Storage
    store: TimelineStore
    block_schema: str
    settings: HFileSettings
    record_schema: Mapping[str, Any]
    commit_schema: str
    partitions: frozenset[str] = frozenset({FILES_PARTITION})
    lock_storage: Storage | None = None  # the data table's: where MDT deltacommits take their lock

    @classmethod
    def open(
        cls,
        data_storage: Storage,
        clock: InstantClock,
        partitions: Iterable[str] = (FILES_PARTITION,),
        data: tuple[int, TimelineLayout, str] | None = None,
    ) -> MetadataTableWriter:
        """The MDT of the table at ``data_storage``, keeping ``partitions`` (``files`` and any of
        ``column_stats``, ``partition_stats``); ``TableConfigError`` if it cannot be kept (no MDT
        properties, properties that do not fit ``data``, the data table's version and timeline
        layout, no ``files`` base file to take the record schema and HFile dialect from, an index
        partition without file groups)."""
        storage = data_storage.child(MDT_DIR)
        kept = frozenset(partitions)
        for partition in sorted(kept - {FILES_PARTITION}):
            if not file_groups(storage, partition):
                raise TableConfigError(
                    f"{storage.uri(partition)}: the metadata table partition has no file group"
                )
        layout = checked_layout(storage, data)
        pending, skipped = pending_bases(storage, layout)
        found = newest_readable(storage, files_bases(storage, pending), skipped)
        if found is None:
            why = f" ({'; '.join(skipped)})" if skipped else ""
            raise TableConfigError(
                f"{storage.uri(FILES_PARTITION)}: no {FILES_GROUP} base file of a completed instant to take "
                f"the record schema from{why}"
            )
        base_rel, hfile = found
        schema = hfile.content.info(SCHEMA_INFO)
        if schema is None:
            raise TableConfigError(f"{storage.uri(base_rel)}: no record schema in its file info")
        text = schema.decode("utf-8")
        parsed, commit_schema = _schemas(text)
        store = TimelineStore(storage, layout, clock)
        return cls(storage, store, text, hfile.settings(), parsed, commit_schema, kept, data_storage)

    def timeline(self) -> Timeline:
        return Timeline.load(self.storage, self.store.layout)

    def completed(self, instant: str) -> bool:
        """Whether the MDT has a completed deltacommit at ``instant``."""
        return any(
            i.timestamp == instant for i in self.timeline().filter([Action.DELTACOMMIT], [State.COMPLETED])
        )

    def commit_write(
        self,
        data: Storage,
        config: TableConfig,
        timeline: Timeline,
        instant: Instant,
        change: FilesChange,
        *,
        new_instant: bool = False,
        logs: Mapping[str, BlockRows] | None = None,
    ) -> list[str]:
        """Write and complete the MDT deltacommit of the pending data write ``instant`` (of
        ``timeline``, which made ``change``): its ``files`` records, and its ``column_stats`` and
        ``partition_stats`` records where the MDT has those partitions; the log files written.

        ``new_instant``: the data instant was created by this run after :meth:`discard_orphans`
        (a data write), so no earlier attempt left an MDT deltacommit at its time to remove first
        (one MDT timeline read less). ``logs``: the rows of the log files the write made, by
        table-relative path, as its writer encoded them (their stats without reading them back)."""
        groups: dict[str, Mapping[str, Records]] = {
            FILES_PARTITION: {FILES_GROUP: files_records(change, self.record_schema)}
        }
        indexed = self.partitions & INDEX_PARTITIONS
        if indexed:
            schema = self.record_schema
            groups.update(index_records(data, config, timeline, instant, change, indexed, schema, logs))
        return self.commit_records(instant.timestamp, groups, discard_first=not new_instant)

    def commit_clean(
        self,
        data: Storage,
        config: TableConfig,
        timeline: Timeline,
        instant: str,
        metadata: Mapping[str, Any],
    ) -> list[str]:
        """Write and complete the MDT deltacommit of the pending clean ``instant`` (of ``timeline``)
        whose ``HoodieCleanMetadata`` is ``metadata``: its ``files`` deletions, and its
        ``column_stats`` entries marked deleted where the MDT has that partition."""
        change = change_of_clean(metadata)
        groups: dict[str, Mapping[str, Records]] = {
            FILES_PARTITION: {FILES_GROUP: files_records(change, self.record_schema)}
        }
        indexed = self.partitions & INDEX_PARTITIONS
        if indexed:
            groups.update(clean_index_records(data, config, timeline, change, indexed, self.record_schema))
        return self.commit_records(instant, groups)

    def commit_rollback_logs(
        self,
        instant: str,
        logs: Iterable[tuple[str, int]],
        deleted: Iterable[str] = (),
        target: tuple[Storage, TableConfig, Timeline, str] | None = None,
    ) -> list[str]:
        """Write and complete the MDT deltacommit of the pending data rollback ``instant`` that
        appended rollback blocks to ``logs`` (table-relative path, new size; table version 6: 1.x
        rollbacks delete logs) and deletes the files ``deleted`` (table-relative; given only where
        the MDT cannot forget the rolled-back instant: ``undo.py``). In ``files`` each log's new
        size, as Java records a rollback's log files (``processRollbackMetadata``; a merge keeps the
        larger size), and each deleted file as a deletion; a partition list only for a correction
        that leaves partitions without files (``Undoing.emptied``), naming them deleted. ``target``: the data
        table's storage, config and timeline and the instant rolled back, for the stats partitions'
        records of a correction (``rollback_index_records``)."""
        partitions: dict[str, dict[str, int]] = {}
        gone: dict[str, list[str]] = {}
        for rel, size in logs:
            partition, _, name = rel.rpartition("/")
            partitions.setdefault(partition, {})[name] = size
        for rel in deleted:
            partition, _, name = rel.rpartition("/")
            gone.setdefault(partition, []).append(name)
        change = FilesChange(
            {
                p: PartitionChange(added=partitions.get(p, {}), deleted=tuple(gone.get(p, ())))
                for p in dict.fromkeys([*partitions, *gone])
            }
        )
        indexed = self.partitions & INDEX_PARTITIONS
        index_groups: dict[str, Mapping[str, Records]] = {}
        if target is not None:
            data, config, timeline, rolled_back = target
            undoing = Undoing.of(config, timeline, rolled_back, change)
            change = dataclasses.replace(change, dropped=undoing.emptied)
            if indexed:
                index_groups.update(
                    rollback_index_records(data, config, undoing, indexed, self.record_schema)
                )
        groups: dict[str, Mapping[str, Records]] = {
            FILES_PARTITION: {FILES_GROUP: files_records(change, self.record_schema)},
            **index_groups,
        }
        again = self._cancelled(gone)
        then = {FILES_PARTITION: {FILES_GROUP: files_records(again, self.record_schema)}} if again else None
        return self.commit_records(instant, groups, then=then)

    def _cancelled(self, gone: Mapping[str, Sequence[str]]) -> FilesChange | None:
        """The deletions in ``gone`` (partition -> file names) a single tombstone would not make:
        files the base file lists and the logs list too. Hudi merges the logs first, where the
        tombstone meets the logs' entry and both go, then the base file, whose entry stays. A
        second tombstone, in a block after the first, is kept through the logs' merge and removes
        the base file's entry (a corrected rollback deleting a log an earlier rollback marked)."""
        if not gone or self.lock_storage is None:
            return None
        stages = files_stages(self.lock_storage)
        twice: dict[str, PartitionChange] = {}
        for partition, names in gone.items():
            key = partition_key(partition)
            in_base = (stages.base.get(key) or {}).get("filesystemMetadata") or {}
            in_logs = (stages.logged.get(key) or {}).get("filesystemMetadata") or {}
            both = tuple(n for n in names if _live(in_base.get(n)) and _live(in_logs.get(n)))
            if both:
                twice[partition] = PartitionChange(deleted=both)
        return FilesChange(twice) if twice else None

    def commit_records(
        self,
        instant: str,
        partitions: Mapping[str, Mapping[str, Records]],
        *,
        discard_first: bool = True,
        then: Mapping[str, Mapping[str, Records]] | None = None,
    ) -> list[str]:
        """Write and complete the MDT deltacommit of data instant ``instant``: per MDT partition and
        file group (file id), one new log file of one HFILE_DATA block holding the records (keys
        routed to file groups by the caller, :func:`file_group_index`); the log files' MDT-relative
        paths, in the order given. ``discard_first``: remove what a crashed attempt of the same data
        instant left (compaction, clean) first. ``then``: the records of a second block in the same
        file groups' logs (merged after the first)."""
        with self.commit_lock():
            self._discard_before(instant, discard_first)
            return self._commit_records(instant, partitions, then or {})

    def commit_lock(self) -> contextlib.AbstractContextManager[None]:
        """One MDT deltacommit at a time, written and completed whole (a write, a clean and a
        compaction commit under their own locks would otherwise interleave their blocks)."""
        if self.lock_storage is None:
            return contextlib.nullcontext()
        busy = "another action is committing to the metadata table"
        return self.lock_storage.lock(MDT_COMMIT_LOCK, busy, MDT_COMMIT_WAIT_SECONDS)

    def _discard_before(self, instant: str, discard_first: bool) -> None:
        """Under the commit lock an MDT deltacommit still pending is a crashed action's: remove it,
        as Java's MDT writer rolls back every pending deltacommit before its next (EAGER). Hudi
        0.14's log scanner stops at the first block newer than the MDT's latest completed instant,
        so a crashed block would hide every later one from it. ``discard_first``: also what a
        crashed attempt of this same data instant left, completed or not."""
        for found in self.timeline().filter([Action.DELTACOMMIT]):
            t = found.timestamp
            ours = t == instant
            if ours and not discard_first or t.startswith(_SOLO) or mdt_own_instant(t):
                continue
            if ours or not found.is_completed:
                self._remove(found)
                if not ours:
                    log.warning("removed the metadata table's pending deltacommit %s: its action crashed", t)

    def _commit_records(
        self,
        instant: str,
        partitions: Mapping[str, Mapping[str, Records]],
        then: Mapping[str, Mapping[str, Records]],
    ) -> list[str]:
        store = self.store
        as_avro = store.layout.has_completion_times  # layout 1 (table version 6): JSON
        inflight = store.start(instant, Action.DELTACOMMIT, _inflight_body(as_avro))
        settings = self.settings
        if settings.dialect is Dialect.HUDI:  # hudi-io's writer stamps the creation time
            settings = dataclasses.replace(settings, create_time_ms=_epoch_ms(store.clock))
        written: list[str] = []
        stats: dict[str, tuple[WriteStat, ...]] = {}
        for partition, groups in partitions.items():
            for file_id, records in groups.items():
                data = hfile_data_block(records, self.block_schema, instant, settings, schema_first=True)
                more = then.get(partition, {}).get(file_id, [])
                if more:
                    data += hfile_data_block(more, self.block_schema, instant, settings, schema_first=True)
                if store.layout.has_completion_times:
                    name, prev, base = LogFileName.create(file_id, instant, 1, MDT_WRITE_TOKEN), instant, ""
                    rel = f"{partition}/{name.name}"
                    self.storage.create(rel, data)
                else:
                    rel, name, prev, base = self._create_log_v6(partition, file_id, data)
                written.append(rel)
                stats[partition] = (
                    *stats.get(partition, ()),
                    log_write_stat(partition, rel, name, prev, base, len(records) + len(more), len(data)),
                )
        body = CommitMetadata(MDT_OPERATION, stats, {"schema": self.commit_schema})
        store.transition_to_completed(inflight, body.to_bytes(as_avro))
        return written

    def discard_orphans(self, data: Timeline) -> list[str]:
        """Remove the MDT deltacommits whose data instant is gone from the data timeline (a write
        that failed after its MDT deltacommit and was undone by a version that did not remove it
        first): Hudi 1.x readers would merge them. Log files first,
        then the completed file, then the pending ones: a crash leaves a shorter orphan to finish.
        Instants before the data timeline's first one (archived there) are left alone."""
        on_data = {i.timestamp for i in data.instants}
        if not on_data:
            return []
        first = min(on_data)
        removed = []
        for instant in self.timeline().filter([Action.DELTACOMMIT]):
            t = instant.timestamp
            if t in on_data or t <= first or t.startswith(_SOLO) or mdt_own_instant(t):
                continue
            self._remove(instant)
            removed.append(t)
            log.warning("removed the metadata table's deltacommit %s: its data instant is gone", t)
        return removed

    def discard(self, instant: str) -> bool:
        """Remove the MDT deltacommit of data instant ``instant`` if there is one (whether it is
        there). Callers do it while the data instant is still pending: Hudi 1.x readers skip the
        MDT deltacommit of a pending data instant, but merge a completed one whose data instant is
        gone or rolled back (``getValidInstantTimestamps``)."""
        left = [i for i in self.timeline().filter([Action.DELTACOMMIT]) if i.timestamp == instant]
        for found in left:
            self._remove(found)
        return bool(left)

    def _create_log_v6(self, partition: str, file_id: str, data: bytes) -> tuple[str, LogFileName, str, str]:
        """Table version 6: create ``data`` as the next log of the file group's newest slice (its
        path, name, base instant and base file name). A write, a data compaction and a clean add MDT
        deltacommits under different locks: when another took the chosen version in between, the
        next one is taken (a name is never overwritten)."""
        attempt = 1
        while True:
            name, prev, base = self._next_log_v6(partition, file_id)
            rel = f"{partition}/{name.name}"
            try:
                self.storage.create(rel, data)
                return rel, name, prev, base
            except ObjectExistsError:
                if attempt == _V6_LOG_ATTEMPTS:
                    raise
                attempt += 1

    def _next_log_v6(self, partition: str, file_id: str) -> tuple[LogFileName, str, str]:
        """Table version 6 (layout 1): the log file a deltacommit adds to the file group's newest
        slice, named after the slice's base instant, one version past every log of that slice in
        storage (a crashed attempt's too: a name is never reused), as our v6 data writer adds one;
        also the slice's base instant and base file name (the write stat's)."""
        (group,) = [g for g in file_groups_of(self.storage, [partition])[partition] if g.file_id == file_id]
        newest = group.latest_slice
        versions = [
            parsed.version
            for n in self.storage.list_names(partition)
            if (parsed := LogFileName.parse(n)) is not None
            and parsed.file_id == file_id
            and parsed.base_instant == newest.base_instant
        ]
        name = LogFileName.create(file_id, newest.base_instant, max(versions, default=0) + 1, MDT_WRITE_TOKEN)
        base = newest.base_file.file_name if newest.base_file is not None else ""
        return name, newest.base_instant, base

    def _logs_of(self, partition: str, instant: str) -> list[str]:
        """The log files of ``partition`` the MDT deltacommit ``instant`` wrote: named after it
        (Hudi 1.x), or, in table version 6, whose every block carries its instant time (a v6 log is
        named after its slice: only its blocks tell which deltacommit wrote it; ours hold one)."""
        found = []
        for name in self.storage.list_names(partition):
            parsed = LogFileName.parse(name)
            if parsed is None:
                continue
            if self.store.layout.has_completion_times:
                if parsed.base_instant == instant:
                    found.append(name)
                continue
            rel = f"{partition}/{name}"
            try:
                blocks = parse_log_bytes(self.storage.read(rel), self.storage.uri(rel))
            except CorruptDataFileError:
                continue  # a partial file of a Java writer's crashed attempt is not ours to remove
            if blocks and all(b.header.get(HeaderKey.INSTANT_TIME) == instant for b in blocks):
                found.append(name)
        return found

    def _remove(self, instant: Instant) -> None:
        """Remove an MDT deltacommit: its log files, then its completed file, then the pending ones
        (a crash leaves a shorter one for the next run to remove)."""
        t = instant.timestamp
        for partition in self.storage.list_dir("")[1]:
            if partition.startswith("."):  # its .hoodie/
                continue
            for name in self._logs_of(partition, t):
                self.storage.delete(f"{partition}/{name}")
        if instant.state is State.COMPLETED:
            self.store.remove_completed(instant)
        self.store.remove_pending(t)


def _live(info: Mapping[str, Any] | None) -> bool:
    return info is not None and not info.get("isDeleted")


@lru_cache(maxsize=2)
def _inflight_body(as_avro: bool) -> bytes:
    """What every MDT deltacommit's inflight file holds (the same bytes each time)."""
    return CommitMetadata(MDT_OPERATION).to_bytes(as_avro)


@lru_cache(maxsize=8)
def _schemas(text: str) -> tuple[Mapping[str, Any], str]:
    """The block schema ``text`` parsed, and the commit schema made of it: once per process (the MDT
    is opened twice per write, and its large schema text is the same for every one)."""
    parsed = json.loads(text)
    return parsed, _without_meta_fields(parsed)


def _without_meta_fields(schema: Mapping[str, Any]) -> str:
    """The schema a Java MDT commit records: the block schema without Hudi's meta fields, compact."""
    fields = [f for f in schema["fields"] if not str(f.get("name", "")).startswith(_META_PREFIX)]
    return json.dumps({**schema, "fields": fields}, separators=(",", ":"), ensure_ascii=False)


def _epoch_ms(clock: InstantClock) -> int:
    return int(clock.now().timestamp() * 1000)
