"""Partition paths and record keys, computed from a batch as Hudi's key generators do."""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import SchemaError, TableConfigError
from airflow_lake_provider.lake.format.table_config import TableConfig, table_flag

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# How Hudi's key generators write a null or empty part of a composite record key.
NULL_KEY_PART = "__null__"
EMPTY_KEY_PART = "__empty__"
_COMPLEX_KEYGENS = {"ComplexKeyGenerator", "ComplexAvroKeyGenerator"}
COMPLEX_KEYGEN_NEW_ENCODING = "hoodie.write.complex.keygen.new.encoding"
_HOODIE_DIR = ".hoodie"
_RESERVED_TOP_LEVEL = {_HOODIE_DIR, "metadata", "_delta_log"}
# NAME_MAX of Linux file systems and HDFS's default dfs.namenode.fs-limits.max-component-length.
MAX_SEGMENT_BYTES = 255
_CONTROL = re.compile("[\x01-\x1f\x7f]")


def _as_strings(column: pa.ChunkedArray, field: str) -> list[str | None]:
    typ = column.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return column.to_pylist()
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        return [
            None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
            for v in column.to_pylist()
        ]
    if pa.types.is_date(typ):
        return [None if v is None else v.isoformat() for v in column.to_pylist()]
    raise SchemaError(f"field {field!r} of type {typ} cannot be a record key or partition field")


def record_keys(batch: pa.Table, config: TableConfig) -> pa.Array:
    """Record key strings as the table's key generator writes them, so Java finds the same keys.

    One field (simple key generators): the value, never null or empty. Several fields, or Hudi's
    complex key generator even with one field: ``f1:v1,f2:v2``, a null part written ``__null__`` and
    an empty one ``__empty__``; a key whose parts are all null or empty is refused, as Java does.
    """
    key_fields = config.record_key_fields
    if not key_fields:
        # Hudi's auto-generated keys (no key fields): keys this writer cannot derive or look up.
        raise TableConfigError(
            f"{config.source}: hoodie.table.recordkey.fields is missing or empty, so records have no "
            "key to write them by (tables with auto-generated keys are not supported)"
        )
    columns = {f: _as_strings(batch.column(f), f) for f in key_fields}
    if not field_prefixed_keys(config):
        (name,) = key_fields
        values = columns[name]
        for row, v in enumerate(values):
            if v is None:
                raise SchemaError(f"record key field {name!r} has null values (row {row})")
            if v == "":
                raise SchemaError(f"record key field {name!r} has an empty value (row {row})")
        return pa.array(values, pa.string())
    keys = []
    for row, parts in enumerate(zip(*(columns[f] for f in key_fields), strict=True)):
        if all(v is None or v == "" for v in parts):
            raise SchemaError(
                f"record key fields {list(key_fields)} are all null or empty (row {row}): "
                "Hudi refuses such a key"
            )
        keys.append(",".join(f"{f}:{_key_part(v)}" for f, v in zip(key_fields, parts, strict=True)))
    return pa.array(keys, pa.string())


def field_prefixed_keys(config: TableConfig) -> bool:
    """Whether keys are written ``field:value``: several key fields, or the complex key generator,
    which prefixes a single field too (Hudi's default encoding for table versions up to 8). Hudi
    0.14.0-0.15.0 wrote a single field's bare value instead; a table that says so with
    ``hoodie.write.complex.keygen.new.encoding=true`` in its properties keeps bare values."""
    keygen = (config.keygen_class or "").rsplit(".", 1)[-1]
    if len(config.record_key_fields) > 1:
        return True
    bare = table_flag(config.properties, COMPLEX_KEYGEN_NEW_ENCODING, False, config.source)
    return keygen in _COMPLEX_KEYGENS and not bare


def _key_part(value: str | None) -> str:
    if value is None:
        return NULL_KEY_PART
    return value or EMPTY_KEY_PART


def partition_paths(batch: pa.Table, config: TableConfig) -> pa.Array:
    """The partition path of every row ("" for non-partitioned tables).

    Raises ``SchemaError`` for a value that cannot be one folder name (checked before any instant
    exists, so a refused batch leaves the table as it was).
    """
    if not config.is_partitioned:
        return pa.array([""] * batch.num_rows, pa.string())
    parts: list[list[str]] = []
    for f in config.partition_fields:
        values = [DEFAULT_PARTITION if v in (None, "") else v for v in _as_strings(batch.column(f), f)]
        segments = [f"{f}={v}" if config.hive_style else v for v in values]
        for v, segment in dict(zip(values, segments, strict=True)).items():
            _check_segment(f, v, segment)
        parts.append(segments)
    paths = ["/".join(segs) for segs in zip(*parts, strict=True)]
    for p in set(paths):
        if p.split("/", 1)[0] in _RESERVED_TOP_LEVEL:
            raise SchemaError(f"partition path {p!r} starts with a name Hudi readers skip")
    return pa.array(paths, pa.string())


def _check_segment(field: str, value: str, segment: str) -> None:
    """Refuse a partition value whose folder name no file system (or Hudi reader) can hold as given."""
    what = f"partition field {field!r} value {value!r}"
    if "\x00" in value:
        raise SchemaError(f"{what} holds a NUL byte, which no file name can")
    control = _CONTROL.search(value)
    if control:
        # Linux would store it, but hudi-rs (object_store paths) then fails to list the whole table.
        raise SchemaError(
            f"{what} holds the control character {control.group()!r}, which Hudi readers cannot list"
        )
    if "/" in value or segment in (".", ".."):
        raise SchemaError(f"{what} cannot be a directory name")
    if segment == _HOODIE_DIR:
        raise SchemaError(f"{what} cannot be a directory name: Java Hudi skips {_HOODIE_DIR} folders")
    size = len(segment.encode("utf-8"))
    if size > MAX_SEGMENT_BYTES:
        raise SchemaError(
            f"{what} makes a folder name of {size} bytes; file systems (and HDFS) allow {MAX_SEGMENT_BYTES}"
        )


def unique_values(array: pa.Array) -> list[str]:
    return sorted(pc.unique(array).to_pylist())


def partition_metadata_bytes(instant: str, depth: int) -> bytes:
    """The body of a partition's ``.hoodie_partition_metadata`` (Java properties text)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")
    return f"#partition metadata\n#{stamp}\ncommitTime={instant}\npartitionDepth={depth}\n".encode()
