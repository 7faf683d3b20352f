"""Which instants a completed rollback undid for good (``undone.py``), and the refusal of Hudi's
retry of a compaction whose plan is gone while logs on its slices hold completed writes."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
from compaction_support import DUE, batch, crash_at, mor, timeline_file
from crash_support import crashing

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.rollback.executor import (
    RollbackResult,
    rollback,
    rollback_instant_locked,
)
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, State


def test_a_requested_write_a_completed_rollback_undid_is_removed_without_a_second_rollback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that crashed right after its requested file, rolled back by a rollback that
    completed before the write's file went (as a crash between the two leaves it), its record
    without ``instantsRollback`` (the field empty): the write is undone for good, only its file
    goes. (An empty record counts as Hudi's retry only for a compaction requested again.)"""
    table = mor(tmp_path)
    with pytest.raises(SimulatedCrash):
        write(crashing(table, 1), batch(["d"], 5, "y"), "insert")
    (w,) = table.timeline().pending
    assert w.state is State.REQUESTED and w.action is Action.DELTACOMMIT
    requested = timeline_file(table, w.timestamp, State.REQUESTED, Action.DELTACOMMIT)
    kept = requested.read_bytes()
    (undo,) = rollback(table)
    record_file = Path(table.storage.root) / ".hoodie" / f"{undo.instant}.rollback"
    record = timeline_avro.read_avro(record_file.read_bytes(), str(record_file))
    record_file.write_bytes(
        timeline_avro.write_avro(timeline_avro.ROLLBACK_METADATA, {**record, "instantsRollback": []})
    )
    requested.write_bytes(kept)
    with caplog.at_level(logging.INFO):
        (again,) = rollback(table)
    removed = f"removed deltacommit {w.timestamp} of {table.uri}: rolled back by {undo.instant} already"
    assert caplog.messages.count(removed) == 1
    assert again == RollbackResult(undo.instant, w.timestamp, "deltacommit", (), (), resumed=True)
    timeline = table.timeline()
    assert timeline.get(w.timestamp) is None
    assert [r.timestamp for r in timeline.filter([Action.ROLLBACK], None)] == [undo.instant]


def test_a_retry_without_its_plan_names_every_log_on_its_slices_holding_a_completed_write(
    tmp_path: Path,
) -> None:
    """Two upserts after compaction C was scheduled, each in its own log on C's slice; C crashed
    and Hudi's retry of it was interrupted; C's plan is gone: the refusal names both logs."""
    table = mor(tmp_path)
    c = schedule_compaction(table, DUE).instant
    assert c is not None
    write(table, batch(["a"], 3, "x"), "upsert")
    write(table, batch(["a"], 4, "x"), "upsert")
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("file"))
    root = Path(table.storage.root)
    logs = {p: p.read_bytes() for p in root.rglob(f".*_{c}.log.*")}
    for p in logs:
        p.unlink()  # Hudi's retry keeps the logs on C's slice (our planner would delete them)
    with table.store.exclusive("write"), contextlib.suppress(SimulatedCrash):
        rollback_instant_locked(crashing(table, 2), c, compaction=True, restoring=True)
    for p, data in logs.items():
        p.write_bytes(data)
    (r,) = table.timeline().filter([Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT])
    timeline_file(table, c, State.REQUESTED).unlink()
    named = ", ".join(table.storage.uri(p.relative_to(root).as_posix()) for p in sorted(logs))
    with pytest.raises(RollbackError) as err:
        rollback(table)
    assert str(err.value) == (
        f"{table.storage.uri()}: rollback {r.timestamp} retries compaction {c}, whose plan (its "
        f"requested file) is missing or empty, and logs on its slices hold completed writes: {named}. "
        f"Removing {c} would hide them; put its requested file back, then run lake rollback "
        f"{table.storage.uri()}"
    )
