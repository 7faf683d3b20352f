"""Crash injection over every durable step of a clean and of a savepoint's creation and deletion, on
table version 6 and on Hudi 1.x's version 8 (timeline layout 2): after a crash at any step the table
reads as before (ours and hudi-rs, snapshot and every retained instant), and the next run ends in the
state a run that never crashed reaches."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from crash_support import crashing, steps_of
from hudi import HudiReadOptions, HudiTableBuilder

from airflow_lake_provider.lake.services.clean.executor import pending_cleans, run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock

RETAIN_ONE = {"hoodie.cleaner.commits.retained": "1"}
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


def _history(path: Path, version: int) -> tuple[LakeTable, list[str]]:
    """Five upserts of two partitions into a COW table: four old slices per file group to clean."""
    table = LakeTable.create(
        path,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
        clock=InstantClock(),
    )
    commits = []
    for ts in range(5):
        batch = pa.table({"id": ["a", "b"], "ts": pa.array([ts, ts], pa.int64()), "p": ["x", "y"]})
        commits.append(write(table, batch, "upsert").instant)
    return table, commits


def _rows(table: LakeTable, as_of: str | None = None) -> list[str]:
    return sorted(repr(r) for r in read_snapshot(table, as_of).to_pylist())


def _hudi_rs(path: Path, as_of: str | None = None) -> list[str]:
    table = HudiTableBuilder.from_base_uri(str(path)).build()
    batches = table.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else table.read()
    return sorted(repr(r) for r in pa.Table.from_batches(batches).to_pylist())


def _data_files(path: Path) -> set[str]:
    found = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        found |= {os.path.relpath(os.path.join(root, f), path) for f in files if f.endswith(".parquet")}
    return found


def _slices(path: Path, commits: list[str]) -> set[tuple[str, int]]:
    """(partition, number of the commit that wrote it) of every base file: the same in every history."""
    return {(f.split("/")[0], commits.index(f.rsplit("_", 1)[1][:17])) for f in _data_files(path)}


def _clean_steps(tmp_path: Path, version: int) -> tuple[list[str], set[tuple[str, int]]]:
    """The durable steps of an uncrashed clean and the slices it leaves."""
    table, commits = _history(tmp_path / "count", version)
    counted = crashing(table)
    assert run_clean(counted, RETAIN_ONE).outcome is Outcome.CLEANED
    return steps_of(counted), _slices(tmp_path / "count", commits)


@VERSIONS
def test_a_clean_killed_after_any_durable_step_leaves_the_table_readable_and_is_finished(
    tmp_path: Path, version: int
) -> None:
    steps, clean_end = _clean_steps(tmp_path, version)
    folder = ".hoodie/timeline/" if version == 8 else ".hoodie/"
    # requested, inflight, the 6 deletes, the completed file, then the incremental-state file.
    assert [s.split(" ", 1)[1].startswith(folder) for s in steps[:2]] == [True, True]
    assert len(steps) == 10, steps
    assert steps[8].startswith(f"create {folder}") and steps[8].endswith(".clean"), steps
    for k in range(1, len(steps) + 1):
        path = tmp_path / f"k{k}"
        table, commits = _history(path, version)
        retained = commits[-2:]
        before = {c: _rows(table, c) for c in [None, *retained]}
        with pytest.raises(SimulatedCrash):
            run_clean(crashing(table, k), RETAIN_ONE)
        for c, rows in before.items():  # readable at every step: ours and hudi-rs agree
            assert _rows(table, c) == _hudi_rs(path, c) == rows, (k, c)
        pending = pending_cleans(table.timeline())
        assert len(pending) == (1 if k < 9 else 0), k
        result = run_clean(table, RETAIN_ONE)
        if pending:
            assert result.finished_pending == (pending[0].timestamp,), k
        assert _slices(path, commits) == clean_end == {(p, n) for p in "xy" for n in (3, 4)}, k
        (clean,) = table.timeline().filter([Action.CLEAN])
        assert clean.is_completed and (clean.completion_time is not None) == (version == 8)
        for c, rows in before.items():
            assert _rows(table, c) == _hudi_rs(path, c) == rows, (k, c)


@VERSIONS
def test_a_savepoint_killed_half_way_protects_nothing_and_is_finished_by_the_next_create(
    tmp_path: Path, version: int
) -> None:
    table, commits = _history(tmp_path / "t", version)
    counted = crashing(table)
    create_savepoint(counted, commits[0])
    steps = steps_of(counted)
    assert len(steps) == 2, steps  # the inflight file, then the completed one
    delete_savepoint(table, commits[0])
    with pytest.raises(SimulatedCrash):
        create_savepoint(crashing(table, 1), commits[0])
    assert table.timeline().savepoints() == []  # half made: only its inflight file
    point = create_savepoint(table, commits[0])
    assert [s.timestamp for s in table.timeline().savepoints()] == [commits[0]]
    saved = _rows(table, commits[0])
    assert run_clean(table, RETAIN_ONE).outcome is Outcome.CLEANED
    assert point.files <= {f.replace(os.sep, "/") for f in _data_files(tmp_path / "t")}
    assert _rows(table, commits[0]) == _hudi_rs(tmp_path / "t", commits[0]) == saved
    # Deleting: the completed file goes first, so a crash leaves a half-made savepoint, which a
    # second delete removes.
    with pytest.raises(SimulatedCrash):
        delete_savepoint(crashing(table, 1), commits[0])
    assert table.timeline().savepoints() == []
    table.store.remove_savepoint(commits[0])
    names = os.listdir(tmp_path / "t" / table.layout.folder)
    assert [n for n in names if ".savepoint" in n] == []
