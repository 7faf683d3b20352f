"""The ``success-file`` policy's file: which names it may take, and where it may be written.

The file is written whole (empty) over whatever has its name, so a name that is a data file or a
file Hudi keeps in the partition would truncate it and break the table. Both checks run before any
policy of any partition is applied.
"""

from __future__ import annotations

from collections.abc import Iterable

from airflow_lake_provider.lake.errors import (
    ObjectNotFoundError,
    PartitionCommitConfigError,
    PartitionCommitError,
)
from airflow_lake_provider.lake.format.commit_metadata import join_partition
from airflow_lake_provider.lake.storage_base import Storage

SUCCESS_FILE_KEY = "sink.partition-commit.success-file.name"
# Hudi's base and log file formats, and parquet directories' files: data, whatever the rest of the name.
DATA_SUFFIXES = (".parquet", ".orc", ".hfile", ".avro")


def check_success_file_name(name: str) -> str:
    """``name`` if a success file may take it: a plain name, not hidden, not a data file's."""
    if not name or "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
        raise PartitionCommitConfigError(f"{SUCCESS_FILE_KEY}={name!r} is not a plain file name")
    if name.startswith("."):
        raise PartitionCommitConfigError(
            f"{SUCCESS_FILE_KEY}={name!r} is a hidden name, as Hudi's own files in a partition are "
            "(.hoodie_partition_metadata, log files .<fileId>_<instant>.log.<n>): choose another, "
            "e.g. _SUCCESS"
        )
    if name.lower().endswith(DATA_SUFFIXES):
        raise PartitionCommitConfigError(
            f"{SUCCESS_FILE_KEY}={name!r} is the name of a data file ({', '.join(DATA_SUFFIXES)}): "
            "choose another, e.g. _SUCCESS"
        )
    return name


def check_success_targets(storage: Storage, partitions: Iterable[str], name: str) -> None:
    """Refuse to write the success file where a non-empty file (or a folder) has its name: an
    earlier success file is empty, anything else would be truncated."""
    for partition in partitions:
        rel = join_partition(partition, name)
        try:
            size = storage.size(rel)
        except ObjectNotFoundError:
            continue
        if size:
            raise PartitionCommitError(
                f"{storage.uri(rel)} exists and is not an empty success file ({size} bytes): "
                f"{SUCCESS_FILE_KEY}={name!r} would overwrite it; nothing was committed"
            )
