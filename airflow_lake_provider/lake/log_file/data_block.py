"""Data blocks: rows as Avro records (AVRO_DATA) or as a whole parquet file (PARQUET_DATA), both ways."""

from __future__ import annotations

import decimal
import io
import logging
import struct
from collections.abc import Mapping
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import CorruptLogBlockError, SchemaError
from airflow_lake_provider.lake.format.avro_binary import avro_bytes, zigzag
from airflow_lake_provider.lake.format.avro_schema import (
    META_FIELDS,
    avro_to_arrow,
    avro_to_arrow_raw,
)
from airflow_lake_provider.lake.format.casting import cast_exact
from airflow_lake_provider.lake.log_file.log_format import (
    AVRO_BLOCK_VERSION,
    INT32,
    BlockType,
    HeaderKey,
    LogBlock,
    check_header_schema,
    encode_block,
    expect_type,
    schema_json,
)

log = logging.getLogger(__name__)


def decode_parquet_block(block: LogBlock) -> pa.Table:
    """Decode a PARQUET_DATA block (its content is a whole parquet file).

    When the block has a SCHEMA header naming the same columns, the table is cast to
    ``avro_to_arrow(block.schema)`` so parquet and Avro blocks give identical types (e.g. list
    items are named ``item``, not parquet's ``element``).

    :param block: a block of type PARQUET_DATA.
    :returns: the rows of the block.
    :raises CorruptLogBlockError: if the content is not a readable parquet file.
    """
    expect_type(block, BlockType.PARQUET_DATA)
    where = block.location
    try:
        # Single-threaded on purpose: threaded reads from an in-memory buffer were seen to abort
        # the interpreter at exit ("terminate called without an active exception") here.
        table = pq.ParquetFile(pa.BufferReader(block.content)).read(use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        raise CorruptLogBlockError(f"{where}: parquet block unreadable: {exc}") from exc
    schema = block.schema
    if schema is None:
        return table
    target = avro_to_arrow(schema)
    if table.column_names != target.names:
        log.debug("%s: parquet columns differ from the SCHEMA header; keeping parquet types", where)
        return table
    try:
        return _cast_table(table, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CorruptLogBlockError(f"{where}: parquet block does not fit its SCHEMA header: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Casting with nested non-nullable fields
# --------------------------------------------------------------------------------------------


def _relax(t: pa.DataType) -> pa.DataType:
    """The same type with every nested field nullable."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _relax(f.type), True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field(t.item_field.name, _relax(t.item_type), True))
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _relax(t.value_type), True))
    if pa.types.is_large_list(t):
        return pa.large_list(pa.field(t.value_field.name, _relax(t.value_type), True))
    return t


def _retype(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """Relabel an array with ``t``, a type differing only in nested nullability.

    A non-nullable field inside a nullable struct legitimately holds nulls where its parent is
    null, but ``cast`` rejects any null there; rebuilding from the same buffers does not copy data.
    """
    if arr.type == t:
        return arr
    if arr.offset:
        arr = pa.concat_arrays([arr])  # offset 0, so parent buffers and children line up
    if pa.types.is_struct(t):
        children = [_retype(arr.field(i), t.field(i).type) for i in range(t.num_fields)]
        return pa.Array.from_buffers(t, len(arr), arr.buffers()[:1], arr.null_count, 0, children)
    if pa.types.is_map(t):
        entries = pa.struct([t.key_field, t.item_field])
        children = [_retype(arr.values, entries)]
        return pa.Array.from_buffers(t, len(arr), arr.buffers()[:2], arr.null_count, 0, children)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        children = [_retype(arr.values, t.value_type)]
        return pa.Array.from_buffers(t, len(arr), arr.buffers()[:2], arr.null_count, 0, children)
    return arr.cast(t)


def _relax_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _relax(f.type), f.nullable) for f in schema])


def _cast_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table.cast(schema)`` that tolerates nulls of non-nullable fields under null parents.

    :raises pa.ArrowException: when a value cannot be converted.
    """
    relaxed = _relax_schema(schema)
    cast = table.cast(relaxed)
    if relaxed.equals(schema):
        return cast
    columns = [
        pa.chunked_array([_retype(chunk, f.type) for chunk in cast.column(i).chunks], type=f.type)
        for i, f in enumerate(schema)
    ]
    return pa.Table.from_arrays(columns, schema=schema)


# --------------------------------------------------------------------------------------------
# AVRO_DATA blocks: encoding
# --------------------------------------------------------------------------------------------


def avro_data_block(table: pa.Table, avro_schema: Mapping[str, Any], instant_time: str) -> bytes:
    """Encode an AVRO_DATA block (content version 3) holding every row of ``table``.

    :param table: the rows; must have exactly the schema's fields (any column order), with
        types castable to the schema's Arrow equivalent and non-null meta fields.
    :param avro_schema: the writer schema, including the five meta fields.
    :param instant_time: the deltacommit instant writing the block.
    :returns: the block bytes.
    :raises SchemaError: naming the offending field when the table does not fit the schema.
    """
    schema = check_header_schema(avro_schema, f"data block at {instant_time}")
    conformed = _conform_table(table, schema)
    raw = _to_raw(conformed, schema)
    parsed = fastavro.parse_schema(_strip_int_logical(schema))
    rows = _python_rows(raw)
    buf = io.BytesIO()
    ends: list[int] = []
    write = fastavro.schemaless_writer
    try:
        for row in rows:
            write(buf, parsed, row)
            ends.append(buf.tell())
    except (TypeError, ValueError, OverflowError, decimal.InvalidOperation) as exc:
        raise SchemaError(f"data block at {instant_time}: row {len(ends)} does not encode: {exc}") from exc
    encoded = buf.getbuffer()
    parts = [INT32.pack(AVRO_BLOCK_VERSION), INT32.pack(len(ends))]
    start = 0
    for stop in ends:
        parts.append(INT32.pack(stop - start))
        parts.append(encoded[start:stop])
        start = stop
    content = b"".join(parts)
    del encoded
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json(schema)}
    return encode_block(BlockType.AVRO_DATA, header, content)


def _family(t: pa.DataType) -> str:
    """Coarse kind of a type: casts are only allowed within a kind (plus int -> float)."""
    checks = (
        ("int", pa.types.is_integer),
        ("float", pa.types.is_floating),
        ("bool", pa.types.is_boolean),
        ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
        (
            "binary",
            lambda x: (
                pa.types.is_binary(x) or pa.types.is_large_binary(x) or pa.types.is_fixed_size_binary(x)
            ),
        ),
        ("timestamp", pa.types.is_timestamp),
        ("date", pa.types.is_date),
        ("time", pa.types.is_time),
        ("decimal", pa.types.is_decimal),
        ("list", lambda x: pa.types.is_list(x) or pa.types.is_large_list(x)),
        ("struct", pa.types.is_struct),
        ("map", pa.types.is_map),
    )
    return next((name for name, check in checks if check(t)), str(t))


def _same_family(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether casting src to dst is a representation change, not a reinterpretation (no parsing
    of strings into numbers, no integers into timestamps)."""
    return _family(src) == _family(dst) or (_family(src), _family(dst)) == ("int", "float")


def _conform_table(table: pa.Table, schema: Mapping[str, Any]) -> pa.Table:
    target = avro_to_arrow(schema)
    extra = [n for n in table.column_names if target.get_field_index(n) < 0]
    if extra:
        raise SchemaError(f"columns {extra} are not in the block schema {schema.get('name')!r}")
    columns = []
    for fld in target:
        if table.schema.get_field_index(fld.name) < 0:
            raise SchemaError(f"field {fld.name!r} of the block schema is missing from the table")
        col = table.column(fld.name)
        if not fld.nullable and col.null_count:
            raise SchemaError(f"field {fld.name!r} is not nullable but has {col.null_count} nulls")
        if fld.name in META_FIELDS and col.null_count:
            raise SchemaError(f"meta field {fld.name!r} has {col.null_count} nulls; hudi needs every value")
        if col.type != fld.type:
            if not _same_family(col.type, fld.type):
                raise SchemaError(
                    f"field {fld.name!r}: table type {col.type} does not fit Avro type {fld.type}"
                )
            col = cast_exact(col, fld.type, fld.name)  # a value that would change is refused
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=target)


def _to_raw(table: pa.Table, schema: Mapping[str, Any]) -> pa.Table:
    # Temporal columns become their integer storage: fastavro then writes ints directly instead
    # of converting a Python datetime per value (and ranges beyond datetime stay writable).
    raw_schema = avro_to_arrow_raw(schema)
    if raw_schema.equals(table.schema):
        return table
    return _cast_table(table, raw_schema)


def _strip_int_logical(t: Any) -> Any:
    """Copy of a schema with int/long logical types removed (they are written as raw ints)."""
    if isinstance(t, list):
        return [_strip_int_logical(x) for x in t]
    if isinstance(t, dict):
        if t.get("type") in ("int", "long") and "logicalType" in t and "name" not in t:
            return t["type"]
        return {
            k: _strip_int_logical(v) if k in ("type", "items", "values", "fields") else v
            for k, v in t.items()
        }
    return t


def _python_rows(table: pa.Table) -> list[dict[str, Any]]:
    names = table.column_names
    columns = [
        _python_values(table.column(i).to_pylist(), table.schema.field(i).type) for i in range(len(names))
    ]
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)] if columns else []


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    return False


def _python_values(values: list[Any], t: pa.DataType) -> list[Any]:
    # Arrow gives maps as lists of (key, value) pairs; fastavro wants dicts.
    if not _has_map(t):
        return values
    return [_fix_maps(v, t) for v in values]


def _fix_maps(v: Any, t: pa.DataType) -> Any:
    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _fix_maps(x, t.item_type) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_fix_maps(x, t.value_type) for x in v]
    if pa.types.is_struct(t):
        return {t.field(i).name: _fix_maps(v[t.field(i).name], t.field(i).type) for i in range(t.num_fields)}
    return v


# --------------------------------------------------------------------------------------------
# AVRO_DATA blocks: decoding
# --------------------------------------------------------------------------------------------

# Logical types polars' Avro reader decodes correctly (checked with polars 2.1). Polars panics on
# maps, enums (except top-level non-null ones) and decimals over 38 digits, and rejects null columns
# and unions other than [null, T]; maps are handled by rewriting them (see _maps_as_arrays).
_POLARS_LOGICAL = {
    ("int", "date"),
    ("int", "time-millis"),
    ("long", "time-micros"),
    ("long", "timestamp-millis"),
    ("long", "timestamp-micros"),
    ("long", "local-timestamp-millis"),
    ("long", "local-timestamp-micros"),
    ("string", "uuid"),
}
_POLARS_PRIMITIVES = {"boolean", "int", "long", "float", "double", "bytes", "string"}
_CONTAINER_SYNC = b"hudi-lake-block!"  # any 16 bytes; only has to match within one container


def polars_can_decode(avro_schema: Mapping[str, Any]) -> bool:
    """Whether the fast polars path supports every type in the schema.

    :param avro_schema: a record schema.
    """
    return _polars_ok(dict(avro_schema))


def _polars_ok(t: Any) -> bool:
    if isinstance(t, list):
        non_null = [b for b in t if b != "null"]
        return len(t) == 2 and len(non_null) == 1 and _polars_ok(non_null[0])
    if isinstance(t, str):
        # Named-type references are not followed by polars in every position: play safe.
        return t in _POLARS_PRIMITIVES
    if not isinstance(t, Mapping):
        return False
    kind = t.get("type")
    if not isinstance(kind, str):
        return _polars_ok(kind)  # {"type": {...}} wrapper
    logical = t.get("logicalType")
    if logical == "decimal":
        precision = t.get("precision")
        return kind in ("bytes", "fixed") and isinstance(precision, int) and 0 < precision <= 38
    if logical is not None:
        return (kind, logical) in _POLARS_LOGICAL
    if kind in _POLARS_PRIMITIVES:
        return True
    if kind == "fixed":
        return True
    if kind == "array":
        return _polars_ok(t.get("items"))
    if kind == "map":
        return _polars_ok(t.get("values"))
    if kind == "record":
        return all(_polars_ok(f.get("type")) for f in t.get("fields", []))
    return False


def decode_avro_data_block(block: LogBlock) -> pa.Table:
    """Decode an AVRO_DATA block into Arrow.

    Uses polars' native Avro reader when the schema allows (see :func:`polars_can_decode`),
    else fastavro record by record; both give the same table.

    :param block: a block of type AVRO_DATA with a SCHEMA header.
    :returns: a table with schema ``avro_to_arrow(block.schema)`` (writer field order,
        meta columns included, timestamps tz=UTC).
    :raises CorruptLogBlockError: if the block is malformed.
    :raises SchemaError: if the writer schema has no Arrow mapping.
    """
    schema, count = _avro_block_prelude(block)
    if count == 0:
        return avro_to_arrow(schema).empty_table()
    if polars_can_decode(schema):
        table = _decode_with_polars(block, schema, count)
        if table is not None:
            return table
    return _decode_with_fastavro(block, schema, count)


def decode_avro_data_block_fastavro(block: LogBlock) -> pa.Table:
    """Decode an AVRO_DATA block with fastavro only (the reference for the fast path).

    :param block: a block of type AVRO_DATA.
    :returns: the same table :func:`decode_avro_data_block` returns.
    """
    schema, count = _avro_block_prelude(block)
    if count == 0:
        return avro_to_arrow(schema).empty_table()
    return _decode_with_fastavro(block, schema, count)


def _avro_block_prelude(block: LogBlock) -> tuple[dict[str, Any], int]:
    expect_type(block, BlockType.AVRO_DATA)
    where = block.location
    schema = block.schema
    if schema is None:
        raise CorruptLogBlockError(f"{where}: data block has no SCHEMA header")
    if len(block.content) < 8:
        raise CorruptLogBlockError(f"{where}: data block content of {len(block.content)} bytes is too short")
    version, count = struct.unpack_from(">ii", block.content, 0)
    if version != AVRO_BLOCK_VERSION:
        raise CorruptLogBlockError(f"{where}: unsupported data block version {version}")
    if count < 0 or count * 4 > len(block.content) - 8:
        raise CorruptLogBlockError(f"{where}: impossible record count {count}")
    return schema, count


def _length_field_name(schema: Mapping[str, Any]) -> str:
    taken = {f.get("name") for f in schema.get("fields", [])}
    name = "_lake_record_length"
    while name in taken:
        name += "_"
    return name


def _decode_with_polars(block: LogBlock, schema: dict[str, Any], count: int) -> pa.Table | None:
    """Read the block as an Avro container; ``None`` if the record lengths do not add up."""
    where = block.location
    # Each record is (4-byte length, datum): exactly a record whose first field is fixed(4).
    len_field = _length_field_name(schema)
    wrapper = _maps_as_arrays(schema, [0])
    wrapper["fields"] = [
        {"name": len_field, "type": {"type": "fixed", "name": f"{len_field}_t", "size": 4}},
        *wrapper.get("fields", []),
    ]
    payload = memoryview(block.content)[8:]
    container = b"".join(
        (
            b"Obj\x01",
            zigzag(2),
            avro_bytes(b"avro.schema"),
            avro_bytes(schema_json(wrapper).encode("utf-8")),
            avro_bytes(b"avro.codec"),
            avro_bytes(b"null"),
            zigzag(0),
            _CONTAINER_SYNC,
            zigzag(count),
            zigzag(len(payload)),
            payload,
            _CONTAINER_SYNC,
        )
    )
    del payload
    import polars as pl  # deferred: only the Avro decode path needs polars' runtime

    try:
        frame = pl.read_avro(io.BytesIO(container))
    except pl.exceptions.PolarsError as exc:
        raise CorruptLogBlockError(f"{where}: data block does not decode: {exc}") from exc
    if frame.height != count:
        raise CorruptLogBlockError(f"{where}: decoded {frame.height} records, header says {count}")
    lengths = frame.get_column(len_field).to_arrow().cast(pa.binary(4))
    declared = sum(struct.unpack(f">{count}i", _fixed_bytes(lengths)))
    if declared != len(block.content) - 8 - 4 * count:
        log.warning(
            "%s: record lengths do not tile the data block (sum %s, %s bytes); decoding record by record",
            where,
            declared,
            len(block.content) - 8 - 4 * count,
        )
        return None
    target = avro_to_arrow(schema)
    table = frame.drop(len_field).to_arrow()
    try:
        # First to the decoded layout (maps still lists of entries), then relabel as maps.
        decoded = pa.schema([pa.field(f.name, _map_entries_type(f.type), f.nullable) for f in target])
        table = table.cast(_relax_schema(decoded))
        columns = [
            pa.chunked_array([_retype(chunk, f.type) for chunk in table.column(i).chunks], type=f.type)
            for i, f in enumerate(target)
        ]
        return pa.Table.from_arrays(columns, schema=target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CorruptLogBlockError(f"{where}: decoded data does not fit the block schema: {exc}") from exc


def _maps_as_arrays(t: Any, counter: list[int]) -> Any:
    """Copy of a schema with every map replaced by an array of {key, value} records.

    Both encode identically (blocks of entries, each a string key then the value), and polars
    reads arrays of records but panics on maps.
    """
    if isinstance(t, list):
        return [_maps_as_arrays(x, counter) for x in t]
    if not isinstance(t, Mapping):
        return t
    if t.get("type") == "map":
        counter[0] += 1
        entry = {
            "type": "record",
            "name": f"_lake_map_entry_{counter[0]}",
            "fields": [
                {"name": "key", "type": "string"},
                {"name": "value", "type": _maps_as_arrays(t.get("values"), counter)},
            ],
        }
        return {"type": "array", "items": entry}
    out = dict(t)
    for key in ("type", "items", "values"):
        if key in out and not isinstance(out[key], str):
            out[key] = _maps_as_arrays(out[key], counter)
    if isinstance(out.get("fields"), list):
        out["fields"] = [dict(f, type=_maps_as_arrays(f.get("type"), counter)) for f in out["fields"]]
    return out


def _map_entries_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type polars produces for ``t`` once maps are read as arrays of entries."""
    if pa.types.is_map(t):
        entries = pa.struct([t.key_field, pa.field(t.item_field.name, _map_entries_type(t.item_type), True)])
        return pa.list_(pa.field("entries", entries, False))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _map_entries_type(f.type), f.nullable) for f in t])
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _map_entries_type(t.value_type), t.value_field.nullable))
    return t


def _fixed_bytes(arr: pa.Array | pa.ChunkedArray) -> bytes:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    width = 4
    data = arr.buffers()[1]
    return data.to_pybytes()[arr.offset * width : (arr.offset + len(arr)) * width]


def _decode_with_fastavro(block: LogBlock, schema: dict[str, Any], count: int) -> pa.Table:
    where = block.location
    parsed = fastavro.parse_schema(_strip_int_logical(_strip_uuid(schema)))
    content = block.content
    stream = io.BytesIO(content)
    read = fastavro.schemaless_reader
    rows: list[Any] = []
    pos = 8
    end = len(content)
    for i in range(count):
        if pos + 4 > end:
            raise CorruptLogBlockError(f"{where}: record {i} length runs past the block")
        (length,) = INT32.unpack_from(content, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptLogBlockError(f"{where}: record {i} of {length} bytes runs past the block")
        stream.seek(pos)
        try:
            rows.append(read(stream, parsed, None))
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise CorruptLogBlockError(f"{where}: record {i} does not decode: {exc}") from exc
        if stream.tell() != pos + length:
            raise CorruptLogBlockError(
                f"{where}: record {i} declared {length} bytes but its datum used {stream.tell() - pos}"
            )
        pos += length
    raw_schema = avro_to_arrow_raw(schema)
    table = pa.Table.from_pylist(rows, schema=_relax_schema(raw_schema))
    try:
        return _cast_table(table, avro_to_arrow(schema))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CorruptLogBlockError(f"{where}: decoded data does not fit the block schema: {exc}") from exc


def _strip_uuid(t: Any) -> Any:
    """fastavro turns uuid strings into UUID objects; keep them plain strings."""
    if isinstance(t, list):
        return [_strip_uuid(x) for x in t]
    if isinstance(t, dict):
        if t.get("type") == "string" and t.get("logicalType") == "uuid":
            return "string"
        return {k: _strip_uuid(v) if k in ("type", "items", "values", "fields") else v for k, v in t.items()}
    return t
