"""A seekable file over a storage's ranged reads, for readers that read parts of a file (S3)."""

from __future__ import annotations

from airflow_lake_provider.lake.storage.base import Storage


class RangedReader:
    """A seekable read-only file over one stored file: every read is one ranged read (on S3 a ranged
    GET) of what is asked.

    pyarrow reads a parquet footer and then column chunks through it, so a reader of a few columns
    never downloads the whole file.
    """

    def __init__(self, storage: Storage, rel: str, size: int) -> None:
        self._storage, self._rel, self._size, self._pos = storage, rel, size, 0
        self.closed = False
        self.mode = "rb"

    def size(self) -> int:
        return self._size

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._size - self._pos
        n = min(n, self._size - self._pos)
        if n <= 0:
            return b""
        data = self._storage.read_range(self._rel, self._pos, n)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> RangedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
