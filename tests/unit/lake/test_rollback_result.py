"""What a rollback reports: its result (and the dict the CLI and operators print) and its log line."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.format.instant import InstantClock
from airflow_lake_provider.lake.storage import SimulatedCrash, inject_crash
from airflow_lake_provider.lake.table.rollback.executor import RollbackResult, rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

START = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def _table(path: Path) -> LakeTable:
    ticks = iter(range(10**6))
    return LakeTable.create(
        path,
        name="orders",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
        clock=InstantClock(now=lambda: START + dt.timedelta(milliseconds=next(ticks))),
    )


def _batch(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "city": pa.array(["a" if i % 2 else "b" for i in ids], pa.string()),
        }
    )


def _data_files(path: Path) -> set[str]:
    return {
        p.relative_to(path).as_posix()
        for p in path.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie_partition")
    }


def test_rollback_of_a_crashed_write_reports_exactly_what_it_undid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2], 10), "insert")
    before = _data_files(path)
    probe_table = _table(tmp_path / "probe")  # the same writes, counting the second one's steps
    write(probe_table, _batch([1, 2], 10), "insert")
    with inject_crash(None) as probe:
        write(probe_table, _batch([3, 4], 20), "insert")
    # Crash the second write just before its completed file: its data files exist, it stays pending.
    completing = next(i for i, step in enumerate(probe.steps) if step.endswith(".commit"))
    with pytest.raises(SimulatedCrash), inject_crash(completing):
        write(table, _batch([3, 4], 20), "insert", options={"hoodie.cleaner.policy.failed.writes": "NEVER"})
    [failed] = table.timeline().pending
    made = sorted(_data_files(path) - before)
    assert len(made) == 2  # one base file per partition

    caplog.set_level(logging.INFO, logger="airflow_lake_provider.lake.table.rollback.executor")
    [result] = rollback(table)
    r = table.timeline().instants[-1].timestamp
    assert result == RollbackResult(r, failed.timestamp, "commit", tuple(made), (), False, ())
    assert result.to_dict() == {
        "instant": r,
        "rolled_back": failed.timestamp,
        "action": "commit",
        "deleted": made,
        "marked": [],
        "resumed": False,
        "failed": [],
    }
    assert _data_files(path) == before
    assert [rec.getMessage() for rec in caplog.records] == [
        f"rolled back commit {failed.timestamp} at {r}: 2 deleted, 0 marked"
    ]
