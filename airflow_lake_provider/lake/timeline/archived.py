"""The archived timeline of a v6 table: ``.hoodie/archived/.commits_.archive.<n>_1-0-1`` files.

Each file is a Hudi log file whose AVRO_DATA blocks hold ``HoodieArchivedMetaEntry`` records: the
instant's time, action and state, and its metadata as an Avro record (commit metadata JSON is
converted to Hudi's ``HoodieCommitMetadata`` record, as Java archives it).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro

from airflow_lake_provider.lake.errors import CorruptLogBlockError
from airflow_lake_provider.lake.log_file.log_format import (
    AVRO_BLOCK_VERSION,
    INT32,
    BlockType,
    HeaderKey,
    LogBlock,
    encode_block,
    expect_type,
)
from airflow_lake_provider.lake.timeline import avro as timeline_avro

ARCHIVE_FOLDER = "archived"
_ARCHIVE_RE = re.compile(r"^\.commits_\.archive\.(\d+)_[0-9]+-[0-9]+-[0-9]+$")


def archive_file_name(version: int) -> str:
    """The name of archive file ``version`` (Java's write token for archive files is ``1-0-1``)."""
    return f".commits_.archive.{version}_1-0-1"


def archive_version(name: str) -> int | None:
    """The version of an archive file name, or ``None`` for any other name."""
    match = _ARCHIVE_RE.match(name)
    return int(match[1]) if match else None


class _Mismatch(Exception):
    """Internal: a value does not fit a schema branch."""


def conform(schema: Any, value: Any, named: Mapping[str, Any] | None = None) -> Any:
    """``value`` (parsed JSON) shaped to an Avro schema: known fields only, defaults for missing ones,
    the first union branch that fits. Raises ``ValueError`` naming the field that fits nowhere."""
    names = dict(named or {})
    _collect_named(schema, names)
    try:
        return _conform(schema, value, names, "")
    except _Mismatch as exc:
        raise ValueError(f"value does not fit the Avro schema at {exc}") from None


def _collect_named(node: Any, names: dict[str, Any]) -> None:
    if isinstance(node, list):
        for n in node:
            _collect_named(n, names)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed") and "name" in node:
            names.setdefault(node["name"], node)
        for f in node.get("fields", ()):
            _collect_named(f["type"], names)
        for key in ("items", "values"):
            if key in node:
                _collect_named(node[key], names)


_PRIMITIVES = {
    "string": lambda v: v if isinstance(v, str) else _fail(),
    "boolean": lambda v: v if isinstance(v, bool) else _fail(),
    "int": lambda v: v if isinstance(v, int) and not isinstance(v, bool) else _fail(),
    "long": lambda v: v if isinstance(v, int) and not isinstance(v, bool) else _fail(),
    "float": lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else _fail(),
    "double": lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else _fail(),
    "bytes": lambda v: v if isinstance(v, bytes) else _fail(),
    "null": lambda v: v if v is None else _fail(),
}


def _fail() -> Any:
    raise _Mismatch("")


def _conform(schema: Any, value: Any, names: Mapping[str, Any], where: str) -> Any:
    if isinstance(schema, str):
        if schema in names:
            return _conform(names[schema], value, names, where)
        try:
            return _PRIMITIVES[schema](value)
        except _Mismatch:
            raise _Mismatch(f"{where or '<root>'}: {value!r} is not {schema}") from None
    if isinstance(schema, list):
        if value is None and "null" in schema:
            return None
        for branch in schema:
            if branch == "null":
                continue
            try:
                return _conform(branch, value, names, where)
            except _Mismatch:
                continue
        raise _Mismatch(f"{where or '<root>'}: {value!r} fits no branch of {schema}")
    kind = schema["type"]
    if kind == "record":
        if not isinstance(value, Mapping):
            raise _Mismatch(f"{where or '<root>'}: {value!r} is not a record")
        out = {}
        for f in schema["fields"]:
            got = value.get(f["name"])
            if got is None and "default" in f:
                out[f["name"]] = f["default"]
            else:
                out[f["name"]] = _conform(f["type"], got, names, f"{where}.{f['name']}".lstrip("."))
        return out
    if kind == "array":
        if not isinstance(value, list):
            raise _Mismatch(f"{where}: {value!r} is not an array")
        return [_conform(schema["items"], v, names, f"{where}[]") for v in value]
    if kind == "map":
        if not isinstance(value, Mapping):
            raise _Mismatch(f"{where}: {value!r} is not a map")
        return {str(k): _conform(schema["values"], v, names, f"{where}[{k}]") for k, v in value.items()}
    if kind == "enum":
        if value not in schema["symbols"]:
            raise _Mismatch(f"{where}: {value!r} is not one of {schema['symbols']}")
        return value
    return _conform(kind, value, names, where)  # a primitive with a logical type


def commit_metadata_record(metadata_json: bytes, replace: bool) -> dict[str, Any]:
    """The ``HoodieCommitMetadata`` (or ``HoodieReplaceCommitMetadata``) record of a JSON commit file."""
    full_name = timeline_avro.REPLACE_COMMIT_METADATA if replace else timeline_avro.COMMIT_METADATA
    return conform(timeline_avro.schema(full_name), json.loads(metadata_json or b"{}"))


def encode_archive_block(entries: Sequence[Mapping[str, Any]], instant_time: str) -> bytes:
    """An AVRO_DATA block of ``HoodieArchivedMetaEntry`` records (content version 3)."""
    schema = timeline_avro.schema(timeline_avro.ARCHIVED_META_ENTRY)
    parts = [INT32.pack(AVRO_BLOCK_VERSION), INT32.pack(len(entries))]
    for entry in entries:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, dict(entry))
        parts += [INT32.pack(buf.tell()), buf.getvalue()]
    plain = {k: v for k, v in schema.items() if not k.startswith("__")}  # fastavro's parse hints
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: json.dumps(plain)}
    return encode_block(BlockType.AVRO_DATA, header, b"".join(parts))


def decode_archive_block(block: LogBlock) -> list[dict[str, Any]]:
    """The ``HoodieArchivedMetaEntry`` records of an archive block, under the block's own schema."""
    expect_type(block, BlockType.AVRO_DATA)
    try:
        schema = fastavro.parse_schema(json.loads(block.header[HeaderKey.SCHEMA]))
        data = io.BytesIO(block.content)
        (_version,) = INT32.unpack(data.read(4))
        (count,) = INT32.unpack(data.read(4))
        out = []
        for _ in range(count):
            (length,) = INT32.unpack(data.read(4))
            out.append(fastavro.schemaless_reader(io.BytesIO(data.read(length)), schema, None))
    except Exception as exc:  # fastavro and struct raise many types for damaged bytes
        raise CorruptLogBlockError(f"{block.location}: archived timeline block unreadable: {exc}") from exc
    return out
