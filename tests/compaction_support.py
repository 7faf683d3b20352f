"""Shared by the exact compaction tests: a small MOR table on a ticking clock, batches, crash hooks,
and a storage that records what a run reads and locks."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_lake_provider.lake.storage import LocalStorage, SimulatedCrash
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import InstantClock

DUE = {"hoodie.compact.inline.max.delta.commits": "1"}
START = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)


def batch(ids: list[str], ts: int, partition: str) -> pa.Table:
    return pa.table({"id": ids, "ts": pa.array([ts] * len(ids), pa.int64()), "p": [partition] * len(ids)})


def empty_mor(tmp_path: Path, clock: InstantClock | None = None) -> LakeTable:
    """A MOR table partitioned by ``p``, its clock one second further at every instant."""
    ticks = iter(range(10**6))
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        clock=clock or InstantClock(now=lambda: START + dt.timedelta(seconds=next(ticks))),
    )


def mor(tmp_path: Path) -> LakeTable:
    """x (a, b) and y (c) with one file group each; x has a log file (a updated to ts 2), y not."""
    table = empty_mor(tmp_path)
    write(table, pa.concat_tables([batch(["a", "b"], 1, "x"), batch(["c"], 1, "y")]), "insert")
    write(table, batch(["a"], 2, "x"), "upsert")
    return table


def crash_at(where: str) -> Callable[[str], None]:
    """A fault hook that crashes at the point ``where``."""

    def fault(point: str) -> None:
        if point == where:
            raise SimulatedCrash(point)

    return fault


TIMELINE = ("list", ".hoodie")  # a read of the timeline (S3 lists cost: one per lock held)


class RecordingStorage(LocalStorage):
    """A local table that records, in order, the parquet files it opens, the timeline listings and
    the locks it takes; ``before_write_lock`` runs once, just before the write lock is taken."""

    def __init__(self, root: str | Path) -> None:
        super().__init__(root)
        self.events: list[tuple[str, str]] = []
        self.before_write_lock: Callable[[], None] | None = None

    def open_input(self, rel: str) -> Any:
        if rel.endswith(".parquet"):
            self.events.append(("read", rel))
        return super().open_input(rel)

    def list_names(self, rel: str = "") -> list[str]:
        if rel == ".hoodie":
            self.events.append(TIMELINE)
        return super().list_names(rel)

    def lock(self, rel: str, what: str, wait_seconds: float = 0.0) -> contextlib.AbstractContextManager[None]:
        name = rel.rsplit("/", 1)[-1]
        if name == ".lake-write.lock" and self.before_write_lock is not None:
            hook, self.before_write_lock = self.before_write_lock, None
            hook()
        self.events.append(("lock", name))
        return super().lock(rel, what, wait_seconds)


def recorded(table: LakeTable) -> tuple[LakeTable, RecordingStorage]:
    """``table`` (its files, config and clock) through a :class:`RecordingStorage`."""
    storage = RecordingStorage(table.base_path)
    return LakeTable(storage, table.config, table.clock), storage
