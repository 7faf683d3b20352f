"""Writing one parquet base file the way every writer of the table core does (writes and compaction)."""

from __future__ import annotations

from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.format.bloom_filter import DEFAULT_SETTINGS, BloomSettings, build

RECORD_KEY = "_hoodie_record_key"
# A column chunk stops dictionary-encoding once its dictionary outgrows this. Arrow's 1 MB default
# spends the first MB of every high-cardinality column (record keys, sequence numbers, measures)
# hashing values into a dictionary it then abandons; at 256 KB a 250,000-row base file was written
# in 0.12-0.14 s instead of 0.22-0.24 s and came out 9% smaller, while columns with up to tens of
# thousands of distinct values keep their dictionary (benchmarks/parquet_write.py).
DICTIONARY_PAGE_LIMIT = 256 * 1024


def write_base_file(sink: IO[bytes], rows: pa.Table, bloom: BloomSettings | None = DEFAULT_SETTINGS) -> None:
    """Write ``rows`` (meta columns first) as a snappy parquet base file into ``sink``.

    The footer carries Hudi's record-key range and (unless ``bloom`` is None) the bloom filter of
    the record keys, which Java's bloom index and our writer's key lookup read.
    """
    keys = rows.column(RECORD_KEY)
    meta = {
        b"hoodie_min_record_key": str(pc.min(keys).as_py() or "").encode(),
        b"hoodie_max_record_key": str(pc.max(keys).as_py() or "").encode(),
    }
    if bloom is not None:
        meta.update(build(keys, bloom).footer())
    pq.write_table(
        rows.replace_schema_metadata(meta),
        sink,
        compression="snappy",
        dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT,
    )
