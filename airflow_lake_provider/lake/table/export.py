"""A snapshot written out as one parquet file while it is read (``lake read --output``): the rows
stream from the merge into the file, so the table is never held whole."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.reader import snapshot_parts
from airflow_lake_provider.lake.table.table import LakeTable

# Parts smaller than this are gathered into one row group (a table of many small slices would
# otherwise get a row group per slice).
MIN_ROW_GROUP_ROWS = 65_536
HIDDEN_SUFFIX = ".lake-inprogress"
NAME_MAX_BYTES = 255


def export_parquet(table: LakeTable, folder: Storage, name: str, as_of: str | None = None) -> int:
    """Write the snapshot of ``table`` (as of ``as_of``) as the parquet file ``name`` of ``folder``;
    returns its row count. The file appears whole or not at all: it is written under a hidden name
    beside it, then published under ``name`` (replacing a file there), and the hidden one removed."""
    schema, parts = snapshot_parts(table, as_of)
    hidden = hidden_name(name)
    try:
        with folder.open_output(hidden) as sink:
            rows = _write_parts(sink, schema, parts)
        folder.copy(hidden, name)
    finally:
        folder.delete(hidden)
    return rows


def hidden_name(name: str) -> str:
    """``.NAME.lake-inprogress``, ``NAME`` cut so that the hidden name fits where ``name`` fits
    (255 bytes a name on most file systems): a long output name failed with "File name too long"
    on a name the user never gave."""
    room = NAME_MAX_BYTES - len(f".{HIDDEN_SUFFIX}")
    cut = name.encode("utf-8")[:room].decode("utf-8", "ignore")
    return f".{cut}{HIDDEN_SUFFIX}"


def _write_parts(sink: object, schema: pa.Schema, parts: Iterator[pa.Table]) -> int:
    """Encode the parts into ``sink`` on a writer thread (Arrow's encoding releases the GIL) while
    the next part is read and merged: two row groups' worth in memory at most."""
    writer: pq.ParquetWriter | None = None
    rows = 0
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="export-write") as pool:
            pending: Future[None] | None = None
            for group in _row_groups(parts):
                if writer is None:
                    writer = pq.ParquetWriter(sink, schema, use_dictionary=dictionary_columns(group))
                if pending is not None:
                    pending.result()
                pending = pool.submit(writer.write_table, group)
                rows += group.num_rows
            if pending is not None:
                pending.result()
    finally:
        (writer or pq.ParquetWriter(sink, schema)).close()
    return rows


def dictionary_columns(sample: pa.Table) -> list[str]:
    """The flat columns worth dictionary encoding, judged on the first row group: those with at most
    half as many distinct values as rows. Arrow would try a dictionary for every column and give it
    up only past 1 MB per row group: on a column of unique keys or measurements, in a row group of
    this size, that doubles the encoding's CPU time and grows the file."""
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


def _row_groups(parts: Iterable[pa.Table]) -> Iterator[pa.Table]:
    gathered: list[pa.Table] = []
    count = 0
    for part in parts:
        if not part.num_rows:
            continue
        gathered.append(part)
        count += part.num_rows
        if count >= MIN_ROW_GROUP_ROWS:
            yield pa.concat_tables(gathered) if len(gathered) > 1 else gathered[0]
            gathered, count = [], 0
    if gathered:
        yield pa.concat_tables(gathered) if len(gathered) > 1 else gathered[0]
