"""The record keys of log blocks alone, for the write's key lookup in log files.

Avro data blocks: when the writer schema starts with Hudi's first three meta fields (as every Hudi
writer's does), only those are walked, for the records of all the blocks at once (numpy), and only
the key is copied out; other blocks are decoded whole (``data_block``). Parquet data blocks: the key
column alone.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import CorruptLogBlockError
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS
from airflow_lake_provider.lake.format.base_file import RECORD_KEY
from airflow_lake_provider.lake.log_file.avro_decode import decode_avro_data_block
from airflow_lake_provider.lake.log_file.log_format import (
    AVRO_BLOCK_VERSION,
    INT32,
    BlockType,
    HeaderKey,
    LogBlock,
    expect_type,
)


def parquet_block_record_keys(block: LogBlock) -> pa.Array:
    """The ``_hoodie_record_key`` column of a PARQUET_DATA block, read alone (nulls if it has none).

    :raises CorruptLogBlockError: if the content is not a readable parquet file.
    """
    expect_type(block, BlockType.PARQUET_DATA)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(block.content))
        if RECORD_KEY not in parquet.schema_arrow.names:
            return pa.nulls(parquet.metadata.num_rows, pa.string())
        column = parquet.read(columns=[RECORD_KEY], use_threads=False).column(0)
    except (pa.ArrowException, OSError) as exc:
        raise CorruptLogBlockError(f"{block.location}: parquet block unreadable: {exc}") from exc
    return column.combine_chunks().cast(pa.string())


def avro_block_record_keys(block: LogBlock) -> pa.Array:
    """The ``_hoodie_record_key`` of every record of an AVRO_DATA block (null where a record has none).

    :raises CorruptLogBlockError: if the block is malformed.
    """
    return avro_blocks_record_keys([block])[0]


def avro_blocks_record_keys(blocks: Sequence[LogBlock]) -> list[pa.Array]:
    """The ``_hoodie_record_key`` of every record of each AVRO_DATA block (null where a record has none).

    When a writer schema starts with Hudi's first three meta fields (as every Hudi writer's does),
    only those are walked, for all the blocks' records at once (numpy), and only the key is copied
    out: the key lookup of a write reads every log block of the groups it searches and needs nothing
    else. A block of another schema, or whose meta fields are not in the usual one-byte form, is
    walked record by record, or decoded whole.

    :raises CorruptLogBlockError: if a block is malformed.
    """
    out: list[pa.Array | None] = [None] * len(blocks)
    # Blocks of one plan (one table: all of them) walked together.
    by_plan: dict[tuple[tuple[bool, int], ...], list[int]] = {}
    for at, block in enumerate(blocks):
        expect_type(block, BlockType.AVRO_DATA)
        text = block.header.get(HeaderKey.SCHEMA)
        plan = _meta_prefix_plan(text) if text is not None else None
        if plan is None:
            table = decode_avro_data_block(block)
            keys = table.column(RECORD_KEY) if RECORD_KEY in table.column_names else None
            out[at] = pa.nulls(table.num_rows, pa.string()) if keys is None else _strings(keys)
        else:
            by_plan.setdefault(plan, []).append(at)
    for plan, members in by_plan.items():
        keys = _keys_vectorized([blocks[at] for at in members], plan)
        for at, found in zip(members, keys, strict=True):
            out[at] = found if found is not None else _keys_one_by_one(blocks[at], plan)
    return [keys if keys is not None else pa.array([], pa.string()) for keys in out]


def _strings(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    flat = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return flat.cast(pa.string())


def _record_count(block: LogBlock) -> int:
    where = block.location
    end = len(block.content)
    if end < 8:
        raise CorruptLogBlockError(f"{where}: data block content of {end} bytes is too short")
    version, count = struct.unpack_from(">ii", block.content, 0)
    if version != AVRO_BLOCK_VERSION:
        raise CorruptLogBlockError(f"{where}: unsupported data block version {version}")
    if count < 0 or count * 4 > end - 8:
        raise CorruptLogBlockError(f"{where}: impossible record count {count}")
    return int(count)


def _record_starts(block: LogBlock) -> list[int]:
    """Offsets in the content of each record's datum."""
    where = block.location
    content = block.content
    end = len(content)
    starts: list[int] = []
    pos = 8
    unpack = INT32.unpack_from
    for i in range(_record_count(block)):
        if pos + 4 > end:
            raise CorruptLogBlockError(f"{where}: record {i} length runs past the block")
        (length,) = unpack(content, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptLogBlockError(f"{where}: record {i} of {length} bytes runs past the block")
        starts.append(pos)
        pos += length
    return starts


# Blocks walked side by side (one numpy step per record) while at least this many still have
# records; the rest record by record (a numpy step costs what a few dozen records do).
_SIDE_BY_SIDE = 64


def _all_record_starts(
    buffer: bytes, data: np.ndarray, heads: np.ndarray, ends: np.ndarray, counts: np.ndarray
) -> np.ndarray | None:
    """The offsets in ``buffer`` (blocks' contents joined; block i's from ``heads[i]`` to ``ends[i]``)
    of every record's datum, block after block; None where a record length is out of place (the
    walk of that block alone names the damage)."""
    starts = np.empty(int(counts.sum()), np.int64)
    slot = np.cumsum(counts) - counts  # where each block's next start goes
    pos = heads + 8  # each block's next record length
    left = counts.copy()
    active = np.flatnonzero(left > 0)
    while len(active) >= _SIDE_BY_SIDE:
        at = pos[active]
        if np.any(at + 4 > ends[active]):
            return None
        length = (
            (data[at].astype(np.int64) << 24)
            | (data[at + 1].astype(np.int64) << 16)
            | (data[at + 2].astype(np.int64) << 8)
            | data[at + 3]
        )
        begin = at + 4
        if np.any(length >= 1 << 31) or np.any(begin + length > ends[active]):
            return None
        starts[slot[active]] = begin
        slot[active] += 1
        pos[active] = begin + length
        left[active] -= 1
        active = active[left[active] > 0]
    unpack = INT32.unpack_from
    for block in active.tolist():
        cur, end, index = int(pos[block]), int(ends[block]), int(slot[block])
        for _ in range(int(left[block])):
            if cur + 4 > end:
                return None
            (length,) = unpack(buffer, cur)
            cur += 4
            if length < 0 or cur + length > end:
                return None
            starts[index] = cur
            index += 1
            cur += length
    return starts


def _keys_vectorized(blocks: Sequence[LogBlock], plan: tuple[tuple[bool, int], ...]) -> list[pa.Array | None]:
    """Each block's keys, walking the meta fields of all records at once; None for a block where a
    union index or string length is not one byte (the walk one by one reads it)."""
    counts = np.array([_record_count(b) for b in blocks], np.int64)
    total = int(counts.sum())
    if total == 0:
        return [pa.array([], pa.string()) for _ in blocks]
    buffer = b"".join(b.content for b in blocks)
    data = np.frombuffer(buffer, np.uint8)
    sizes = np.array([len(b.content) for b in blocks], np.int64)
    heads = np.cumsum(sizes) - sizes
    ends = heads + sizes
    pos = _all_record_starts(buffer, data, heads, ends, counts)
    if pos is None:
        for block in blocks:
            _record_starts(block)  # raises, naming the block and record
        raise AssertionError("a record length was out of place, yet every block walks")
    # A record ends where the next one's length begins (the last one at its block's end).
    stop = np.empty(total, np.int64)
    stop[:-1] = pos[1:] - 4
    nonempty = counts > 0
    stop[(np.cumsum(counts) - 1)[nonempty]] = ends[nonempty]
    bad = np.zeros(total, bool)
    is_string = np.ones(total, bool)
    key_start = key_size = np.zeros(total, np.int64)
    for is_union, string_at in plan:
        is_string = np.ones(total, bool)
        if is_union:
            bad |= pos >= stop
            byte = data[np.minimum(pos, len(data) - 1)]
            bad |= (byte != 0) & (byte != 2)
            is_string = (byte >> 1) == string_at
            pos = pos + 1
        bad |= is_string & (pos >= stop)
        byte = data[np.minimum(pos, len(data) - 1)].astype(np.int64)
        bad |= is_string & ((byte >= 0x80) | (byte & 1 == 1))  # one byte, not negative
        size = np.where(is_string, byte >> 1, 0)
        key_start = pos + is_string
        key_size = size
        pos = key_start + size
        bad |= pos > stop
    valid = is_string & ~bad
    keys = _string_array(data, key_start, np.where(valid, key_size, 0), valid)
    offsets = np.cumsum(counts) - counts
    try:
        keys.validate(full=True)  # UTF-8, of every block at once
    except pa.ArrowInvalid:
        for block, offset, count in zip(blocks, offsets.tolist(), counts.tolist(), strict=True):
            try:
                keys.slice(offset, count).validate(full=True)
            except pa.ArrowInvalid as exc:
                raise CorruptLogBlockError(f"{block.location}: a record key is not UTF-8: {exc}") from exc
        raise
    block_bad = np.logical_or.reduceat(bad, offsets[nonempty]) if nonempty.any() else np.array([], bool)
    damaged = np.zeros(len(blocks), bool)
    damaged[nonempty] = block_bad
    return [
        None if damaged[i] else keys.slice(offset, count)
        for i, (offset, count) in enumerate(zip(offsets.tolist(), counts.tolist(), strict=True))
    ]


def _string_array(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, valid: np.ndarray) -> pa.Array:
    """An Arrow string array of ``data[starts[i]:starts[i] + sizes[i]]`` (null where not ``valid``),
    its UTF-8 not yet checked."""
    offsets = np.zeros(len(sizes) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    picks = np.repeat(starts - offsets[:-1], sizes) + np.arange(offsets[-1])
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data[picks].tobytes())]
    return pa.Array.from_buffers(pa.string(), len(sizes), buffers)


def _keys_one_by_one(block: LogBlock, plan: tuple[tuple[bool, int], ...]) -> pa.Array:
    where = block.location
    content = block.content
    starts = _record_starts(block)
    ends = [*(s - 4 for s in starts[1:]), len(content)]
    keys: list[str | None] = []
    for i, (cur, stop) in enumerate(zip(starts, ends, strict=True)):
        key: str | None = None
        for is_union, string_at in plan:
            if is_union:
                index, cur = _varint(content, cur, stop, where)
                if index not in (0, 1):
                    raise CorruptLogBlockError(f"{where}: record {i}: union branch {index} in a meta field")
                if index != string_at:
                    key = None
                    continue
            size, cur = _varint(content, cur, stop, where)
            if size < 0 or cur + size > stop:
                raise CorruptLogBlockError(f"{where}: record {i} has a meta field running past it")
            try:
                key = content[cur : cur + size].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptLogBlockError(f"{where}: record {i} has a meta field not UTF-8: {exc}") from None
            cur += size
        keys.append(key)
    return pa.array(keys, pa.string())


def _varint(data: bytes, pos: int, stop: int, where: str) -> tuple[int, int]:
    """The Avro (zig-zag) long at ``pos`` and the position after it; it must end before ``stop``."""
    if pos < stop and data[pos] < 0x80:  # the usual case: one byte (union index, short string)
        byte = data[pos]
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = shift = 0
    while True:
        if pos >= stop:
            raise CorruptLogBlockError(f"{where}: Avro varint runs past its record")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptLogBlockError(f"{where}: Avro varint longer than 10 bytes")


@functools.lru_cache(maxsize=64)
def _meta_prefix_plan(schema_text: str) -> tuple[tuple[bool, int], ...] | None:
    """Per leading meta field (commit time, seqno, record key) of a writer schema: (is a union, index
    of its string branch; -1: always null); None when the schema does not start with those three as
    strings or unions of null and string. Cached: every block of a table repeats the schema."""
    try:
        schema = json.loads(schema_text)
    except json.JSONDecodeError:
        return None
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list) or len(fields) < 3:
        return None
    out: list[tuple[bool, int]] = []
    for name, fld in zip(META_FIELDS[:3], fields[:3], strict=True):
        if not isinstance(fld, Mapping) or fld.get("name") != name:
            return None
        kind = fld.get("type")
        if kind == "string":
            out.append((False, 0))
            continue
        if not isinstance(kind, list) or len(kind) != 2 or sorted(map(str, kind)) != ["null", "string"]:
            return None
        out.append((True, kind.index("string")))
    return tuple(out)
