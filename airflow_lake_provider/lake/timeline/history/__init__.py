"""The archived timeline of Hudi 1.x tables (timeline layout 2): an LSM tree of parquet files under
``.hoodie/timeline/history/``, with manifests naming the files of each snapshot and ``_version_``
naming the latest snapshot (``layout``); its rows (``records``), read lazily (``reader``) and
written, compacted and cleaned as Hudi does (``writer``)."""

from airflow_lake_provider.lake.timeline.history.layout import HISTORY_DIR, DataFile, Snapshot
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter

__all__ = [
    "HISTORY_DIR",
    "ArchivedEntry",
    "ArchivedInstant",
    "DataFile",
    "History",
    "HistoryWriter",
    "Snapshot",
]
