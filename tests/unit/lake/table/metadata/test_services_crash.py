"""Crash injection over a compaction and a clean that keep Hudi's metadata table (MDT): a crash after
any durable step (the data instant's files and timeline files, the MDT deltacommit's
requested/inflight/log/completed files, the data instant completed, the clean-up after it) leaves a
table that hudi-rs, listing through the MDT, reads as we do, with the rows it had (a compaction and
a clean change no row), whose ``files`` partition equals a full listing and whose column stats
equal a recomputation; the next run finishes the action (removing the MDT deltacommit a crashed
attempt left at the same instant time first) and the table stays so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from crash_support import crashing, steps_of

from airflow_lake_provider.lake.services.clean.executor import run_clean, stored_plan
from airflow_lake_provider.lake.services.clean.result import Outcome as CleanOutcome
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash, open_storage
from airflow_lake_provider.lake.table.metadata.listing import check_files_partition
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from tests.unit.lake.table.metadata.test_commit import (
    MAINTAIN,
    assert_consistent,
    assert_index_consistent,
    hudi_rs,
)
from tests.unit.lake.table.metadata.test_services import ONE_VERSION, _prepared, _rows

# A v8 table with record_index and a secondary index; a v9 one with partition_stats (3 partitions).
NAMES = ("mdt_basic_mor_avro_v8_nonpartitioned", "mor_avro_v9_txns_simple_meta")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _assert_unchanged(path: Path, before: list[str], *, partition_stats: bool = True) -> None:
    assert _rows(assert_consistent(path)) == before
    assert_index_consistent(path, partitions=partition_stats)


@pytest.mark.parametrize("name", NAMES)
def test_crash_at_every_durable_step_of_a_maintained_compaction(
    hudi_table_zip, tmp_path: Path, name: str
) -> None:
    template = _prepared(hudi_table_zip, name)
    scheduled = schedule_compaction(LakeTable.open(template), MAINTAIN, force=True)
    c = scheduled.instant
    assert c is not None
    before = _rows(assert_consistent(template))
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    done = execute_compaction(counting, c, options=MAINTAIN)
    assert done.outcome is Outcome.COMPLETED
    steps = steps_of(counting)
    completions = [i for i, s in enumerate(steps, 1) if f"/{c}_" in s]
    assert len(completions) == 2  # the MDT deltacommit's, then the data instant's commit
    assert steps[completions[0] - 1].endswith(".deltacommit")
    assert steps[completions[1] - 1].endswith(".commit")
    for step in range(1, len(steps) + 1):
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            execute_compaction(crashing(LakeTable.open(path), step), c, options=MAINTAIN)
        _assert_unchanged(path, before)
        again = execute_compaction(LakeTable.open(path), c, options=MAINTAIN)
        expected = Outcome.ALREADY_COMPLETED if step >= completions[1] else Outcome.COMPLETED
        assert again.outcome is expected, (step, steps[step - 1])
        _assert_unchanged(path, before)
        # One MDT deltacommit at the compaction's time, completed: the crashed attempt's is gone.
        mdt = path / ".hoodie/metadata/.hoodie/timeline"
        assert len(list(mdt.glob(f"{c}_*.deltacommit"))) == 1, (step, steps[step - 1])


@pytest.mark.parametrize("name", NAMES)
def test_crash_at_every_durable_step_of_a_maintained_clean(hudi_table_zip, tmp_path: Path, name: str) -> None:
    template = _prepared(hudi_table_zip, name)
    _, done = run_compaction(LakeTable.open(template), MAINTAIN, force=True)
    assert done.outcome is Outcome.COMPLETED
    before = _rows(assert_consistent(template))
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    cleaned = run_clean(counting, ONE_VERSION)
    assert cleaned.outcome is CleanOutcome.CLEANED and cleaned.deleted_files > 0
    t = cleaned.instant
    steps = steps_of(counting)
    completions = [i for i, s in enumerate(steps, 1) if f"/{t}_" in s]
    assert len(completions) == 2  # the MDT deltacommit's, then the clean's
    for step in range(1, len(steps) + 1):
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            run_clean(crashing(LakeTable.open(path), step), ONE_VERSION)
        # Files the crashed clean deleted stay listed until it completes (its MDT deletions count
        # only then, in Hudi as here): readers read the latest slices, which it never touches.
        table = LakeTable.open(path)
        assert _rows(read_snapshot(table)) == before
        assert _rows(hudi_rs(path)) == before
        check = check_files_partition(open_storage(path))
        pending = [i for i in table.timeline().instants if i.action.value == "clean" and not i.is_completed]
        planned = {
            p
            for i in pending
            for paths in stored_plan(table, table.timeline(), i).files_per_partition.values()
            for p in paths
        }
        assert not (check.missing_files or check.size_mismatches or check.missing_partitions)
        assert {f for f, _ in check.extra_files} <= planned, (step, steps[step - 1])
        assert check.consistent or pending
        assert_index_consistent(path, partitions=False)  # (the column stats of present files)
        run_clean(LakeTable.open(path), ONE_VERSION)  # finishes a pending clean, or plans it anew
        _assert_unchanged(path, before, partition_stats=False)
        timeline = LakeTable.open(path).timeline()
        (clean,) = [i for i in timeline.instants if i.action.value == "clean"]
        assert clean.is_completed, (step, steps[step - 1])
        mdt = path / ".hoodie/metadata/.hoodie/timeline"
        assert len(list(mdt.glob(f"{clean.timestamp}_*.deltacommit"))) == 1, (step, steps[step - 1])
