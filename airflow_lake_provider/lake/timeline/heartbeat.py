"""Heartbeats: a running write refreshes ``.hoodie/.heartbeat/<instant>`` (Hudi's LAZY failed-writes
policy judges a pending write by it; ``table/rollback/policy`` decides what an expired one means)."""

from __future__ import annotations

from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.timeline.instant import validate_instant_time

HEARTBEAT_DIR = ".heartbeat"


class Heartbeats:
    """The heartbeat files of a table's writes (through the timeline store: ``store.heartbeats``)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def path(self, timestamp: str) -> str:
        return f"{HOODIE_DIR}/{HEARTBEAT_DIR}/{timestamp}"

    def beat(self, timestamp: str, now_ms: int) -> None:
        """Refresh a running write's heartbeat (Hudi reads the file's modification time; we also
        write the time into it, so a copied or touched file still tells the truth)."""
        validate_instant_time(timestamp)
        self.storage.write(self.path(timestamp), str(now_ms).encode())

    def delete(self, timestamp: str) -> None:
        self.storage.delete(self.path(timestamp))
