"""The MDT's ``column_stats`` and ``partition_stats`` records, computed as Hudi 1.x computes them.

A ``column_stats`` record (``HoodieMetadataRecord`` type 3) holds, for one column of one data file,
a ``HoodieMetadataColumnStats``; a ``partition_stats`` record (type 6) the same for one column of a
partition, aggregated over the files of the partition's latest file slices (its ``fileName`` is the
partition path). Keys: ``format.hash_id``.

For a parquet base file Hudi reads the footer, not the rows (``ParquetUtils``): per column, the
minimum of the row groups' minima and the maximum of their maxima, the sums of their null counts,
value counts (the column chunks' ``num_values``, nulls included), compressed sizes (``totalSize``)
and uncompressed sizes. Where this differs from a naive reading of the values:
- min/max are parquet-mr's column chunk statistics, which are never truncated (only the page
  column index is), so a long string is kept whole;
- values are stored in their physical form, wrapped in the union branch of the value's "primitive"
  type (``ValueType`` of Hudi 1.1, ``valueType.typeOrdinal`` records which): a timestamp is its
  epoch count in the column's own unit (``LongWrapper``), not a date-time; a date its day number
  (``IntWrapper``); a decimal its unscaled value as Java's ``BigInteger.toByteArray`` gives it (the
  shortest two's complement, big-endian: 0 is ``b"\\x00"``; ``BytesWrapper``) with ``precision,scale``
  in ``additionalInfo``, not the parquet column's fixed-width bytes;
- ``isTightBound`` is false for a file's record and true for a partition's (recomputed from the
  latest slices, not widened by merging older records).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
from collections.abc import Iterable, Mapping
from enum import IntEnum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import CorruptDataFileError, SchemaError
from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.hash_id import column_stats_key, partition_stats_key
from airflow_lake_provider.lake.log_file.avro_decode import decode_avro_data_block
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey
from airflow_lake_provider.lake.log_file.scanner import read_log_blocks
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.columns import (
    avro_indexable,
    avro_unindexable,
    column_stats_definition,
    default_columns,
    index_version,
    named_types,
    parquet_columns,
    resolve_avro,
)

COLUMN_STATS, PARTITION_STATS = 3, 6  # HoodieMetadataRecord.type
_WRAPPER = "org.apache.hudi.avro.model."
Stats = dict[str, Any]


class ValueType(IntEnum):
    """``org.apache.hudi.stats.ValueType``: the record's ``valueType.typeOrdinal``."""

    V1 = 0
    NULL = 1
    BOOLEAN = 2
    INT = 3
    LONG = 4
    FLOAT = 5
    DOUBLE = 6
    STRING = 7
    BYTES = 8
    FIXED = 9
    DECIMAL = 10
    UUID = 11
    DATE = 12
    TIME_MILLIS = 13
    TIME_MICROS = 14
    TIMESTAMP_MILLIS = 15
    TIMESTAMP_MICROS = 16
    TIMESTAMP_NANOS = 17
    LOCAL_TIMESTAMP_MILLIS = 18
    LOCAL_TIMESTAMP_MICROS = 19
    LOCAL_TIMESTAMP_NANOS = 20


# The wrapper (union branch) each value type is stored in.
_WRAPPERS = {
    ValueType.BOOLEAN: "BooleanWrapper",
    ValueType.INT: "IntWrapper",
    ValueType.LONG: "LongWrapper",
    ValueType.FLOAT: "FloatWrapper",
    ValueType.DOUBLE: "DoubleWrapper",
    ValueType.STRING: "StringWrapper",
    ValueType.BYTES: "BytesWrapper",
    ValueType.FIXED: "BytesWrapper",
    ValueType.DECIMAL: "BytesWrapper",
    ValueType.UUID: "StringWrapper",
    ValueType.DATE: "IntWrapper",
    ValueType.TIME_MILLIS: "IntWrapper",
}
_PHYSICAL = {
    "BOOLEAN": ValueType.BOOLEAN,
    "INT32": ValueType.INT,
    "INT64": ValueType.LONG,
    "FLOAT": ValueType.FLOAT,
    "DOUBLE": ValueType.DOUBLE,
    "BYTE_ARRAY": ValueType.BYTES,
    "FIXED_LEN_BYTE_ARRAY": ValueType.FIXED,
}
_TIME_UNITS = {"milliseconds": 0, "microseconds": 1, "nanoseconds": 2}


def _value_type(column: pq.ColumnSchema) -> tuple[ValueType, str | None]:
    """The value type of a parquet leaf column (Hudi's ``ParquetAdapter``), and its additional info."""
    logical = json.loads(column.logical_type.to_json())
    kind = logical.get("Type")
    if kind in ("String", "Enum", "JSON"):
        return ValueType.STRING, None
    if kind == "Decimal":
        return ValueType.DECIMAL, f"{logical['precision']},{logical['scale']}"
    if kind == "Date":
        return ValueType.DATE, None
    if kind == "UUID":
        return ValueType.UUID, None
    if kind == "Time":
        return (
            ValueType.TIME_MILLIS if logical["timeUnit"] == "milliseconds" else ValueType.TIME_MICROS
        ), None
    if kind == "Timestamp":
        unit = _TIME_UNITS[logical["timeUnit"]]
        first = ValueType.TIMESTAMP_MILLIS if logical["isAdjustedToUTC"] else ValueType.LOCAL_TIMESTAMP_MILLIS
        return ValueType(first + unit), None
    if kind == "Int":
        return (ValueType.LONG if logical["bitWidth"] == 64 else ValueType.INT), None
    return _PHYSICAL[column.physical_type], None


def _java_big_integer_bytes(value: int) -> bytes:
    """``BigInteger.toByteArray``: the shortest big-endian two's complement (at least one byte)."""
    bits = (value if value >= 0 else ~value).bit_length()  # Java's bitLength: no sign bit
    return value.to_bytes(bits // 8 + 1, "big", signed=True)


def _primitive(raw: Any, kind: ValueType, column: pq.ColumnSchema) -> Any:
    """The value as the wrapper stores it, from parquet's physical (``min_raw``) value."""
    if kind is ValueType.DECIMAL:
        if isinstance(raw, bytes):
            raw = int.from_bytes(raw, "big", signed=True)
        return _java_big_integer_bytes(int(raw))
    if kind in (ValueType.STRING, ValueType.UUID):
        return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    return raw


# Index version V1 (Hudi 1.0, table version 8: no ``valueType``) wraps what parquet-mr's statistics
# give Java: a decimal's ``BigDecimal`` in a ``DecimalWrapper`` (an Avro decimal of scale 15 in its
# schema) and a date in a ``DateWrapper``; a timestamp stays the ``Long`` of its physical type.
_V1_WRAPPERS = {
    ValueType.DECIMAL: "DecimalWrapper",
    ValueType.DATE: "DateWrapper",
}


def _wrap(value: Any, kind: ValueType, v1: bool, scale: int) -> tuple[str, dict[str, Any]] | None:
    if value is None:
        return None
    if v1 and kind in _V1_WRAPPERS:
        if kind is ValueType.DECIMAL:
            value = decimal.Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-scale)
        return (_WRAPPER + _V1_WRAPPERS[kind], {"value": value})
    return (_WRAPPER + _WRAPPERS.get(kind, "LongWrapper"), {"value": value})


def parquet_column_stats(
    storage: Storage,
    partition: str,
    file_name: str,
    columns: Iterable[str] | None = None,
    *,
    definition: Mapping[str, Any] | None = None,
) -> dict[str, Stats]:
    """key -> ``HoodieMetadataColumnStats`` of each indexed column of a parquet base file (``columns``:
    default :func:`columns_to_index`), from its footer.

    :raises CorruptDataFileError: if the footer cannot be read.
    """
    rel = f"{partition}/{file_name}" if partition else file_name
    try:
        with storage.open_input(rel) as source:
            meta = pq.ParquetFile(source).metadata
    except (OSError, ValueError) as exc:
        raise CorruptDataFileError(f"{storage.uri(rel)}: unreadable parquet footer ({exc})") from exc
    leaves = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    if definition is None:
        definition = column_stats_definition(storage)
    if columns is not None:
        wanted = columns
    else:
        wanted = default_columns(storage, definition, *parquet_columns(meta.schema))
    v1 = index_version(storage, definition) == 1
    out = {}
    for name in wanted:
        at = leaves.get(name)
        if at is None:
            continue
        stats = _chunk_stats(meta, at, file_name, name, v1)
        out[column_stats_key(name, partition or ".", file_name)] = stats
    return out


def _chunk_stats(meta: pq.FileMetaData, at: int, file_name: str, name: str, v1: bool) -> Stats:
    column = meta.schema.column(at)
    kind, info = _value_type(column)
    low = high = None
    nulls = values = size = raw_size = 0
    for g in range(meta.num_row_groups):
        chunk = meta.row_group(g).column(at)
        values += chunk.num_values
        size += chunk.total_compressed_size
        raw_size += chunk.total_uncompressed_size
        stats = chunk.statistics
        if stats is None:
            continue
        nulls += stats.null_count or 0
        if stats.has_min_max:
            lo, hi = _primitive(stats.min_raw, kind, column), _primitive(stats.max_raw, kind, column)
            low = lo if low is None or _order(kind, lo) < _order(kind, low) else low
            high = hi if high is None or _order(kind, hi) > _order(kind, high) else high
    scale = int(info.split(",")[1]) if info else 0
    stats: Stats = {
        "fileName": file_name,
        "columnName": name,
        "minValue": _wrap(low, kind, v1, scale),
        "maxValue": _wrap(high, kind, v1, scale),
        "valueCount": values,
        "nullCount": nulls,
        "totalSize": size,
        "totalUncompressedSize": raw_size,
        "isDeleted": False,
        "isTightBound": False,
    }
    if not v1:
        stats["valueType"] = {"typeOrdinal": int(kind), "additionalInfo": info}
    return stats


_AVRO_LOGICAL = {
    "date": ValueType.DATE,
    "uuid": ValueType.UUID,
    "time-millis": ValueType.TIME_MILLIS,
    "time-micros": ValueType.TIME_MICROS,
    "timestamp-millis": ValueType.TIMESTAMP_MILLIS,
    "timestamp-micros": ValueType.TIMESTAMP_MICROS,
    "timestamp-nanos": ValueType.TIMESTAMP_NANOS,
    "local-timestamp-millis": ValueType.LOCAL_TIMESTAMP_MILLIS,
    "local-timestamp-micros": ValueType.LOCAL_TIMESTAMP_MICROS,
    "local-timestamp-nanos": ValueType.LOCAL_TIMESTAMP_NANOS,
}
_AVRO_PRIMITIVE = {
    "boolean": ValueType.BOOLEAN,
    "int": ValueType.INT,
    "long": ValueType.LONG,
    "float": ValueType.FLOAT,
    "double": ValueType.DOUBLE,
    "string": ValueType.STRING,
    "enum": ValueType.STRING,
    "bytes": ValueType.BYTES,
    "fixed": ValueType.FIXED,
}


def _avro_value_type(field_type: Any) -> tuple[ValueType, str | None]:
    """The value type of an Avro field (``ValueType.fromSchema``: the non-null branch of a union)."""
    if isinstance(field_type, list):
        field_type = next(t for t in field_type if t != "null")
    if isinstance(field_type, str):
        return _AVRO_PRIMITIVE.get(field_type, ValueType.BYTES), None
    logical = field_type.get("logicalType")
    if logical == "decimal":
        return ValueType.DECIMAL, f"{field_type['precision']},{field_type.get('scale', 0)}"
    if logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical], None
    return _AVRO_PRIMITIVE.get(field_type.get("type"), ValueType.BYTES), None


def log_column_stats(
    storage: Storage,
    partition: str,
    file_name: str,
    columns: Iterable[str] | None = None,
    *,
    definition: Mapping[str, Any] | None = None,
) -> dict[str, Stats]:
    """key -> ``HoodieMetadataColumnStats`` of each indexed column of a log file, from the records of
    its data blocks, as Hudi's append handle collects them while writing: the record count (nulls
    included) as ``valueCount``, min/max over the values (Java compares strings by UTF-16 units,
    which orders like code points for every character outside the surrogate range), and sizes 0 (a
    log file has no column chunks). A log file with no data records (deletes only) gives a record
    without values whose value type is ``NULL``.

    :raises CorruptDataFileError: if a block cannot be decoded.
    """
    rel = f"{partition}/{file_name}" if partition else file_name
    tables, schema = [], None
    for block in read_log_blocks(storage, rel):
        if block.block_type is BlockType.AVRO_DATA:
            tables.append(decode_avro_data_block(block))
            schema = json.loads(block.header[HeaderKey.SCHEMA])
        elif block.block_type is BlockType.PARQUET_DATA:
            raise CorruptDataFileError(
                f"{storage.uri(rel)}: column stats of parquet log blocks are not computed"
            )
    rows = pa.concat_tables(tables, promote_options="permissive") if tables else None
    return rows_column_stats(storage, partition, file_name, rows, schema, columns, definition=definition)


def rows_column_stats(
    storage: Storage,
    partition: str,
    file_name: str,
    rows: pa.Table | None,
    schema: Mapping[str, Any] | None,
    columns: Iterable[str] | None = None,
    *,
    definition: Mapping[str, Any] | None = None,
) -> dict[str, Stats]:
    """:func:`log_column_stats` of a log file whose data blocks hold ``rows`` (None: it has none)
    under the (last) block ``schema``: what its writer, which holds the rows it encoded, computes
    without reading the file back."""
    types = {f["name"]: f["type"] for f in (schema or {}).get("fields", [])}
    named = named_types(schema, {}) if schema else {}
    if definition is None:
        definition = column_stats_definition(storage)
    if columns is not None:
        wanted = columns
    else:
        wanted = default_columns(storage, definition, list(types), avro_unindexable(schema))
    v1 = index_version(storage, definition) == 1
    out = {}
    for name in wanted:
        if rows is None:
            stats = _empty_stats(file_name, name, v1)
        else:
            found = _log_column(rows, types, named, name)
            if found is None:
                continue
            values, field_type = found
            if not avro_indexable(field_type, named):
                raise SchemaError(
                    f"{storage.uri(f'{partition}/{file_name}' if partition else file_name)}: column "
                    f"{name!r} is indexed but its type ({json.dumps(field_type)}) is not one Hudi keeps "
                    "column stats of"
                )
            stats = _values_stats(values, *_avro_value_type(field_type), file_name, name, v1)
        out[column_stats_key(name, partition or ".", file_name)] = stats
    return out


def _log_column(
    rows: pa.Table, types: Mapping[str, Any], named: Mapping[str, Any], name: str
) -> tuple[pa.ChunkedArray, Any] | None:
    """The values and Avro type of column ``name`` of a log's rows; a dotted name is a field nested
    in records (null where a record on the way is), as Hudi reads an indexed nested field. None when
    the rows have no such column."""
    if name in types:
        return (rows.column(name), types[name]) if name in rows.column_names else None
    top, *path = name.split(".")
    if not path or top not in types or top not in rows.column_names:
        return None
    values: pa.ChunkedArray | pa.Array = rows.column(top)
    field_type = types[top]
    for part in path:
        record = resolve_avro(field_type, named)
        fields = record.get("fields") if isinstance(record, dict) else None
        children = {f["name"]: f["type"] for f in fields or ()}
        if part not in children or not pa.types.is_struct(values.type):
            return None
        values = pc.struct_field(values, part)
        field_type = children[part]
    return pa.chunked_array([values]) if isinstance(values, pa.Array) else values, field_type


def _empty_stats(file_name: str, name: str, v1: bool) -> Stats:
    stats: Stats = {
        "fileName": file_name,
        "columnName": name,
        "minValue": None,
        "maxValue": None,
        "valueCount": 0,
        "nullCount": 0,
        "totalSize": 0,
        "totalUncompressedSize": 0,
        "isDeleted": False,
        "isTightBound": False,
    }
    if not v1:
        stats["valueType"] = {"typeOrdinal": int(ValueType.NULL), "additionalInfo": None}
    return stats


def _values_stats(
    values: pa.ChunkedArray, kind: ValueType, info: str | None, file_name: str, name: str, v1: bool
) -> Stats:
    present = [_log_primitive(v, kind) for v in values.to_pylist() if v is not None]
    low = min(present, key=lambda v: _order(kind, v)) if present else None
    high = max(present, key=lambda v: _order(kind, v)) if present else None
    scale = int(info.split(",")[1]) if info else 0
    stats = _empty_stats(file_name, name, v1)
    stats.update(
        minValue=_wrap(low, kind, v1, scale),
        maxValue=_wrap(high, kind, v1, scale),
        valueCount=len(values),
        nullCount=values.null_count,
    )
    if not v1:
        stats["valueType"] = {"typeOrdinal": int(kind), "additionalInfo": info}
    return stats


def _log_primitive(value: Any, kind: ValueType) -> Any:
    """A decoded log value in the physical form the wrappers store."""
    if isinstance(value, decimal.Decimal):
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return _java_big_integer_bytes(unscaled)
    if isinstance(value, dt.datetime):
        unit = {ValueType.TIMESTAMP_MILLIS: 1000, ValueType.LOCAL_TIMESTAMP_MILLIS: 1000}.get(kind, 1)
        naive = value.replace(tzinfo=None) if value.tzinfo is None else value.astimezone(dt.timezone.utc)
        delta = naive.replace(tzinfo=None) - dt.datetime(1970, 1, 1)
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros // unit
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    return value


def _order(kind: ValueType, value: Any) -> Any:
    """A sort key for stored values (a decimal's bytes compare as the signed number)."""
    return int.from_bytes(value, "big", signed=True) if kind is ValueType.DECIMAL else value


def slices_seen_by(view: FileSystemView, partition: str, instant: str | None) -> list[FileSlice]:
    """The file slices a ``partition_stats`` record written for ``instant`` covers: the latest slices
    of the partition's live file groups as the writer of ``instant`` saw them. Hudi updates the MDT
    before the data instant completes, so the groups ``instant`` itself replaces (clustering,
    insert_overwrite) still count: their rows are in the record beside the new files'."""
    replaced = {key: at for key, at in view.replaced.items() if at != instant}
    return dataclasses.replace(view, replaced=replaced).latest_slices(partition=partition)


_KINDS = {int(k): k for k in ValueType}  # not ValueType(n) per record: a write merges a thousand


def partition_stats(partition: str, file_stats: Iterable[Mapping[str, Any]]) -> dict[str, Stats]:
    """key -> the ``partition_stats`` record content of each column over ``file_stats`` (the
    ``column_stats`` of every file in the partition's latest slices): min of minima, max of maxima,
    sums of the counts and sizes; a tight bound."""
    merged: dict[str, Stats] = {}
    for stats in file_stats:
        name = stats["columnName"]
        ordinal = stats["valueType"]["typeOrdinal"]
        kind = _KINDS[ordinal] if ordinal in _KINDS else ValueType(ordinal)  # ValueType: its error
        have = merged.get(name)
        if have is None:
            merged[name] = {**stats, "fileName": partition, "isTightBound": True}
            continue
        have["minValue"] = _pick(have["minValue"], stats["minValue"], kind, min)
        have["maxValue"] = _pick(have["maxValue"], stats["maxValue"], kind, max)
        for count in ("valueCount", "nullCount", "totalSize", "totalUncompressedSize"):
            have[count] += stats[count]
        if have["valueType"]["typeOrdinal"] == ValueType.NULL:
            have["valueType"] = stats["valueType"]  # a file with no values yet says nothing of the type
    return {partition_stats_key(name, partition): stats for name, stats in merged.items()}


def _pick(a: Any, b: Any, kind: ValueType, choose: Any) -> Any:
    """The wrapped value ``choose`` (``min`` or ``max``) takes of ``a`` and ``b``: ``a`` on a tie, as
    those builtins keep the first; a missing one gives way to the other."""
    if a is None or b is None:
        return a if b is None else b
    x, y = _order(kind, a[1]["value"]), _order(kind, b[1]["value"])
    return b if (y < x if choose is min else y > x) else a
