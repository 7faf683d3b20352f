"""Hudi's bloom index (non-global): which file group holds each record key of a write.

Per base file, the footer's key range, then its bloom filter, then the record-key column of the row
groups whose statistics may hold a key; keys found in no base file are then looked for in the log
files of the latest slices. The base files read stay open for a COW rewrite in the same process.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import (
    CorruptDataFileError,
    StorageAccessError,
    StorageUnavailableError,
)
from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.base_file import RECORD_KEY
from airflow_lake_provider.lake.format.bloom_filter import probe_footer
from airflow_lake_provider.lake.table.reader import SliceReader, conform
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition

log = logging.getLogger(__name__)


# At most this many footer summaries are kept per LakeTable object (a few hundred bytes each).
_FOOTER_SUMMARIES = 100_000
# At most this many base files stay open from the key lookup to their COW rewrite (file handles);
# a file closed early is opened again by its rewrite (two reads of it instead of one).
_OPEN_BASE_FILES = 256


@dataclass(frozen=True)
class _FooterSummary:
    """What the key lookup needs of a base file's footer but its bloom filter: the record-key range
    of the file and of each row group (None where unknown)."""

    low: str | None
    high: str | None
    row_groups: tuple[tuple[str, str] | None, ...]


@dataclass(frozen=True)
class LookupStats:
    """What the key lookup read: base files skipped by their footer's key range or bloom filter,
    the base files whose record-key column it read, and in how many row groups."""

    range_pruned: int = 0
    bloom_pruned: int = 0
    keys_read: tuple[str, ...] = ()
    row_groups_read: int = 0


def _between(ordered: list[str], low: str, high: str) -> list[str]:
    """The keys of sorted ``ordered`` in [low, high] (code point order: UTF-8 byte order, as parquet
    statistics compare)."""
    return ordered[bisect.bisect_left(ordered, low) : bisect.bisect_right(ordered, high)]


def locate(
    table: LakeTable,
    timeline: Timeline,
    view: FileSystemView,
    partition: str,
    keys: pa.Array | pa.ChunkedArray,
    reads: BaseFileReads,
) -> tuple[dict[str, tuple[FileSlice, FileSlice]], pa.Table]:
    """Which file groups hold each of ``keys`` (Hudi's bloom index, non-global), with the (merged,
    newest) slices of each group that holds one; the table pairs each key found (column ``key``)
    with a file id holding it (``__lake_fid``), one row per group for a key in several.

    Per base file: the footer's min/max record key keeps only the keys in its range, its bloom
    filter only the keys it may hold; the record-key column is read only if a key is left, and only
    of the row groups whose key statistics may hold one. Keys found in no base file are then looked
    for in the log files of the latest slices (where Hudi's bloom index does not look): a key can
    live in logs only (a compaction executed after it was re-inserted on top of its plan, or a
    writer that inserts into logs), and must stay in its group. Deletes count there too: a logged
    delete may lose to the base row (event time), and the key's next version must meet it in the
    same group. Only the slices read are built (an older slice may be being cleaned).
    """
    groups: dict[str, tuple[FileSlice, FileSlice]] = {}
    found_keys: list[pa.Array] = []
    owners: list[pa.Array] = []
    keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    keys = keys.cast(pa.string())
    # Sorted once per partition: each file's key range is then two bisections, not Arrow calls.
    ordered = sorted(keys.to_pylist())
    with_logs: list[str] = []

    def found(file_id: str, held: pa.Array | None) -> None:
        if held is None or not len(held):
            return
        pair = view.latest_pair(partition, file_id)
        assert pair is not None  # snapshot_bases lists only groups with a slice to read
        groups[file_id] = pair
        found_keys.append(held)
        owners.append(pa.array([file_id] * len(held), pa.string()))

    # From the view's index: slices (log files parsed) are built only for the groups that hold a
    # key or whose logs are searched, not for every group of the partition.
    for file_id, base, has_logs in view.snapshot_bases(partition):
        if has_logs:
            with_logs.append(file_id)
        if base is None:
            continue
        rel = join_partition(partition, base[0])
        held = reads.candidate_keys(rel, base[1], ordered)
        if held is not None:
            # Keep only the batch's keys: hashing the (small) batch beats hashing a large file's keys.
            held = held.filter(pc.is_in(held, value_set=keys))
        if held is None or not len(held) or table.config.is_mor or has_logs:
            reads.release(rel)  # no COW rewrite will read this file from the lookup's open
        found(file_id, held)
    rest = keys
    if found_keys and with_logs:
        rest = keys.filter(pc.invert(pc.is_in(keys, value_set=pa.concat_arrays(found_keys))))
    if with_logs and len(rest):
        for file_id, held in _keys_in_logs(table, timeline, view, partition, with_logs, rest).items():
            found(file_id, held)
    if not found_keys:
        return groups, pa.table({"key": pa.array([], pa.string()), "__lake_fid": pa.array([], pa.string())})
    return groups, pa.table({"key": pa.concat_arrays(found_keys), "__lake_fid": pa.concat_arrays(owners)})


def _keys_in_logs(
    table: LakeTable,
    timeline: Timeline,
    view: FileSystemView,
    partition: str,
    file_ids: list[str],
    keys: pa.Array,
) -> dict[str, pa.Array]:
    """Which of ``keys`` the visible log blocks of each group's latest slice name (data or delete), by
    file id; a key named in two groups' logs (written so by others) is in both, as a key in two base
    files is: the write reaches every copy."""
    reader = SliceReader(table, timeline, pa.schema([pa.field(RECORD_KEY, pa.string())]))
    paths = [view.snapshot_logs(partition, file_id) for file_id in file_ids]
    logged = reader.log_keys_of(paths, readers=table.storage.concurrent_reads)
    every = pa.concat_arrays(logged)  # one hash lookup for all groups
    named = pc.is_in(every, value_set=keys)
    if not pc.any(named).as_py():
        return {}
    owner = np.repeat(np.arange(len(file_ids)), [len(k) for k in logged])
    where = np.flatnonzero(named.to_numpy(zero_copy_only=False))
    by_group: dict[str, set[str]] = {}
    for key, at in zip(every.take(where).to_pylist(), owner[where].tolist(), strict=True):
        by_group.setdefault(file_ids[at], set()).add(key)  # a key in several blocks of a slice: once
    return {file_id: pa.array(sorted(found), pa.string()) for file_id, found in by_group.items()}


class BaseFileReads:
    """The base files one write reads, each opened once: the key lookup reads the footer and the
    record keys, a COW rewrite in the same process the other columns from the same open file.

    Not picklable (open files): a file group written on an executor opens its base file there.
    """

    def __init__(self, table: LakeTable) -> None:
        self.table = table
        self._open: dict[str, tuple[contextlib.AbstractContextManager[Any], pq.ParquetFile]] = {}
        self._keys: dict[tuple[str, int], pa.Array] = {}
        self.range_pruned = self.bloom_pruned = self.row_groups_read = 0
        self.keys_read: list[str] = []

    def __enter__(self) -> BaseFileReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> LookupStats:
        return LookupStats(self.range_pruned, self.bloom_pruned, tuple(self.keys_read), self.row_groups_read)

    def close(self) -> None:
        for rel in list(self._open):
            self.release(rel)

    def release(self, rel: str) -> None:
        """Close ``rel`` and forget what was read of it (nothing more of it is needed)."""
        opened = self._open.pop(rel, None)
        for key in [k for k in self._keys if k[0] == rel]:
            del self._keys[key]
        if opened is not None:
            opened[0].__exit__(None, None, None)

    def open(self, rel: str) -> pq.ParquetFile:
        """The base file ``rel`` opened once (its footer parsed once) while this object keeps it."""
        if rel not in self._open:
            if len(self._open) >= _OPEN_BASE_FILES:
                self.release(next(iter(self._open)))  # the oldest; its rewrite opens it again
            with self.corrupt(rel):
                manager = self.table.storage.open_input(rel)
                source = manager.__enter__()
                try:
                    parquet = pq.ParquetFile(source)
                except BaseException:
                    manager.__exit__(None, None, None)
                    raise
            self._open[rel] = (manager, parquet)
        return self._open[rel][1]

    @contextlib.contextmanager
    def corrupt(self, rel: str) -> Iterator[None]:
        """Arrow and OS errors reading ``rel`` as one CorruptDataFileError naming it."""
        try:
            yield
        except (StorageAccessError, StorageUnavailableError):
            raise  # the store, not the file
        except (pa.ArrowException, OSError) as exc:
            message = " ".join(str(exc).split())
            raise CorruptDataFileError(
                f"cannot read base file {self.table.storage.uri(rel)}: {message}"
            ) from exc

    def candidate_keys(self, rel: str, size: int, ordered: list[str]) -> pa.Array | None:
        """Record keys of base file ``rel`` that may be among the (sorted) keys ``ordered``, or None
        when its footer rules out every one of them."""
        summary = self._summary(rel, size)
        if summary.low is not None and summary.high is not None:
            ordered = _between(ordered, summary.low, summary.high)
            if not ordered:
                self.range_pruned += 1
                return None
        maybe = self._bloom(rel, self.open(rel).metadata.metadata or {}, ordered)
        if maybe is not None:
            ordered = [key for key, hit in zip(ordered, maybe, strict=True) if hit]
            if not ordered:
                self.bloom_pruned += 1
                return None
        # Only the row groups whose key statistics may hold a candidate (base files hold
        # ROW_GROUP_ROWS rows per group: with keys that grow over time, few are read).
        parts = [
            self._row_group_keys(rel, index)
            for index, stats in enumerate(summary.row_groups)
            if stats is None or _between(ordered, *stats)
        ]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.string())

    def _summary(self, rel: str, size: int) -> _FooterSummary:
        """The footer summary of ``rel``, from the table's cache when a write already read it."""
        cache = self.table.footer_summaries
        found = cache.get((rel, size))
        if found is not None:
            return found
        meta = self.open(rel).metadata
        kv = meta.metadata or {}
        low, high = kv.get(b"hoodie_min_record_key"), kv.get(b"hoodie_max_record_key")
        leaf = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == RECORD_KEY), None)
        groups: list[tuple[str, str] | None] = []
        for index in range(meta.num_row_groups):
            stats = meta.row_group(index).column(leaf).statistics if leaf is not None else None
            known = stats is not None and stats.has_min_max and isinstance(stats.min, str)
            groups.append((stats.min, stats.max) if known else None)  # type: ignore[union-attr]
        ranged = low is not None and high is not None
        summary = _FooterSummary(
            low.decode() if ranged else None,  # type: ignore[union-attr]
            high.decode() if ranged else None,  # type: ignore[union-attr]
            tuple(groups),
        )
        if len(cache) >= _FOOTER_SUMMARIES:
            cache.clear()
        cache[(rel, size)] = summary
        return summary

    def _bloom(self, rel: str, meta: Mapping[bytes, bytes], ordered: list[str]) -> np.ndarray | None:
        """Which of ``ordered`` the footer's bloom filter may hold (None: no filter we can read)."""
        try:
            return probe_footer(meta, pa.array(ordered, pa.string()), self.table.storage.uri(rel))
        except CorruptDataFileError as exc:  # a filter we cannot read only costs the key column read
            log.warning("%s; reading its record keys instead", exc)
            return None

    def _row_group_keys(self, rel: str, index: int) -> pa.Array:
        if (rel, index) not in self._keys:
            parquet = self.open(rel)
            with self.corrupt(rel):
                group = parquet.read_row_group(index, columns=[RECORD_KEY])
            if RECORD_KEY not in group.column_names:  # Arrow skips a column the file lacks
                raise CorruptDataFileError(
                    f"cannot read base file {self.table.storage.uri(rel)}: it has no {RECORD_KEY} column"
                )
            column = group.column(0)
            self._keys[(rel, index)] = column.combine_chunks().cast(pa.string())
            self.row_groups_read += 1
            if rel not in self.keys_read:
                self.keys_read.append(rel)
        return self._keys[(rel, index)]

    def rows(self, rel: str, schema: pa.Schema) -> pa.Table:
        """The rows of base file ``rel`` as ``schema``, its record keys taken from what the lookup
        read: every column chunk of the file is read once per write."""
        parquet = self.open(rel)
        # A file the lookup found a key in has row groups, and the meta fields besides the key.
        keys = pa.concat_arrays(
            [self._row_group_keys(rel, i) for i in range(parquet.metadata.num_row_groups)]
        )
        present = set(parquet.schema_arrow.names)
        wanted = [n for n in schema.names if n in present and n != RECORD_KEY]
        with self.corrupt(rel):
            rows = parquet.read(columns=wanted)
        return conform(rows.append_column(RECORD_KEY, keys), schema)
