"""The file system view's queries, exactly: missing_slices (which file slices a read as of an instant
needs but lacks: the savepoint refusal's oracle) and the slices a read takes. One MOR table with
two-level partitions:

    c1 insert a -> x/1 (group fx), b -> y/1 (group fy)   fx@c1, fy@c1
    c2 upsert a                                          log of fx's slice c1
    c3 compaction of fx                                  fx@c3
    c4 upsert a                                          log of fx's slice c3
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.format import timeline_avro
from airflow_lake_provider.lake.format.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.format.instant import Action, InstantClock
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

START = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Table:
    table: LakeTable
    c: tuple[str, str, str, str]  # c1..c4
    fx: str
    fy: str

    def missing(self, at: str, partitions: list[str] | None = None) -> list[tuple[str, str, str]]:
        return self.table.file_system_view().missing_slices(at, partitions)

    def delete(self, partition: str, pattern: str) -> None:
        (found,) = (self.table.base_path / partition).glob(pattern)
        found.unlink()


def _batch(key: str, ts: int, p: str) -> pa.Table:
    return pa.table({"id": [key], "ts": pa.array([ts], pa.int64()), "p": [p], "q": ["1"]})


@pytest.fixture
def t(tmp_path: Path) -> Table:
    ticks = iter(range(10**6))
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p", "q"),
        clock=InstantClock(now=lambda: START + dt.timedelta(seconds=next(ticks))),
    )
    write(table, pa.concat_tables([_batch("a", 1, "x"), _batch("b", 1, "y")]), "insert")
    write(table, _batch("a", 2, "x"), "upsert")
    scheduled, _ = run_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
    write(table, _batch("a", 4, "x"), "upsert")
    c = tuple(i.timestamp for i in table.timeline().completed_commits)
    assert len(c) == 4 and c[2] == scheduled.instant
    view = table.file_system_view()
    ((_, fx),) = [k for k in view.groups if k[0] == "x/1"]
    ((_, fy),) = [k for k in view.groups if k[0] == "y/1"]
    return Table(table, c, fx, fy)  # type: ignore[arg-type]


def _replace(table: LakeTable, partition: str, file_id: str, stats: tuple[WriteStat, ...] = ()) -> str:
    """A completed INSERT_OVERWRITE replacecommit that replaces one file group."""
    at = table.clock.next(after=table.timeline().latest_time)
    body = {"operationType": "INSERT_OVERWRITE", "clusteringPlan": None, "extraMetadata": None, "version": 1}
    requested = table.store.create_requested(
        at, Action.REPLACECOMMIT, timeline_avro.write_avro(timeline_avro.REQUESTED_REPLACE_METADATA, body)
    )
    inflight = table.store.transition_to_inflight(requested)
    schema = table.timeline().latest_schema()
    written = {partition: stats} if stats else {}
    meta = CommitMetadata("INSERT_OVERWRITE", written, {"schema": schema}, False, {partition: (file_id,)})
    table.store.transition_to_completed(inflight, meta.to_json_bytes())
    return at


def test_nothing_is_missing_while_every_file_is_there(t: Table) -> None:
    assert [t.missing(at) for at in t.c] == [[], [], [], []]


def test_a_slice_whose_base_file_is_gone_is_missing_up_to_the_next_slice(t: Table) -> None:
    c1, c2, c3, c4 = t.c
    t.delete("x/1", f"{t.fx}_*_{c1}.parquet")
    assert t.missing(c1) == t.missing(c2) == [("x/1", t.fx, c1)]
    assert t.missing(c3) == t.missing(c4) == []


def test_a_slice_whose_log_file_is_gone_is_missing_from_the_log_on(t: Table) -> None:
    c1, c2, c3, c4 = t.c
    t.delete("x/1", f".{t.fx}_{c1}.log.*")
    assert (t.missing(c1), t.missing(c2), t.missing(c3)) == ([], [("x/1", t.fx, c1)], [])
    t.delete("x/1", f".{t.fx}_{c3}.log.*")
    assert (t.missing(c3), t.missing(c4)) == ([], [("x/1", t.fx, c3)])


def test_a_group_gone_whole_and_the_partitions_asked_for(t: Table) -> None:
    c1, c2, _, _ = t.c
    t.delete("y/1", f"{t.fy}_*_{c1}.parquet")  # fy's only file: the group is gone
    t.delete("x/1", f"{t.fx}_*_{c1}.parquet")
    both = [("x/1", t.fx, c1), ("y/1", t.fy, c1)]
    assert t.missing(c2) == both
    assert t.missing(c2, ["x/1"]) == both[:1]
    assert t.missing(c2, ["y/1"]) == both[1:]
    assert t.missing(c2, ["y/1", "x/1"]) == both
    assert t.missing(c2, []) == [] and t.missing(c2, ["z/1"]) == []


def test_a_replaced_group_is_needed_only_before_its_replacement(t: Table) -> None:
    c1, _, c3, c4 = t.c
    c5 = _replace(t.table, "x/1", t.fx)
    t.delete("x/1", f".{t.fx}_{c3}.log.*")
    t.delete("y/1", f"{t.fy}_*_{c1}.parquet")
    assert t.missing(c4) == [("x/1", t.fx, c3), ("y/1", t.fy, c1)]
    # At the replacement itself the read skips fx; fy (after it in the order) is still missing.
    assert t.missing(c5) == [("y/1", t.fy, c1)]


def test_a_write_stat_naming_no_data_file_is_ignored(t: Table) -> None:
    # Another tool's commit may list a file that is neither a base nor a log file.
    odd = WriteStat(file_id="odd", partition_path="y/1", path="y/1/notes.txt")
    c5 = _replace(t.table, "x/1", "no-such-group", (odd,))
    assert t.missing(c5) == []
