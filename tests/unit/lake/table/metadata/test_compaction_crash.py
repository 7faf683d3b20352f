"""Crash injection over a compaction of Hudi's metadata table (MDT) under the maintain policy: a crash
after any durable step (the plan, the inflight file, each new base file, the completed commit)
leaves a table hudi-rs (listing through the MDT) reads as we do, with its rows, whose ``files``
partition equals a full listing and whose column stats equal a recomputation; the next run finishes
the pending compaction at its own instant (its base files written again) and the table stays so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from crash_support import crashing, steps_of
from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.metadata.services import run_metadata_table_services
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    _batch,
    _rows,
    assert_consistent,
    assert_index_consistent,
)

NAME = "mor_avro_v9_txns_simple_meta"
DUE = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}


def _timeline_files(path: Path, instant: str) -> list[str]:
    return sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").glob(f"{instant}*"))


def _compactions(path: Path) -> set[str]:
    timeline = path / ".hoodie/metadata/.hoodie/timeline"
    return {p.name.split(".")[0] for p in timeline.glob("*.compaction.requested")}


def test_crash_at_every_durable_step_of_an_mdt_compaction(hudi_table_zip, tmp_path: Path) -> None:
    template = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    before = _rows(assert_consistent(template))
    counting = crashing(LakeTable.open(shutil.copytree(template, tmp_path / "count")))
    c = run_metadata_table_services(counting, DUE)
    assert c is not None
    steps = steps_of(counting)
    completed = [i for i, s in enumerate(steps, 1) if f"/{c}_" in s and s.endswith(".commit")]
    assert len(completed) == 1
    bases = [s for s in steps if s.endswith(f"_{c}.hfile")]
    assert len(bases) >= 3  # files, and the column and partition stats file groups
    javas = _compactions(template)
    for step in range(1, len(steps) + 1):
        path = shutil.copytree(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            run_metadata_table_services(crashing(LakeTable.open(path), step), DUE)
        assert _rows(assert_consistent(path)) == before, (step, steps[step - 1])
        assert_index_consistent(path)
        crashed = _compactions(path) - javas  # the crashed run's compaction, if it got that far
        again = run_metadata_table_services(LakeTable.open(path), DUE)
        if step >= completed[0]:
            assert again is None, (step, steps[step - 1])  # done: no deltacommit since, none due
        elif crashed:
            assert {again} == crashed, (step, steps[step - 1])  # finished at its own time
        else:
            assert again is not None
        assert _rows(assert_consistent(path)) == before
        assert_index_consistent(path)
        (done,) = _compactions(path) - javas
        files = _timeline_files(path, done)
        assert files[0] == f"{done}.compaction.inflight" and files[1] == f"{done}.compaction.requested"
        assert len(files) == 3 and files[2].endswith(".commit"), (step, files)


JAVA_COMPACTION = "20260307162612567"  # the MDT compaction Spark ran on NAME


def _java_left_pending(hudi_table_zip) -> tuple[Path, list[str]]:
    """NAME with every MDT partition, as if Java died writing its MDT compaction's base files: the
    completed commit gone, the ``files`` base file cut short. The base files it left, by path."""
    path = hudi_table_zip(NAME)
    mdt = path / ".hoodie/metadata"
    (done,) = (mdt / ".hoodie/timeline").glob(f"{JAVA_COMPACTION}_*.commit")
    done.unlink()
    (files_base,) = (mdt / "files").glob(f"files-0000-0_*_{JAVA_COMPACTION}.hfile")
    files_base.write_bytes(files_base.read_bytes()[:1000])
    return path, sorted(str(p.relative_to(mdt)) for p in mdt.glob(f"*/*_{JAVA_COMPACTION}.hfile"))


def test_a_compaction_java_left_pending_is_finished_without_its_partial_files(hudi_table_zip) -> None:
    """Java's base files of a compaction it did not complete (other write tokens than ours, one cut
    short) are deleted before ours are written: the writer took its schema from the newest ``files``
    base file, the partial one (every maintained action then failed), and two base files of one slice
    at one instant would be read in place of ours once the compaction completes."""
    path, java_files = _java_left_pending(hudi_table_zip)
    before = assert_consistent(path)
    assert run_metadata_table_services(LakeTable.open(path), MAINTAIN) == JAVA_COMPACTION
    mdt = path / ".hoodie/metadata"
    assert _timeline_files(path, JAVA_COMPACTION)[-1].endswith(".commit")
    left = sorted(str(p.relative_to(mdt)) for p in mdt.glob(f"*/*_{JAVA_COMPACTION}.hfile"))
    assert not set(left) & set(java_files)
    # One base file per group at the instant: ours (Java writes none for the record index groups
    # whose merge is empty, Java 1.1 an empty one).
    groups = [name.split("/")[1].split("_")[0] for name in left]
    assert len(groups) == len(set(groups)) and "files-0000-0" in groups
    assert _rows(assert_consistent(path)) == _rows(before)


def test_a_maintained_write_past_a_pending_compactions_partial_base_file(hudi_table_zip) -> None:
    """The writer takes the record schema from the newest ``files`` base file of a completed instant:
    the partial one of a pending compaction failed every maintained write."""
    path, _ = _java_left_pending(hudi_table_zip)
    keep_files_partition_only(path, INDEXES)
    table = LakeTable.open(path)
    before = read_snapshot(table)
    batch = _batch(before, "txn_id", "txn_ts", [0], ["new-1"])
    done = write(table, batch, operation="insert", options=MAINTAIN)
    assert list((path / ".hoodie/metadata/.hoodie/timeline").glob(f"{done.instant}_*.deltacommit"))
    after = assert_consistent(path)
    assert sorted(after.column("txn_id").to_pylist()) == sorted(
        [*before.column("txn_id").to_pylist(), "new-1"]
    )
