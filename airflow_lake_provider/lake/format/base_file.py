"""Writing one parquet base file the way every writer of the table core does (writes and compaction)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.format.bloom_filter import (
    DEFAULT_SETTINGS,
    BloomFilter,
    BloomSettings,
    build,
    carried,
)

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
# Dictionary encoding is asked only for the columns with at most half as many distinct values as
# rows in the first rows written (``dictionary_columns``). Arrow would try a dictionary for every
# column and give it up only past DICTIONARY_PAGE_LIMIT: on columns of unique keys, sequence numbers
# or measures that hashing is wasted, and the fallback leaves dictionary pages in the chunk. On the
# compaction benchmark's 1,000,000-row base file: 0.33 s of CPU instead of 0.58 s, 62 MB, not 69.
DICTIONARY_SAMPLE_ROWS = 16_384
# Reading a base file, a string column whose dictionary pages are at most this large (compressed) is
# read as a dictionary (``small_dictionary_columns``), if it is dictionary-encoded throughout.
SMALL_DICTIONARY_BYTES = 64 * 1024
# Writers give a chunk's dictionary up once its page outgrows their limit (Arrow and parquet-java: 1 MB
# uncompressed by default) and write the rest of the chunk as plain pages. A small compressed
# dictionary does not rule that out: Spark's 1 MB dictionary of unique _hoodie_commit_seqno values is
# 15 KB under zstd.
WRITER_DICTIONARY_LIMIT = 1 << 20
_OFFSETS_LIMIT = 2**31 - 1  # bytes of values an array with 32-bit offsets holds


def write_base_file(sink: IO[bytes], rows: pa.Table, bloom: BloomSettings | None = DEFAULT_SETTINGS) -> None:
    """Write ``rows`` (meta columns first) as a snappy parquet base file into ``sink``.

    The footer carries Hudi's record-key range and (unless ``bloom`` is None) the bloom filter of
    the record keys, which Java's bloom index and our writer's key lookup read.
    """
    keys = rows.column(RECORD_KEY)
    key_range = (str(pc.min(keys).as_py() or ""), str(pc.max(keys).as_py() or ""))
    writer = BaseFileWriter(sink, rows.schema, bloom, key_range=key_range)
    try:
        writer.write(rows)
        writer.close()
    except BaseException:
        writer.abort()
        raise


class BaseFileWriter:
    """A base file written part by part (in file order), so that a merge holds one part at a time.

    ``previous``: gives (once the parts are written) the bloom filter of the base file these rows
    replace, or None. Parts written with
    ``carried=True`` hold only keys that file held; if ``previous`` is laid out as a filter of the
    new key count is, the new filter is ``previous`` plus the other parts' keys (no hashing of the
    carried keys), else it is built from all the keys.
    """

    def __init__(
        self,
        sink: IO[bytes],
        schema: pa.Schema,
        bloom: BloomSettings | None = DEFAULT_SETTINGS,
        previous: Callable[[], BloomFilter | None] | None = None,
        key_range: tuple[str, str] | None = None,
    ) -> None:
        # A key range known up front goes in the schema's metadata too (as every file written whole
        # has it); a streamed file's is known at the end: footer key-value metadata only.
        self._key_range = key_range
        self._schema = schema.remove_metadata()
        if key_range is not None:
            self._schema = self._schema.with_metadata(
                {
                    b"hoodie_min_record_key": key_range[0].encode(),
                    b"hoodie_max_record_key": key_range[1].encode(),
                }
            )
        self._bloom = bloom
        self._previous = previous
        self._sink = sink
        self._writer: pq.ParquetWriter | None = None  # opened with the first rows (its dictionaries)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._keys: list[pa.Array] = []  # every key written, in file order
        self._fresh: list[tuple[int, pa.Array]] = []  # (first row, keys) of the parts not carried
        self._low: str | None = None
        self._high: str | None = None
        self.rows = 0

    def write(self, rows: pa.Table, *, carried: bool = False) -> None:
        if not rows.num_rows:
            return
        keys = rows.column(RECORD_KEY).combine_chunks()
        low, high = pc.min_max(keys).values()
        low, high = low.as_py() or "", high.as_py() or ""
        self._low = low if self._low is None else min(self._low, low)
        self._high = high if self._high is None else max(self._high, high)
        self._keys.append(keys)
        if not carried:
            self._fresh.append((self.rows, keys))
        self.rows += rows.num_rows
        self._pending.append(rows.replace_schema_metadata(self._schema.metadata))
        self._pending_rows += rows.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self._pending_rows:
            return
        table = pa.concat_tables(self._pending)
        whole = table.num_rows if final else table.num_rows - table.num_rows % ROW_GROUP_ROWS
        self._open(table).write_table(table.slice(0, whole), row_group_size=ROW_GROUP_ROWS)
        rest = table.slice(whole)
        self._pending, self._pending_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)

    def close(self) -> None:
        """Finish the file: the last rows, then the footer's key range and bloom filter."""
        self._flush(final=True)
        meta = {}
        if self._key_range is None:
            meta = {"hoodie_min_record_key": self._low or "", "hoodie_max_record_key": self._high or ""}
        if self._bloom is not None:
            meta.update({k.decode(): v.decode() for k, v in self._filter(self._bloom).footer().items()})
        # Footer key-value metadata only: as schema metadata it would be stored twice (Arrow also
        # keeps the schema, metadata included, base64 in the footer): 1 MB, not 431 KB.
        writer = self._open(None)
        if meta:
            writer.add_key_value_metadata(meta)
        writer.close()

    def _open(self, first: pa.Table | None) -> pq.ParquetWriter:
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self._sink,
                self._schema,
                compression="snappy",
                use_dictionary=dictionary_columns(first) if first is not None else True,
                dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT,
            )
        return self._writer

    def abort(self) -> None:
        """Give the file up after a failure (its caller discards the output): the parquet writer is
        closed now, while its sink is open. Left to garbage collection, it would write its footer
        into the sink closed meanwhile ("write to closed file", reported at collection)."""
        if self._writer is not None:
            with contextlib.suppress(pa.ArrowException, OSError, ValueError):
                self._writer.close()

    def _filter(self, settings: BloomSettings) -> BloomFilter:
        previous = self._previous() if self._previous is not None else None
        if previous is not None:
            fresh = [keys for _, keys in self._fresh]
            at = [np.arange(start, start + len(keys), dtype=np.int64) for start, keys in self._fresh]
            found = carried(
                previous,
                settings,
                self.rows,
                pa.concat_arrays(fresh) if fresh else pa.array([], pa.string()),
                np.concatenate(at) if at else np.zeros(0, np.int64),
            )
            if found is not None:
                return found
        return build(pa.chunked_array(self._keys) if self._keys else pa.array([], pa.string()), settings)


def dictionary_columns(rows: pa.Table) -> list[str]:
    """The flat columns worth dictionary encoding, judged on the first ``DICTIONARY_SAMPLE_ROWS``
    of ``rows`` (counting the distinct values of every column of a whole row group cost 0.2 s of
    CPU): those with at most half as many distinct values as rows there."""
    sample = rows.slice(0, DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for field, column in zip(sample.schema, sample.columns, strict=True):
        if pa.types.is_nested(field.type):
            continue
        try:
            distinct = pc.count_distinct(column, mode="all").as_py()
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            continue
        if distinct * 2 <= sample.num_rows:
            chosen.append(field.name)
    return chosen


def small_dictionary_columns(metadata: pq.FileMetaData) -> list[str]:
    """The top-level string (byte array) columns of a parquet file whose every row group holds a
    dictionary page of at most ``SMALL_DICTIONARY_BYTES``: read as dictionaries, then decoded by
    :func:`decode_dictionaries` (a take), they cost a fraction of Parquet's value-by-value decoding
    (a million 70-byte ``_hoodie_file_name`` values: 0.1 s of CPU, 3 ms as a dictionary). Columns
    whose dictionary is large, absent in some row group, or given up for plain pages (whose values a
    dictionary read would hash one by one: ten times Parquet's decoding) are read as they are."""
    schema, groups = metadata.schema, [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    chosen = []
    for index in range(metadata.num_columns if groups else 0):
        column = schema.column(index)
        if column.physical_type != "BYTE_ARRAY" or column.path != column.name or column.max_repetition_level:
            continue
        chunks = [group.column(index) for group in groups]
        if all(
            chunk.has_dictionary_page
            and chunk.data_page_offset - chunk.dictionary_page_offset <= SMALL_DICTIONARY_BYTES
            and _no_plain_pages(chunk)
            for chunk in chunks
        ):
            chosen.append(column.name)
    return chosen


def _no_plain_pages(chunk: pq.ColumnChunkMetaData) -> bool:
    """Whether the chunk's size allows it to hold its dictionary and indices only: a dictionary page
    within a writer's limit, then per value an index (at most the bit width of the value count) and a
    definition level. Plain pages hold each value whole, its length alone 4 bytes: a chunk that fell
    back to them after its dictionary's first values is larger (the footer has no page encodings)."""
    values = chunk.num_values
    return chunk.total_uncompressed_size <= WRITER_DICTIONARY_LIMIT + values * (values.bit_length() + 2) // 8


def decode_dictionaries(rows: pa.Table) -> pa.Table:
    """``rows`` with each dictionary column as its values' type (the same values)."""
    for index, field in enumerate(rows.schema):
        if pa.types.is_dictionary(field.type):
            column = rows.column(index)
            decoded = pa.chunked_array(
                [piece for chunk in column.chunks for piece in _decoded(chunk)], field.type.value_type
            )
            rows = rows.set_column(index, field.with_type(field.type.value_type), decoded)
    return rows


def _decoded(chunk: pa.DictionaryArray) -> list[pa.Array]:
    """The chunk's values, in pieces whose values fit 32-bit offsets (at most 2 GiB each): a row
    group of a few million rows of a long constant string decodes to more (Parquet's own read
    splits it so too), and a single take fails."""
    longest = pc.max(pc.binary_length(chunk.dictionary)).as_py() or 0
    if len(chunk) * longest <= _OFFSETS_LIMIT or _large(chunk.type.value_type):
        return [chunk.dictionary_decode()]
    step = max(1, _OFFSETS_LIMIT // longest)
    return [chunk.slice(start, step).dictionary_decode() for start in range(0, len(chunk), step)]


def _large(value_type: pa.DataType) -> bool:
    return pa.types.is_large_string(value_type) or pa.types.is_large_binary(value_type)
