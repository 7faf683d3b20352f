"""What one write plans: its operation, the context every file group shares, each file group's part
(planned by ``planner``, written by ``group_writer``, in this process or on a Spark executor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

import pyarrow as pa

from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.format.bloom_filter import DEFAULT_SETTINGS, BloomSettings
from airflow_lake_provider.lake.log_file.data_block import BlockRows
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import WriteStat

# Internal columns carried alongside a batch while it is routed; never written.
_KEY, _PART, _ORD = "__lake_key", "__lake_partition", "__lake_ordering"


class Operation(str, Enum):
    INSERT = "insert"
    UPSERT = "upsert"
    DELETE = "delete"


FaultHook = Callable[[str], None]


def _no_fault(_point: str) -> None:
    return None


class GroupKind(str, Enum):
    INSERT = "insert"  # new file group: one new base file
    MERGE = "merge"  # copy-on-write: the group rewritten as a new base file
    APPEND = "append"  # merge-on-read: a new log file version with one data or delete block


@dataclass(frozen=True)
class WriteContext:
    """What every file group's part of one write needs; picklable, so Spark executors get it whole."""

    instant: str
    timeline: Timeline
    schema: pa.Schema  # meta fields + data fields, as the base files hold them
    avro: dict  # the table's Avro schema (data fields)
    operation: Operation
    bloom: BloomSettings = DEFAULT_SETTINGS  # sizes the bloom filter of every base file written


@dataclass(frozen=True)
class FileGroupWrite:
    """One file group's part of a write, planned by :func:`plan_file_groups` with the key lookup
    and run by :func:`write_file_group` (in this process, or on an executor)."""

    index: int  # 1-based, unique in the write: the write token and the commit sequence numbers
    partition: str
    kind: GroupKind
    file_id: str
    seqno_start: int
    rows: pa.Table  # the routed rows of this group (with the internal __lake_* columns)
    merged: FileSlice | None = None  # MERGE/APPEND: the latest slice as readers merge it
    newest: FileSlice | None = None  # APPEND: the slice the new log file joins
    first_in_partition: bool = False  # INSERT: write the partition metadata file first


@dataclass(frozen=True)
class FileGroupResult:
    """What one :class:`FileGroupWrite` wrote: files, its write stat (``None``: nothing won)."""

    files: tuple[str, ...] = ()
    stat: WriteStat | None = None
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    # APPEND of a data block, in this process: its rows, for the log's column stats (None: read back).
    log_rows: BlockRows | None = None


# Runs the file groups of a write and returns their results in the same order (the default runs
# them here one by one; spark_jobs/write.py spreads them over executors).
GroupRunner = Callable[[LakeTable, WriteContext, Sequence[FileGroupWrite]], Sequence[FileGroupResult]]
