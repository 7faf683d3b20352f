"""A table's data files read and written through its storage: base files, log files, partition metadata."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from airflow_lake_provider.lake.errors import (
    CorruptLogBlockError,
    LakeError,
    StorageAccessError,
    StorageUnavailableError,
)
from airflow_lake_provider.lake.file_group.file_names import PARTITION_METADATA_FILE
from airflow_lake_provider.lake.format.base_file import write_base_file
from airflow_lake_provider.lake.format.bloom_filter import BloomSettings
from airflow_lake_provider.lake.format.partitioning import partition_metadata_bytes
from airflow_lake_provider.lake.log_file.log_format import LogBlock, parse_log_bytes
from airflow_lake_provider.lake.storage import Storage


def store_base_file(storage: Storage, rel: str, rows: pa.Table, bloom: BloomSettings) -> int:
    """Write ``rows`` as the base file ``rel`` (durable on return); return its size in bytes.

    ``bloom`` sizes the footer's record-key bloom filter (``BloomSettings.from_options`` of the
    table's properties).
    """
    with storage.open_output(rel) as sink:
        write_base_file(sink, rows, bloom)
    return storage.size(rel)


def read_log_blocks(storage: Storage, rel: str) -> list[LogBlock]:
    """Every intact block of log file ``rel``; damaged regions are skipped with a warning.

    :raises CorruptLogBlockError: if the file cannot be read at all.
    """
    try:
        data = storage.read(rel)
    except (StorageAccessError, StorageUnavailableError):
        raise  # the store, not the file: already names the URI, and is not corruption
    except (LakeError, OSError) as exc:
        raise CorruptLogBlockError(f"cannot read log file {storage.uri(rel)}: {exc}") from exc
    return parse_log_bytes(data, storage.uri(rel))


def append_log_blocks(storage: Storage, rel: str, blocks: Sequence[bytes]) -> tuple[int, int]:
    """Append encoded blocks to log file ``rel`` (created if missing), durably.

    :returns: (file size before = offset of the first new block, new file size).
    """
    return storage.append(rel, b"".join(blocks))


def write_partition_metadata(storage: Storage, partition: str, instant: str, depth: int) -> None:
    """Create ``.hoodie_partition_metadata`` once per partition (Java's partition discovery needs it)."""
    rel = f"{partition}/{PARTITION_METADATA_FILE}" if partition else PARTITION_METADATA_FILE
    if not storage.exists(rel):
        storage.write(rel, partition_metadata_bytes(instant, depth))
