"""``PartitionCommitTrigger``: waits, in the triggerer, until partitions of a table are committable.

Light to import (no table-core code at import time); each look at the table runs in a thread, off
the triggerer's event loop. It never commits: the sensor does that in the worker once it fires.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_lake_provider.hooks.errors import fails_now


class PartitionCommitTrigger(BaseTrigger):
    """Polls the commit plan of ``partitions`` until none waits for its trigger or first write.

    Events: ``{"status": "ready", "summary": ...}`` (the dry-run plan), ``{"status": "timeout"}``
    once ``timeout_at`` (epoch seconds) passes, ``{"status": "error", "message": ..., "fail_now": bool}``
    (``fail_now``: a bad option or table, which a retry cannot change: the sensor fails at once).

    :param table_path: absolute base path of the table (already resolved by the sensor).
    :param partitions: partition paths.
    :param options: partition commit options.
    :param watermark: watermark for the partition-time trigger (ISO 8601 or epoch ms), or ``None``.
    :param poll_interval: seconds between two looks.
    :param timeout_at: epoch seconds after which the trigger gives up, or ``None``.
    """

    def __init__(
        self,
        table_path: str,
        partitions: list[str],
        options: dict[str, str] | None = None,
        watermark: str | None = None,
        poll_interval: float = 60.0,
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
        self.partitions = [str(p) for p in partitions]
        self.options = {str(k): str(v) for k, v in (options or {}).items()}
        self.watermark = None if watermark is None else str(watermark)
        self.poll_interval = float(poll_interval)
        self.timeout_at = None if timeout_at is None else float(timeout_at)
        # The connection is looked up in the triggerer: credentials are never serialized.
        self.lake_conn_id = lake_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_path": self.table_path,
                "partitions": self.partitions,
                "options": self.options,
                "watermark": self.watermark,
                "poll_interval": self.poll_interval,
                "timeout_at": self.timeout_at,
                "lake_conn_id": self.lake_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                summary = await asyncio.to_thread(self._look)
            except Exception as exc:  # a bad table or option: report it, the sensor fails the task
                yield TriggerEvent({"status": "error", "message": str(exc), "fail_now": fails_now(exc)})
                return
            if not summary.get("waiting") and not summary.get("missing"):
                yield TriggerEvent({"status": "ready", "summary": summary})
                return
            if self.timeout_at is not None and time.time() >= self.timeout_at:
                yield TriggerEvent({"status": "timeout"})
                return
            await asyncio.sleep(self.poll_interval)

    def _look(self) -> dict[str, Any]:
        from airflow_lake_provider.hooks.partition_commit import run_partition_commit

        return run_partition_commit(
            self.table_path,
            self.partitions,
            self.options,
            watermark=self.watermark,
            dry_run=True,
            require_existing=False,
            lake_conn_id=self.lake_conn_id,
        )
