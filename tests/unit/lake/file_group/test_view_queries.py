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
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock

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


def _slices(slices: list[FileSlice]) -> list[tuple[str, str, str, bool, int]]:
    """(partition, file id, base instant, has a base file, log files) of each slice."""
    return [
        (s.partition, s.file_id, s.base_instant, s.base_file is not None, len(s.log_files)) for s in slices
    ]


def test_the_latest_slices_of_a_partition_and_as_of_an_instant(t: Table) -> None:
    c1, c2, c3, c4 = t.c
    view = t.table.file_system_view()
    x_now, y_now = ("x/1", t.fx, c3, True, 1), ("y/1", t.fy, c1, True, 0)
    assert _slices(view.latest_slices()) == [x_now, y_now]
    assert _slices(view.latest_slices(partition="x/1")) == [x_now]
    assert _slices(view.latest_slices(as_of=c2)) == [("x/1", t.fx, c1, True, 1), y_now]
    c5 = _replace(t.table, "x/1", t.fx)
    view = t.table.file_system_view()
    # Replaced at c5: gone from reads at or after c5, still there for a read as of c4.
    assert _slices(view.latest_slices()) == _slices(view.latest_slices(as_of=c5)) == [y_now]
    assert _slices(view.latest_slices(as_of=c4)) == [x_now, y_now]


def test_a_log_only_slice_at_an_archived_instant_is_the_latest(t: Table) -> None:
    # Instants older than the active timeline are archived history, so committed. A log-only slice
    # after a base file (as log-first writers leave) is read as it is: it is no pending compaction.
    old, older = "20250201000000000", "20250101000000000"
    listing = {"z/1": [(f"fz_0-1-0_{older}.parquet", 10), (f".fz_{old}.log.1_0-1-0", 20)]}
    view = FileSystemView.build(
        t.table.config, t.table.timeline(), ["z/1"], lambda names: {n: listing[n] for n in names}
    )
    assert _slices(view.latest_slices()) == [("z/1", "fz", old, False, 1)]
    assert view.snapshot_bases("z/1") == [("fz", None, True)]
    # A view holding built groups (not the lazy index) answers the same.
    built = replace(view, groups={k: view.groups[k] for k in view.groups})
    assert built.snapshot_bases("z/1") == [("fz", None, True)]


def test_an_unpartitioned_table_is_listed_at_its_root(tmp_path: Path) -> None:
    table = LakeTable.create(
        tmp_path / "u", name="u", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": ["a"], "ts": pa.array([1], pa.int64())}), "insert")
    asked: list[list[str]] = []

    def lister(names: list[str]) -> dict[str, list[tuple[str, int]]]:
        asked.append(list(names))
        return {p: table.storage.list(p) for p in names}

    view = table.file_system_view(lister=lister)
    assert asked == [[""]] and view.partitions == ("",)
    assert [(s.partition, s.base_file is not None) for s in view.latest_slices()] == [("", True)]


def test_a_lister_gets_the_partitions_found_or_asked_for(t: Table) -> None:
    asked: list[list[str]] = []

    def lister(names: list[str]) -> dict[str, list[tuple[str, int]]]:
        asked.append(list(names))
        return {p: t.table.storage.list(p) for p in names if p != "a/1"}

    view = t.table.file_system_view(lister=lister)
    assert asked == [["x/1", "y/1"]] and view.config is t.table.config
    assert sorted(view.groups) == [("x/1", t.fx), ("y/1", t.fy)]
    # A partition with no files (listed first) does not end the grouping of the others.
    view = t.table.file_system_view(partitions=["y/1", "a/1", "x/1"], lister=lister)
    assert asked[1] == ["a/1", "x/1", "y/1"] and view.partitions == ("a/1", "x/1", "y/1")
    assert sorted(view.groups) == [("x/1", t.fx), ("y/1", t.fy)]


def test_a_view_of_some_partitions_knows_every_size_by_default(t: Table) -> None:
    view = FileSystemView.build(t.table.config, t.table.timeline(), ["x/1"])
    sizes = [
        size
        for slots in view.slice_index.values()
        for base, logs in slots.values()
        for _, size in ([base] if base else []) + list(logs)
    ]
    on_disk = sorted(
        p.stat().st_size
        for p in (t.table.base_path / "x/1").iterdir()
        if p.name != ".hoodie_partition_metadata"
    )
    assert sorted(sizes) == on_disk and len(sizes) == 4


def test_a_pending_compaction_adds_a_slice_that_reads_fold_into_the_one_before(t: Table) -> None:
    _, _, c3, _ = t.c
    scheduled = schedule_compaction(t.table, {"hoodie.compact.inline.max.delta.commits": "1"})
    c5 = scheduled.instant
    assert [(op.partition, op.file_id) for op in scheduled.plan.operations] == [("x/1", t.fx)]
    view = t.table.file_system_view()
    (x,) = view.file_groups("x/1")
    # The empty slice at c5 (where writers now log) folds into c3's slice: one log file, c4's.
    assert [(s.base_instant, s.base_file is not None, len(s.log_files)) for s in x.slices][1:] == [
        (c3, True, 1),
        (c5, False, 0),
    ]
    assert _slices(view.latest_slices(partition="x/1")) == [("x/1", t.fx, c3, True, 1)]
    write(t.table, _batch("a", 6, "x"), "upsert")  # logged against c5's slice
    view = t.table.file_system_view()
    assert _slices(view.latest_slices(partition="x/1")) == [("x/1", t.fx, c3, True, 2)]
    (latest,) = view.latest_slices(partition="x/1")
    assert latest.base_file is not None
    assert view.snapshot_bases("x/1") == [(t.fx, (latest.base_file.file_name, latest.base_file.size), True)]
    assert view.pending_compaction == {("x/1", t.fx): c5}
    assert view.pending_compaction_base == {("x/1", t.fx): c3}
    # A view of the other partition only: the compaction's group is not there, and not made up.
    assert sorted(t.table.file_system_view(partitions=["y/1"]).groups) == [("y/1", t.fy)]
    # Only the log against c5 left (the rest lost): that log-only slice is what there is to read.
    for name in [p.name for p in (t.table.base_path / "x/1").iterdir() if c5 not in p.name]:
        if name != ".hoodie_partition_metadata":
            (t.table.base_path / "x/1" / name).unlink()
    view = t.table.file_system_view()
    assert _slices(view.latest_slices(partition="x/1")) == [("x/1", t.fx, c5, False, 1)]
    assert view.snapshot_bases("x/1") == [(t.fx, None, True)]


def test_snapshot_bases_skip_a_replaced_group_and_go_on(t: Table) -> None:
    older = "20250101000000000"  # archived history: committed
    listing = {"z/1": [(f"fa_0-1-0_{older}.parquet", 10), (f"fb_0-1-0_{older}.parquet", 20)]}
    _replace(t.table, "z/1", "fa")
    view = FileSystemView.build(
        t.table.config, t.table.timeline(), ["z/1"], lambda names: {n: listing[n] for n in names}
    )
    assert view.snapshot_bases("z/1") == [("fb", (f"fb_0-1-0_{older}.parquet", 20), False)]
    built = replace(view, groups={k: view.groups[k] for k in view.groups})
    assert built.snapshot_bases("z/1") == view.snapshot_bases("z/1")


def test_the_partition_walk_skips_hudi_and_other_formats_metadata_folders(t: Table) -> None:
    c1 = t.c[0]
    root = t.table.base_path
    (base,) = (root / "y/1").glob(f"{t.fy}_*_{c1}.parquet")
    # A data file name where no partition is: Hudi's folder at any depth, the other formats' at the top.
    for folder in ("_delta_log", "metadata", "x/1/.hoodie", "y/1/sub/.hoodie"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / base.name).write_bytes(base.read_bytes())
    # The same names below the top level are partition values like any other.
    for folder in ("z/_delta_log", "z/metadata"):
        (root / folder).mkdir(parents=True)
        (root / folder / base.name).write_bytes(base.read_bytes())
    view = t.table.file_system_view()
    assert view.partitions == ("x/1", "y/1", "z/_delta_log", "z/metadata")
    # A built group is kept: asking again returns the same object.
    assert view.groups[("x/1", t.fx)] is view.groups[("x/1", t.fx)]


def test_a_view_listed_without_sizes_sizes_the_files_it_is_asked_for(t: Table, tmp_path: Path) -> None:
    view = FileSystemView.build(t.table.config, t.table.timeline(), ["x/1"], sizes=False)
    (x,) = view.file_groups("x/1")
    got = sorted(f.size for s in x.slices for f in s.files)
    on_disk = sorted(p.stat().st_size for p in (t.table.base_path / "x/1").glob(f"*{t.fx}*"))
    assert got == on_disk and len(got) == 4
    assert {f.partition for s in x.slices for f in s.files} == {"x/1"}
    # At the root of an unpartitioned table too.
    table = LakeTable.create(
        tmp_path / "u", name="u", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": ["a"], "ts": pa.array([1], pa.int64())}), "insert")
    view = FileSystemView.build(table.config, table.timeline(), [""], sizes=False)
    ((_, (base, size), _),) = view.snapshot_bases("")
    assert size == (table.base_path / base).stat().st_size


def test_a_pending_compaction_of_an_unpartitioned_table(tmp_path: Path) -> None:
    table = LakeTable.create(
        tmp_path / "u", name="u", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    batch = pa.table({"id": ["a"], "ts": pa.array([1], pa.int64())})
    first = write(table, batch, "insert")
    write(table, batch, "upsert")
    c = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"}).instant
    view = table.file_system_view()
    ((partition, file_id),) = view.groups
    assert partition == ""
    assert view.pending_compaction == {("", file_id): c}
    assert view.pending_compaction_base == {("", file_id): first.instant}
    assert {f.partition for s in view.groups[("", file_id)].slices for f in s.files} == {""}
