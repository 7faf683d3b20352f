"""The ``success-file`` policy's file: which names it may take, and where it may be written.

The file is written whole (empty) over whatever has its name, so a name that is a data file or a
file Hudi keeps in the partition would truncate it and break the table. Names are checked with the
configuration, the files the name would overwrite before any policy of any partition is applied.
"""

from __future__ import annotations

from collections.abc import Iterable

from airflow_lake_provider.lake.config.registry import PC_SUCCESS_FILE
from airflow_lake_provider.lake.errors import (
    ObjectNotFoundError,
    PartitionCommitConfigError,
    PartitionCommitError,
    StorageError,
)
from airflow_lake_provider.lake.storage.base import Storage
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition

SUCCESS_FILE_KEY = PC_SUCCESS_FILE.key


# How data files start: Parquet (also its _metadata summaries), ORC, Avro object containers.
DATA_MAGIC = {b"PAR1": "parquet", b"ORC": "ORC", b"Obj\x01": "Avro"}


def check_success_targets(storage: Storage, partitions: Iterable[str], name: str) -> None:
    """Refuse to write the success file over a data file of that name (named as none of the name
    rules above foresee: Hive's ``000000_0``, Spark's ``_metadata``). Any other file is overwritten,
    as Flink does: an earlier success file, or an S3A committer's ``_SUCCESS`` manifest. A name the
    storage cannot hold there (longer than a file name may be) is refused too, before anything runs."""
    for partition in partitions:
        rel = join_partition(partition, name)
        try:
            storage.check_path(rel, what=storage.uri(rel))
        except StorageError as exc:
            raise PartitionCommitConfigError(
                f"{SUCCESS_FILE_KEY}={name!r}: {exc}; nothing was committed"
            ) from None
        try:
            head = storage.read_range(rel, 0, 4)
        except ObjectNotFoundError:
            continue
        except IsADirectoryError:
            kind = "a folder"
        else:
            kind = next(
                (f"a data file ({k})" for magic, k in DATA_MAGIC.items() if head.startswith(magic)), None
            )
        if kind is not None:
            raise PartitionCommitError(
                f"{storage.uri(rel)} is {kind}: {SUCCESS_FILE_KEY}={name!r} would overwrite it; "
                "nothing was committed"
            )
