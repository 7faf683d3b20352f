"""Hudi's ``HashID``: the hashes that key the metadata table's column and partition statistics.

A ``column_stats`` key is ``base64(column id) + base64(partition id) + base64(file id)``, a
``partition_stats`` key the first two (``HoodieMetadataPayload`` with ``ColumnIndexID``,
``PartitionIndexID`` and ``FileIndexID``): column and partition ids are the 64-bit XXH64 of the
name's UTF-8 bytes (big-endian), seeded with Java's ``int 0xdabadaba`` widened to a ``long`` (so
sign-extended); a file id is the MD5 of the file name. XXH64 is written out here (no dependency for
one small hash); the constants and rounds are those of the public xxHash specification.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from functools import lru_cache

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
# Java passes the int seed 0xdabadaba to XXHash64.hash(..., long seed): it arrives sign-extended.
HASH_SEED = (0xDABADABA - (1 << 32)) & _MASK


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def xxh64(data: bytes, seed: int = HASH_SEED) -> int:
    """XXH64 of ``data`` (unsigned 64-bit)."""
    seed &= _MASK
    n, i = len(data), 0
    if n >= 32:
        acc = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed, (seed - _P1) & _MASK]
        while i + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, i)
            acc = [_round(a, lane) for a, lane in zip(acc, lanes, strict=True)]
            i += 32
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & _MASK
        for a in acc:
            h = (((h ^ _round(0, a)) * _P1) + _P4) & _MASK
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h = ((_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * _P1) + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h = ((_rotl(h ^ ((struct.unpack_from("<I", data, i)[0] * _P1) & _MASK), 23) * _P2) + _P3) & _MASK
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _MASK), 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


# A write keys ~a thousand column stats over a few dozen column and partition names: each is hashed once.
@lru_cache(maxsize=4096)
def name_id(name: str) -> str:
    """Base64 of a column's or partition's 64-bit id."""
    return base64.b64encode(struct.pack(">Q", xxh64(name.encode("utf-8")))).decode("ascii")


def file_id(name: str) -> str:
    """Base64 of a file name's 128-bit id."""
    return base64.b64encode(hashlib.md5(name.encode("utf-8"), usedforsecurity=False).digest()).decode("ascii")


def column_stats_key(column: str, partition: str, file_name: str) -> str:
    return name_id(column) + name_id(partition) + file_id(file_name)


def partition_stats_key(column: str, partition: str) -> str:
    return name_id(column) + name_id(partition)
