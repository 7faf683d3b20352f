"""A table's data files written through its storage: base files and partition metadata (log files:
``log_file.scanner``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from airflow_lake_provider.lake.file_group.file_names import PARTITION_METADATA_FILE
from airflow_lake_provider.lake.format.base_file import BaseFileWriter, write_base_file
from airflow_lake_provider.lake.format.bloom_filter import BloomFilter, BloomSettings
from airflow_lake_provider.lake.format.partitioning import partition_metadata_bytes
from airflow_lake_provider.lake.storage import Storage


def store_base_file(storage: Storage, rel: str, rows: pa.Table, bloom: BloomSettings) -> int:
    """Write ``rows`` as the base file ``rel`` (durable on return); return its size in bytes.

    ``bloom`` sizes the footer's record-key bloom filter (``BloomSettings.from_options`` of the
    table's properties).
    """
    with storage.open_output(rel) as sink:
        write_base_file(sink, rows, bloom)
    return storage.size(rel)


def store_base_parts(
    storage: Storage,
    rel: str,
    schema: pa.Schema,
    parts: Iterable[tuple[pa.Table, bool]],
    bloom: BloomSettings,
    previous: Callable[[], BloomFilter | None] | None = None,
) -> tuple[int, int]:
    """Write the base file ``rel`` from ``(rows, carried)`` parts in file order (durable on return):
    see :class:`BaseFileWriter` for ``previous`` and ``carried``. Returns (rows, size in bytes)."""
    with storage.open_output(rel) as sink:
        writer = BaseFileWriter(sink, schema, bloom, previous)
        try:
            _write_parts(writer, parts)
            writer.close()
        except BaseException:
            writer.abort()  # open_output then discards the file
            raise
    return writer.rows, storage.size(rel)


def _write_parts(writer: BaseFileWriter, parts: Iterable[tuple[pa.Table, bool]]) -> None:
    if pa.cpu_count() > 1:
        # Encoding runs without the GIL: one thread encodes part k while the caller produces
        # part k + 1 (two parts in memory at most). A Spark task caps Arrow at its cores.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="base-file-write") as pool:
            pending: Future[None] | None = None
            for rows, carried in parts:
                if pending is not None:
                    pending.result()
                pending = pool.submit(writer.write, rows, carried=carried)
            if pending is not None:
                pending.result()
    else:
        for rows, carried in parts:
            writer.write(rows, carried=carried)


def write_partition_metadata(storage: Storage, partition: str, instant: str, depth: int) -> None:
    """Create ``.hoodie_partition_metadata`` once per partition (Java's partition discovery needs it)."""
    rel = f"{partition}/{PARTITION_METADATA_FILE}" if partition else PARTITION_METADATA_FILE
    if not storage.exists(rel):
        storage.write(rel, partition_metadata_bytes(instant, depth))
