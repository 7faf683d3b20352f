"""The input of a write job: one parquet file, or a folder of them (local, ``file:`` or ``s3://``).

Read through the storage layer like every other byte. A folder is walked recursively; files and
folders whose names start with ``_`` or ``.`` (``_SUCCESS``, ``.crc`` files, ``_temporary``) are
skipped, as Spark's readers skip them. Sizing needs only the parquet footers (row counts), so
choosing where a write runs costs one ranged read per file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import SchemaError, WriteInputError
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.storage.base import Storage


@dataclass(frozen=True)
class WriteInput:
    """The parquet files of an input location, relative to ``storage`` (sorted), with sizes."""

    location: str
    storage: Storage
    files: tuple[tuple[str, int], ...]

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def uri(self, rel: str) -> str:
        return self.storage.uri(rel)


def _hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def find_input(location: str, environ: Mapping[str, str] | None = None) -> WriteInput:
    """The parquet files at ``location`` (a file, or a folder walked recursively).

    ``environ`` holds the ``AWS_*`` settings for an ``s3://`` location (else the process' own).
    """
    text = str(location).strip()
    if not text:
        raise WriteInputError("the write input location is empty")
    trimmed = text.rstrip("/") or text
    folder, _, name = trimmed.rpartition("/")
    scheme, sep, rest = trimmed.partition("://")
    names_a_file = bool(name) and not (sep and "/" not in rest.strip("/"))
    if names_a_file:
        parent = open_storage(folder or ("/" if trimmed.startswith("/") else "."), environ=environ)
        sizes = dict(parent.list())
        if name in sizes:
            return WriteInput(text, parent, ((name, sizes[name]),))
    root = open_storage(trimmed, environ=environ)
    files = []
    for rel, listing in root.walk("", descend=lambda sub: not _hidden(sub.rpartition("/")[2])):
        for file_name, size in listing:
            if not _hidden(file_name):
                files.append((f"{rel}/{file_name}" if rel else file_name, size))
    if not files:
        raise WriteInputError(f"write input {text} does not exist or holds no parquet files")
    return WriteInput(text, root, tuple(sorted(files)))


def input_rows(source: WriteInput) -> int:
    """Rows in every file of the input, from the parquet footers only."""
    total = 0
    for rel, _size in source.files:
        total += _footer(source, rel).num_rows
    return total


def _footer(source: WriteInput, rel: str) -> pq.FileMetaData:
    try:
        with source.storage.open_input(rel) as handle:
            return pq.ParquetFile(handle).metadata
    except (pa.ArrowException, OSError) as exc:
        raise WriteInputError(
            f"write input {source.uri(rel)} is not a readable parquet file: {exc}"
        ) from None


def read_input(source: WriteInput) -> pa.Table:
    """Every file of the input as one table; files must share one schema (nulls aside: see
    :func:`_unified_schema`)."""
    tables = []
    for rel, _size in source.files:
        try:
            with source.storage.open_input(rel) as handle:
                tables.append(pq.read_table(handle))
        except (pa.ArrowException, OSError) as exc:
            raise WriteInputError(
                f"write input {source.uri(rel)} is not a readable parquet file: {exc}"
            ) from None
    unified = _unified_schema(source, tables)
    tables = [table.cast(unified) for table in tables]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _unified_schema(source: WriteInput, tables: list[pa.Table]) -> pa.Schema:
    """The one schema of the input's files: the same columns in the same order and of the same
    types, except that nullability may differ and a column may be all nulls (type ``null``) in
    some files, as writers produce for a part holding no value of it."""
    first_rel = source.files[0][0]
    fields = list(tables[0].schema)
    for (rel, _size), table in zip(source.files, tables, strict=True):
        schema = table.schema
        same = schema.names == [f.name for f in fields] and all(
            a.type == b.type or pa.types.is_null(a.type) or pa.types.is_null(b.type)
            for a, b in zip(schema, fields, strict=True)
        )
        if not same:
            shown = schema.to_string(show_schema_metadata=False)
            raise SchemaError(
                f"write input {source.uri(rel)} has schema {shown!r}, unlike {source.uri(first_rel)}"
            )
        fields = [
            pa.field(a.name, b.type if pa.types.is_null(a.type) else a.type, a.nullable or b.nullable)
            for a, b in zip(fields, schema, strict=True)
        ]
    return pa.schema(fields)


__all__ = ["WriteInput", "WriteInputError", "find_input", "input_rows", "read_input"]
