"""A snapshot written out as one parquet file while it is read (``lake read --output``): the rows
stream from the merge into the file, so the table is never held whole."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.format.base_file import dictionary_columns
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.reader import snapshot_parts
from airflow_lake_provider.lake.table.table import LakeTable

# Parts smaller than this are gathered into one row group (a table of many small slices would
# otherwise get a row group per slice).
MIN_ROW_GROUP_ROWS = 65_536
HIDDEN_SUFFIX = ".lake-inprogress"
NAME_MAX_BYTES = 255
RUN_ID_CHARS = 8
# A hidden file of another run untouched this long is a killed run's leftover (a live run writes a
# row group every 65,536 rows or more, far more often).
STALE_AFTER_MS = 3_600_000


def export_parquet(table: LakeTable, folder: Storage, name: str, as_of: str | None = None) -> int:
    """Write the snapshot of ``table`` (as of ``as_of``) as the parquet file ``name`` of ``folder``;
    returns its row count. The file appears whole or not at all: it is written under a hidden name
    of its own beside it (runs to the same output at the same time each write their own, and the last
    to finish publishes), then published under ``name`` (replacing a file there), and the hidden one
    removed; hidden files of killed runs older than an hour are removed too."""
    schema, parts = snapshot_parts(table, as_of)
    hidden = hidden_name(name, os.urandom(RUN_ID_CHARS // 2).hex())  # (secrets: 5-20 ms to import)
    _remove_stale(folder, name, hidden)
    try:
        with folder.open_output(hidden) as sink:
            rows = _write_parts(sink, schema, parts)
        folder.copy(hidden, name)
    finally:
        folder.delete(hidden)
    return rows


def hidden_name(name: str, run_id: str) -> str:
    """``.NAME.RUN.lake-inprogress``, ``NAME`` cut so that the hidden name fits where ``name`` fits
    (255 bytes a name on most file systems): a long output name failed with "File name too long"
    on a name the user never gave."""
    return f"{_hidden_prefix(name)}{run_id}{HIDDEN_SUFFIX}"


def _hidden_prefix(name: str) -> str:
    room = NAME_MAX_BYTES - len(f"..{'0' * RUN_ID_CHARS}{HIDDEN_SUFFIX}")
    cut = name.encode("utf-8")[:room].decode("utf-8", "ignore")
    return f".{cut}."


def _remove_stale(folder: Storage, name: str, own: str) -> None:
    """Delete the hidden files of earlier runs to ``name`` that nothing wrote for an hour."""
    prefix = _hidden_prefix(name)
    now_ms = time.time() * 1000
    try:
        names = folder.list_names()
    except FileNotFoundError:
        return
    for other in names:
        if other == own or not (other.startswith(prefix) and other.endswith(HIDDEN_SUFFIX)):
            continue
        run_id = other[len(prefix) : -len(HIDDEN_SUFFIX)]
        if len(run_id) != RUN_ID_CHARS or not all(c in "0123456789abcdef" for c in run_id):
            continue
        try:
            if now_ms - folder.modified_ms(other) > STALE_AFTER_MS:
                folder.delete(other)
        except FileNotFoundError:
            continue  # its run finished meanwhile


def _write_parts(sink: object, schema: pa.Schema, parts: Iterator[pa.Table]) -> int:
    """Encode the parts into ``sink`` on a writer thread (Arrow's encoding releases the GIL) while
    the next part is read and merged: two row groups' worth in memory at most. The writer thread
    also opens the file, its dictionary columns judged on the first row group as in base files
    (Arrow would try a dictionary for every column: twice the encoding's CPU time here)."""
    opened: list[pq.ParquetWriter] = []
    rows = 0

    def write(group: pa.Table) -> None:
        if not opened:
            opened.append(pq.ParquetWriter(sink, schema, use_dictionary=dictionary_columns(group)))
        opened[0].write_table(group)

    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="export-write") as pool:
            pending: Future[None] | None = None
            for group in _row_groups(parts):
                if pending is not None:
                    pending.result()
                pending = pool.submit(write, group)
                rows += group.num_rows
            if pending is not None:
                pending.result()
    finally:
        (opened[0] if opened else pq.ParquetWriter(sink, schema)).close()
    return rows


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
