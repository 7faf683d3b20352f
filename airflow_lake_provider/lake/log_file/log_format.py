"""Framing of Hudi (table version 6) log files: blocks in, bytes out, and back.

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

import json
import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from airflow_lake_provider.lake.errors import CorruptLogBlockError, SchemaError
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS, parse_avro_json

log = logging.getLogger(__name__)

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
AVRO_BLOCK_VERSION = 3
DELETE_BLOCK_VERSION = 3
ROLLBACK_COMMAND = "0"

INT64 = struct.Struct(">q")
INT32 = struct.Struct(">i")
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
        except (json.JSONDecodeError, RecursionError) as exc:
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


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------


class _BadBlock(Exception):
    """Internal: the bytes at an offset are not a consistent block."""


def parse_log_bytes(data: bytes, source: str, damage: list[str] | None = None) -> list[LogBlock]:
    """Parse the blocks of a log file held in memory, skipping damaged regions with a warning.

    :param data: the file content.
    :param source: a label (usually the path) used in log messages and on the blocks.
    :param damage: if given, receives one line per damaged region (``offset <n>: <what>``).
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
                if damage is not None:
                    damage.append(f"offset {pos}: {exc}")
            else:
                blocks.append(block)
                pos += block.size
                continue
        else:
            log.warning("log file %s: no block magic at offset %s, scanning forward", source, pos)
            if damage is not None:
                damage.append(f"offset {pos}: no block magic")
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
    (length,) = INT64.unpack_from(data, pos + 6)
    block_end = pos + 14 + length
    if length < _MIN_BLOCK_SIZE - 14:
        raise _BadBlock(f"block length {length} is too small")
    if block_end > end:
        raise _BadBlock(f"block length {length} runs past end of file ({end} bytes; truncated)")
    (version,) = INT32.unpack_from(data, pos + 14)
    if version != LOG_FORMAT_VERSION:
        raise _BadBlock(f"unsupported log format version {version}")
    (type_ord,) = INT32.unpack_from(data, pos + 18)
    try:
        block_type = BlockType(type_ord)
    except ValueError:
        raise _BadBlock(f"unknown block type {type_ord}") from None
    header, cur = _parse_metadata(data, pos + 22, block_end, "header")
    if cur + 8 > block_end:
        raise _BadBlock("content length runs past the block")
    (content_len,) = INT64.unpack_from(data, cur)
    cur += 8
    if content_len < 0 or cur + content_len > block_end:
        raise _BadBlock(f"content length {content_len} runs past the block")
    content = data[cur : cur + content_len]
    cur += content_len
    footer, cur = _parse_metadata(data, cur, block_end, "footer")
    if cur + 8 != block_end:
        raise _BadBlock(f"{block_end - cur - 8} unexplained bytes before the reverse pointer")
    (reverse,) = INT64.unpack_from(data, cur)
    if reverse != block_end - 8 - pos:
        raise _BadBlock(f"reverse pointer {reverse} does not match block size {block_end - pos}")
    return LogBlock(block_type, header, footer, content, pos, block_end - pos, source)


def _parse_metadata(data: bytes, cur: int, limit: int, what: str) -> tuple[dict[HeaderKey, str], int]:
    if cur + 4 > limit:
        raise _BadBlock(f"{what} runs past the block")
    (count,) = INT32.unpack_from(data, cur)
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
    parts = [INT32.pack(len(meta))]
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
            INT32.pack(LOG_FORMAT_VERSION),
            INT32.pack(int(block_type)),
            _encode_metadata(header),
            INT64.pack(len(content)),
            content,
            _encode_metadata({}),
        )
    )
    length = len(body) + 8
    return b"".join((MAGIC, INT64.pack(length), body, INT64.pack(6 + 8 + length - 8)))


def expect_type(block: LogBlock, expected: BlockType) -> None:
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


def check_header_schema(avro_schema: Mapping[str, Any], what: str) -> dict[str, Any]:
    schema = parse_avro_json(avro_schema)
    names = [f.get("name") for f in schema.get("fields", [])]
    missing = [m for m in META_FIELDS if m not in names]
    if missing:
        raise SchemaError(f"{what}: the block schema must include the Hudi meta fields; missing {missing}")
    return schema


def schema_json(schema: Mapping[str, Any]) -> str:
    # Compact, non-ASCII-escaped JSON: the same text Java's Schema.toString() produces.
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
