"""HFile v3 primitives: protobuf varints, Hadoop vints, CRC32C, GZ, block framing, KeyValue keys.

Every block is framed as::

    magic (8) | on-disk size without header (int) | uncompressed size without header (int)
    | previous block of the same type's offset (long) | checksum type (byte)
    | bytes per checksum (int) | on-disk data size with header (int) | data | checksums

with integers big-endian. The data is the (GZ-compressed) payload; the checksums cover the header
and data in chunks of ``bytes per checksum``, four bytes per chunk.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import Enum

from airflow_lake_provider.lake.errors import CorruptDataFileError

HEADER = struct.Struct(">8siiqBii")
HEADER_SIZE = HEADER.size  # 33
BYTES_PER_CHECKSUM = 16384
TRAILER_SIZE = 4096
TRAILER_MAGIC = b'TRABLK"$'
PB_MAGIC = b"PBUF"
LATEST_TIMESTAMP = (1 << 63) - 1
PUT = 4  # KeyValue type of every cell Hudi writes

DATA = b"DATABLK*"
META = b"METABLKc"
ROOT_INDEX = b"IDXROOT2"
FILE_INFO = b"FILEINF2"


class Compression(Enum):
    """HBase's compression algorithm ordinals, as the trailer stores them."""

    NONE = 2
    GZ = 1


class Checksum(Enum):
    NULL = 0
    CRC32C = 2


# ---------------------------------------------------------------------------------------------
# Varints
# ---------------------------------------------------------------------------------------------


def pb_varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative value (negatives as 64-bit two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_pb_varint(data: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise CorruptDataFileError(f"{where}: protobuf varint runs past its data")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def hadoop_vint(n: int) -> bytes:
    """Hadoop ``WritableUtils.writeVLong`` (one byte for -112..127, else a length byte + big-endian)."""
    if -112 <= n <= 127:
        return struct.pack(">b", n)
    marker = -112
    if n < 0:
        n = ~n
        marker = -120
    size = (n.bit_length() + 7) // 8
    return struct.pack(">b", marker - size) + n.to_bytes(size, "big")


def read_hadoop_vint(data: bytes, pos: int, where: str) -> tuple[int, int]:
    if pos >= len(data):
        raise CorruptDataFileError(f"{where}: vint runs past its block")
    first = struct.unpack_from(">b", data, pos)[0]
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    size = (-120 - first) if negative else (-112 - first)
    if pos + 1 + size > len(data):
        raise CorruptDataFileError(f"{where}: vint runs past its block")
    value = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
    return (~value if negative else value), pos + 1 + size


# ---------------------------------------------------------------------------------------------
# Protobuf messages (only what the trailer and file info use: varint and length-delimited fields)
# ---------------------------------------------------------------------------------------------


def pb_fields(message: bytes, where: str) -> list[tuple[int, int | bytes]]:
    """(field number, value) of every field of a protobuf message, in order."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(message):
        tag, pos = read_pb_varint(message, pos, where)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = read_pb_varint(message, pos, where)
            out.append((number, value))
        elif wire == 2:
            size, pos = read_pb_varint(message, pos, where)
            if pos + size > len(message):
                raise CorruptDataFileError(f"{where}: protobuf field {number} runs past its message")
            out.append((number, message[pos : pos + size]))
            pos += size
        else:
            raise CorruptDataFileError(f"{where}: protobuf wire type {wire} (field {number}) is not expected")
    return out


def pb_field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, bytes):
        return pb_varint(number << 3 | 2) + pb_varint(len(value)) + value
    return pb_varint(number << 3) + pb_varint(value)


# ---------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), for the HBase writer's block checksums; no stdlib implementation exists
# ---------------------------------------------------------------------------------------------


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC32C
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# GZ: a gzip member with a zeroed header (no time, no OS), deflate level 6, as Java's writers emit
# ---------------------------------------------------------------------------------------------

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"


def gzip_compress(raw: bytes) -> bytes:
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = deflate.compress(raw) + deflate.flush()
    return _GZIP_HEADER + body + struct.pack("<II", zlib.crc32(raw), len(raw) & 0xFFFFFFFF)


def gzip_decompress(data: bytes, expected: int, where: str) -> bytes:
    try:
        raw = zlib.decompress(data, 31)
    except zlib.error as exc:
        raise CorruptDataFileError(f"{where}: GZ data unreadable: {exc}") from exc
    if len(raw) != expected:
        raise CorruptDataFileError(f"{where}: GZ data holds {len(raw)} bytes, the header says {expected}")
    return raw


# ---------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One block read back: its type, where it is, and its uncompressed payload."""

    magic: bytes
    offset: int
    on_disk_size: int  # header + data + checksums
    prev_offset: int
    checksum: int
    payload: bytes


def encode_block(
    magic: bytes, payload: bytes, prev_offset: int, compression: Compression, checksum: Checksum
) -> bytes:
    data = gzip_compress(payload) if compression is Compression.GZ else payload
    with_header = HEADER_SIZE + len(data)
    chunks = -(-with_header // BYTES_PER_CHECKSUM)
    header = HEADER.pack(
        magic,
        len(data) + 4 * chunks,
        len(payload),
        prev_offset,
        checksum.value,
        BYTES_PER_CHECKSUM,
        with_header,
    )
    block = header + data
    if checksum is Checksum.CRC32C:
        sums = b"".join(
            struct.pack(">I", crc32c(block[i : i + BYTES_PER_CHECKSUM]))
            for i in range(0, with_header, BYTES_PER_CHECKSUM)
        )
    else:  # Hudi's own writer reserves the checksum bytes and leaves them zero
        sums = bytes(4 * chunks)
    return block + sums


def read_block(data: bytes, offset: int, compression: Compression, where: str) -> Block:
    at = f"{where}: block at offset {offset}"
    if offset < 0 or offset + HEADER_SIZE > len(data):
        raise CorruptDataFileError(f"{at} runs past the end of the file")
    magic, on_disk, raw_size, prev, checksum, per_chunk, with_header = HEADER.unpack_from(data, offset)
    if on_disk < 0 or raw_size < 0 or not HEADER_SIZE <= with_header <= HEADER_SIZE + on_disk:
        raise CorruptDataFileError(f"{at}: impossible sizes in its header")
    end = offset + HEADER_SIZE + on_disk
    if end > len(data):
        raise CorruptDataFileError(f"{at} ({on_disk} bytes) runs past the end of the file")
    body = data[offset + HEADER_SIZE : offset + with_header]
    if checksum == Checksum.CRC32C.value and per_chunk > 0:
        block = data[offset : offset + with_header]
        sums = data[offset + with_header : end]
        for n, i in enumerate(range(0, with_header, per_chunk)):
            want = sums[4 * n : 4 * n + 4]
            if struct.pack(">I", crc32c(block[i : i + per_chunk])) != want:
                raise CorruptDataFileError(f"{at}: checksum mismatch in chunk {n}")
    if compression is Compression.GZ:
        payload = gzip_decompress(body, raw_size, at)
    else:
        payload = body
    return Block(magic, offset, end - offset, prev, checksum, payload)


# ---------------------------------------------------------------------------------------------
# KeyValue keys: row length (short) | row | family length (byte, 0) | timestamp (long) | type (byte)
# ---------------------------------------------------------------------------------------------


def kv_key(row: bytes) -> bytes:
    return struct.pack(">h", len(row)) + row + b"\x00" + struct.pack(">qB", LATEST_TIMESTAMP, PUT)


def kv_row(key: bytes, where: str) -> bytes:
    if len(key) < 2:
        raise CorruptDataFileError(f"{where}: cell key of {len(key)} bytes is too short")
    (size,) = struct.unpack_from(">h", key, 0)
    if size < 0 or 2 + size > len(key):
        raise CorruptDataFileError(f"{where}: cell key row length {size} runs past the key")
    return key[2 : 2 + size]


def short_key(row: bytes) -> bytes:
    """The row with its short length prefix: the index and last key of Hudi's own writer."""
    return struct.pack(">h", len(row)) + row
