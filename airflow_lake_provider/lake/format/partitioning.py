"""Partition paths and record keys, computed from a batch as Hudi's key generators do."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import SchemaError
from airflow_lake_provider.lake.format.table_config import TableConfig

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
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


def record_keys(batch: pa.Table, key_fields: tuple[str, ...]) -> pa.Array:
    """Record key strings: the value for one field, ``f1:v1,f2:v2`` for several (complex keys)."""
    columns = {f: _as_strings(batch.column(f), f) for f in key_fields}
    for f, values in columns.items():
        if any(v is None for v in values):
            raise SchemaError(f"record key field {f!r} has null values")
    if len(key_fields) == 1:
        return pa.array(columns[key_fields[0]], pa.string())
    rows = zip(*(columns[f] for f in key_fields), strict=True)
    return pa.array(
        [",".join(f"{f}:{v}" for f, v in zip(key_fields, row, strict=True)) for row in rows], pa.string()
    )


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
