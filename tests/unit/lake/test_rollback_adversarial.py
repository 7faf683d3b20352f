"""Adversarial cases of failed-write rollback: races with writers that do not take our write lock,
and batches whose shape the writer must refuse with one LakeError, changing nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_rollback import _batch, _rows, _seed

from airflow_lake_provider.lake.format.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

LAZY = {"hoodie.cleaner.policy.failed.writes": "LAZY"}


class _Stop(BaseException):
    """Stops a write at its commit step, as a process dying there would (not caught by the writer)."""


def _stop_at_commit(point: str) -> None:
    if point == "commit":
        raise _Stop


class _CommitsWhileHeartbeatIsRead(LocalStorage):
    """Local storage on which another writer (Hudi's: it takes no lock of ours) commits ``instant``
    and then drops its markers and heartbeat, just as a rollback goes to read that heartbeat."""

    def __init__(self, root: Path, instant: str) -> None:
        super().__init__(root)
        self.instant, self.fired = instant, False

    def exists(self, rel: str) -> bool:
        if rel.endswith(f".heartbeat/{self.instant}") and not self.fired:
            self.fired = True
            other = LakeTable.open(self.root)
            markers = other.store.read_markers(self.instant)
            stats = {
                m.partition: (WriteStat(m.file_name.split("_")[0], m.partition, m.relative_path),)
                for m in markers
            }
            body = CommitMetadata(operation_type="UPSERT", partition_to_write_stats=stats)
            other.store.transition_to_completed(other.timeline().get(self.instant), body.to_json_bytes())
            other.store.delete_markers(self.instant)
            other.store.delete_heartbeat(self.instant)
        return super().exists(rel)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_lazy_write_committing_as_its_heartbeat_is_judged_is_not_rolled_back(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "t"
    table, model = _seed(path, kind)
    with pytest.raises(_Stop):
        write(table, _batch([(1, 60, "theirs")]), "upsert", options=LAZY, fault=_stop_at_commit)
    [pending] = table.timeline().pending
    racy = LakeTable.open(_CommitsWhileHeartbeatIsRead(path, pending.timestamp))
    assert rollback(racy, options=LAZY) == []
    after = LakeTable.open(path)
    assert [str(i) for i in after.timeline().instants][
        -1
    ] == f"{pending.timestamp}__{pending.action.value}__COMPLETED"
    assert _rows(read_snapshot(after)) == {**model, 1: (60, "theirs")}
    assert not any(name.endswith(".rollback") for name in os.listdir(path / ".hoodie"))
