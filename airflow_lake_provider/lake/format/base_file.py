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
# Rows per row group. A writer's key lookup reads the record-key column only of the row groups whose
# key statistics may hold a key it looks for: with keys that grow over time (ids, time-prefixed keys)
# a 2-key upsert into a 1,000,000-row file reads 2 of 16 groups' keys (benchmarks/write_growth.py).
ROW_GROUP_ROWS = 64 * 1024


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
    rows = rows.replace_schema_metadata(meta)
    with pq.ParquetWriter(
        sink, rows.schema, compression="snappy", dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT
    ) as writer:
        writer.write_table(rows, row_group_size=ROW_GROUP_ROWS)
        if bloom is not None:
            # Footer key-value metadata only: as schema metadata it would be stored twice (Arrow
            # also keeps the schema, metadata included, base64 in the footer): 1 MB, not 431 KB.
            writer.add_key_value_metadata(
                {k.decode(): v.decode() for k, v in build(keys, bloom).footer().items()}
            )
