"""Restore and a pending clustering: as Hudi's restore planner (0.x and 1.x), a restore rolls back
the pending clusterings requested after the savepoint first (newest first), then the other writes
after it, newest first; on versions 8/9 the pending action is ``clustering``, on 6 ``replacecommit``.
The clustering here is a merge-small-files that crashed after writing its files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from tests.unit.lake.services.partition_commit.test_merge import (
    _hudi_rs,
    _parquet,
    _pending_action,
    _rows,
    _table,
)


def _crash(at: str) -> None:
    if at == "commit":
        raise KeyboardInterrupt(at)


def _instants(table: LakeTable) -> list[tuple[str, str, str]]:
    return [(i.timestamp, i.action.value, i.state.name) for i in table.timeline().instants]


@pytest.mark.parametrize("version", [6, 8])
def test_restore_rolls_back_a_pending_clustering_after_the_savepoint_first(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "t"
    table = _table(path, version=version)  # six small files in x, one in y
    last = table.timeline().last_completed_commit
    assert last is not None
    point = last.timestamp
    create_savepoint(table, point)
    rows, x_files, y_files = _rows(read_snapshot(table)), _parquet(path / "x"), _parquet(path / "y")
    kept = _instants(table)
    y1 = pa.table({"id": ["y1"], "ts": pa.array([1], pa.int64()), "p": ["y"], "v": [1]})
    w1 = write(table, y1, "insert").instant
    with pytest.raises(KeyboardInterrupt):  # its new files written, its completed file not
        merge_small_files(table, "x", sum(x_files.values()) // 2 + 1, fault=_crash)
    (clustering,) = table.timeline().filter([_pending_action(table)], [State.REQUESTED, State.INFLIGHT])
    assert len(_parquet(path / "x")) == len(x_files) + 2
    y2 = pa.table({"id": ["y2"], "ts": pa.array([2], pa.int64()), "p": ["y"], "v": [2]})
    w2 = write(table, y2, "insert").instant
    c = clustering.timestamp
    assert w1 < c < w2

    result = restore(table, point)

    # Hudi's order: the pending clustering first, then the other writes newest first.
    assert result.rolled_back == (c, w2, w1)
    timeline = table.timeline()
    plan = timeline.avro_record(Instant(result.instant or "", State.REQUESTED, Action.RESTORE))
    assert [(i["commitTime"], i["action"]) for i in plan["instantsToRollback"]] == [
        (c, _pending_action(table).value),
        (w2, "commit"),
        (w1, "commit"),
    ]
    rollbacks = timeline.filter([Action.ROLLBACK], [State.COMPLETED])
    assert [timeline.avro_record(r)["commitsRollback"] for r in rollbacks] == [[c], [w2], [w1]]
    assert _instants(table) == [
        *kept,
        (result.instant, "restore", "COMPLETED"),  # (planned before its rollbacks ran)
        *[(r.timestamp, "rollback", "COMPLETED") for r in rollbacks],
    ]
    folder = path / table.layout.folder
    assert [n.name for n in folder.iterdir() if n.name.startswith((c, w1, w2))] == []
    assert not (path / ".hoodie" / ".temp" / c).exists()
    assert (_parquet(path / "x"), _parquet(path / "y")) == (x_files, y_files)
    assert _rows(read_snapshot(LakeTable.open(path))) == rows == _hudi_rs(path)
