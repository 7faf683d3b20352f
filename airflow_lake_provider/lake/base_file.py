"""Writing one parquet base file the way every writer of the table core does (writes and compaction)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

RECORD_KEY = "_hoodie_record_key"


def fsync_file(path: Path) -> None:
    """Flush a file (or a folder's entries) to stable storage before a later step depends on it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_base_file(path: Path, rows: pa.Table) -> int:
    """Write ``rows`` (meta columns first) as a snappy parquet base file; return its size in bytes.

    The footer carries Hudi's record-key range, which Java's bloom/range index reads.
    """
    keys = rows.column(RECORD_KEY)
    meta = {
        b"hoodie_min_record_key": str(pc.min(keys).as_py() or "").encode(),
        b"hoodie_max_record_key": str(pc.max(keys).as_py() or "").encode(),
    }
    pq.write_table(rows.replace_schema_metadata(meta), path, compression="snappy")
    fsync_file(path)
    return path.stat().st_size
