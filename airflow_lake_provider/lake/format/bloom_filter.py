"""Hudi's bloom filter of record keys, as kept in a base file's parquet footer.

Footer key-value metadata (what Java's bloom index reads):
- ``org.apache.hudi.bloomfilter``: the filter, base64 (standard alphabet, padded) of Java
  ``DataOutput`` bytes (big-endian);
- ``hoodie_bloom_filter_type_code``: ``SIMPLE`` or ``DYNAMIC_V0`` (absent: ``SIMPLE``).

A standard filter serialises as a header ``int version (-1), int hash count, byte hash type
(1 = murmur), int vector size in bits`` then the bit vector, ``ceil(bits / 8)`` bytes, bit ``i``
in byte ``i // 8`` at mask ``1 << (i % 8)``. ``DYNAMIC_V0`` (Hadoop's dynamic filter, bounded) is
the same header, then ``int keys per row, int keys in the active row, int row count`` and that
many standard filters. A key (UTF-8 bytes) sets or tests ``hash count`` bits: hash ``i`` is
Hadoop's 32-bit MurmurHash2 of the bytes seeded with hash ``i - 1`` (the first with 0), bit
``abs(hash % bits)`` in Java's signed remainder. Rows fill one after another until ``row count x
keys per row`` reaches the dynamic maximum; past it keys are spread over the rows in turn.

Hashing is vectorised with numpy over keys of equal byte length: a 1,000,000-key file is a few
seconds of arithmetic rather than minutes of Python.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from airflow_lake_provider.lake.config import registry as r
from airflow_lake_provider.lake.errors import CorruptDataFileError, WriteConfigError

FILTER_KEY = "org.apache.hudi.bloomfilter"
TYPE_CODE_KEY = "hoodie_bloom_filter_type_code"
SIMPLE, DYNAMIC_V0 = "SIMPLE", "DYNAMIC_V0"
MURMUR_HASH = 1
_VERSION = -1
_HEADER = struct.Struct(">iibi")  # version, hash count, hash type, vector size
_DYNAMIC = struct.Struct(">iii")  # keys per row, keys in the active row, rows
_INT_MAX = 2**31 - 1  # the header's sizes are Java ints
_MAX_HASHES = 4096  # Java's count is ceil(ln 2 x bits / entries): 30 at Hudi's defaults
_M = np.uint32(0x5BD1E995)

# Hudi's writer options and defaults (HoodieStorageConfig / HoodieIndexConfig).
NUM_ENTRIES_OPTION = r.BLOOM_NUM_ENTRIES.key
FPP_OPTION = r.BLOOM_FPP.key
TYPE_OPTION = r.BLOOM_FILTER_TYPE.key
MAX_ENTRIES_OPTION = r.BLOOM_MAX_ENTRIES.key


@dataclass(frozen=True)
class BloomSettings:
    """How the filters of new base files are sized."""

    num_entries: int = 60_000
    fpp: float = 1e-9
    type_code: str = DYNAMIC_V0
    max_entries: int = 100_000

    @classmethod
    def from_options(cls, *layers: Mapping[str, str]) -> BloomSettings:
        """Settings from option layers (table properties, then write options: a later layer's value
        wins); a bad value names its key."""
        # Each value is checked as it is read (the registry's parsers); only their combination here.
        settings = cls(
            r.BLOOM_NUM_ENTRIES.read(*layers),
            r.BLOOM_FPP.read(*layers),
            r.BLOOM_FILTER_TYPE.read(*layers),
            r.BLOOM_MAX_ENTRIES.read(*layers),
        )
        if settings.vector_size > _INT_MAX:
            raise WriteConfigError(
                f"{NUM_ENTRIES_OPTION}={settings.num_entries} at {FPP_OPTION}={settings.fpp:g} needs a "
                f"filter of {settings.vector_size} bits, more than its header holds ({_INT_MAX})"
            )
        return settings

    @property
    def vector_size(self) -> int:
        return math.ceil(self.num_entries * (-math.log(self.fpp) / (math.log(2) ** 2)))

    @property
    def num_hashes(self) -> int:
        return math.ceil(math.log(2) * self.vector_size / self.num_entries)


DEFAULT_SETTINGS = BloomSettings()


@dataclass(frozen=True)
class BloomFilter:
    """A decoded or built filter: ``rows`` are packed bit vectors (one for ``SIMPLE``)."""

    type_code: str
    vector_size: int
    num_hashes: int
    rows: tuple[bytes, ...]
    row_capacity: int = 0  # DYNAMIC_V0: keys per row
    active_count: int = 0  # DYNAMIC_V0: keys recorded in the last row
    hash_type: int = MURMUR_HASH

    @cached_property
    def _vectors(self) -> list[np.ndarray]:
        return [np.frombuffer(row, dtype=np.uint8) for row in self.rows]

    def might_contain(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """One bool per key: False only if the key was never added (no false negatives)."""
        keys = _as_strings(keys)
        answer = np.zeros(len(keys), dtype=bool)
        if not len(keys):
            return answer
        positions = hash_positions(keys, self.num_hashes, self.vector_size)
        byte, mask = positions >> 3, (np.uint8(1) << (positions & 7).astype(np.uint8))
        for vector in self._vectors:
            answer |= np.all(vector[byte] & mask, axis=1)
        return answer

    def serialize(self) -> str:
        """The footer string Java writes for this filter."""
        header = _HEADER.pack(_VERSION, self.num_hashes, self.hash_type, self.vector_size)
        if self.type_code == SIMPLE:
            body = header + self.rows[0]
        else:
            body = header + _DYNAMIC.pack(self.row_capacity, self.active_count, len(self.rows))
            body += b"".join(header + row for row in self.rows)
        return base64.b64encode(body).decode("ascii")

    def footer(self) -> dict[bytes, bytes]:
        return {
            FILTER_KEY.encode(): self.serialize().encode(),
            TYPE_CODE_KEY.encode(): self.type_code.encode(),
        }


def build(keys: pa.Array | pa.ChunkedArray, settings: BloomSettings = DEFAULT_SETTINGS) -> BloomFilter:
    """A filter holding ``keys``, laid out bit for bit as Java's writer lays out the same keys."""
    builder = BloomBuilder(settings)
    builder.add(keys)
    return builder.finish()


class BloomBuilder:
    """Builds a filter from keys added in file order, a batch at a time: :func:`build` of all the
    keys, bit for bit, with memory bounded by the bit vectors and one batch's positions."""

    def __init__(self, settings: BloomSettings = DEFAULT_SETTINGS, start: BloomFilter | None = None) -> None:
        """``start``: a filter (of ``settings``' layout) whose bits the new one starts from."""
        self.settings = settings
        self.count = 0
        self._bits: list[np.ndarray] = [
            # 0/1 bytes viewed as booleans: a copy (astype) of 2.6 million of them cost 4 ms a file.
            np.unpackbits(np.frombuffer(row, np.uint8), count=settings.vector_size, bitorder="little").view(
                bool
            )
            for row in (start.rows if start is not None else ())
        ]

    def add(self, keys: pa.Array | pa.ChunkedArray) -> None:
        """Add the next ``keys`` (in the order the file holds them)."""
        keys = _as_strings(keys)
        self.set_at(keys, np.arange(self.count, self.count + len(keys), dtype=np.int64))
        self.count += len(keys)

    def set_at(self, keys: pa.Array, indices: np.ndarray) -> None:
        """Set the bits of ``keys``, at those row ``indices`` of the file (they choose a dynamic row)."""
        settings = self.settings
        rows = (
            np.zeros(len(indices), dtype=np.int64)
            if settings.type_code == SIMPLE
            else _row_of(indices, settings.num_entries, settings.max_entries)
        )
        for start in range(0, len(keys), _HASH_BATCH):
            part = keys.slice(start, _HASH_BATCH)
            positions = hash_positions(part, settings.num_hashes, settings.vector_size)
            part_rows = rows[start : start + _HASH_BATCH]
            for row in np.unique(part_rows):
                while len(self._bits) <= row:
                    self._bits.append(np.zeros(settings.vector_size, dtype=bool))
                self._bits[row][positions[part_rows == row].ravel()] = True

    def finish(self, count: int | None = None) -> BloomFilter:
        """The filter of a file of ``count`` keys (default: the keys added)."""
        settings = self.settings
        count = self.count if count is None else count
        size, hashes = settings.vector_size, settings.num_hashes
        if settings.type_code == SIMPLE:
            return BloomFilter(SIMPLE, size, hashes, (self._packed(0),))
        row_count, active = _dynamic_shape(count, settings)
        rows = tuple(self._packed(r) for r in range(row_count))
        return BloomFilter(DYNAMIC_V0, size, hashes, rows, settings.num_entries, active)

    def _packed(self, row: int) -> bytes:
        if row >= len(self._bits):
            return bytes((self.settings.vector_size + 7) // 8)
        return np.packbits(self._bits[row], bitorder="little").tobytes()


def carried(
    old: BloomFilter | None, settings: BloomSettings, count: int, added: pa.Array, added_at: np.ndarray
) -> BloomFilter | None:
    """The filter of a new file of ``count`` keys: ``old``'s keys (some perhaps gone: a key left
    set is only a false positive) plus ``added`` at file rows ``added_at``. None unless ``old`` is
    laid out exactly as :func:`build` lays out ``count`` keys with ``settings`` (type, vector size,
    hash count, keys per row, row count): then the caller builds from scratch. With the same keys
    in the same order the result is :func:`build`'s, byte for byte."""
    if old is None or old.hash_type != MURMUR_HASH or old.type_code != settings.type_code:
        return None
    if (old.vector_size, old.num_hashes) != (settings.vector_size, settings.num_hashes):
        return None
    if settings.type_code != SIMPLE:
        if old.row_capacity != settings.num_entries or len(old.rows) != _dynamic_shape(count, settings)[0]:
            return None
    elif len(old.rows) != 1:
        return None
    builder = BloomBuilder(settings, old)
    if len(added):
        builder.set_at(_as_strings(added), np.asarray(added_at, dtype=np.int64))
    return builder.finish(count)


_HASH_BATCH = 32 * 1024  # keys hashed at once: the temporaries stay in the CPU's caches


def _dynamic_shape(count: int, settings: BloomSettings) -> tuple[int, int]:
    """Row count and the active row's key count of a dynamic filter of ``count`` keys."""
    per_row = settings.num_entries
    limit = max(1, -(-settings.max_entries // per_row))
    rows = min(limit, max(1, -(-count // per_row)))
    return rows, count - (rows - 1) * per_row


def _row_of(index: np.ndarray, per_row: int, max_entries: int) -> np.ndarray:
    """The dynamic row of the keys at file rows ``index``."""
    limit = max(1, -(-max_entries // per_row))  # rows are added while rows x per_row < max
    row_of = np.minimum(index // per_row, limit - 1)
    past = index >= limit * per_row
    # Past the bound the first key goes to row 0, then rows 0, 1, ... in turn.
    row_of[past] = np.maximum(index[past] - limit * per_row - 1, 0) % limit
    return row_of


def decode(text: str | bytes, type_code: str | bytes | None, where: str = "") -> BloomFilter:
    """Parse a footer filter (``type_code`` None means ``SIMPLE``, as Java assumes)."""
    code = (type_code.decode() if isinstance(type_code, bytes) else type_code) or SIMPLE
    try:
        data = base64.b64decode(text, validate=True)
        if code.startswith("DYNAMIC"):
            header, offset = _read_header(data, 0)
            per_row, active, count = _DYNAMIC.unpack_from(data, offset)
            offset += _DYNAMIC.size
            rows = []
            for _ in range(count):
                row_header, offset = _read_header(data, offset)
                if row_header != header:
                    raise ValueError(f"row header {row_header} differs from {header}")
                rows.append(_read_bits(data, offset, header[2]))
                offset += len(rows[-1])
            filt = BloomFilter(DYNAMIC_V0, header[2], header[0], tuple(rows), per_row, active, header[1])
        elif code == SIMPLE:
            header, offset = _read_header(data, 0)
            rows = [_read_bits(data, offset, header[2])]
            offset += len(rows[0])
            filt = BloomFilter(SIMPLE, header[2], header[0], tuple(rows), hash_type=header[1])
        else:
            raise ValueError(f"unknown bloom filter type code {code!r}")
        if offset != len(data):
            raise ValueError(f"{len(data) - offset} trailing bytes")
    except (ValueError, struct.error, binascii.Error) as exc:
        raise CorruptDataFileError(
            f"cannot decode the bloom filter of {where or 'a base file'}: {exc}"
        ) from None
    if filt.hash_type != MURMUR_HASH:
        raise CorruptDataFileError(
            f"bloom filter of {where or 'a base file'} uses hash type {filt.hash_type}; "
            "only murmur (1) is read"
        )
    return filt


def from_footer(metadata: Mapping[bytes, bytes] | None, where: str = "") -> BloomFilter | None:
    """The filter in a parquet footer's key-value metadata, or None if it has none."""
    text = (metadata or {}).get(FILTER_KEY.encode())
    if text is None:
        return None
    return decode(text, (metadata or {}).get(TYPE_CODE_KEY.encode()), where)


def probe_footer(
    metadata: Mapping[bytes, bytes] | None, keys: pa.Array | pa.ChunkedArray, where: str = ""
) -> np.ndarray | None:
    """``might_contain`` of the filter in a parquet footer (None if it has none), decoding only the
    base64 quads holding the keys' bits: a default filter is 431 KB of text, a lookup touches a few
    hundred bytes of it. A filter cut short, padded wrongly, or with a bad character where a key's
    bits lie raises ``CorruptDataFileError``, as :func:`decode` does."""
    text = (metadata or {}).get(FILTER_KEY.encode())
    if text is None:
        return None
    type_code = (metadata or {}).get(TYPE_CODE_KEY.encode())
    code = (type_code.decode() if isinstance(type_code, bytes) else type_code) or SIMPLE
    chars = np.frombuffer(text if isinstance(text, bytes) else text.encode(), dtype=np.uint8)
    try:
        header_text = bytes(chars[: 4 * -(-(_HEADER.size + _DYNAMIC.size) // 3)])
        head = base64.b64decode(header_text[: len(header_text) - len(header_text) % 4], validate=True)
        header, offset = _read_header(head, 0)
        hashes, hash_type, bits = header
        vector = (bits + 7) // 8
        if code.startswith("DYNAMIC"):
            count = _DYNAMIC.unpack_from(head, offset)[2]
            starts = [
                offset + _DYNAMIC.size + r * (_HEADER.size + vector) + _HEADER.size for r in range(count)
            ]
            total = offset + _DYNAMIC.size + count * (_HEADER.size + vector)
        elif code == SIMPLE:
            starts, total = [offset], offset + vector
        else:
            raise ValueError(f"unknown bloom filter type code {code!r}")
        if len(chars) != 4 * -(-total // 3):
            raise ValueError(f"{len(chars)} characters for a {total}-byte filter (cut short or trailing)")
        # Exactly the padding the length calls for: a pad anywhere else would read as zero bits.
        pads = (3 - total % 3) % 3
        found = 2 - len(bytes(chars[-2:]).rstrip(b"="))  # a filter is >= 13 bytes: 2+ characters
        if found != pads:
            raise ValueError(f"{found} padding characters where a {total}-byte filter has {pads}")
        if pads:
            chars = chars.copy()
            chars[-pads:] = ord("A")
        if hash_type != MURMUR_HASH:
            raise CorruptDataFileError(
                f"bloom filter of {where or 'a base file'} uses hash type {hash_type}; "
                "only murmur (1) is read"
            )
        for start in starts if code != SIMPLE else []:  # every row (row 0 too) repeats the header
            row = _b64_bytes(chars, np.arange(start - _HEADER.size, start, dtype=np.int64)).tobytes()
            if _read_header(row, 0)[0] != header:
                raise ValueError(f"row header {_read_header(row, 0)[0]} differs from {header}")
        keys = _as_strings(keys)
        answer = np.zeros(len(keys), dtype=bool)
        if not len(keys):
            return answer
        positions = hash_positions(keys, hashes, bits).astype(np.int64)
        byte, mask = positions >> 3, (np.uint8(1) << (positions & 7).astype(np.uint8))
        for start in starts:
            answer |= np.all(_b64_bytes(chars, start + byte) & mask, axis=1)
        return answer
    except (ValueError, struct.error, binascii.Error) as exc:
        raise CorruptDataFileError(
            f"cannot decode the bloom filter of {where or 'a base file'}: {exc}"
        ) from None


_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_SEXTETS = np.full(256, 255, dtype=np.uint8)
_SEXTETS[np.frombuffer(_ALPHABET, dtype=np.uint8)] = np.arange(64, dtype=np.uint8)
_PAD = ord("=")


def _b64_bytes(chars: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The data bytes at ``offsets`` (any shape) of base64 text ``chars``, decoding their quads only."""
    quad = (offsets // 3)[..., None] * 4 + np.arange(4)
    sextets = _SEXTETS[chars[quad]]
    if (sextets == 255).any():
        raise ValueError("Only base64 data is allowed (a bad character in the filter)")
    v = sextets.astype(np.uint32)
    word = (v[..., 0] << 18) | (v[..., 1] << 12) | (v[..., 2] << 6) | v[..., 3]
    return ((word >> ((2 - offsets % 3) * 8).astype(np.uint32)) & 0xFF).astype(np.uint8)


def _read_header(data: bytes, offset: int) -> tuple[tuple[int, int, int], int]:
    version, hashes, hash_type, size = _HEADER.unpack_from(data, offset)
    if version != _VERSION:
        raise ValueError(f"filter version {version} (only {_VERSION} is read)")
    if hashes <= 0 or size <= 0:
        raise ValueError(f"hash count {hashes} / vector size {size} must be positive")
    if hashes > _MAX_HASHES:
        # Hashing allocates keys x hashes positions: a damaged count must not exhaust memory.
        raise ValueError(f"hash count {hashes} is over {_MAX_HASHES} (no false positive rate needs it)")
    return (hashes, hash_type, size), offset + _HEADER.size


def _read_bits(data: bytes, offset: int, size: int) -> bytes:
    end = offset + (size + 7) // 8
    if end > len(data):
        raise ValueError(f"bit vector of {size} bits cut short")
    return data[offset:end]


def _as_strings(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if keys.null_count:
        raise ValueError("record keys must not be null")
    return keys.cast(pa.large_string())


def hash_positions(keys: pa.Array, num_hashes: int, vector_size: int) -> np.ndarray:
    """The ``(len(keys), num_hashes)`` bit positions of each key (UTF-8 bytes), as Java computes them."""
    keys = _as_strings(keys)
    out = np.empty((len(keys), num_hashes), dtype=np.uint32)
    if not len(keys):
        return out
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int64)[keys.offset : keys.offset + len(keys) + 1]
    data = keys.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    for length in np.unique(lengths):
        which = np.flatnonzero(lengths == length)
        if length == 0:
            raise ValueError("record keys must not be empty")
        rows = data[offsets[which][:, None] + np.arange(length)]
        hashes = _murmur2_chain(rows, num_hashes)
        # Java's abs(h % size) with a signed h is |h| mod size; |h| fits an unsigned int.
        np.abs(hashes.view(np.int32), out=hashes.view(np.int32))
        hashes %= np.uint32(vector_size)
        if len(which) == len(keys):
            out[:] = hashes.T
        else:
            out[which] = hashes.T
    return out


def _murmur2_chain(rows: np.ndarray, num_hashes: int) -> np.ndarray:
    """``(num_hashes, len(rows))`` hashes: hash ``i`` is Hadoop's MurmurHash2 of each row seeded
    with hash ``i - 1`` (the first with 0). The mixed blocks and the tail do not depend on the
    seed: they are computed once for all the hashes."""
    length = rows.shape[1]
    blocks = length // 4
    mixed = []
    if blocks:
        words = np.ascontiguousarray(rows[:, : blocks * 4]).view("<u4")
        for j in range(blocks):
            k = words[:, j] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            mixed.append(k)
    left = length % 4
    tail = None
    if left:
        # Java xors the tail bytes sign-extended (a signed byte widened to int).
        tail = np.zeros(len(rows), dtype=np.uint32)
        for back, shift in ((3, 16), (2, 8), (1, 0)):
            if left >= back:
                signed = rows[:, length - back].view(np.int8).astype(np.int32) << np.int32(shift)
                tail ^= signed.view(np.uint32)
    out = np.empty((num_hashes, len(rows)), dtype=np.uint32)
    seed = np.zeros(len(rows), dtype=np.uint32)
    shifted = np.empty_like(seed)
    for i in range(num_hashes):
        h = out[i]
        np.bitwise_xor(seed, np.uint32(length), out=h)
        for k in mixed:
            h *= _M
            h ^= k
        if tail is not None:
            h ^= tail
            h *= _M
        np.right_shift(h, np.uint32(13), out=shifted)
        h ^= shifted
        h *= _M
        np.right_shift(h, np.uint32(15), out=shifted)
        h ^= shifted
        seed = h
    return out
