"""A compaction killed right after any of its durable steps (schedule and execution, on table versions
6 and 8) leaves the table reading as before (ours == hudi-rs), a write on top of it is not lost, and
the next run of the service completes it: ours == hudi-rs == the rows written, nothing left pending."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from compaction_support import DUE, mor
from crash_support import crashing, steps_of
from write_support import hudi_rows

from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

ROWS = [("a", 2, "x"), ("b", 1, "x"), ("c", 1, "y")]  # what compaction_support.mor holds
AFTER_WRITE = [("a", 3, "x"), ("b", 1, "x"), ("c", 1, "y"), ("d", 3, "y")]


def _ours(path: Path) -> list[tuple]:
    snap = read_snapshot(LakeTable.open(path)).select(["id", "ts", "p"])
    return sorted(tuple(r.values()) for r in snap.to_pylist())


def _readable_as(path: Path, rows: list[tuple], hudi: bool = True) -> None:
    assert _ours(path) == rows
    if hudi:
        assert hudi_rows(path, "id", "ts", "p") == rows


def _steps(tmp_path: Path, table_version: int) -> list[str]:
    counting = crashing(mor(tmp_path / "count", table_version=table_version))
    assert run_compaction(counting, DUE)[1].outcome is Outcome.COMPLETED
    return steps_of(counting)


def test_a_compaction_killed_after_any_durable_step_recovers(tmp_path: Path, table_version: int) -> None:
    steps = _steps(tmp_path, table_version)
    # The plan, the inflight, a marker and a base file per operation, the commit, the markers' removal.
    assert any(".compaction.requested" in s for s in steps) and any(".commit" in s for s in steps)
    for k in range(1, len(steps) + 1):
        table = mor(tmp_path / f"after-{k}", table_version=table_version)
        path = table.base_path
        with pytest.raises(SimulatedCrash):
            run_compaction(crashing(table, k), DUE)
        _readable_as(path, ROWS)
        # A write after the crash (logs on top of a pending plan, or of the completed compaction).
        write(
            table, pa.table({"id": ["a", "d"], "ts": pa.array([3, 3], pa.int64()), "p": ["x", "y"]}), "upsert"
        )
        # On v6 hudi-rs hides the logs written on top of a pending compaction (v8 slices them by
        # completion time, and hudi-rs reads them).
        pending = LakeTable.open(path).timeline().pending_compactions()
        _readable_as(path, AFTER_WRITE, hudi=table_version == 8 or not pending)
        # The next run of the service: the pending compaction if the crash left one, else a new one.
        reopened = LakeTable.open(path, clock=table.clock)
        pending = reopened.timeline().pending_compactions()
        if pending:
            assert execute_compaction(reopened).outcome is Outcome.COMPLETED, steps[k - 1]
        else:
            run_compaction(reopened, DUE)
        _readable_as(path, AFTER_WRITE)
        timeline = LakeTable.open(path).timeline()
        assert timeline.pending == [], steps[k - 1]
        assert [i.timestamp for i in timeline.instants if timeline.is_compaction(i)], steps[k - 1]
