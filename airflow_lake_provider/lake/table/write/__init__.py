"""Insert, upsert and delete of an Arrow batch into a COW or MOR table, one instant per call.

``writer`` orchestrates one write (lock, instant, commit, rollback on error); ``checks`` refuses a
bad batch before any instant exists; ``planner`` assigns rows to file groups with the bloom index
(``table/index/bloom``); ``group_writer`` writes one file group's files; ``plan`` holds what passes
between them.
"""

from airflow_lake_provider.lake.table.index.bloom import BaseFileReads, LookupStats
from airflow_lake_provider.lake.table.write.checks import EVENT_TIME_FIELD, EVENT_TIME_MAX, EVENT_TIME_MIN
from airflow_lake_provider.lake.table.write.group_writer import write_file_group
from airflow_lake_provider.lake.table.write.plan import (
    FaultHook,
    FileGroupResult,
    FileGroupWrite,
    GroupKind,
    GroupRunner,
    Operation,
    WriteContext,
)
from airflow_lake_provider.lake.table.write.planner import plan_file_groups
from airflow_lake_provider.lake.table.write.writer import (
    DEFAULT_MAX_ROWS_PER_FILE,
    WRITE_LOCK_WAIT_SECONDS,
    WriteResult,
    write,
)

__all__ = [
    "DEFAULT_MAX_ROWS_PER_FILE",
    "EVENT_TIME_FIELD",
    "EVENT_TIME_MAX",
    "EVENT_TIME_MIN",
    "WRITE_LOCK_WAIT_SECONDS",
    "BaseFileReads",
    "FaultHook",
    "FileGroupResult",
    "FileGroupWrite",
    "GroupKind",
    "GroupRunner",
    "LookupStats",
    "Operation",
    "WriteContext",
    "WriteResult",
    "plan_file_groups",
    "write",
    "write_file_group",
]
