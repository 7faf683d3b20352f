"""How two records of one key in Hudi's metadata table (MDT) combine, as Hudi 1.x's
``HoodieMetadataPayload`` combines them (``preCombine``, then ``combineMetadataPayloads`` of the
record's ``MetadataPartitionType``): what an MDT compaction writes into a new base file.

Per record type (``HoodieMetadataRecord.type``):

- ``files`` (1: ``__all_partitions__``, 2: a partition's files): the file maps merge
  (``HoodieTableMetadataUtil.combineFileSystemMetadata``): a newer deletion of a file the older map
  has removes it, a deletion of one it lacks stays as a tombstone (a base file merged later may
  have it), otherwise the larger size wins.
- ``column_stats`` (3) and ``partition_stats`` (6) (``mergeColumnStatsRecords``): a tombstone on
  either side, or a newer record with tight bounds, replaces the older; otherwise the ranges
  widen (smaller minimum, larger maximum) and the counts and sizes add up. A merge whose result is
  a tombstone deletes the key (the combined payload is a deleted record, which a compaction drops).
- secondary index (7): the newer record, and a newer tombstone deletes the key
  (``combineSecondaryIndexRecord``); record index (5) and the rest: the newer record.

A delete block's key (``None`` here) deletes the key whatever its type. A record with no older one
is written as it is, tombstones included. File maps keep the entry order of Java's ``HashMap``s
(``format.java_map``): a decoded record goes through :func:`as_read` first, so a base file written
from the result has Java's bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_lake_provider.lake.errors import CorruptLogBlockError
from airflow_lake_provider.lake.format.java_map import JavaHashMap

Record = dict[str, Any]
PARTITION_LIST, FILE_LIST, COLUMN_STATS, PARTITION_STATS, SECONDARY_INDEX = 1, 2, 3, 6, 7
_STATS = "ColumnStatsMetadata"
_SUMMED = ("valueCount", "nullCount", "totalSize", "totalUncompressedSize")


def combine(older: Record | None, newer: Record | None, key: str) -> Record | None:
    """``newer`` merged over ``older`` (None: the key is deleted)."""
    if newer is None or older is None:
        return newer
    kind = newer.get("type")
    if older.get("type") != kind:
        raise CorruptLogBlockError(
            f"metadata record {key!r}: cannot combine type {older.get('type')} with {kind}"
        )
    if kind in (PARTITION_LIST, FILE_LIST):
        return {**newer, "filesystemMetadata": _combine_files(older, newer)}
    if kind in (COLUMN_STATS, PARTITION_STATS):
        stats = _combine_stats(older.get(_STATS) or {}, newer.get(_STATS) or {})
        return None if stats.get("isDeleted") else {**newer, _STATS: stats}
    if kind == SECONDARY_INDEX and (newer.get("SecondaryIndexMetadata") or {}).get("isDeleted"):
        return None
    return newer


def as_read(record: Record) -> Record:
    """``record`` as decoded, its file map in the order Java iterates it once read back (Avro's reader
    fills a ``HashMap`` sized for the map's entries, in file order)."""
    files = record.get("filesystemMetadata")
    if not files:
        return record
    read = JavaHashMap.read(files.items(), len(files))
    return {**record, "filesystemMetadata": dict(read.items())}


def _merge_file(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    if new.get("isDeleted"):
        return dict(new) if old.get("isDeleted") else None  # deleted twice: Java keeps the tombstone
    return {"size": max(int(new["size"]), int(old["size"])), "isDeleted": False}


def _combine_files(older: Mapping[str, Any], newer: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The file maps merged into a new ``HashMap`` as Java does (``putAll`` of the older, then a
    ``merge`` per newer entry), in the order Java then iterates it."""
    combined: JavaHashMap[dict[str, Any]] = JavaHashMap()
    combined.put_all([(n, dict(i)) for n, i in (older.get("filesystemMetadata") or {}).items()])
    for name, info in (newer.get("filesystemMetadata") or {}).items():
        combined.merge(name, dict(info), _merge_file)
    return dict(combined.items())


def _value(wrapped: Any) -> Any:
    """The value of a stats wrapper as decoded (``(record name, {"value": v})``, or a plain dict)."""
    if wrapped is None:
        return None
    record = wrapped[1] if isinstance(wrapped, tuple) else wrapped
    return record.get("value") if isinstance(record, Mapping) else record


def _pick(a: Any, b: Any, smaller: bool) -> Any:
    """Of two wrapped values, the smaller (or larger); a missing one never wins."""
    if _value(a) is None:
        return b
    if _value(b) is None:
        return a
    if smaller:
        return b if _value(b) < _value(a) else a
    return b if _value(b) > _value(a) else a


def _combine_stats(older: Mapping[str, Any], newer: Mapping[str, Any]) -> dict[str, Any]:
    if newer.get("isDeleted") or older.get("isDeleted") or newer.get("isTightBound"):
        return dict(newer)
    merged = dict(newer)
    merged["minValue"] = _pick(older.get("minValue"), newer.get("minValue"), smaller=True)
    merged["maxValue"] = _pick(older.get("maxValue"), newer.get("maxValue"), smaller=False)
    for name in _SUMMED:
        if name in merged:
            merged[name] = (older.get(name) or 0) + (newer.get(name) or 0)
    return merged
