"""Savepoints for rollback/restore tests on table versions 6 and 8: ``savepoint(table, instant)``
runs the savepoint service (the timeline store writes layout 1 and layout 2 savepoints alike)."""

from __future__ import annotations

from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.table.table import LakeTable


def savepoint(table: LakeTable, instant: str) -> None:
    create_savepoint(table, instant)
