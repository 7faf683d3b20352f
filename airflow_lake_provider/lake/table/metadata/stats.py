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
from collections.abc import Collection, Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import CorruptDataFileError, SchemaError
from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS
from airflow_lake_provider.lake.format.hash_id import column_stats_key, partition_stats_key
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.log_file.avro_decode import decode_avro_data_block
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey
from airflow_lake_provider.lake.log_file.scanner import read_log_blocks
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout

COLUMN_STATS, PARTITION_STATS = 3, 6  # HoodieMetadataRecord.type
INDEX_DEFS = f"{HOODIE_DIR}/.index_defs/index.json"
# Meta columns Hudi always indexes (when the table populates them).
META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key")
MAX_COLUMNS = 32  # hoodie.metadata.index.column.stats.max.columns.to.index
# Never among the first data columns (``HOODIE_META_COLUMNS_WITH_OPERATION``): exactly these names.
_ALL_META = frozenset((*META_FIELDS, "_hoodie_operation"))
# The largest decimal a ``DecimalWrapper`` holds (an Avro decimal(30, 15)): Hudi indexes a decimal
# column only when its values fit (``precision + (15 - scale) <= 30`` and ``scale <= 15``).
_DECIMAL_MAX_PRECISION, _DECIMAL_MAX_SCALE = 30, 15
# Avro types whose columns Hudi never indexes (``isColumnTypeSupported`` for Avro records).
_UNINDEXED_AVRO = frozenset(("record", "array", "map", "enum"))
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


def index_version(storage: Storage, definition: Mapping[str, Any] | None = None) -> int:
    """The ``column_stats`` index version (1 or 2) the table's index definition names (V1 when the
    table has none: Hudi 1.0). ``definition``: :func:`column_stats_definition`, if already read."""
    found = column_stats_definition(storage) if definition is None else definition
    return 2 if found.get("version") == "V2" else 1


def column_stats_definition(storage: Storage) -> dict[str, Any]:
    """The table's ``column_stats`` index definition (empty when it has none): read once by a
    caller that computes the stats of several files, and passed to the functions here."""
    try:
        defs = json.loads(storage.read(INDEX_DEFS))
    except FileNotFoundError:
        return {}
    return dict((defs.get("indexDefinitions") or {}).get("column_stats") or {})


def columns_to_index(
    storage: Storage,
    schema_columns: Sequence[str],
    column_list: Sequence[str] | None = None,
    *,
    definition: Mapping[str, Any] | None = None,
    unindexable: Collection[str] = frozenset(),
) -> tuple[str, ...]:
    """The columns Hudi indexes: the ``column_stats`` index definition's source fields (Hudi 1.x
    keeps them in ``.hoodie/.index_defs/index.json``), else ``column_list``
    (``hoodie.metadata.index.column.stats.column.list``, its meta columns and ``unindexable`` ones
    left out) after the meta columns, else the meta columns and the first ``MAX_COLUMNS`` data columns
    of a type Hudi indexes: ``unindexable`` (nested, enum and too wide decimal columns) are passed
    over before counting, and no meta column counts as a data column.

    ``schema_columns``: the top-level columns in schema order, meta columns included where the
    table populates them; ``unindexable``: those (and for ``column_list``, nested ones) of a type
    Hudi does not index (:func:`avro_indexable`)."""
    found = column_stats_definition(storage) if definition is None else definition
    fields = found.get("sourceFields")
    if fields:
        return tuple(fields)
    present = [c for c in META_COLUMNS if c in schema_columns]
    if column_list:
        listed = [c for c in column_list if c not in META_COLUMNS and c not in unindexable]
        return tuple(present + list(dict.fromkeys(listed)))
    data = [c for c in schema_columns if c not in _ALL_META and c not in unindexable]
    return tuple(present + data[:MAX_COLUMNS])


def table_columns(config: TableConfig, timeline: Timeline) -> tuple[list[str], frozenset[str]] | None:
    """The columns Hudi picks indexed ones from when no index definition names them (it takes them
    from the table's schema, not from each file): the meta columns the table populates, then the
    fields of the newest commit schema; and those of them of a type Hudi does not index. None when
    no completed commit records a schema."""
    text = timeline.latest_schema()
    if not text:
        return None
    schema = json.loads(text)
    meta = list(META_COLUMNS) if config.populate_meta_fields else []
    fields = [str(f["name"]) for f in schema.get("fields") or ()]
    return meta + [f for f in fields if f not in meta], avro_unindexable(schema)


def indexed_columns(
    storage: Storage, config: TableConfig, timeline: Timeline, definition: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """The columns every file of a write or clean gets ``column_stats`` of, chosen once from the
    table as Hudi chooses them (:func:`columns_to_index` over :func:`table_columns`); None when
    the table records no schema yet (each file's own columns then)."""
    if definition.get("sourceFields"):
        return tuple(definition["sourceFields"])
    found = table_columns(config, timeline)
    if found is None:
        return None
    names, unindexable = found
    return columns_to_index(storage, names, definition=definition, unindexable=unindexable)


def _default_columns(
    storage: Storage, definition: Mapping[str, Any], own: Sequence[str], own_unindexable: Collection[str]
) -> tuple[str, ...]:
    """The columns of a file whose caller named none: the definition's, else those the table's
    schema gives (read from storage), else those of the file's own schema ``own``."""
    if not definition.get("sourceFields"):
        try:
            text = storage.read(f"{HOODIE_DIR}/hoodie.properties").decode("utf-8")
        except FileNotFoundError:
            text = None
        if text is not None:
            props = parse_properties(text, storage.uri(f"{HOODIE_DIR}/hoodie.properties"))
            timeline = Timeline.load(storage, TimelineLayout.from_properties(props))
            chosen = indexed_columns(storage, TableConfig.from_properties(props), timeline, definition)
            if chosen is not None:
                return chosen
    return columns_to_index(storage, own, definition=definition, unindexable=own_unindexable)


def _decimal_indexable(precision: int, scale: int) -> bool:
    return precision + (_DECIMAL_MAX_SCALE - scale) <= _DECIMAL_MAX_PRECISION and scale <= _DECIMAL_MAX_SCALE


def _named_types(node: Any, into: dict[str, Any]) -> dict[str, Any]:
    """Every named type (record, enum, fixed) an Avro schema defines, by name and full name: a
    later field may name one instead of repeating it."""
    if isinstance(node, list):
        for branch in node:
            _named_types(branch, into)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "enum", "fixed") and "name" in node:
            name = str(node["name"])
            into[name] = node
            if node.get("namespace") and "." not in name:
                into[f"{node['namespace']}.{name}"] = node
        for field in node.get("fields") or ():
            _named_types(field.get("type"), into)
        for key in ("items", "values"):
            if key in node:
                _named_types(node[key], into)
        if isinstance(kind, (dict, list)):
            _named_types(kind, into)
    return into


def _resolve_avro(field_type: Any, named: Mapping[str, Any]) -> Any:
    """The one non-null branch of a nullable union, named types looked up; None for a union of
    several non-null types (Hudi resolves only a nullable one)."""
    if isinstance(field_type, list):
        branches = [b for b in field_type if b != "null"]
        if len(branches) != 1:
            return None
        field_type = branches[0]
    if isinstance(field_type, str):
        field_type = named.get(field_type, field_type)
    if isinstance(field_type, dict) and isinstance(field_type.get("type"), (dict, list)):
        return _resolve_avro(field_type["type"], named)
    return field_type


def avro_indexable(field_type: Any, named: Mapping[str, Any] | None = None) -> bool:
    """Whether Hudi 1.x keeps column stats of a column of this Avro type
    (``HoodieTableMetadataUtil.isColumnTypeSupported``, Avro records): not a record, array, map or
    enum, nor a decimal wider than a ``DecimalWrapper``. ``named``: the schema's named types."""
    resolved = _resolve_avro(field_type, named or {})
    if resolved is None:
        return False
    if isinstance(resolved, str):
        return resolved not in _UNINDEXED_AVRO
    if resolved.get("logicalType") == "decimal":
        return _decimal_indexable(int(resolved["precision"]), int(resolved.get("scale", 0)))
    return resolved.get("type") not in _UNINDEXED_AVRO


def avro_unindexable(schema: Mapping[str, Any] | None) -> frozenset[str]:
    """The top-level fields of an Avro record schema whose type Hudi does not index."""
    named = _named_types(schema, {}) if schema else {}
    fields = (schema or {}).get("fields") or ()
    return frozenset(str(f["name"]) for f in fields if not avro_indexable(f["type"], named))


def _parquet_columns(schema: pq.ParquetSchema) -> tuple[list[str], frozenset[str]]:
    """A parquet file's top-level columns in order, and those of a type Hudi does not index
    (groups: structs, lists and maps; enums; too wide decimals)."""
    enums = {
        schema.column(i).path
        for i in range(len(schema))
        if json.loads(schema.column(i).logical_type.to_json()).get("Type") == "Enum"
    }
    arrow = schema.to_arrow_schema()
    skipped = set()
    for field in arrow:
        kind = field.type
        if pa.types.is_nested(kind) or field.name in enums:
            skipped.add(field.name)
        elif pa.types.is_decimal(kind) and not _decimal_indexable(kind.precision, kind.scale):
            skipped.add(field.name)
    return list(arrow.names), frozenset(skipped)


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
        wanted = _default_columns(storage, definition, *_parquet_columns(meta.schema))
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
    named = _named_types(schema, {}) if schema else {}
    if definition is None:
        definition = column_stats_definition(storage)
    if columns is not None:
        wanted = columns
    else:
        wanted = _default_columns(storage, definition, list(types), avro_unindexable(schema))
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
        record = _resolve_avro(field_type, named)
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
