"""Table-format core: Apache Hudi table version 6 in pure Python (no Airflow, no Spark).

The names most programs need are importable from here::

    from airflow_lake_provider.lake import LakeTable, read_snapshot, write

They load on first use, so importing this package stays cheap (no pyarrow, polars or fastavro).
Layers, each importing only those below it: ``services`` (clean, compaction, partition commit,
savepoints) > ``table`` (merge, read, write, rollback, archival) > ``file_group`` (file slices and
groups, the file system view) > ``timeline`` (instants, active and archived timeline, the store) >
``log_file`` (log blocks) > ``format`` (Hudi v6 codecs) > ``storage`` (every file access) and ``errors``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "LakeTable": "airflow_lake_provider.lake.table.table",
    "read_snapshot": "airflow_lake_provider.lake.table.reader",
    "write": "airflow_lake_provider.lake.table.write",
    "Operation": "airflow_lake_provider.lake.table.write",
    "LakeError": "airflow_lake_provider.lake.errors",
    "Storage": "airflow_lake_provider.lake.storage",
    "open_storage": "airflow_lake_provider.lake.storage",
}
__all__ = ["LakeError", "LakeTable", "Operation", "Storage", "open_storage", "read_snapshot", "write"]

if TYPE_CHECKING:
    from airflow_lake_provider.lake.errors import LakeError
    from airflow_lake_provider.lake.storage import Storage, open_storage
    from airflow_lake_provider.lake.table.reader import read_snapshot
    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import Operation, write


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
