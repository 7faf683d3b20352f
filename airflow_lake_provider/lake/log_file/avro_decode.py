"""Decoding AVRO_DATA blocks into Arrow tables: with polars' Avro reader where the schema allows
(one container file per block, no per-record Python), else with fastavro."""

from __future__ import annotations

import io
import logging
import mmap
import os
import struct
import sys
import threading
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from airflow_lake_provider.lake.errors import CorruptLogBlockError
from airflow_lake_provider.lake.format.avro_binary import avro_bytes, zigzag
from airflow_lake_provider.lake.format.avro_schema import (
    avro_to_arrow,
    avro_to_arrow_raw,
)
from airflow_lake_provider.lake.log_file.data_block import cast_table, relax_schema, retype, strip_int_logical
from airflow_lake_provider.lake.log_file.log_format import (
    AVRO_BLOCK_VERSION,
    INT32,
    BlockType,
    LogBlock,
    expect_type,
    schema_json,
)

log = logging.getLogger(__name__)


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
_SENTINEL = b"\xfflk\xff"  # the length prefix of the record after a block's (see _sentinel)


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


def decode_avro_data_block_polars(block: LogBlock) -> pa.Table | None:
    """Decode an AVRO_DATA block with polars only (the fast path, for comparing it with fastavro);
    ``None`` where the fast path falls back.

    :param block: a block of type AVRO_DATA whose schema :func:`polars_can_decode`.
    """
    schema, count = _avro_block_prelude(block)
    if count == 0:
        return avro_to_arrow(schema).empty_table()
    return _decode_with_polars(block, schema, count)


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
    """Read the block as an Avro container; ``None`` if the records do not read so or their lengths
    do not add up: the record by record decode then decides (it names the bad record; it reads
    the records of a block with bytes after them, as Hudi's readers do)."""
    len_field = _length_field_name(schema)
    try:
        frame = _read_container(_polars(), block, schema, count, len_field)
    except CorruptLogBlockError as exc:
        log.debug("%s; decoding record by record", exc)  # which reports a bad block itself
        return None
    return _frame_table(frame, block, schema, count, len_field)


def _read_container(pl: Any, block: LogBlock, schema: dict[str, Any], count: int, len_field: str) -> Any:
    """The block's records read as a container: a frame with the length prefix of each record as
    its first column ``len_field``."""
    where = block.location
    # Each record is (4-byte length, datum): exactly a record whose first field is fixed(4).
    wrapper = _maps_as_arrays(schema, [0])
    wrapper["fields"] = [
        {"name": len_field, "type": {"type": "fixed", "name": f"{len_field}_t", "size": 4}},
        *wrapper.get("fields", []),
    ]
    payload = memoryview(block.content)[8:]
    tail = _sentinel(schema) + _overrun(wrapper)
    header = b"".join(
        (
            b"Obj\x01",
            zigzag(2),
            avro_bytes(b"avro.schema"),
            avro_bytes(schema_json(wrapper).encode("utf-8")),
            avro_bytes(b"avro.codec"),
            avro_bytes(b"null"),
            zigzag(0),
            _CONTAINER_SYNC,
            zigzag(count + 1),
            zigzag(len(payload) + len(tail)),
        )
    )
    # The container (a copy of the block) in memory of its own, unmapped when read: a bytes object
    # under the C heap's mmap threshold (up to 32 MB once raised) stays with the heap when freed.
    # After the records, a sentinel record (see _sentinel: it shows whether the records took
    # exactly the block's bytes), then bytes that do not decode (see _overrun): records cut short
    # read into them and fail as a polars error, not a panic past the buffer that Rust prints.
    container = mmap.mmap(-1, len(header) + len(payload) + len(tail) + len(_CONTAINER_SYNC))
    try:
        container.write(header)
        container.write(payload)
        container.write(tail)
        container.write(_CONTAINER_SYNC)
        del payload
        container.seek(0)
        frame = pl.read_avro(container)
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, OSError) as exc:
        # Records cut short: polars panics, or fails to fill its buffer, depending on where.
        raise CorruptLogBlockError(f"{where}: data block does not decode: {exc}") from exc
    finally:
        container.close()  # not held through the conversions (peak memory)
    if frame.height != count + 1:
        raise CorruptLogBlockError(f"{where}: decoded {frame.height - 1} records, header says {count}")
    return frame


def _sentinel(schema: Any) -> bytes:
    """A record after the block's: the length prefix ``_SENTINEL`` (negative: no record's), then
    zero bytes, a datum of any schema (empty strings and arrays, zeros, first union branches). Read
    where it was written, it proves the block's records took exactly their bytes: the last one's
    overrun shows in no length prefix (those that follow it), but moves the sentinel."""
    return _SENTINEL + bytes(_zero_width(schema))


def _zero_width(t: Any) -> int:
    """Bytes of the all-zero datum of ``t``."""
    if isinstance(t, str):
        return {"null": 0, "float": 4, "double": 8}.get(t, 1)
    if isinstance(t, list):
        return 1 + _zero_width(t[0]) if t else 1  # branch 0
    kind = t.get("type")
    if not isinstance(kind, str):
        return _zero_width(kind)
    if kind == "fixed":
        return int(t.get("size", 0))
    if kind == "record":
        return sum(_zero_width(f.get("type")) for f in t.get("fields", []))
    return 1 if kind in ("array", "map", "enum") else _zero_width(kind)


def _overrun(schema: Any) -> bytes:
    """0xFF bytes, enough that a record read into them meets a variable-length integer there (an
    Avro length, union branch or int: no run of 0xFF bytes ends one, polars fails "out-of-spec")
    before it runs out: past what the fixed-size values of two records take (a record cut short,
    then the next), which are read whatever the bytes, and a few KB a string or bytes value cut
    short may still claim (a corrupt length claiming more than that still panics)."""
    return b"\xff" * (2 * _fixed_width(schema) + 4096)


def _fixed_width(t: Any) -> int:
    """Bytes a value of ``t`` may take before its first variable-length integer, at most."""
    if isinstance(t, str):
        return {"float": 4, "double": 8, "boolean": 1}.get(t, 0)
    if not isinstance(t, Mapping):
        return 0  # a union: its branch index comes first
    kind = t.get("type")
    if not isinstance(kind, str):
        return _fixed_width(kind)
    if kind == "fixed":
        return int(t.get("size", 0))
    if kind == "record":
        return sum(_fixed_width(f.get("type")) for f in t.get("fields", []))
    return _fixed_width(kind)  # arrays and maps start with a count; logical types by their base type


def _frame_table(
    frame: Any, block: LogBlock, schema: dict[str, Any], count: int, len_field: str
) -> pa.Table | None:
    """The frame as the block's Arrow table, once its records' lengths are checked to tile the
    block; ``None`` where they do not."""
    where = block.location
    prefixes = _fixed_bytes(frame.get_column(len_field).to_arrow().cast(pa.binary(4)))
    declared = sum(struct.unpack(f">{count}i", prefixes[:-4]))
    if prefixes[-4:] != _SENTINEL or declared != len(block.content) - 8 - 4 * count:
        log.warning(
            "%s: record lengths do not tile the data block (sum %s, %s bytes); decoding record by record",
            where,
            declared,
            len(block.content) - 8 - 4 * count,
        )
        return None
    target = avro_to_arrow(schema)
    table = frame.drop(len_field).head(count).to_arrow()
    del frame
    try:
        # First to the decoded layout (maps still lists of entries), then relabel as maps.
        decoded = pa.schema([pa.field(f.name, _map_entries_type(f.type), f.nullable) for f in target])
        table = table.cast(relax_schema(decoded))
        columns = [
            pa.chunked_array([retype(chunk, f.type) for chunk in table.column(i).chunks], type=f.type)
            for i, f in enumerate(target)
        ]
        return pa.Table.from_arrays(columns, schema=target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CorruptLogBlockError(f"{where}: decoded data does not fit the block schema: {exc}") from exc


def _polars() -> Any:
    """polars, loaded on first use (only the Avro decode path needs its runtime). Unless the process
    loaded it already or says otherwise, its allocator (jemalloc) is told to return freed memory at
    once: it would keep the decode's garbage, about twice the decoded block, for the whole read."""
    if "polars" not in sys.modules:
        os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
    import polars

    return polars


def preload_decoder() -> None:
    """Start loading polars (the Avro decoder) on a background thread, unless loaded: for a reader
    about to read a large log file, so that the import (0.15 s of CPU) overlaps the file's read and
    the base file's decoding instead of following them. A decode waits for it (the import lock)."""
    if "polars" not in sys.modules:
        threading.Thread(target=_polars, name="polars-import", daemon=True).start()


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
    import fastavro  # the fallback's: a read whose blocks polars decodes never loads it

    where = block.location
    parsed = fastavro.parse_schema(strip_int_logical(_strip_uuid(schema)))
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
    table = pa.Table.from_pylist(rows, schema=relax_schema(raw_schema))
    try:
        return cast_table(table, avro_to_arrow(schema))
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
