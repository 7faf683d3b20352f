"""Crash injection over a write that keeps Hudi's metadata table (MDT): a crash after any durable step
(data instant requested/inflight, data files, the MDT deltacommit's requested/inflight/log/completed
files, the data instant completed, the clean-up after it) leaves a table that hudi-rs, listing
through the MDT, reads exactly as we do (the rows before the write, or after it once the data instant
completed) and whose ``files`` partition equals a full listing; the next maintained write goes ahead
and the table stays so. An MDT deltacommit whose data instant was discarded is ignored by both
readers and removed by the next maintained write (a crash at each of its steps included).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from crash_support import crashing, steps_of
from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    _batch,
    assert_consistent,
    assert_index_consistent,
)

# (table, record key, ordering field, a new key per write)
CASES = {
    "cow_v9_txns_simple_meta": ("txn_id", "txn_ts", ("crash-1", "crash-2", "crash-3")),
    "mdt_basic_mor_avro_v8_nonpartitioned": ("id", "longField", (2001, 2002, 2003)),
}
# (table, MDT partitions kept besides files)
KEPT = [
    ("cow_v9_txns_simple_meta", ()),
    ("cow_v9_txns_simple_meta", INDEXES),
    ("mdt_basic_mor_avro_v8_nonpartitioned", INDEXES),  # (it has column_stats only)
]


def _keys(rows: pa.Table, key: str) -> set:
    return set(rows.column(key).to_pylist())


# The write after a crash leaves the crashed write pending: rolling back a failed write of table
# version 8/9 is not supported yet (each of our writes rolls back pending ones under Spark's EAGER).
AFTER_CRASH = {**MAINTAIN, "hoodie.cleaner.policy.failed.writes": "NEVER"}


def _upsert(
    path: Path, key: str, ordering: str, new_key: object, options: dict[str, str] = MAINTAIN
) -> Callable[[LakeTable], object]:
    """A maintained upsert of one new key and one old key (in its own partition)."""
    snapshot = read_snapshot(LakeTable.open(path))
    old = sorted(snapshot.column(key).to_pylist())[0]
    row = snapshot.column(key).to_pylist().index(old)
    batch = _batch(snapshot, key, ordering, [row, row], [old, new_key])
    return lambda table: write(table, batch, "upsert", options=options)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _mdt_names(path: Path, instant: str) -> list[str]:
    mdt = path / ".hoodie/metadata"
    return sorted(str(p.relative_to(mdt)) for p in mdt.rglob(f"*{instant}*"))


@pytest.mark.parametrize(("name", "also"), KEPT)
def test_crash_at_every_durable_step_of_a_maintained_write(
    hudi_table_zip, tmp_path: Path, name: str, also: tuple[str, ...]
) -> None:
    key, ordering, (first, second, _) = CASES[name]
    template = keep_files_partition_only(hudi_table_zip(name), also)
    before = _keys(assert_consistent(template), key)
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    done = _upsert(template, key, ordering, first)(counting)
    steps = steps_of(counting)
    t = done.instant
    # Each storage counts its own relative paths: the MDT's are relative to .hoodie/metadata/.
    completions = [i for i, s in enumerate(steps, 1) if f"/{t}_" in s]
    assert len(completions) == 2  # the MDT deltacommit's, then the data instant's
    mdt_done, data_done = completions
    # The MDT's requested and inflight files, one new log file per MDT file group, its completion.
    mdt_start = max(
        i for i, s in enumerate(steps, 1) if s == f"create .hoodie/timeline/{t}.deltacommit.requested"
    )
    assert steps[mdt_start] == f"create .hoodie/timeline/{t}.deltacommit.inflight"
    logs = steps[mdt_start + 1 : mdt_done - 1]
    assert logs[0] == f"create files/.files-0000-0_{t}.log.1_0-0-0"
    assert (
        len(logs) == 1 + {(): 0, INDEXES: 3 if "cow" in name else 2}[also]
    )  # col-stats x2 (+ partition-stats)
    assert all(s.startswith("create ") and s.endswith(f"_{t}.log.1_0-0-0") for s in logs)
    assert data_done == mdt_done + 1
    for step in range(1, len(steps) + 1):
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            _upsert(template, key, ordering, first)(crashing(LakeTable.open(path), step))
        rows = assert_consistent(path)
        assert_index_consistent(path)
        expected = before | {first} if step >= data_done else before
        assert _keys(rows, key) == expected, (step, steps[step - 1])
        # The next maintained write goes ahead (the crashed write's instant stays pending, its MDT
        # deltacommit, if any, ignored by readers) and everything stays consistent.
        _upsert(path, key, ordering, second, AFTER_CRASH)(LakeTable.open(path))
        rows = assert_consistent(path)
        assert_index_consistent(path)
        assert _keys(rows, key) == expected | {second}, (step, steps[step - 1])


def _no_mdt_deltacommit_of(path: Path, instant: str) -> None:
    assert _mdt_names(path, instant) == []
    assert not list((path / ".hoodie/metadata/.hoodie/timeline").glob(f"{instant}*"))


@pytest.mark.parametrize(("name", "also"), KEPT)
def test_a_failed_maintained_write_removes_its_mdt_deltacommit_before_its_instant(
    hudi_table_zip, tmp_path: Path, name: str, also: tuple[str, ...]
) -> None:
    """A write that fails after its MDT deltacommit completed undoes it before its data instant
    leaves the timeline (Hudi 1.x readers would merge a completed MDT deltacommit whose data instant
    is gone, and list the files the undo deletes), a crash at every step of that undo included."""
    key, ordering, (first, second, _) = CASES[name]
    template = keep_files_partition_only(hudi_table_zip(name), also)
    before = _keys(assert_consistent(template), key)

    def fail_at_commit(step: str) -> None:
        if step == "commit":  # after the MDT deltacommit completed, before the data instant
            raise RuntimeError("injected")

    def failing(table: LakeTable) -> object:
        snapshot = read_snapshot(LakeTable.open(template))
        old = sorted(snapshot.column(key).to_pylist())[0]
        row = snapshot.column(key).to_pylist().index(old)
        batch = _batch(snapshot, key, ordering, [row, row], [old, first])
        return write(table, batch, "upsert", options=MAINTAIN, fault=fail_at_commit)

    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    with pytest.raises(RuntimeError, match="injected"):
        failing(counting)
    steps = steps_of(counting)
    (t,) = {s.split("/")[-1].split(".")[0] for s in steps if s.endswith(".deltacommit.requested")}
    _no_mdt_deltacommit_of(counting_path := tmp_path / "count", t)
    assert _keys(assert_consistent(counting_path), key) == before
    mdt_done = next(i for i, s in enumerate(steps, 1) if f"/{t}_" in s)
    for step in range(mdt_done, len(steps) + 1):  # every step from the MDT deltacommit's completion
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            failing(crashing(LakeTable.open(path), step))
        assert _keys(assert_consistent(path), key) == before, (step, steps[step - 1])
        # The next maintained write rolls the crashed one back (Spark's EAGER), its MDT first.
        _upsert(path, key, ordering, second)(LakeTable.open(path))
        _no_mdt_deltacommit_of(path, t)
        assert _keys(assert_consistent(path), key) == before | {second}, (step, steps[step - 1])


@pytest.mark.parametrize(("name", "also"), KEPT)
def test_the_rollback_of_a_crashed_maintained_write_keeps_the_metadata_table(
    hudi_table_zip, tmp_path: Path, name: str, also: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    """A maintained write that crashed after its MDT deltacommit completed is rolled back by the
    next maintained write (EAGER, Spark's default): the MDT deltacommit goes while the crashed
    instant is still pending, so at every durable step of the next write both readers (ours as Hudi
    1.x's, which merges the MDT deltacommit of a rolled-back instant) read the rows before it."""
    key, ordering, (first, second, third) = CASES[name]
    template = keep_files_partition_only(hudi_table_zip(name), also)
    before = _keys(assert_consistent(template), key)
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    done = _upsert(template, key, ordering, first)(counting)
    data_done = [i for i, s in enumerate(steps_of(counting), 1) if f"/{done.instant}_" in s][1]
    with pytest.raises(SimulatedCrash):  # the MDT deltacommit completed, the data instant not
        _upsert(template, key, ordering, first)(crashing(LakeTable.open(template), data_done - 1))
    (t,) = [i.timestamp for i in LakeTable.open(template).timeline().instants if not i.is_completed]
    assert _mdt_names(template, t)
    assert _keys(assert_consistent(template), key) == before
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count2")))
    with caplog.at_level(logging.INFO):
        _upsert(template, key, ordering, second)(counting)
    forgot = f"removed the metadata table's deltacommit of {t}, which is being undone"
    assert caplog.messages.count(forgot) == 1
    steps = steps_of(counting)
    assert any(s.endswith(".rollback") for s in steps)  # (completed rollback of the crashed write)
    for step in range(1, len(steps) + 1):
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            _upsert(template, key, ordering, second)(crashing(LakeTable.open(path), step))
        rows = _keys(assert_consistent(path), key)
        assert rows in (before, before | {second}), (step, steps[step - 1])
        _upsert(path, key, ordering, third)(LakeTable.open(path))
        _no_mdt_deltacommit_of(path, t)
        assert _keys(assert_consistent(path), key) - {second} == before | {third}, (step, steps[step - 1])
