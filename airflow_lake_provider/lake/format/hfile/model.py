"""What an HFile holds and the settings that decide its bytes: shared by the reader and the writer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from airflow_lake_provider.lake.format.hfile.codec import Compression

HUDI_COMPARATOR = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"
DEFAULT_BLOCK_SIZE = 1024 * 1024  # Hudi's hoodie.hfile.block.size

# File info entries the writer derives from the cells (never given by a caller).
LAST_KEY = b"hfile.LASTKEY"
AVG_KEY_LEN = b"hfile.AVG_KEY_LEN"
AVG_VALUE_LEN = b"hfile.AVG_VALUE_LEN"
KEY_VALUE_VERSION = b"KEY_VALUE_VERSION"
MAX_MEMSTORE_TS = b"MAX_MEMSTORE_TS_KEY"
CREATE_TIME = b"hfile.CREATE_TIME_TS"
DERIVED_INFO = frozenset(
    {LAST_KEY, AVG_KEY_LEN, AVG_VALUE_LEN, KEY_VALUE_VERSION, MAX_MEMSTORE_TS, CREATE_TIME}
)


class Dialect(Enum):
    """Which Java writer's bytes to produce (both write HFile v3 that either reader reads).

    ``HBASE``: Hudi 1.0.x and earlier, through HBase 2.4's writer (trailer minor version 3): CRC32C
    block checksums, full KeyValue keys in the index and ``hfile.LASTKEY``, file info sorted by name.
    ``HUDI``: Hudi 1.1+, hudi-io's own writer (minor version 0): zeroed checksums, row-only index keys
    and last key, file info in Java ``HashMap`` order, a real ``hfile.CREATE_TIME_TS``.
    """

    HBASE = "hbase"
    HUDI = "hudi"

    @property
    def minor_version(self) -> int:
        return 3 if self is Dialect.HBASE else 0


@dataclass(frozen=True)
class HFileSettings:
    """What, besides its content, decides an HFile's bytes.

    :param dialect: the writer to match.
    :param compression: of every block (Hudi's MDT: GZ).
    :param block_size: uncompressed bytes of cells per data block (a boundary rule per dialect).
    :param comparator: the class name the trailer records.
    :param create_time_ms: ``hfile.CREATE_TIME_TS`` (HBase's writer, as Hudi drives it, writes 0).
    """

    dialect: Dialect = Dialect.HUDI
    compression: Compression = Compression.GZ
    block_size: int = DEFAULT_BLOCK_SIZE
    comparator: str = HUDI_COMPARATOR
    create_time_ms: int = 0


@dataclass(frozen=True)
class HFileContent:
    """The decoded content of an HFile: enough, with its settings, to write it again.

    :param cells: (row key, value) of every cell, in file (sorted) order.
    :param file_info: the caller-given file info entries (``DERIVED_INFO`` left out), in file order.
    :param meta_blocks: (name, uncompressed payload) of each meta block, in file order.
    """

    cells: tuple[tuple[bytes, bytes], ...]
    file_info: tuple[tuple[bytes, bytes], ...]
    meta_blocks: tuple[tuple[bytes, bytes], ...]

    def info(self, name: str | bytes) -> bytes | None:
        key = name.encode() if isinstance(name, str) else name
        return next((v for k, v in self.file_info if k == key), None)
