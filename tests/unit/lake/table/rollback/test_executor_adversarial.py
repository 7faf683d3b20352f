"""Adversarial cases of failed-write rollback: races with writers that do not take our write lock,
and batches whose shape the writer must refuse with one LakeError, changing nothing."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.errors import SchemaError, WriteInputError
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.archival.executor import Outcome, run_archival
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import FileGroupWrite, WriteContext, write, write_file_group
from airflow_lake_provider.lake.table.write.input import find_input, read_input
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from unit.lake.table.rollback.test_executor import _batch, _check, _rows, _seed

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
            markers = other.store.markers.read(self.instant)
            stats = {
                m.partition: (WriteStat(m.file_name.split("_")[0], m.partition, m.relative_path),)
                for m in markers
            }
            body = CommitMetadata(operation_type="UPSERT", partition_to_write_stats=stats)
            other.store.transition_to_completed(other.timeline().get(self.instant), body.to_json_bytes())
            other.store.markers.delete(self.instant)
            other.store.heartbeats.delete(self.instant)
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


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if ".aux" not in p.parts)


@pytest.mark.parametrize(
    ("batch", "error", "message"),
    [
        (  # was ArrowInvalid from a sort deep in the router
            pa.table({"id": [9], "ts": [1], "city": ["a"], "v": ["x"], "__lake_key": ["k"]}),
            SchemaError,
            r"batch column\(s\) \['__lake_key'\]: names starting with '__lake_' are reserved",
        ),
        (  # was KeyError 'Column v does not exist in schema'
            pa.Table.from_arrays(
                [pa.array([9]), pa.array([1]), pa.array(["a"]), pa.array(["x"]), pa.array(["y"])],
                names=["id", "ts", "city", "v", "v"],
            ),
            SchemaError,
            r"batch has column\(s\) \['v'\] more than once",
        ),
    ],
)
def test_batches_the_router_choked_on_are_refused_by_name(
    tmp_path: Path, batch: pa.Table, error: type, message: str
) -> None:
    path = tmp_path / "t"
    table, model = _seed(path, "mor")
    before = _tree(path)
    with pytest.raises(error, match=message):
        write(table, batch, "upsert")
    assert _tree(path) == before
    assert _rows(read_snapshot(LakeTable.open(path))) == model


def test_an_unknown_operation_is_a_lake_error(tmp_path: Path) -> None:
    table, _model = _seed(tmp_path / "t", "cow")
    before = _tree(tmp_path / "t")
    with pytest.raises(WriteInputError, match=r"operation 'merge' is not one of insert, upsert, delete"):
        write(table, _batch([(1, 1, "x")]), "merge")
    assert _tree(tmp_path / "t") == before


def test_input_files_differing_only_in_nulls_are_one_input(tmp_path: Path) -> None:
    """The docstring promised "nulls aside": a part whose column is all nulls (type null) or not
    nullable is the same input; other differences are still refused by name."""
    folder = tmp_path / "in"
    folder.mkdir()
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    pq.write_table(pa.table({"id": [1], "v": ["a"]}, schema=strict), folder / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([2], pa.int64()), "v": pa.nulls(1)}), folder / "b.parquet")
    pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "v": ["c"]}), folder / "c.parquet")
    batch = read_input(find_input(str(folder)))
    assert batch.schema == pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
    assert batch.to_pylist() == [{"id": 1, "v": "a"}, {"id": 2, "v": None}, {"id": 3, "v": "c"}]
    pq.write_table(pa.table({"id": pa.array([4], pa.int32()), "v": ["d"]}), folder / "d.parquet")
    with pytest.raises(
        SchemaError, match=r"in/d\.parquet has schema 'id: int32\\nv: string', unlike .*in/a\.parquet"
    ):
        read_input(find_input(str(folder)))


ARCHIVE_SOON = {  # (no count-based compaction trigger: a MOR table's delta commits go too)
    "hoodie.keep.max.commits": "3",
    "hoodie.keep.min.commits": "2",
    "hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED",
}


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_archival_never_makes_files_of_a_rolled_back_write_count_as_committed(
    tmp_path: Path, kind: str
) -> None:
    """Files named with a rolled-back instant count as committed once the active timeline starts
    after it. Two ways such files outlive their rollback: one it could not delete
    (``failedDeleteFiles``) and one a late Spark executor finished after it (its marker left).
    Archival deletes both first, or archives nothing while one cannot be deleted."""
    path = tmp_path / "t"
    table, model = _seed(path, kind)
    with pytest.raises(_Stop):
        write(table, _batch([(50, 40, "ghost"), (51, 40, "ghost")]), "insert", fault=_stop_at_commit)
    [pending] = table.timeline().pending
    markers = {m.relative_path: m for m in table.store.markers.read(pending.timestamp)}
    late, stuck = sorted(markers)
    late_bytes = (path / late).read_bytes()
    os.remove(path / stuck)
    os.mkdir(path / stuck)  # cannot be deleted: goes to failedDeleteFiles
    [result] = rollback(table)
    assert result.failed == (stuck,)
    (path / late).write_bytes(late_bytes)  # the late executor: its file and its marker
    m = markers[late]
    table.store.markers.create(pending.timestamp, m.partition, m.file_name, m.io_type)
    for i in range(4):
        write(table, _batch([(1, 100 + i, f"v{i}")]), "upsert")
        model[1] = (100 + i, f"v{i}")
    hoodie = sorted(os.listdir(path / ".hoodie"))
    refused = run_archival(table, ARCHIVE_SOON)
    assert refused.outcome is Outcome.NO_WORK
    assert f"could not be cleaned up: {table.storage.uri(stuck)} (delete it, then archive);" in refused.reason
    assert sorted(os.listdir(path / ".hoodie")) == hoodie
    os.rmdir(path / stuck)
    (path / stuck).write_bytes(late_bytes)  # deletable now (any parquet: the name is what counts)
    done = run_archival(table, ARCHIVE_SOON)
    assert done.outcome is Outcome.ARCHIVED and done.keep_from > pending.timestamp
    assert not (path / late).exists() and not (path / stuck).exists()
    assert table.store.markers.read(pending.timestamp) == []
    _check(path, model)


def test_a_file_a_late_executor_makes_after_the_rollback_took_its_marker_is_archived_away(
    tmp_path: Path,
) -> None:
    """The marker exists, the file not yet, as the rollback runs; the executor then writes it
    (marker gone). The rollback's metadata names it, so archival deletes it before moving past."""
    path = tmp_path / "t"
    table, model = _seed(path, "cow")
    with pytest.raises(_Stop):
        write(table, _batch([(50, 40, "ghost")]), "insert", fault=_stop_at_commit)
    [pending] = table.timeline().pending
    [late] = [m.relative_path for m in table.store.markers.read(pending.timestamp)]
    late_bytes = (path / late).read_bytes()
    os.remove(path / late)
    [result] = rollback(table)
    assert result.deleted == (late,)
    (path / late).write_bytes(late_bytes)
    assert table.store.markers.read(pending.timestamp) == []
    for i in range(4):
        write(table, _batch([(1, 100 + i, f"v{i}")]), "upsert")
        model[1] = (100 + i, f"v{i}")
    assert run_archival(table, ARCHIVE_SOON).outcome is Outcome.ARCHIVED
    assert not (path / late).exists()
    _check(path, model)


def _each_task_retried(table: LakeTable, context: WriteContext, units: Sequence[FileGroupWrite]) -> list:
    """A runner like Spark's when every task dies after writing its file and is retried (or a
    speculative copy runs): each file group is written twice, the second result is kept."""
    out = []
    for unit in units:
        write_file_group(table, context, unit)
        out.append(write_file_group(table, context, unit))
    return out


@pytest.mark.parametrize("kind", ["cow", "mor"])
@pytest.mark.parametrize(
    ("op", "rows"), [("upsert", [(1, 50, "r1"), (9, 50, "r9")]), ("delete", [(2, 50, "")])]
)
def test_a_retried_task_of_a_spark_write_rewrites_its_file_group(
    tmp_path: Path, kind: str, op: str, rows: list
) -> None:
    """On merge-on-read the retry's log file already existed (create-once): every retry failed
    with ObjectExistsError and the whole write was rolled back."""
    path = tmp_path / "t"
    table, model = _seed(path, kind)
    result = write(table, _batch(rows), op, runner=_each_task_retried)
    assert (result.inserted, result.updated, result.deleted) == ((1, 1, 0) if op == "upsert" else (0, 0, 1))
    for key, ts, v in rows:
        if op == "delete":
            model.pop(key)
        else:
            model[key] = (ts, v)
    _check(path, model)
