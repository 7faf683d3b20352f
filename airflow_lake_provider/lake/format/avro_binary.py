"""Avro binary primitives: zig-zag longs, length-prefixed bytes, and a reader over a buffer."""

from __future__ import annotations

import logging

from airflow_lake_provider.lake.errors import CorruptLogBlockError

log = logging.getLogger(__name__)
# --------------------------------------------------------------------------------------------
# Avro primitives (for DELETE block content and the in-memory container)
# --------------------------------------------------------------------------------------------


def zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def avro_bytes(raw: bytes) -> bytes:
    return zigzag(len(raw)) + raw


class AvroReader:
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
