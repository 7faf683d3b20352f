"""A clean under the LAZY failed-writes policy rolls back the writes whose heartbeat expired first (as
Hudi's cleaner does), from the table's policy or the caller's options, under the write lock."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import CorruptTimelineFileError
from airflow_lake_provider.lake.services.clean import executor
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action

LAZY = {"hoodie.cleaner.policy.failed.writes": "LAZY"}
# A heartbeat expires 2 ms after its last beat.
EXPIRES_AT_ONCE = {
    "hoodie.client.heartbeat.interval_in_ms": "1",
    "hoodie.client.heartbeat.tolerable.misses": "2",
}
RETAIN_ONE = {"hoodie.cleaner.commits.retained": "1"}


def _table(tmp_path: Path, properties: dict[str, str]) -> LakeTable:
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    table.store.update_properties({**table.config.properties, **properties})
    return LakeTable.open(tmp_path / "t")


def _batch(key: str, ts: int) -> pa.Table:
    return pa.table({"id": [key], "ts": pa.array([ts], pa.int64()), "p": ["x"]})


def _crashed_write(table: LakeTable) -> str:
    """A write that died after its requested file, its heartbeat left behind (and soon expired)."""

    def die(point: str) -> None:
        # The write's own hook, not a crash injected at the n-th storage step: the heartbeat thread
        # beats every millisecond and could take that step instead.
        if point == "requested":
            raise SimulatedCrash(point)

    with pytest.raises(SimulatedCrash):
        write(table, _batch("k9", 9), "insert", options={**LAZY, **EXPIRES_AT_ONCE}, fault=die)
    (pending,) = table.timeline().pending
    assert (table.base_path / ".hoodie" / ".heartbeat" / pending.timestamp).exists()
    time.sleep(0.05)  # well past 2 ms
    return pending.timestamp


def _log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == executor.log.name]


@pytest.mark.parametrize("where", ["table", "options"])
def test_a_lazy_clean_rolls_back_an_expired_failed_write_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    table = _table(tmp_path, {**(LAZY if where == "table" else {}), **EXPIRES_AT_ONCE})
    write(table, _batch("k1", 1), "insert")
    failed = _crashed_write(table)
    caplog.set_level(logging.INFO, logger=executor.log.name)
    caplog.clear()
    result = run_clean(table, {**RETAIN_ONE, **(LAZY if where == "options" else {})})
    assert (result.outcome, result.held_back_by) == (Outcome.NO_WORK, ())
    assert table.timeline().pending == []
    rollbacks = table.timeline().filter([Action.ROLLBACK])
    assert len(rollbacks) == 1 and rollbacks[0].is_completed
    assert _log(caplog)[0] == f"clean of {table.uri} rolled back failed write {failed} (heartbeat expired)"


def test_an_eager_clean_leaves_failed_writes_to_the_writers(tmp_path: Path) -> None:
    table = _table(tmp_path, {"hoodie.cleaner.policy.failed.writes": "EAGER", **EXPIRES_AT_ONCE})
    write(table, _batch("k1", 1), "insert")
    failed = _crashed_write(table)
    assert run_clean(table, RETAIN_ONE).outcome is Outcome.NO_WORK
    assert [i.timestamp for i in table.timeline().pending] == [failed]
    assert table.timeline().filter([Action.ROLLBACK]) == []


def test_a_lazy_clean_waits_for_the_write_lock_before_rolling_back(tmp_path: Path) -> None:
    table = _table(tmp_path, {**LAZY, **EXPIRES_AT_ONCE})
    write(table, _batch("k1", 1), "insert")
    failed = _crashed_write(table)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(run_clean(table, RETAIN_ONE)))
    with table.storage.lock(".hoodie/.aux/.lake-write.lock", "held by the test"):
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and outcome == []
        assert [i.timestamp for i in table.timeline().pending] == [failed]
    worker.join(60)
    assert len(outcome) == 1 and table.timeline().pending == []


def test_a_corrupt_last_clean_is_named_when_the_state_file_does_not_match(tmp_path: Path) -> None:
    table = _table(tmp_path, {})
    for ts in range(3):
        write(table, _batch("k1", ts), "upsert")
    done = run_clean(table, RETAIN_ONE)
    assert done.outcome is Outcome.CLEANED
    (table.base_path / ".hoodie" / ".aux" / executor.STATE_FILE).unlink()
    completed = table.base_path / ".hoodie" / f"{done.instant}.clean"
    completed.write_bytes(b"not avro")
    write(table, _batch("k1", 3), "upsert")
    path = table.timeline().path_of(table.timeline().last_completed(Action.CLEAN))
    with pytest.raises(CorruptTimelineFileError, match=f"^{re.escape(path)}: not a readable Avro"):
        run_clean(table, RETAIN_ONE, dry_run=True)


@pytest.mark.parametrize("how", [{"dry_run": True}, {"mode": "execute"}])
def test_a_dry_run_or_an_execute_only_clean_rolls_nothing_back(tmp_path: Path, how: dict) -> None:
    table = _table(tmp_path, {**LAZY, **EXPIRES_AT_ONCE})
    write(table, _batch("k1", 1), "insert")
    failed = _crashed_write(table)
    before = sorted(p.name for p in (table.base_path / ".hoodie").iterdir())
    assert run_clean(table, RETAIN_ONE, **how).outcome is Outcome.NO_WORK
    assert [i.timestamp for i in table.timeline().pending] == [failed]
    assert sorted(p.name for p in (table.base_path / ".hoodie").iterdir()) == before


def test_on_v8_a_lazy_clean_rolls_back_the_expired_failed_write_then_cleans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Table version 8 as version 6: the failed write is rolled back first (its files deleted, a
    completed rollback on the timeline), so it holds nothing back and the clean retains by commits."""
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=8,
    )
    commits = [write(table, _batch("k1", ts), "upsert").instant for ts in range(3)]
    failed = _crashed_write(table)
    commits += [write(table, _batch("k1", ts), "upsert", options=LAZY).instant for ts in range(3, 5)]
    caplog.set_level(logging.INFO, logger=executor.log.name)
    caplog.clear()

    result = run_clean(table, {**LAZY, **EXPIRES_AT_ONCE, **RETAIN_ONE})

    assert table.timeline().pending == []
    rollbacks = table.timeline().filter([Action.ROLLBACK])
    assert len(rollbacks) == 1 and rollbacks[0].is_completed
    assert [p.name for p in (table.base_path / "x").iterdir() if failed in p.name] == []
    assert (result.outcome, result.held_back_by) == (Outcome.CLEANED, ())
    assert result.plan is not None and result.plan.earliest_instant_to_retain.timestamp == commits[-1]
    assert _log(caplog)[0] == f"clean of {table.uri} rolled back failed write {failed} (heartbeat expired)"
