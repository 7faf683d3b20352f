"""``CompactionPlanTrigger``: waits, in the triggerer, for a requested compaction plan to appear.

Light to import (no table-core code at import time: the triggerer loads trigger modules on its
event loop); each look at the timeline runs in a thread, off the loop.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_lake_provider.hooks.errors import fails_now


class CompactionPlanTrigger(BaseTrigger):
    """Polls a table's timeline until a ``<c>.compaction.requested`` exists, then fires with ``c``.

    Events: ``{"status": "success", "instant": c}``, ``{"status": "timeout"}`` once ``timeout_at``
    (epoch seconds) passes, ``{"status": "error", "message": ..., "fail_now": bool}`` if the table
    cannot be read (``fail_now``: a retry cannot help, so the sensor fails its task at once).

    :param table_path: absolute base path of the table (already resolved by the sensor).
    :param poll_interval: seconds between two looks at the timeline.
    :param timeout_at: epoch seconds after which the trigger gives up, or ``None``.
    :param lake_conn_id: the ``lake`` connection whose S3 settings open the table (looked up in the
        triggerer: the credentials are never serialized with the trigger).
    """

    def __init__(
        self,
        table_path: str,
        poll_interval: float = 30.0,
        timeout_at: float | None = None,
        lake_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        if not table_path:
            raise ValueError("table_path must not be empty")
        if not (math.isfinite(float(poll_interval)) and float(poll_interval) > 0):
            raise ValueError(f"poll_interval={poll_interval} must be a finite number > 0")
        if timeout_at is not None and not math.isfinite(float(timeout_at)):
            raise ValueError(f"timeout_at={timeout_at} must be a finite number (epoch seconds) or None")
        self.table_path = str(table_path)
        self.poll_interval = float(poll_interval)
        self.timeout_at = None if timeout_at is None else float(timeout_at)
        self.lake_conn_id = lake_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_path": self.table_path,
                "poll_interval": self.poll_interval,
                "timeout_at": self.timeout_at,
                "lake_conn_id": self.lake_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                # File system and S3 calls block (and the first one imports the core): keep them off
                # the triggerer's event loop.
                instant = await asyncio.to_thread(self._look)
            except Exception as exc:  # an unreadable table or a bad connection: the sensor fails the task
                yield TriggerEvent({"status": "error", "message": str(exc), "fail_now": fails_now(exc)})
                return
            if instant is not None:
                yield TriggerEvent({"status": "success", "instant": instant})
                return
            if self.timeout_at is not None and time.time() >= self.timeout_at:
                yield TriggerEvent({"status": "timeout"})
                return
            await asyncio.sleep(self.poll_interval)

    def _look(self) -> str | None:
        """One look at ``.hoodie/`` (a listing; no commit file is read).

        Through the storage and the timeline only, not ``LakeTable``: that would load pyarrow and
        polars into the triggerer, and loading polars' native library holds the interpreter lock for
        0.1-0.5 s, which blocks the event loop even from a thread.
        """
        from airflow_lake_provider.hooks.compaction import requested_compaction_in
        from airflow_lake_provider.lake.errors import TableNotFoundError
        from airflow_lake_provider.lake.storage import open_storage
        from airflow_lake_provider.lake.timeline.active import Timeline
        from airflow_lake_provider.lake.timeline.store import PROPERTIES_FILE

        environ: dict[str, str] = dict(os.environ)
        if self.lake_conn_id:
            from airflow_lake_provider.hooks.lake import LakeHook

            environ.update(LakeHook(lake_conn_id=self.lake_conn_id).storage_env())
        storage = open_storage(self.table_path, environ=environ)
        if not storage.exists(f".hoodie/{PROPERTIES_FILE}"):
            raise TableNotFoundError(f"{self.table_path} is not a Hudi table: no .hoodie/{PROPERTIES_FILE}")
        return requested_compaction_in(Timeline.load(storage))
