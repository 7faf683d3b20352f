"""HFile v3 writer producing the bytes of Hudi's Java writers (see :class:`Dialect`).

Layout: data blocks, meta blocks, then the load-on-open section (root data index, meta index,
file info) and the 4096-byte trailer. Byte identity with the files of Hudi 1.0.x (HBase dialect)
and 1.1.x (Hudi dialect) is tested on every HFile of the 1.x test tables; those all have one data
block, so the multi-block rules (block boundary, index keys of later blocks, the HUDI dialect's
previous-block offsets) follow the Java sources and are not proven byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from airflow_lake_provider.lake.errors import WriteInputError
from airflow_lake_provider.lake.format.hfile.codec import (
    DATA,
    FILE_INFO,
    HEADER_SIZE,
    LATEST_TIMESTAMP,
    META,
    PB_MAGIC,
    ROOT_INDEX,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    Checksum,
    encode_block,
    hadoop_vint,
    kv_key,
    pb_field,
    pb_varint,
    short_key,
)
from airflow_lake_provider.lake.format.hfile.model import (
    AVG_KEY_LEN,
    AVG_VALUE_LEN,
    CREATE_TIME,
    DERIVED_INFO,
    KEY_VALUE_VERSION,
    LAST_KEY,
    MAX_MEMSTORE_TS,
    Dialect,
    HFileContent,
    HFileSettings,
)

_MAX_TYPE = 0xFF  # KeyValue type "Maximum": HBase's first-on-row index keys


def write_hfile(content: HFileContent, settings: HFileSettings) -> bytes:
    """The bytes of an HFile holding ``content``.

    :param content: cells sorted by row key (unique), the caller's file info entries (the
        writer adds ``DERIVED_INFO``), meta blocks (e.g. Hudi's ``bloomFilter``).
    :raises WriteInputError: on unsorted or repeated keys, or a derived file info entry given.
    """
    _check(content)
    dialect = settings.dialect
    checksum = Checksum.CRC32C if dialect is Dialect.HBASE else Checksum.NULL
    comp = settings.compression

    def block(magic: bytes, payload: bytes, prev: int) -> bytes:
        return encode_block(magic, payload, prev, comp, checksum)

    out = bytearray()
    uncompressed = 0  # HBase's running total of blocks' uncompressed sizes (header included)
    data_index: list[tuple[int, int, bytes]] = []
    data_raw = 0
    prev_row: bytes | None = None
    prev_data = -1
    for cells in _split(content.cells, settings):
        payload = b"".join(_cell(row, value) for row, value in cells)
        encoded = block(DATA, payload, prev_data)
        data_index.append((len(out), len(encoded), _index_key(prev_row, cells[0][0], dialect)))
        prev_data = len(out)
        out += encoded
        uncompressed += HEADER_SIZE + len(payload)
        data_raw += len(payload)
        prev_row = cells[-1][0]
    meta_index: list[tuple[int, int, bytes]] = []
    prev_meta = -1
    for name, payload in content.meta_blocks:
        encoded = block(META, payload, prev_meta if dialect is Dialect.HBASE else -1)
        meta_index.append((len(out), len(encoded), name))
        prev_meta = len(out)
        out += encoded
        uncompressed += HEADER_SIZE + len(payload)
    load_on_open = len(out)
    root_payload = _index_payload(data_index)
    out += block(ROOT_INDEX, root_payload, -1)
    meta_payload = _index_payload(meta_index)
    out += block(ROOT_INDEX, meta_payload, load_on_open if dialect is Dialect.HBASE else -1)
    uncompressed += HEADER_SIZE + len(meta_payload)
    file_info_offset = len(out)
    info_payload = _file_info_payload(content, settings)
    out += block(FILE_INFO, info_payload, -1)
    uncompressed += HEADER_SIZE + len(info_payload)
    first = data_index[0][0] if data_index else -1
    last = data_index[-1][0] if data_index else (-1 if dialect is Dialect.HBASE else 0)
    fields = [
        (1, file_info_offset),
        (2, load_on_open),
        (3, len(root_payload) if dialect is Dialect.HBASE else data_raw),
    ]
    if dialect is Dialect.HBASE:
        fields.append((4, uncompressed + TRAILER_SIZE))
    fields += [
        (5, len(data_index)),
        (6, len(meta_index)),
        (7, len(content.cells)),
        (8, 1),
        (9, first),
        (10, last),
        (11, settings.comparator.encode()),
        (12, comp.value),
    ]
    message = b"".join(pb_field(n, v) for n, v in fields)
    trailer = TRAILER_MAGIC + pb_varint(len(message)) + message
    version = 3 | dialect.minor_version << 24
    out += trailer.ljust(TRAILER_SIZE - 4, b"\x00") + struct.pack(">i", version)
    return bytes(out)


def _check(content: HFileContent) -> None:
    for before, after in zip(content.cells, content.cells[1:], strict=False):
        if not before[0] < after[0]:
            raise WriteInputError(
                f"HFile keys must be unique and sorted: {after[0]!r} comes after {before[0]!r}"
            )
    derived = sorted(k.decode(errors="replace") for k, _ in content.file_info if k in DERIVED_INFO)
    if derived:
        raise WriteInputError(f"file info entries {derived} are computed by the writer, not given")


def _cell(row: bytes, value: bytes) -> bytes:
    key = kv_key(row)
    # key length, value length, key, value, memstore timestamp (a Hadoop vint: 0)
    return struct.pack(">ii", len(key), len(value)) + key + value + b"\x00"


def _split(cells: Sequence[tuple[bytes, bytes]], settings: HFileSettings) -> list[list[tuple[bytes, bytes]]]:
    """Cells per data block. HBase finishes a block before a cell once the block has reached the
    block size; Hudi's writer before a cell that would take it past the block size."""
    blocks: list[list[tuple[bytes, bytes]]] = []
    current: list[tuple[bytes, bytes]] = []
    size = 0
    for row, value in cells:
        cell_size = len(row) + 12 + len(value) + 9
        full = size >= settings.block_size
        if settings.dialect is Dialect.HUDI:
            full = size + cell_size > settings.block_size
        if current and full:
            blocks.append(current)
            current, size = [], 0
        current.append((row, value))
        size += cell_size
    if current:
        blocks.append(current)
    return blocks


def _index_key(prev_row: bytes | None, row: bytes, dialect: Dialect) -> bytes:
    if dialect is Dialect.HUDI:
        return short_key(row)
    if prev_row is None:
        return kv_key(row)
    # HBase indexes later blocks by the shortest row between the previous block's last and this
    # block's first (``getMidpoint``), as a first-on-row key.
    mid = _midpoint_row(prev_row, row)
    if mid is None:
        return kv_key(row)
    return short_key(mid) + b"\x00" + struct.pack(">qB", LATEST_TIMESTAMP, _MAX_TYPE)


def _midpoint_row(left: bytes, right: bytes) -> bytes | None:
    common = 0
    limit = min(len(left), len(right))
    while common < limit and left[common] == right[common]:
        common += 1
    if common >= limit:  # left is a prefix of right
        return right[: common + 1]
    if left[common] < 0xFF and left[common] + 1 < right[common]:
        return left[:common] + bytes([left[common] + 1])
    return right[: common + 1]


def _index_payload(entries: Sequence[tuple[int, int, bytes]]) -> bytes:
    return b"".join(struct.pack(">qi", off, size) + hadoop_vint(len(key)) + key for off, size, key in entries)


def _file_info_payload(content: HFileContent, settings: HFileSettings) -> bytes:
    cells = content.cells
    n = len(cells)
    hbase = settings.dialect is Dialect.HBASE
    key_total = sum(len(row) + (12 if hbase else 0) for row, _ in cells)
    value_total = sum(len(value) for _, value in cells)
    derived: list[tuple[bytes, bytes]] = []
    if cells or not hbase:
        last = cells[-1][0] if cells else None
        derived.append((LAST_KEY, b"" if last is None else kv_key(last) if hbase else short_key(last)))
    derived += [
        (AVG_VALUE_LEN, struct.pack(">i", value_total // n if n else 0)),
        (AVG_KEY_LEN, struct.pack(">i", key_total // n if n else 0)),
        (KEY_VALUE_VERSION, struct.pack(">i", 1)),
        (MAX_MEMSTORE_TS, struct.pack(">q", 0)),
        (CREATE_TIME, struct.pack(">q", settings.create_time_ms)),
    ]
    entries = [*content.file_info, *derived]
    ordered = sorted(entries) if hbase else java_hash_map_order(entries)
    message = b"".join(pb_field(1, pb_field(1, k) + pb_field(2, v)) for k, v in ordered)
    return PB_MAGIC + pb_varint(len(message)) + message


def _java_string_hash(name: bytes) -> int:
    h = 0
    text = name.decode("utf-8", errors="replace").encode("utf-16-be")
    for i in range(0, len(text), 2):
        h = (31 * h + int.from_bytes(text[i : i + 2], "big")) & 0xFFFFFFFF
    return h


def java_hash_map_order(entries: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Iteration order of a ``java.util.HashMap<String, byte[]>`` filled with ``entries`` in order:
    by bucket (spread hash masked by the table size, which doubles past 0.75 load), then by
    insertion within a bucket (resizing keeps it)."""
    unique: dict[bytes, bytes] = {}
    for key, value in entries:
        unique[key] = value  # a repeated put keeps the first position
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: bytes) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    keyed = list(unique.items())
    order = sorted(range(len(keyed)), key=lambda i: (bucket(keyed[i][0]), i))
    return [keyed[i] for i in order]
