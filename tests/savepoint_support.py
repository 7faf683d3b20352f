"""Savepoints for rollback/restore tests on table versions 6 and 8.

``savepoint(table, instant)`` runs the savepoint service inside a write scope (savepoints on v8/v9
are not the subject of the tests that use this). Until the timeline store writes a layout-2
savepoint (its completed file carries a completion time), a v8 savepoint's two files are written
here as Hudi 1.x names them: ``<t>.savepoint.inflight`` (empty), then ``<t>_<completion>.savepoint``.
"""

from __future__ import annotations

from airflow_lake_provider.lake.errors import InvalidInstantError
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro


def savepoint(table: LakeTable, instant: str) -> None:
    try:
        create_savepoint(table, instant)
        return
    except InvalidInstantError:
        if not table.layout.has_completion_times:
            raise
    folder = table.base_path / table.layout.folder
    inflight = folder / f"{instant}.savepoint.inflight"
    inflight.unlink(missing_ok=True)  # what the refused attempt left
    record = {
        "savepointedBy": "test",
        "savepointedAt": 0,
        "comments": "",
        "partitionMetadata": {},
        "version": 1,
    }
    completion = table.clock.next(after=table.timeline().latest_time)
    inflight.write_bytes(b"")
    (folder / f"{instant}_{completion}.savepoint").write_bytes(
        timeline_avro.write_avro(timeline_avro.SAVEPOINT_METADATA, record)
    )
