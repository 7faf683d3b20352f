"""``missing_slices`` as of an instant only the LSM history holds (layout 2): it decodes only the
archived commits that can have written a slice a clean took (a read as of the newest of 10,000
archived instants decoded every one of them), and finds exactly what decoding every commit finds.

Tables written here (version 8, copy-on-write, one partition per key), their oldest instants archived
as Hudi's archiver does (``tests/history_support.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import SnapshotCleanedError
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Instant, InstantClock
from tests.history_support import archive_oldest

START = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)


def _table(path: Path, table_type: str = "cow", partition_fields: tuple[str, ...] = ("p",)) -> LakeTable:
    """A v8 table keyed by ``id``, ordered by ``ts``, whose clock ticks a second per instant."""
    ticks = iter(range(10**6))
    return LakeTable.create(
        path,
        table_version=8,
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=partition_fields,
        clock=InstantClock(now=lambda: START + dt.timedelta(seconds=next(ticks))),
    )


def _write(table: LakeTable, key: str, ts: int, op: str = "upsert") -> str:
    batch = pa.table({"id": [key], "ts": pa.array([ts], pa.int64()), "p": [key]})
    return write(table, batch, op).instant


def _decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The times of the commits whose metadata is decoded from now on."""
    decoded: list[str] = []
    real = Timeline.commit_metadata

    def counted(self: Timeline, instant: Instant):  # noqa: ANN202 - the real method's type
        decoded.append(instant.timestamp)
        return real(self, instant)

    monkeypatch.setattr(Timeline, "commit_metadata", counted)
    return decoded


def _every_group_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``missing_slices`` as before the bound: every group, every commit up to the instant."""
    monkeypatch.setattr(FileSystemView, "_at_risk", lambda self, instant, only: (None, ""))


def test_as_of_the_newest_archived_instant_no_archived_commit_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No file group was rewritten after the instant: a clean cannot have taken the slice a read as
    of it needs, which is the one a snapshot read takes. The groups written since are new (their
    commits, on the active timeline, say so)."""
    table = _table(tmp_path / "t")
    times = [_write(table, f"k{n}", n, "insert") for n in range(12)]
    assert archive_oldest(table.base_path, 8) == times[:8]
    newest = times[7]
    timeline = table.timeline().with_history(newest)
    view = table.file_system_view(timeline)
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(newest) == []
    assert [t for t in decoded if t <= newest] == []  # before: all 8
    assert sorted(set(decoded)) == times[8:]  # each group's first commit, active: read once
    assert read_snapshot(table, newest).num_rows == 8


def test_as_of_an_archived_instant_a_cleaned_slice_refuses_the_read_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean took the slice of k0 that the first commits read: a read as of any of them is
    refused with the message decoding every commit gives; the later ones read."""
    table = _table(tmp_path / "t")
    first = [_write(table, "k0", 1, "insert"), _write(table, "k1", 1, "insert")]
    rewrite = _write(table, "k0", 2)
    one_version = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    cleaned = run_clean(table, one_version)
    assert cleaned.deleted_files == 1
    later = [_write(table, f"k{n}", n, "insert") for n in range(2, 6)]
    assert archive_oldest(table.base_path, 7) == [*first, rewrite, cleaned.instant, *later[:3]]
    messages: dict[str, str] = {}
    for instant in [*first, rewrite, *later[:3]]:
        try:
            messages[instant] = f"{read_snapshot(table, instant).num_rows} rows"
        except SnapshotCleanedError as exc:
            messages[instant] = str(exc)
    _every_group_checked(monkeypatch)
    for instant, message in messages.items():
        try:
            expected = f"{read_snapshot(table, instant).num_rows} rows"
        except SnapshotCleanedError as exc:
            expected = str(exc)
        assert message == expected, instant
    (k0,) = [k for k in table.file_system_view().groups if k[0] == "k0"]
    refused = (
        f"{table.uri}: cannot read as of {{}}: a clean removed the file slice {first[0]} of file group "
        f"{k0[1]} in partition k0 (1 slice in all); instants from "
    )
    assert [messages[t][: len(refused) + 15] for t in first] == [refused.format(t) for t in first]
    assert [messages[t] for t in [rewrite, *later[:3]]] == ["2 rows", "3 rows", "4 rows", "5 rows"]


def test_as_of_an_archived_instant_only_commits_from_the_oldest_slice_at_risk_are_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups rewritten after the instant are at risk; the commits decoded are those completed
    from the earliest slice any of them reads as of the instant (k0's second base, not its first),
    up to the instant, and the first commits of the groups created since (active)."""
    table = _table(tmp_path / "t")
    k0 = [_write(table, "k0", 1, "insert"), _write(table, "k0", 2)]
    k1, k2 = _write(table, "k1", 1, "insert"), _write(table, "k2", 1, "insert")
    rewrites = [_write(table, "k0", 3), _write(table, "k1", 2), _write(table, "k2", 2)]
    new = [_write(table, f"k{n}", 1, "insert") for n in (3, 4)]
    assert archive_oldest(table.base_path, 4) == [*k0, k1, k2]
    assert not table.timeline().archived
    timeline = table.timeline().with_history(k2)
    view = table.file_system_view(timeline)
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(k2) == []
    assert decoded == [*new, k0[1], k1, k2]
    decoded.clear()
    assert view.missing_slices(k2, ["k1", "k2"]) == []
    assert decoded == [k1, k2]  # neither k0 nor the new groups are asked for
    # As of k0's second write k1 and k2 are new (their commits say so); k0's floor is that write.
    decoded.clear()
    assert view.missing_slices(k0[1]) == []
    assert decoded == [k1, k2, *new, k0[1]]
    # As of an active instant (not in the history): narrowed the same way.
    decoded.clear()
    assert view.missing_slices(rewrites[0]) == []
    assert decoded == [*new, k1, k2, rewrites[0]]


def test_a_built_view_narrows_the_groups_at_risk_as_the_listed_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups built into FileGroups (a view a caller replaced its groups of) rather than read from
    the slice index: which slices have a base file is read from them, so the same commits are decoded."""
    table = _table(tmp_path / "t")
    k0 = [_write(table, "k0", 1, "insert"), _write(table, "k0", 2)]
    k1, k2 = _write(table, "k1", 1, "insert"), _write(table, "k2", 1, "insert")
    for key in ("k0", "k1", "k2"):
        _write(table, key, 3)
    new = [_write(table, f"k{n}", 1, "insert") for n in (3, 4)]
    assert archive_oldest(table.base_path, 4) == [*k0, k1, k2]
    view = table.file_system_view(table.timeline().with_history(k2))
    built = dataclasses.replace(view, groups=dict(view.groups.items()))
    decoded = _decoding(monkeypatch)
    assert built.missing_slices(k2) == []
    assert decoded == [*new, k0[1], k1, k2]


def test_on_a_timeline_without_history_every_commit_up_to_the_instant_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing archived: the groups at risk are not narrowed (every commit up to the instant)."""
    table = _table(tmp_path / "t")
    k0 = [_write(table, "k0", 1, "insert"), _write(table, "k0", 2)]
    k1 = _write(table, "k1", 1, "insert")
    _write(table, "k0", 3)
    decoded = _decoding(monkeypatch)
    assert table.file_system_view().missing_slices(k1) == []
    assert decoded == [*k0, k1]


def _put(table: LakeTable, partition: str, key: str, op: str = "insert") -> str:
    batch = pa.table({"id": [key], "ts": pa.array([1], pa.int64()), "p": [partition]})
    return write(table, batch, op).instant


def _replaced_and_rewritten(path: Path) -> tuple[LakeTable, list[str]]:
    """Partition x: two groups that a merge replaced after the instant (the third write); z: a
    group rewritten after it. A clean then removed the replaced groups and z's first slice.
    Returns the table and its instants: x0, x1, z0, z0 again, the merge, k1, the clean."""
    table = _table(path)
    times = [_put(table, "x", "x0"), _put(table, "x", "x1"), _put(table, "z", "z0")]
    times += [_put(table, "z", "z0", "upsert"), merge_small_files(table, "x", 10**9).instant]
    times += [_put(table, "k1", "k1"), run_clean(table, {"hoodie.cleaner.commits.retained": "1"}).instant]
    return table, times


def test_as_of_an_archived_instant_replaced_and_rewritten_groups_a_clean_emptied_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The groups a merge replaced after the instant and the group rewritten since are at risk (a
    clean removed what a read as of the instant needs), also when only their partition is asked
    for; a group gone from storage (and z's, whose slice as of the instant is gone) leaves no floor,
    so every commit up to the instant is decoded. As of the merge, nothing is at risk: the groups it
    replaced are not read, the one group written since (k1) was created by its commit."""
    table, times = _replaced_and_rewritten(tmp_path / "t")
    x0, x1, z0, z_newest, merge, k1, _ = times
    assert archive_oldest(table.base_path, 3) == [x0, x1, z0]
    view = table.file_system_view(table.timeline().with_history(z0))
    x_ids = {k[1]: at for k, at in view.replaced.items()}
    assert set(x_ids.values()) == {merge}
    (z_id,) = [k[1] for k in view.groups if k[0] == "z"]
    x_missing = sorted(("x", i, at) for i, at in zip(_ids_by_first_write(view, x_ids), [x0, x1], strict=True))
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(z0) == sorted([*x_missing, ("z", z_id, z0)])
    # Every commit up to z0; before them, the first commits of the groups made since (k1's, and
    # the merge's when its output group's id sorts before a replaced one's) show they are new.
    assert decoded[-3:] == [x0, x1, z0] and set(decoded[:-3]) - {merge} == {k1}
    decoded.clear()
    assert view.missing_slices(z0, ["x"]) == x_missing
    assert decoded[-3:] == [x0, x1, z0] and set(decoded[:-3]) <= {merge}
    decoded.clear()
    assert view.missing_slices(z0, ["z"]) == [("z", z_id, z0)]
    assert decoded == [z_newest, x0, x1, z0]  # z's newest base's commit: not its first
    # The merge archived too: as of z0 the timeline does not show it; every group is checked.
    assert archive_oldest(table.base_path, 2) == [z_newest, merge]
    view = table.file_system_view(table.timeline().with_history(z0))
    assert view.replaced == {}
    decoded.clear()
    assert view.missing_slices(z0) == sorted([*x_missing, ("z", z_id, z0)])
    assert decoded == [x0, x1, z0]
    view = table.file_system_view(table.timeline().with_history(merge))
    decoded.clear()
    assert view.missing_slices(merge) == []
    assert decoded == [k1]


def _ids_by_first_write(view: FileSystemView, replaced: dict[str, str]) -> list[str]:
    """The replaced x groups' ids in the order of their first writes (x0's group, then x1's)."""
    timeline = view.timeline
    return [
        next(s.file_id for s in timeline.commit_metadata(c).write_stats() if s.file_id in replaced)
        for c in timeline.completed_commits[:2]
    ]


@pytest.mark.parametrize("completed", ["000", "500"])  # at the floor itself, or after it
def test_as_of_an_archived_instant_a_commit_completed_after_the_floor_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, completed: str
) -> None:
    """The floor bounds completion times, not request times: k0's first write, completed (as a
    concurrent writer's may) when or after its second was requested, can have written a file of a
    slice from the floor on, so it is decoded; by request time it would be skipped."""
    table = _table(tmp_path / "t")
    k0 = [_write(table, "k0", 1, "insert"), _write(table, "k0", 2)]
    k1 = _write(table, "k1", 1, "insert")
    _write(table, "k0", 3)
    folder = table.base_path / ".hoodie" / "timeline"
    (done,) = folder.glob(f"{k0[0]}_*.commit")
    done.rename(folder / f"{k0[0]}_{k0[1][:-3]}{completed}.commit")
    assert archive_oldest(table.base_path, 3) == [*k0, k1]
    view = table.file_system_view(table.timeline().with_history(k1))
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(k1) == []
    assert decoded == [*k0, k1]


def test_as_of_an_archived_instant_a_group_is_new_by_its_own_write_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One commit rewrote k1's group and created k5's (two-level partitions): k5's own write stat
    (prevCommit null) makes it new, not k1's, which the commit lists first."""
    table = _table(tmp_path / "t", partition_fields=("p", "q"))

    def put(keys: list[str], op: str) -> str:
        rows = {"id": keys, "ts": pa.array([1] * len(keys), pa.int64()), "p": keys, "q": ["a"] * len(keys)}
        return write(table, pa.table(rows), op).instant

    first, k1 = put(["k0"], "insert"), put(["k1"], "insert")
    both = put(["k1", "k5"], "upsert")
    stats = table.timeline().commit_metadata(table.timeline().get(both)).write_stats()
    assert [(s.partition_path, s.prev_commit) for s in stats] == [("k1/a", k1), ("k5/a", "null")]
    assert archive_oldest(table.base_path, 2) == [first, k1]
    view = table.file_system_view(table.timeline().with_history(k1))
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(k1) == []
    assert decoded == [both, k1]


def test_as_of_an_archived_instant_a_new_group_of_a_non_partitioned_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No partition folder: the write stat's path is the bare file name, and still names the group."""
    table = _table(tmp_path / "t", partition_fields=())

    def insert(key: str) -> str:
        return write(table, pa.table({"id": [key], "ts": pa.array([1], pa.int64())}), "insert").instant

    times = [insert("k0"), insert("k1"), insert("k2")]
    assert len(table.file_system_view().groups) == 3
    assert archive_oldest(table.base_path, 2) == times[:2]
    view = table.file_system_view(table.timeline().with_history(times[1]))
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(times[1]) == []
    assert decoded == [times[2]]


def test_as_of_an_archived_instant_a_log_only_group_written_since_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group of log files only (as Flink and bucket-index writers leave) written after the
    instant: no base file says whether it is new, so every commit up to the instant is read."""
    table = _table(tmp_path / "t", "mor")

    def put(key: str, partition: str, ts: int) -> str:
        rows = pa.table({"id": [key], "ts": pa.array([ts], pa.int64()), "p": [partition]})
        return write(table, rows, "upsert").instant

    kept = put("a1", "a", 1)
    first = put("b1", "b", 1)
    logs = [put("b1", "b", ts) for ts in (2, 3)]
    (base,) = (table.base_path / "b").glob("*.parquet")
    base.unlink()  # b's group: its two logs only, as the writer that made it left them
    for name in (table.base_path / ".hoodie" / "timeline").glob(f"{first}*"):
        name.unlink()
    assert archive_oldest(table.base_path, 1) == [kept]
    view = table.file_system_view(table.timeline().with_history(kept))
    (group,) = view.file_groups("b")
    assert [(s.base_instant, s.base_file) for s in group.slices] == [(logs[0], None)]
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(kept) == []
    assert decoded == [kept]


def test_as_of_an_archived_instant_a_group_its_commit_does_not_name_is_not_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A base file of a committed instant that its commit's write stats do not name (a task
    attempt's file left behind): nothing says the group is new, so every commit up to the instant
    is read; the group k1's commit names is new."""
    table = _table(tmp_path / "t")
    k0, k1 = _write(table, "k0", 1, "insert"), _write(table, "k1", 1, "insert")
    (real,) = (table.base_path / "k1").glob("*.parquet")
    token_and_time = real.name.split("_", 1)[1]
    shutil.copy(real, real.with_name(f"ffffffff-0000-0000-0000-000000000000-0_{token_and_time}"))
    assert archive_oldest(table.base_path, 1) == [k0]
    view = table.file_system_view(table.timeline().with_history(k0))
    assert len(view.file_groups("k1")) == 2
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(k0) == []
    assert decoded == [k1, k0]
