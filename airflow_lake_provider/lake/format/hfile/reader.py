"""HFile v3 reader: trailer, load-on-open section (root data index, meta index, file info), meta and
data blocks, cells. Bytes in, :class:`HFile` out; single-level indexes only (all Hudi writes)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.format.hfile.codec import (
    DATA,
    FILE_INFO,
    META,
    PB_MAGIC,
    ROOT_INDEX,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    Block,
    Compression,
    kv_row,
    pb_fields,
    read_block,
    read_hadoop_vint,
    read_pb_varint,
)
from airflow_lake_provider.lake.format.hfile.model import (
    CREATE_TIME,
    DERIVED_INFO,
    KEY_VALUE_VERSION,
    Dialect,
    HFileContent,
    HFileSettings,
)

_UINT64 = (1 << 64) - 1


@dataclass(frozen=True)
class Trailer:
    """The fixed file trailer (HBase's ``FileTrailerProto``), -1 where an offset is unset."""

    file_info_offset: int
    load_on_open_offset: int
    data_index_size: int
    total_uncompressed_bytes: int | None
    data_index_count: int
    meta_index_count: int
    entry_count: int
    index_levels: int
    first_data_block_offset: int
    last_data_block_offset: int
    comparator: str
    compression: Compression
    minor_version: int


@dataclass(frozen=True)
class IndexEntry:
    offset: int
    size: int  # on disk, header included
    key: bytes


@dataclass(frozen=True)
class HFile:
    """A parsed HFile."""

    source: str
    trailer: Trailer
    content: HFileContent
    all_file_info: tuple[tuple[bytes, bytes], ...]  # every entry, derived ones too, in file order
    data_index: tuple[IndexEntry, ...]
    blocks: tuple[Block, ...]  # every block, in file order

    @property
    def dialect(self) -> Dialect:
        return Dialect.HBASE if self.trailer.minor_version == 3 else Dialect.HUDI

    def settings(self, block_size: int | None = None) -> HFileSettings:
        """The settings this file was written with (block size: not recorded, so given or default)."""
        created = dict(self.all_file_info).get(CREATE_TIME, bytes(8))
        extra = {} if block_size is None else {"block_size": block_size}
        return HFileSettings(
            dialect=self.dialect,
            compression=self.trailer.compression,
            comparator=self.trailer.comparator,
            create_time_ms=int.from_bytes(created, "big", signed=True),
            **extra,
        )


def read_hfile(data: bytes, source: str, *, info_only: bool = False) -> HFile:
    """Parse a whole HFile held in memory (``info_only``: its trailer, indexes and file info, for a
    caller wanting no more: no data or meta block is read, the content has no cells or meta blocks).

    :raises CorruptDataFileError: naming ``source`` and what is wrong.
    """
    trailer = _read_trailer(data, source)
    if trailer.index_levels != 1:
        raise CorruptDataFileError(f"{source}: {trailer.index_levels}-level data index is not supported")
    comp = trailer.compression
    root = read_block(data, trailer.load_on_open_offset, comp, source)
    meta_index = read_block(data, root.offset + root.on_disk_size, comp, source)
    info_block = read_block(data, trailer.file_info_offset, comp, source)
    for block, magic in ((root, ROOT_INDEX), (meta_index, ROOT_INDEX), (info_block, FILE_INFO)):
        _expect(block, magic, source)
    data_index = _index_entries(root.payload, trailer.data_index_count, source)
    meta_entries = _index_entries(meta_index.payload, trailer.meta_index_count, source)
    info = _file_info(info_block.payload, source)
    with_mvcc = dict(info).get(KEY_VALUE_VERSION) == b"\x00\x00\x00\x01"
    cells: list[tuple[bytes, bytes]] = []
    data_blocks = []
    for entry in () if info_only else data_index:
        block = read_block(data, entry.offset, comp, source)
        _expect(block, DATA, source)
        data_blocks.append(block)
        cells.extend(_cells(block, with_mvcc, source))
    if not info_only and len(cells) != trailer.entry_count:
        raise CorruptDataFileError(f"{source}: {len(cells)} cells, the trailer says {trailer.entry_count}")
    metas = []
    meta_blocks = []
    for entry in () if info_only else meta_entries:
        block = read_block(data, entry.offset, comp, source)
        _expect(block, META, source)
        meta_blocks.append(block)
        metas.append((entry.key, block.payload))
    content = HFileContent(
        cells=tuple(cells),
        file_info=tuple((k, v) for k, v in info if k not in DERIVED_INFO),
        meta_blocks=tuple(metas),
    )
    blocks = sorted([*data_blocks, *meta_blocks, root, meta_index, info_block], key=lambda b: b.offset)
    return HFile(source, trailer, content, tuple(info), tuple(data_index), tuple(blocks))


def _expect(block: Block, magic: bytes, source: str) -> None:
    if block.magic != magic:
        raise CorruptDataFileError(
            f"{source}: block at offset {block.offset} is {block.magic!r}, expected {magic!r}"
        )


def _signed(value: int) -> int:
    return value - (1 << 64) if value > _UINT64 >> 1 else value


def _read_trailer(data: bytes, source: str) -> Trailer:
    if len(data) < TRAILER_SIZE:
        raise CorruptDataFileError(f"{source}: {len(data)} bytes, shorter than an HFile v3 trailer")
    start = len(data) - TRAILER_SIZE
    (version,) = struct.unpack_from(">i", data, len(data) - 4)
    major, minor = version & 0xFFFFFF, (version >> 24) & 0xFF
    if major != 3:
        raise CorruptDataFileError(f"{source}: HFile version {major}.{minor} is not supported (only 3)")
    if data[start : start + 8] != TRAILER_MAGIC:
        raise CorruptDataFileError(f"{source}: no trailer magic {TRAILER_MAGIC!r}")
    size, pos = read_pb_varint(data, start + 8, source)
    if pos + size > len(data) - 4:
        raise CorruptDataFileError(f"{source}: trailer message runs past the trailer")
    fields: dict[int, int | bytes] = dict(pb_fields(data[pos : pos + size], f"{source} trailer"))

    def number(n: int, default: int = 0) -> int:
        value = fields.get(n, default)
        if not isinstance(value, int):
            raise CorruptDataFileError(f"{source}: trailer field {n} is not a number")
        return _signed(value)

    codec = number(12, Compression.NONE.value)
    try:
        compression = Compression(codec)
    except ValueError:
        raise CorruptDataFileError(f"{source}: compression codec {codec} is not supported") from None
    comparator = fields.get(11, b"")
    return Trailer(
        file_info_offset=number(1),
        load_on_open_offset=number(2),
        data_index_size=number(3),
        total_uncompressed_bytes=number(4) if 4 in fields else None,
        data_index_count=number(5),
        meta_index_count=number(6),
        entry_count=number(7),
        index_levels=number(8, 1),
        first_data_block_offset=number(9, -1),
        last_data_block_offset=number(10, -1),
        comparator=comparator.decode() if isinstance(comparator, bytes) else "",
        compression=compression,
        minor_version=minor,
    )


def _index_entries(payload: bytes, count: int, source: str) -> list[IndexEntry]:
    out = []
    pos = 0
    where = f"{source} index"
    for _ in range(count):
        if pos + 12 > len(payload):
            raise CorruptDataFileError(f"{where}: entry runs past its block")
        offset, size = struct.unpack_from(">qi", payload, pos)
        length, pos = read_hadoop_vint(payload, pos + 12, where)
        if length < 0 or pos + length > len(payload):
            raise CorruptDataFileError(f"{where}: key of {length} bytes runs past its block")
        out.append(IndexEntry(offset, size, payload[pos : pos + length]))
        pos += length
    return out


def _file_info(payload: bytes, source: str) -> list[tuple[bytes, bytes]]:
    where = f"{source} file info"
    if not payload.startswith(PB_MAGIC):
        raise CorruptDataFileError(f"{where}: no {PB_MAGIC!r} magic")
    size, pos = read_pb_varint(payload, len(PB_MAGIC), where)
    out = []
    for number, pair in pb_fields(payload[pos : pos + size], where):
        if number != 1 or not isinstance(pair, bytes):
            raise CorruptDataFileError(f"{where}: unexpected field {number}")
        parts = dict(pb_fields(pair, where))
        name, value = parts.get(1, b""), parts.get(2, b"")
        if not isinstance(name, bytes) or not isinstance(value, bytes):
            raise CorruptDataFileError(f"{where}: an entry is not a pair of byte strings")
        out.append((name, value))
    return out


def _cells(block: Block, with_mvcc: bool, source: str) -> list[tuple[bytes, bytes]]:
    where = f"{source}: data block at offset {block.offset}"
    payload = block.payload
    out = []
    pos = 0
    while pos < len(payload):
        if pos + 8 > len(payload):
            raise CorruptDataFileError(f"{where}: cell header runs past the block")
        key_len, value_len = struct.unpack_from(">ii", payload, pos)
        pos += 8
        if key_len < 0 or value_len < 0 or pos + key_len + value_len > len(payload):
            raise CorruptDataFileError(f"{where}: cell of {key_len}+{value_len} bytes runs past the block")
        row = kv_row(payload[pos : pos + key_len], where)
        value = payload[pos + key_len : pos + key_len + value_len]
        pos += key_len + value_len
        if with_mvcc:
            _, pos = read_hadoop_vint(payload, pos, where)
        out.append((row, value))
    return out
