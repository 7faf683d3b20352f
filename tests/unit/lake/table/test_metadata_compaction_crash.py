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
from airflow_lake_provider.lake.table.metadata_services import run_metadata_table_services
from airflow_lake_provider.lake.table.table import LakeTable
from tests.unit.lake.table.test_metadata_commit import (
    INDEXES,
    MAINTAIN,
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
