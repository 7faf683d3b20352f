"""A table's data files written through its storage: base files and partition metadata (log files:
``log_file.scanner``)."""

from __future__ import annotations

import pyarrow as pa

from airflow_lake_provider.lake.file_group.file_names import PARTITION_METADATA_FILE
from airflow_lake_provider.lake.format.base_file import write_base_file
from airflow_lake_provider.lake.format.bloom_filter import BloomSettings
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


def write_partition_metadata(storage: Storage, partition: str, instant: str, depth: int) -> None:
    """Create ``.hoodie_partition_metadata`` once per partition (Java's partition discovery needs it)."""
    rel = f"{partition}/{PARTITION_METADATA_FILE}" if partition else PARTITION_METADATA_FILE
    if not storage.exists(rel):
        storage.write(rel, partition_metadata_bytes(instant, depth))
