"""Codec for Hudi (table version 6) log files: blocks in, bytes out, and back.

A log file is a concatenation of blocks, each framed as::

    #HUDI# | long L | int format version (1) | int block type | header map | long C | content
           | footer map | long reverse pointer (= block size - 8)

with every integer big-endian. Appending a commit means appending blocks, so a crash can leave a
partial block at the end of a file; readers must skip such damage instead of failing, which is
why :func:`parse_log_bytes` re-synchronises on the next magic after any inconsistent block.

Data blocks carry Avro-encoded records (AVRO_DATA) or a whole parquet file (PARQUET_DATA); DELETE
blocks carry an Avro ``HoodieDeleteRecordList``; COMMAND blocks mark a rolled-back instant.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import logging
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import CorruptLogBlockError, SchemaError
from airflow_lake_provider.lake.format.avro_schema import (
    META_FIELDS,
    avro_to_arrow,
    avro_to_arrow_raw,
    parse_avro_json,
)

log = logging.getLogger(__name__)

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
AVRO_BLOCK_VERSION = 3
DELETE_BLOCK_VERSION = 3
ROLLBACK_COMMAND = "0"

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
# magic + length + version + type + header count + content length + footer count + reverse pointer
_MIN_BLOCK_SIZE = 6 + 8 + 4 + 4 + 4 + 8 + 4 + 8


class BlockType(IntEnum):
    """Log block types (ordinal written as the block type int)."""

    COMMAND = 0
    DELETE = 1
    CORRUPTED = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    """Header/footer metadata keys (ordinal written as the map key)."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


@dataclass(frozen=True)
class LogBlock:
    """One parsed log block.

    :param block_type: the block type.
    :param header: header metadata, in file order.
    :param footer: footer metadata (empty in everything Hudi writes).
    :param content: the raw content bytes.
    :param offset: byte offset of the block's magic in its file.
    :param size: total bytes the block occupies (magic through reverse pointer).
    :param source: the file (or label) the block came from, for error messages.
    """

    block_type: BlockType
    header: Mapping[HeaderKey, str]
    footer: Mapping[HeaderKey, str]
    content: bytes
    offset: int
    size: int
    source: str = ""

    @property
    def instant_time(self) -> str | None:
        """The INSTANT_TIME header, or ``None`` if absent.

        Every block Hudi writes has one; a block without it cannot be placed on the timeline, so
        readers skip it.
        """
        return self.header.get(HeaderKey.INSTANT_TIME)

    @property
    def target_instant_time(self) -> str | None:
        """The TARGET_INSTANT_TIME header (set on rollback command blocks), or ``None``."""
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @property
    def schema(self) -> dict[str, Any] | None:
        """The SCHEMA header parsed from JSON (a fresh dict per call), or ``None`` if absent.

        :raises CorruptLogBlockError: if the header is not valid JSON.
        """
        text = self.header.get(HeaderKey.SCHEMA)
        if text is None:
            return None
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CorruptLogBlockError(f"{self.location}: SCHEMA header is not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise CorruptLogBlockError(f"{self.location}: SCHEMA header is not a JSON object")
        return parsed

    @property
    def is_rollback(self) -> bool:
        """Whether this is a ROLLBACK command block."""
        return (
            self.block_type == BlockType.COMMAND
            and self.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == ROLLBACK_COMMAND
        )

    @property
    def location(self) -> str:
        """``<source> offset <n>``, for messages."""
        return f"{self.source or '<bytes>'} offset {self.offset}"


@dataclass(frozen=True)
class DeleteRecord:
    """One entry of a DELETE block.

    :param record_key: the record key to delete.
    :param partition_path: the partition path of the record.
    :param ordering_value: the ordering (precombine) value, or ``None``.
    :param ordering_type: the Avro union branch for ``ordering_value``: one of
        :data:`ORDERING_TYPES` other than ``"null"``; ``None`` writes the null branch.
    """

    record_key: str
    partition_path: str
    ordering_value: object = None
    ordering_type: str | None = None


# Branches of HoodieDeleteRecord.orderingVal, in union order: the index is what is written.
ORDERING_TYPES: tuple[str, ...] = (
    "null",
    "int",
    "long",
    "float",
    "double",
    "bytes",
    "string",
    "decimal",
    "date",
    "time-millis",
    "time-micros",
    "timestamp-millis",
    "timestamp-micros",
)
_ORDERING_INDEX = {name: i for i, name in enumerate(ORDERING_TYPES)}
_ORDERING_DECIMAL_PRECISION = 30
_ORDERING_DECIMAL_SCALE = 15


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------


class _BadBlock(Exception):
    """Internal: the bytes at an offset are not a consistent block."""


def read_log_blocks(path: str | Path) -> list[LogBlock]:
    """Parse every intact block of a log file.

    Damaged regions (bad magic, length, version or reverse pointer, or a block running past the
    end of the file after a crash mid-append) are logged as warnings and skipped.

    :param path: the log file.
    :returns: the blocks in file order.
    :raises CorruptLogBlockError: if the file cannot be opened or read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CorruptLogBlockError(f"cannot read log file {path}: {exc}") from exc
    return parse_log_bytes(data, str(path))


def parse_log_bytes(data: bytes, source: str) -> list[LogBlock]:
    """Parse the blocks of a log file held in memory, skipping damaged regions with a warning.

    :param data: the file content.
    :param source: a label (usually the path) used in log messages and on the blocks.
    :returns: the intact blocks in order.
    """
    blocks: list[LogBlock] = []
    pos = 0
    end = len(data)
    while pos < end:
        if data.startswith(MAGIC, pos):
            try:
                block = _parse_block(data, pos, source)
            except _BadBlock as exc:
                log.warning("log file %s: skipping corrupt block at offset %s: %s", source, pos, exc)
            else:
                blocks.append(block)
                pos += block.size
                continue
        else:
            log.warning("log file %s: no block magic at offset %s, scanning forward", source, pos)
        nxt = data.find(MAGIC, pos + 1)
        if nxt < 0:
            if pos < end:
                log.warning("log file %s: dropping %s trailing bytes after offset %s", source, end - pos, pos)
            break
        pos = nxt
    return blocks


def _parse_block(data: bytes, pos: int, source: str) -> LogBlock:
    end = len(data)
    if end - pos < _MIN_BLOCK_SIZE:
        raise _BadBlock(f"only {end - pos} bytes left, shorter than any block (truncated)")
    (length,) = _LONG.unpack_from(data, pos + 6)
    block_end = pos + 14 + length
    if length < _MIN_BLOCK_SIZE - 14:
        raise _BadBlock(f"block length {length} is too small")
    if block_end > end:
        raise _BadBlock(f"block length {length} runs past end of file ({end} bytes; truncated)")
    (version,) = _INT.unpack_from(data, pos + 14)
    if version != LOG_FORMAT_VERSION:
        raise _BadBlock(f"unsupported log format version {version}")
    (type_ord,) = _INT.unpack_from(data, pos + 18)
    try:
        block_type = BlockType(type_ord)
    except ValueError:
        raise _BadBlock(f"unknown block type {type_ord}") from None
    header, cur = _parse_metadata(data, pos + 22, block_end, "header")
    if cur + 8 > block_end:
        raise _BadBlock("content length runs past the block")
    (content_len,) = _LONG.unpack_from(data, cur)
    cur += 8
    if content_len < 0 or cur + content_len > block_end:
        raise _BadBlock(f"content length {content_len} runs past the block")
    content = data[cur : cur + content_len]
    cur += content_len
    footer, cur = _parse_metadata(data, cur, block_end, "footer")
    if cur + 8 != block_end:
        raise _BadBlock(f"{block_end - cur - 8} unexplained bytes before the reverse pointer")
    (reverse,) = _LONG.unpack_from(data, cur)
    if reverse != block_end - 8 - pos:
        raise _BadBlock(f"reverse pointer {reverse} does not match block size {block_end - pos}")
    return LogBlock(block_type, header, footer, content, pos, block_end - pos, source)


def _parse_metadata(data: bytes, cur: int, limit: int, what: str) -> tuple[dict[HeaderKey, str], int]:
    if cur + 4 > limit:
        raise _BadBlock(f"{what} runs past the block")
    (count,) = _INT.unpack_from(data, cur)
    cur += 4
    if count < 0 or count * 8 > limit - cur:
        raise _BadBlock(f"{what} entry count {count} is impossible")
    out: dict[HeaderKey, str] = {}
    for _ in range(count):
        if cur + 8 > limit:
            raise _BadBlock(f"{what} entry runs past the block")
        key_ord, value_len = struct.unpack_from(">ii", data, cur)
        cur += 8
        if value_len < 0 or cur + value_len > limit:
            raise _BadBlock(f"{what} value length {value_len} runs past the block")
        try:
            key = HeaderKey(key_ord)
            value = data[cur : cur + value_len].decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadBlock(f"bad {what} entry (key {key_ord}): {exc}") from None
        out[key] = value
        cur += value_len
    return out, cur


def _encode_metadata(meta: Mapping[HeaderKey, str]) -> bytes:
    parts = [_INT.pack(len(meta))]
    for key, value in meta.items():
        raw = value.encode("utf-8")
        parts.append(struct.pack(">ii", int(key), len(raw)))
        parts.append(raw)
    return b"".join(parts)


def encode_block(block_type: BlockType, header: Mapping[HeaderKey, str], content: bytes) -> bytes:
    """Frame one block (format version 1, empty footer), header entries in the given order.

    :param block_type: the block type.
    :param header: header metadata.
    :param content: the content bytes.
    :returns: the complete block bytes, magic through reverse pointer.
    """
    body = b"".join(
        (
            _INT.pack(LOG_FORMAT_VERSION),
            _INT.pack(int(block_type)),
            _encode_metadata(header),
            _LONG.pack(len(content)),
            content,
            _encode_metadata({}),
        )
    )
    length = len(body) + 8
    return b"".join((MAGIC, _LONG.pack(length), body, _LONG.pack(6 + 8 + length - 8)))


def append_blocks(path: str | Path, blocks: Sequence[bytes]) -> tuple[int, int]:
    """Append encoded blocks to a log file (created if missing) and fsync it.

    :param path: the log file.
    :param blocks: complete block bytes, e.g. from :func:`avro_data_block`.
    :returns: (file size before the append = offset of the first new block, new file size).
    """
    target = Path(path)
    created = not target.exists()
    payload = b"".join(blocks)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        before = os.fstat(fd).st_size
        view = memoryview(payload)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
        after = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if created:
        # Make the new directory entry durable too, not just the bytes.
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return before, after


# --------------------------------------------------------------------------------------------
# Avro primitives (for DELETE block content and the in-memory container)
# --------------------------------------------------------------------------------------------


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _avro_bytes(raw: bytes) -> bytes:
    return _zigzag(len(raw)) + raw


class _Reader:
    """Cursor over Avro binary data; raises CorruptLogBlockError on overrun."""

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.pos = 0
        self.where = where

    def long(self) -> int:
        result = 0
        shift = 0
        while True:
            if self.pos >= len(self.data):
                raise CorruptLogBlockError(f"{self.where}: Avro varint runs past the end")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 63:
                raise CorruptLogBlockError(f"{self.where}: Avro varint longer than 10 bytes")
        return (result >> 1) ^ -(result & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptLogBlockError(f"{self.where}: {n} bytes at {self.pos} run past the end")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def bytes_(self) -> bytes:
        return self.take(self.long())

    def string(self) -> str:
        raw = self.bytes_()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptLogBlockError(f"{self.where}: invalid UTF-8 string: {exc}") from None


# --------------------------------------------------------------------------------------------
# DELETE blocks
# --------------------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DATE = dt.date(1970, 1, 1)
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def ordering_type_for(arrow_type: pa.DataType) -> str:
    """Return the ``orderingVal`` union branch matching an ordering column's Arrow type.

    Delete entries must carry the ordering column's own type (hudi-rs silently ignores, e.g., an
    int 0 against a long column).

    :param arrow_type: the ordering (precombine) column type.
    :raises SchemaError: if no branch fits.
    """
    t = arrow_type
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_time32(t) and t.unit == "ms":
        return "time-millis"
    if pa.types.is_time64(t) and t.unit == "us":
        return "time-micros"
    if pa.types.is_timestamp(t) and t.unit == "ms":
        return "timestamp-millis"
    if pa.types.is_timestamp(t) and t.unit == "us":
        return "timestamp-micros"
    raise SchemaError(f"ordering column type {t} has no HoodieDeleteRecord orderingVal branch")


def _encode_ordering(rec: DeleteRecord) -> bytes:
    kind = rec.ordering_type
    value = rec.ordering_value
    if kind is None or kind == "null":
        if value is not None:
            raise SchemaError(
                f"delete of key {rec.record_key!r}: ordering_value {value!r} needs an ordering_type"
            )
        return _zigzag(0)
    if kind not in _ORDERING_INDEX:
        raise SchemaError(
            f"delete of key {rec.record_key!r}: ordering_type {kind!r} is not one of {ORDERING_TYPES}"
        )
    if value is None:
        return _zigzag(0)
    head = _zigzag(_ORDERING_INDEX[kind])
    try:
        return head + _encode_ordering_value(kind, value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise SchemaError(
            f"delete of key {rec.record_key!r}: ordering_value {value!r} does not fit {kind!r}: {exc}"
        ) from exc


def _checked_int(value: object, bounds: tuple[int, int]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError("out of range")
    return value


def _encode_ordering_value(kind: str, value: object) -> bytes:
    if kind == "int":
        return _zigzag(_checked_int(value, _INT32))
    if kind == "long":
        return _zigzag(_checked_int(value, _INT64))
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a float, got {type(value).__name__}")
        return struct.pack("<f" if kind == "float" else "<d", float(value))
    if kind == "bytes":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes, got {type(value).__name__}")
        return _avro_bytes(bytes(value))
    if kind == "string":
        if not isinstance(value, str):
            raise TypeError(f"expected str, got {type(value).__name__}")
        return _avro_bytes(value.encode("utf-8"))
    if kind == "decimal":
        return _avro_bytes(_decimal_to_bytes(value))
    if kind == "date":
        days = (value - _EPOCH_DATE).days if isinstance(value, dt.date) else value
        return _zigzag(_checked_int(days, _INT32))
    if kind in ("time-millis", "time-micros"):
        if isinstance(value, dt.time):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            value = micros // 1000 if kind == "time-millis" else micros
        return _zigzag(_checked_int(value, _INT32 if kind == "time-millis" else _INT64))
    # timestamp-millis / timestamp-micros
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        delta = aware - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        value = micros // 1000 if kind == "timestamp-millis" else micros
    return _zigzag(_checked_int(value, _INT64))


def _decimal_to_bytes(value: object) -> bytes:
    if isinstance(value, bool) or not isinstance(value, (decimal.Decimal, int)):
        raise TypeError(f"expected a Decimal, got {type(value).__name__}")
    scaled = decimal.Decimal(value).scaleb(_ORDERING_DECIMAL_SCALE)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"more than {_ORDERING_DECIMAL_SCALE} decimal places")
    unscaled = int(scaled)
    if abs(unscaled) >= 10**_ORDERING_DECIMAL_PRECISION:
        raise ValueError(f"more than {_ORDERING_DECIMAL_PRECISION} digits")
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(size, "big", signed=True)


def _decode_ordering(reader: _Reader) -> tuple[object, str | None]:
    index = reader.long()
    if not 0 <= index < len(ORDERING_TYPES):
        raise CorruptLogBlockError(f"{reader.where}: orderingVal union index {index} out of range")
    kind = ORDERING_TYPES[index]
    if kind == "null":
        return None, None
    if kind in ("int", "long"):
        return reader.long(), kind
    if kind == "float":
        return struct.unpack("<f", reader.take(4))[0], kind
    if kind == "double":
        return struct.unpack("<d", reader.take(8))[0], kind
    if kind == "bytes":
        return reader.bytes_(), kind
    if kind == "string":
        return reader.string(), kind
    if kind == "decimal":
        unscaled = int.from_bytes(reader.bytes_(), "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-_ORDERING_DECIMAL_SCALE), kind
    raw = reader.long()
    try:
        if kind == "date":
            return _EPOCH_DATE + dt.timedelta(days=raw), kind
        if kind in ("time-millis", "time-micros"):
            micros = raw * 1000 if kind == "time-millis" else raw
            secs, micro = divmod(micros, 1_000_000)
            return dt.time(secs // 3600, secs // 60 % 60, secs % 60, micro), kind
        micros = raw * 1000 if kind == "timestamp-millis" else raw
        return _EPOCH + dt.timedelta(microseconds=micros), kind
    except (OverflowError, ValueError):
        # Out of Python's datetime range: keep the raw number rather than fail the block.
        return raw, kind


def _check_header_schema(avro_schema: Mapping[str, Any], what: str) -> dict[str, Any]:
    schema = parse_avro_json(avro_schema)
    names = [f.get("name") for f in schema.get("fields", [])]
    missing = [m for m in META_FIELDS if m not in names]
    if missing:
        raise SchemaError(f"{what}: the block schema must include the Hudi meta fields; missing {missing}")
    return schema


def _schema_json(schema: Mapping[str, Any]) -> str:
    # Compact, non-ASCII-escaped JSON: the same text Java's Schema.toString() produces.
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


def encode_delete_content(records: Sequence[DeleteRecord]) -> bytes:
    """Encode the content of a DELETE block (version 3 + length-prefixed HoodieDeleteRecordList).

    :param records: the entries.
    :returns: the content bytes.
    :raises SchemaError: if an ordering value does not fit its declared type.
    """
    parts: list[bytes] = []
    if records:
        parts.append(_zigzag(len(records)))
        for rec in records:
            # recordKey and partitionPath are ["null", "string"]: branch 1 then the string.
            parts.append(b"\x02" + _avro_bytes(rec.record_key.encode("utf-8")))
            parts.append(b"\x02" + _avro_bytes(rec.partition_path.encode("utf-8")))
            parts.append(_encode_ordering(rec))
    parts.append(_zigzag(0))
    payload = b"".join(parts)
    return _INT.pack(DELETE_BLOCK_VERSION) + _INT.pack(len(payload)) + payload


def delete_block(records: Sequence[DeleteRecord], instant_time: str, avro_schema: Mapping[str, Any]) -> bytes:
    """Encode a complete DELETE block.

    :param records: the keys to delete.
    :param instant_time: the deltacommit instant writing the block.
    :param avro_schema: the table's writer schema, including the meta fields.
    :returns: the block bytes.
    :raises SchemaError: if the schema lacks meta fields or an ordering value is ill-typed.
    """
    schema = _check_header_schema(avro_schema, f"delete block at {instant_time}")
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: _schema_json(schema)}
    return encode_block(BlockType.DELETE, header, encode_delete_content(records))


def decode_delete_block(block: LogBlock) -> list[DeleteRecord]:
    """Decode the entries of a DELETE block.

    :param block: a block of type DELETE.
    :returns: the entries in order.
    :raises CorruptLogBlockError: if the content cannot be decoded.
    """
    where = block.location
    _expect_type(block, BlockType.DELETE)
    content = block.content
    if len(content) < 8:
        raise CorruptLogBlockError(f"{where}: delete block content of {len(content)} bytes is too short")
    version, length = struct.unpack_from(">ii", content, 0)
    if version != DELETE_BLOCK_VERSION:
        raise CorruptLogBlockError(f"{where}: unsupported delete block version {version}")
    if length < 0 or 8 + length > len(content):
        raise CorruptLogBlockError(f"{where}: delete payload length {length} runs past the content")
    reader = _Reader(content[8 : 8 + length], where)
    out: list[DeleteRecord] = []
    for _ in _array_items(reader):
        key = _nullable_string(reader)
        partition = _nullable_string(reader)
        value, kind = _decode_ordering(reader)
        out.append(DeleteRecord(key or "", partition or "", value, kind))
    return out


def _array_items(reader: _Reader) -> Iterator[None]:
    """Yield once per item of an Avro array (blocks with negative counts carry a byte size)."""
    while True:
        count = reader.long()
        if count == 0:
            return
        if count < 0:
            count = -count
            reader.long()
        for _ in range(count):
            yield None


def _nullable_string(reader: _Reader) -> str | None:
    branch = reader.long()
    if branch == 0:
        return None
    if branch != 1:
        raise CorruptLogBlockError(f"{reader.where}: [null, string] union index {branch} out of range")
    return reader.string()


def _expect_type(block: LogBlock, expected: BlockType) -> None:
    if block.block_type != expected:
        raise CorruptLogBlockError(
            f"{block.location}: expected a {expected.name} block, got {block.block_type.name}"
        )


# --------------------------------------------------------------------------------------------
# COMMAND and PARQUET blocks
# --------------------------------------------------------------------------------------------


def rollback_command_block(instant_time: str, target_instant_time: str) -> bytes:
    """Encode a ROLLBACK command block.

    :param instant_time: the rollback instant.
    :param target_instant_time: the instant whose blocks are rolled back.
    :returns: the block bytes.
    """
    header = {
        HeaderKey.INSTANT_TIME: instant_time,
        HeaderKey.TARGET_INSTANT_TIME: target_instant_time,
        HeaderKey.COMMAND_BLOCK_TYPE: ROLLBACK_COMMAND,
    }
    return encode_block(BlockType.COMMAND, header, b"")


def decode_parquet_block(block: LogBlock) -> pa.Table:
    """Decode a PARQUET_DATA block (its content is a whole parquet file).

    When the block has a SCHEMA header naming the same columns, the table is cast to
    ``avro_to_arrow(block.schema)`` so parquet and Avro blocks give identical types (e.g. list
    items are named ``item``, not parquet's ``element``).

    :param block: a block of type PARQUET_DATA.
    :returns: the rows of the block.
    :raises CorruptLogBlockError: if the content is not a readable parquet file.
    """
    _expect_type(block, BlockType.PARQUET_DATA)
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
    schema = _check_header_schema(avro_schema, f"data block at {instant_time}")
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
    parts = [_INT.pack(AVRO_BLOCK_VERSION), _INT.pack(len(ends))]
    start = 0
    for stop in ends:
        parts.append(_INT.pack(stop - start))
        parts.append(encoded[start:stop])
        start = stop
    content = b"".join(parts)
    del encoded
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: _schema_json(schema)}
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
            try:
                col = _cast_table(pa.table({fld.name: col}), pa.schema([fld])).column(0)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SchemaError(f"field {fld.name!r}: cannot cast {col.type} to {fld.type}: {exc}") from exc
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
    _expect_type(block, BlockType.AVRO_DATA)
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
            _zigzag(2),
            _avro_bytes(b"avro.schema"),
            _avro_bytes(_schema_json(wrapper).encode("utf-8")),
            _avro_bytes(b"avro.codec"),
            _avro_bytes(b"null"),
            _zigzag(0),
            _CONTAINER_SYNC,
            _zigzag(count),
            _zigzag(len(payload)),
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
        (length,) = _INT.unpack_from(content, pos)
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
