"""Shared by the exact compaction tests: a small MOR table on a ticking clock, batches, crash hooks,
and a storage that records what a run reads and locks."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_lake_provider.lake.storage import LocalStorage, SimulatedCrash
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, Instant, InstantClock, State
from airflow_lake_provider.lake.timeline.store import TimelineStore

DUE = {"hoodie.compact.inline.max.delta.commits": "1"}
START = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)


def batch(ids: list[str], ts: int, partition: str) -> pa.Table:
    return pa.table({"id": ids, "ts": pa.array([ts] * len(ids), pa.int64()), "p": [partition] * len(ids)})


def empty_mor(
    tmp_path: Path,
    clock: InstantClock | None = None,
    table_version: int = 6,
    partition_fields: tuple[str, ...] = ("p",),
) -> LakeTable:
    """A MOR table of ``table_version`` partitioned by ``partition_fields``, its clock one second
    further at every instant."""
    ticks = iter(range(10**6))
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=partition_fields,
        clock=clock or InstantClock(now=lambda: START + dt.timedelta(seconds=next(ticks))),
        table_version=table_version,
    )


def mor(tmp_path: Path, table_version: int = 6) -> LakeTable:
    """x (a, b) and y (c) with one file group each; x has a log file (a updated to ts 2), y not."""
    table = empty_mor(tmp_path, table_version=table_version)
    write(table, pa.concat_tables([batch(["a", "b"], 1, "x"), batch(["c"], 1, "y")]), "insert")
    write(table, batch(["a"], 2, "x"), "upsert")
    return table


def crash_at(where: str) -> Callable[[str], None]:
    """A fault hook that crashes at the point ``where``."""

    def fault(point: str) -> None:
        if point == where:
            raise SimulatedCrash(point)

    return fault


def store(table: LakeTable) -> TimelineStore:
    """A timeline store of ``table`` as another process has one (a lock holder, a marker reader)."""
    return TimelineStore(table.storage, table.layout, table.clock)


def timeline_file(table: LakeTable, c: str, state: State, action: Action = Action.COMPACTION) -> Path:
    """The timeline file of ``c`` in ``state``: under ``.hoodie/`` (v6) or ``.hoodie/timeline/`` (v8);
    a completed one found by name (layout 2 adds the completion time)."""
    if state is State.COMPLETED:
        (found,) = [i for i in table.timeline().instants if i.timestamp == c and i.is_completed]
        return table.base_path / table.layout.instant_path(found)
    return table.base_path / table.layout.instant_path(Instant(c, state, action))


def commit_record(table: LakeTable, c: str) -> dict:
    """The completed commit at ``c`` as its file holds it: JSON (v6), Avro under Hudi 1.x's schema (v8)."""
    data = timeline_file(table, c, State.COMPLETED).read_bytes()
    if table.layout.has_completion_times:
        return timeline_avro.read_commit_metadata(data, c)
    return json.loads(data)


def drop_commit_schemas(table: LakeTable) -> None:
    """Rewrite every completed commit without the schema in its extra metadata (JSON or Avro)."""
    timeline = table.timeline()
    for commit in timeline.completed_commits:
        meta = timeline.commit_metadata(commit)
        extra = {k: v for k, v in meta.extra_metadata.items() if k != "schema"}
        body = dataclasses.replace(meta, extra_metadata=extra).to_bytes(table.layout.has_completion_times)
        timeline_file(table, commit.timestamp, State.COMPLETED).write_bytes(body)


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
