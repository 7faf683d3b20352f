"""Partition paths and record keys, computed from a batch as Hudi's key generators do."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import SchemaError
from airflow_lake_provider.lake.format.table_config import TableConfig

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# How Hudi's key generators write a null or empty part of a composite record key.
NULL_KEY_PART = "__null__"
EMPTY_KEY_PART = "__empty__"
_COMPLEX_KEYGENS = {"ComplexKeyGenerator", "ComplexAvroKeyGenerator"}
_RESERVED_TOP_LEVEL = {".hoodie", "metadata", "_delta_log"}


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
    which prefixes a single field too (Hudi's default encoding for table versions up to 8)."""
    keygen = (config.keygen_class or "").rsplit(".", 1)[-1]
    return len(config.record_key_fields) > 1 or keygen in _COMPLEX_KEYGENS


def _key_part(value: str | None) -> str:
    if value is None:
        return NULL_KEY_PART
    return value or EMPTY_KEY_PART


def partition_paths(batch: pa.Table, config: TableConfig) -> pa.Array:
    """The partition path of every row ("" for non-partitioned tables)."""
    if not config.is_partitioned:
        return pa.array([""] * batch.num_rows, pa.string())
    parts: list[list[str]] = []
    for f in config.partition_fields:
        values = [DEFAULT_PARTITION if v in (None, "") else v for v in _as_strings(batch.column(f), f)]
        for v in values:
            if "/" in v or v in (".", ".."):
                raise SchemaError(f"partition field {f!r} value {v!r} cannot be a directory name")
        parts.append([f"{f}={v}" if config.hive_style else v for v in values])
    paths = ["/".join(segs) for segs in zip(*parts, strict=True)]
    for p in set(paths):
        if p.split("/", 1)[0] in _RESERVED_TOP_LEVEL:
            raise SchemaError(f"partition path {p!r} starts with a name Hudi readers skip")
    return pa.array(paths, pa.string())


def unique_values(array: pa.Array) -> list[str]:
    return sorted(pc.unique(array).to_pylist())


def partition_metadata_bytes(instant: str, depth: int) -> bytes:
    """The body of a partition's ``.hoodie_partition_metadata`` (Java properties text)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")
    return f"#partition metadata\n#{stamp}\ncommitTime={instant}\npartitionDepth={depth}\n".encode()
