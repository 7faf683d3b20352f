"""Data blocks: rows as Avro records (AVRO_DATA) or as a whole parquet file (PARQUET_DATA); encoding both,
decoding parquet ones (Avro ones: ``avro_decode``)."""

from __future__ import annotations

import decimal
import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import CorruptLogBlockError, SchemaError
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
        return cast_table(table, target)
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


def retype(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """Relabel an array with ``t``, a type differing only in nested nullability.

    A non-nullable field inside a nullable struct legitimately holds nulls where its parent is
    null, but ``cast`` rejects any null there; rebuilding from the same buffers does not copy data.
    """
    if arr.type == t:
        return arr
    if arr.offset:
        arr = pa.concat_arrays([arr])  # offset 0, so parent buffers and children line up
    if pa.types.is_struct(t):
        children = [retype(arr.field(i), t.field(i).type) for i in range(t.num_fields)]
        return pa.Array.from_buffers(t, len(arr), arr.buffers()[:1], arr.null_count, 0, children)
    if pa.types.is_map(t):
        entries = pa.struct([t.key_field, t.item_field])
        children = [retype(arr.values, entries)]
        return pa.Array.from_buffers(t, len(arr), arr.buffers()[:2], arr.null_count, 0, children)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        children = [retype(arr.values, t.value_type)]
        return pa.Array.from_buffers(t, len(arr), arr.buffers()[:2], arr.null_count, 0, children)
    return arr.cast(t)


def relax_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _relax(f.type), f.nullable) for f in schema])


def cast_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table.cast(schema)`` that tolerates nulls of non-nullable fields under null parents.

    :raises pa.ArrowException: when a value cannot be converted.
    """
    relaxed = relax_schema(schema)
    cast = table.cast(relaxed)
    if relaxed.equals(schema):
        return cast
    columns = [
        pa.chunked_array([retype(chunk, f.type) for chunk in cast.column(i).chunks], type=f.type)
        for i, f in enumerate(schema)
    ]
    return pa.Table.from_arrays(columns, schema=schema)


# --------------------------------------------------------------------------------------------
# AVRO_DATA blocks: encoding
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockRows:
    """The rows of an AVRO_DATA block as decoding it gives them back: kept by the block's writer, so
    the log file's column stats are computed without decoding the block it has just written.

    :param rows: schema ``avro_to_arrow(schema)``.
    :param schema: the block's SCHEMA header, parsed.
    """

    rows: pa.Table
    schema: Mapping[str, Any]


def avro_data_block(table: pa.Table, avro_schema: Mapping[str, Any], instant_time: str) -> bytes:
    """Encode an AVRO_DATA block (content version 3) holding every row of ``table``.

    :param table: the rows; must have exactly the schema's fields (any column order), with
        types castable to the schema's Arrow equivalent and non-null meta fields.
    :param avro_schema: the writer schema, including the five meta fields.
    :param instant_time: the deltacommit instant writing the block.
    :returns: the block bytes.
    :raises SchemaError: naming the offending field when the table does not fit the schema.
    """
    return encode_avro_data_block(table, avro_schema, instant_time)[0]


def encode_avro_data_block(
    table: pa.Table, avro_schema: Mapping[str, Any], instant_time: str
) -> tuple[bytes, BlockRows]:
    """:func:`avro_data_block`'s bytes, and the rows as the block holds them."""
    import fastavro  # the writer's: a reader never loads it (start-up of a fresh `lake read`)

    schema = check_header_schema(avro_schema, f"data block at {instant_time}")
    conformed = _conform_table(table, schema)
    raw = _to_raw(conformed, schema)
    parsed = fastavro.parse_schema(strip_int_logical(schema))
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
    return encode_block(BlockType.AVRO_DATA, header, content), BlockRows(conformed, schema)


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
    return cast_table(table, raw_schema)


def strip_int_logical(t: Any) -> Any:
    """Copy of a schema with int/long logical types removed (they are written as raw ints)."""
    if isinstance(t, list):
        return [strip_int_logical(x) for x in t]
    if isinstance(t, dict):
        if t.get("type") in ("int", "long") and "logicalType" in t and "name" not in t:
            return t["type"]
        return {
            k: strip_int_logical(v) if k in ("type", "items", "values", "fields") else v for k, v in t.items()
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
