"""HFILE_DATA blocks: the records of Hudi's metadata table in its log files.

The block content is a whole HFile: one cell per record, the cell's row the record key (UTF-8), its
value the Avro binary of the record under the block's SCHEMA header (which the HFile's file info
repeats as ``schema``). Java writes the record's own ``key`` field empty: the key lives in the cell.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Container, Mapping, Sequence
from functools import lru_cache
from typing import Any

import fastavro
from fastavro.const import AVRO_TYPES

from airflow_lake_provider.lake.errors import CorruptDataFileError, CorruptLogBlockError, SchemaError
from airflow_lake_provider.lake.format.hfile import (
    HFile,
    HFileContent,
    HFileSettings,
    read_hfile,
    write_hfile,
)
from airflow_lake_provider.lake.log_file.log_format import (
    BlockType,
    HeaderKey,
    LogBlock,
    encode_block,
    expect_type,
)

SCHEMA_INFO = b"schema"  # the file info entry holding the writer schema


def hfile_of_block(block: LogBlock) -> HFile:
    """The HFile an HFILE_DATA block carries.

    :raises CorruptLogBlockError: if the content is not a readable HFile.
    """
    expect_type(block, BlockType.HFILE_DATA)
    try:
        return read_hfile(block.content, block.location)
    except CorruptDataFileError as exc:
        raise CorruptLogBlockError(f"{block.location}: HFile block unreadable: {exc}") from exc


def decode_hfile_block(
    block: LogBlock, keys: Container[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(record key, record) of every cell of an HFILE_DATA block (of those in ``keys``, if given),
    in key order.

    The writer schema is the block's SCHEMA header, else the HFile's ``schema`` file info. A value
    of a union of several records (column stats' value wrappers) comes as ``(record name, value)``,
    the form :func:`encode_records` takes back, so the branch survives a round trip.

    :raises CorruptLogBlockError: if the HFile, the schema or a record is malformed.
    """
    hfile = hfile_of_block(block)
    text = block.header.get(HeaderKey.SCHEMA)
    schema = text if text is not None else hfile.content.info(SCHEMA_INFO)
    return decode_hfile_cells(hfile, schema, block.location, keys)


def decode_hfile_cells(
    hfile: HFile, schema_text: str | bytes | None, where: str, keys: Container[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(record key, record) of every cell of an HFile whose values are Avro records of ``schema_text``
    (a log block's, or a metadata table base file's: its ``schema`` file info); only the cells whose
    key is in ``keys``, if given (the others are not decoded).

    :raises CorruptLogBlockError: if the schema is missing or unusable, or a record is malformed.
    """
    if schema_text is None:
        raise CorruptLogBlockError(f"{where}: HFile records without a schema")
    if isinstance(schema_text, bytes):
        schema_text = schema_text.decode("utf-8", errors="replace")
    schema = _parse(schema_text, where)
    unwrap = _single_record_unions(schema_text)
    read = fastavro.schemaless_reader
    out = []
    for row, value in hfile.content.cells:
        try:
            key = row.decode("utf-8")
            if keys is not None and key not in keys:
                continue
            if unwrap is None:
                record = read(
                    io.BytesIO(value), schema, None, return_record_name=True, return_record_name_override=True
                )
            else:  # the same record, decoded faster (see _single_record_unions)
                record = unwrap(read(io.BytesIO(value), schema, None, return_record_name=True))
        except (UnicodeDecodeError, ValueError, EOFError, IndexError, TypeError) as exc:
            raise CorruptLogBlockError(f"{where}: record {row!r} does not decode: {exc}") from exc
        if not isinstance(record, dict):
            raise CorruptLogBlockError(f"{where}: record {row!r} is not an Avro record")
        out.append((key, record))
    return out


def _parse(text: str, where: str) -> Any:
    try:
        return _parsed_schema(text)
    except (json.JSONDecodeError, RecursionError, fastavro.schema.SchemaParseException, TypeError) as exc:
        raise CorruptLogBlockError(f"{where}: block schema unusable: {exc}") from exc


@lru_cache(maxsize=32)
def _parsed_schema(text: str) -> Any:
    """``text`` parsed for fastavro, once per process: every block of a metadata table repeats the
    same large ``HoodieMetadataRecord`` schema (a read decodes dozens of blocks, a write encodes a few).
    fastavro's readers and writers do not change a parsed schema."""
    return fastavro.parse_schema(json.loads(text))


Fix = Callable[[Any], Any]


@lru_cache(maxsize=32)
def _single_record_unions(text: str) -> Fix | None:
    """How a record of the schema ``text``, read with fastavro's ``return_record_name`` alone, becomes
    the record read with ``return_record_name_override`` too (a fifth faster for the metadata
    table's records: the override counts a union's records at every union read): each value of a
    union with one record branch comes as ``(name, value)`` and is unwrapped. None: the schema has
    such a union where this does not follow it (it then is read with the override)."""
    parsed = _parsed_schema(text)
    try:
        return _fix(parsed, parsed.get("__named_schemas", {}), set()) or (lambda record: record)
    except _Unfollowed:
        return None


class _Unfollowed(Exception):
    """A single-record union where :func:`_fix` does not follow it."""


def _record_like(branch: Any) -> bool:
    """Whether fastavro counts a union branch as a record (an inline one, or any named reference)."""
    kind = branch.get("type") if isinstance(branch, dict) else branch
    return kind == "record" or (isinstance(kind, str) and kind not in AVRO_TYPES)


def _fix(t: Any, named: Mapping[str, Any], seen: set[str]) -> Fix | None:
    """What to change in a value of type ``t`` read without the override (None: nothing)."""
    if isinstance(t, str):
        if t in AVRO_TYPES:
            return None
        if t not in named or t in seen:
            raise _Unfollowed(t)  # unknown, or a recursive type
        return _fix(named[t], named, seen | {t})
    if isinstance(t, list):
        return _union_fix(t, named, seen)
    kind = t.get("type")
    if kind == "record":
        inner = seen | {t["name"]}
        fields = [(f["name"], fix) for f in t["fields"] if (fix := _fix(f["type"], named, inner))]
        if not fields:
            return None

        def record(value: Any) -> Any:
            for name, fix in fields:
                value[name] = fix(value[name])
            return value

        return record
    if kind in ("array", "map"):
        each = _fix(t["items" if kind == "array" else "values"], named, seen)
        if each is None:
            return None
        if kind == "array":
            return lambda value: [each(v) for v in value]
        return lambda value: {k: each(v) for k, v in value.items()}
    return None


def _union_fix(t: list[Any], named: Mapping[str, Any], seen: set[str]) -> Fix | None:
    records = [b for b in t if _record_like(b)]
    if any(_fix(b, named, seen) for b in t if not _record_like(b)):
        raise _Unfollowed("a union's non-record branch holds one")  # whose branch a value took: unknown
    if len(records) != 1:  # read the same with or without the override: named values stay tuples
        by_name = {_name(b, named): fix for b in records if (fix := _fix(b, named, seen))}
        if not by_name:
            return None
        return lambda value: (
            (value[0], by_name[value[0]](value[1]))
            if isinstance(value, tuple) and value[0] in by_name
            else value
        )
    inner = _fix(records[0], named, seen)
    if inner is None:
        return lambda value: value[1] if isinstance(value, tuple) else value
    return lambda value: inner(value[1]) if isinstance(value, tuple) else value


def _name(branch: Any, named: Mapping[str, Any]) -> str:
    """The name fastavro gives a record-like union branch's values."""
    return str(branch["name"] if isinstance(branch, dict) else named[branch]["name"])


def encode_records(
    records: Sequence[tuple[str, Mapping[str, Any]]], schema_text: str
) -> list[tuple[bytes, bytes]]:
    """HFile cells (UTF-8 key, Avro binary) of ``records``, sorted by key.

    :raises SchemaError: if a record does not fit the schema or a key repeats.
    """
    schema = _parsed_schema(schema_text)
    named = _nullable_records(schema_text)
    cells = []
    for key, record in records:
        buf = io.BytesIO()
        value = dict(record)
        for field, name in named:
            if isinstance(value.get(field), dict):
                value[field] = (name, value[field])
        try:
            fastavro.schemaless_writer(buf, schema, value)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise SchemaError(f"metadata record {key!r} does not fit its schema: {exc}") from exc
        cells.append((key.encode("utf-8"), buf.getvalue()))
    cells.sort(key=lambda cell: cell[0])
    for before, after in zip(cells, cells[1:], strict=False):
        if before[0] == after[0]:
            raise SchemaError(f"metadata record key {before[0].decode()!r} given twice in one block")
    return cells


@lru_cache(maxsize=32)
def _nullable_records(text: str) -> tuple[tuple[str, str], ...]:
    """(field, record name) of each top-level field of the schema ``text`` that is a union of null
    and one named record: a record value given as ``(name, value)`` takes that branch without
    fastavro checking the value against every branch first (a third of a metadata record's
    encoding; the bytes are the same)."""
    out = []
    for field in _parsed_schema(text).get("fields", ()):
        kind = field.get("type")
        if isinstance(kind, list) and len(kind) == 2 and "null" in kind:
            (branch,) = [b for b in kind if b != "null"]
            name = branch if isinstance(branch, str) and branch not in AVRO_TYPES else None
            if isinstance(branch, dict) and branch.get("type") == "record":
                name = branch.get("name")
            if name:
                out.append((str(field["name"]), str(name)))
    return tuple(out)


def hfile_data_block(
    records: Sequence[tuple[str, Mapping[str, Any]]],
    schema_text: str,
    instant_time: str,
    settings: HFileSettings,
    *,
    schema_first: bool = False,
) -> bytes:
    """Encode an HFILE_DATA block holding ``records`` (key, Avro record), as Hudi's Java writer does.

    :param schema_text: the writer schema's JSON text exactly as the SCHEMA header carries it.
    :param schema_first: header order (Java's header map iterates in an order that varies per run;
        both are seen in Hudi's files).
    :returns: the framed block bytes.
    """
    cells = encode_records(records, schema_text)
    content = HFileContent(tuple(cells), ((SCHEMA_INFO, schema_text.encode("utf-8")),), ())
    return hfile_block_bytes(content, schema_text, instant_time, settings, schema_first=schema_first)


def hfile_block_bytes(
    content: HFileContent, schema_text: str, instant_time: str, settings: HFileSettings, *, schema_first: bool
) -> bytes:
    """Frame an HFile of ``content`` as an HFILE_DATA block (header INSTANT_TIME and SCHEMA)."""
    entries = [(HeaderKey.INSTANT_TIME, instant_time), (HeaderKey.SCHEMA, schema_text)]
    header = dict(reversed(entries) if schema_first else entries)
    return encode_block(BlockType.HFILE_DATA, header, write_hfile(content, settings))
