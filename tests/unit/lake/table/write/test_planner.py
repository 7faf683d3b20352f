"""The writer's key lookup beyond base files: keys that live only in log files stay in their file
group (issue 30 item 1), and a write does not read, or fail on, the older slices of the groups it
touches that a concurrent clean deletes (item 9). Exact rows, ours and hudi-rs."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.format.table_config import MergeMode
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome as CleanOutcome
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome as CompactionOutcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import (
    Action,
    Instant,
    InstantClock,
    format_instant,
    instant_to_datetime,
)

Row = tuple[int, int, str]  # id, ts, v


def _lake(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), argv
    return out


def _input(path: Path, rows: list[Row]) -> str:
    pq.write_table(
        pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int64()),
                "ts": pa.array([r[1] for r in rows], pa.int64()),
                "v": pa.array([r[2] for r in rows], pa.string()),
            }
        ),
        path,
    )
    return str(path)


def _rows(table: pa.Table) -> list[Row]:
    return sorted(tuple(r.values()) for r in table.select(["id", "ts", "v"]).to_pylist())  # type: ignore[misc]


def _groups(table: pa.Table) -> set[str]:
    """The file groups the rows were read from (file id: the base or log file name's prefix)."""
    return {name.lstrip(".").split("_")[0] for name in table.column("_hoodie_file_name").to_pylist()}


def _ours(path: Path) -> pa.Table:
    return read_snapshot(LakeTable.open(path))


def _hudi(path: Path) -> pa.Table:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _both(path: Path, expected: list[Row]) -> pa.Table:
    """Ours and hudi-rs read exactly ``expected`` (only where no compaction is pending: hudi-rs hides
    the logs written against a pending compaction's slice until it completes)."""
    ours = _ours(path)
    assert _rows(ours) == expected
    assert _rows(_hudi(path)) == expected
    return ours


A = [(i, 1, "a") for i in range(10)]


def _init_mor(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    _lake(
        capsys,
        "init",
        str(path),
        "--table-type",
        "mor",
        "--name",
        "t",
        "--record-key",
        "id",
        "--precombine",
        "ts",
    )
    _lake(
        capsys, "write", str(path), "--input", _input(path.parent / "a.parquet", A), "--operation", "insert"
    )


def _write(capsys: pytest.CaptureFixture[str], path: Path, name: str, rows: list[Row], op: str) -> None:
    source = _input(path.parent / f"{name}.parquet", rows)
    _lake(capsys, "write", str(path), "--input", source, "--operation", op)


@pytest.fixture
def reinserted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The issue's history: ids 0-9; delete 5; schedule a compaction; upsert 5='x' while the plan is
    pending; execute it. The compaction drops 5 from the new base (the delete), so 5='x' lives only
    in the log written against the new slice."""
    path = tmp_path / "t"
    _init_mor(capsys, path)
    _write(capsys, path, "d", [(5, 1, "a")], "delete")
    _both(path, [r for r in A if r[0] != 5])
    assert (
        json.loads(_lake(capsys, "compact", str(path), "--mode", "schedule", "--force"))["outcome"]
        == "SCHEDULED"
    )
    _write(capsys, path, "x", [(5, 1, "x")], "upsert")
    assert _rows(_ours(path)) == sorted([r for r in A if r[0] != 5] + [(5, 1, "x")])
    assert json.loads(_lake(capsys, "compact", str(path), "--mode", "execute"))["outcome"] == "COMPLETED"
    ours = _both(path, sorted([r for r in A if r[0] != 5] + [(5, 1, "x")]))
    assert len(_groups(ours)) == 1
    return path


def test_a_key_living_only_in_a_log_is_updated_in_its_file_group(
    reinserted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Upsert 5='y': one row 5='y' (ours and hudi-rs read 5 twice before the fix), in the one file
    group; another compaction keeps the ten rows."""
    _write(capsys, reinserted, "y", [(5, 1, "y")], "upsert")
    expected = sorted([r for r in A if r[0] != 5] + [(5, 1, "y")])
    assert len(_groups(_both(reinserted, expected))) == 1
    assert (
        json.loads(_lake(capsys, "compact", str(reinserted), "--mode", "run", "--force"))["outcome"]
        == "COMPLETED"
    )
    assert len(_groups(_both(reinserted, expected))) == 1


def test_a_key_living_only_in_a_log_is_deleted_and_reinserted_in_its_file_group(
    reinserted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting 5 deletes it (before the fix the delete found no key and 5='x' stayed); re-inserting
    it goes to the group holding its delete (one group: 5 lives once), and compaction keeps it."""
    _write(capsys, reinserted, "d2", [(5, 1, "x")], "delete")
    _both(reinserted, [r for r in A if r[0] != 5])
    _write(capsys, reinserted, "z", [(5, 1, "z")], "upsert")
    expected = sorted([r for r in A if r[0] != 5] + [(5, 1, "z")])
    assert len(_groups(_both(reinserted, expected))) == 1
    assert (
        json.loads(_lake(capsys, "compact", str(reinserted), "--mode", "run", "--force"))["outcome"]
        == "COMPLETED"
    )
    assert len(_groups(_both(reinserted, expected))) == 1


def test_an_event_time_delete_in_a_log_keeps_the_key_in_its_group(tmp_path: Path) -> None:
    """Event time: a logged delete older (smaller ts) than the key's version does not delete it, so
    the key's next version must meet both in the same group: ts=3 loses to the live ts=5 version,
    ts=7 replaces it, and the key never lives twice."""
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
    )
    assert table.config.merge_mode is MergeMode.EVENT_TIME_ORDERING
    batch = pa.table(
        {"id": pa.array([1, 2], pa.int64()), "ts": pa.array([1, 1], pa.int64()), "v": ["a", "a"]}
    )
    write(table, batch, "insert")
    write(table, pa.table({"id": [1], "ts": [1], "v": ["a"]}), "delete")
    planned = schedule_compaction(table, force=True)
    write(table, pa.table({"id": [1], "ts": [5], "v": ["b"]}), "upsert")  # on top of the plan
    assert execute_compaction(table, planned.instant).outcome is CompactionOutcome.COMPLETED
    # The compaction dropped 1 (the delete): it lives in the new slice's log only from here.
    write(table, pa.table({"id": [1], "ts": [4], "v": ["b"]}), "delete")  # older than ts=5: loses
    path = tmp_path / "t"
    assert len(_groups(_both(path, [(1, 5, "b"), (2, 1, "a")]))) == 1
    write(table, pa.table({"id": [1], "ts": [3], "v": ["c"]}), "upsert")
    assert len(_groups(_both(path, [(1, 5, "b"), (2, 1, "a")]))) == 1
    write(table, pa.table({"id": [1], "ts": [7], "v": ["d"]}), "upsert")
    assert len(_groups(_both(path, [(1, 7, "d"), (2, 1, "a")]))) == 1


def _clean_after_listing(table: LakeTable, monkeypatch: pytest.MonkeyPatch, found: list[int]) -> None:
    """Run a real clean (one file version kept) right after the next write lists its partitions,
    before it uses what it listed: the interleaving of a clean running beside the write."""
    listed = table.file_system_view

    def list_then_clean(*args: object, **kwargs: object) -> object:
        view = listed(*args, **kwargs)  # type: ignore[arg-type]
        monkeypatch.setattr(table, "file_system_view", listed)
        result = run_clean(
            table,
            {
                "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                "hoodie.cleaner.fileversions.retained": "1",
            },
        )
        assert result.outcome is CleanOutcome.CLEANED
        found.append(result.deleted_files)
        return view

    monkeypatch.setattr(table, "file_system_view", list_then_clean)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_clean_deleting_an_older_slice_during_a_write_does_not_fail_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The write updates a group whose older slice the clean deletes between the write's listing and
    its use: it commits (before the fix it failed with "... does not exist" and rolled back)."""
    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type=kind, record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": [1, 2], "ts": [1, 1], "v": ["a", "a"]}), "insert")
    write(table, pa.table({"id": [1], "ts": [1], "v": ["b"]}), "upsert")
    if kind == "mor":  # a second slice: the compaction's base; the first (base + log) is older
        run_compaction(table, force=True)
    deleted: list[int] = []
    _clean_after_listing(table, monkeypatch, deleted)
    result = write(table, pa.table({"id": [2], "ts": [1], "v": ["z"]}), "upsert")
    assert deleted == [1 if kind == "cow" else 2]  # the older slice: base (and log) file
    assert result.updated == 1
    assert len(_groups(_both(path, [(1, 1, "b"), (2, 1, "z")]))) == 1
    assert [i.timestamp for i in table.timeline().completed_commits][-1] == result.instant


@pytest.mark.parametrize("policy", ["EAGER", "LAZY"])
def test_a_clean_taking_the_writes_instant_first_is_left_alone_and_the_write_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """A clean in another process schedules in the very millisecond the write chose, just before the
    write creates its instant. The write takes a later instant and commits; the clean's plan stays
    and runs. Before the fix the write failed, and its error path "undid" the clean's requested
    instant as if it were its own (the clean, running, then lost its plan)."""
    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": [1, 2], "ts": [1, 1], "v": ["a", "a"]}), "insert")
    write(table, pa.table({"id": [1], "ts": [1], "v": ["b"]}), "upsert")
    keep_one = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    create = table.store.create_requested
    taken: list[str] = []

    def clean_first(timestamp: str, action: Action, content: bytes = b"") -> Instant:
        if not taken:
            at = instant_to_datetime(timestamp)
            other = LakeTable.open(path, clock=InstantClock(now=lambda: at))  # the same millisecond
            scheduled = run_clean(other, keep_one, mode="schedule")
            assert scheduled.outcome is CleanOutcome.SCHEDULED and scheduled.instant == timestamp
            taken.append(timestamp)
        return create(timestamp, action, content)

    monkeypatch.setattr(table.store, "create_requested", clean_first)
    result = write(
        table,
        pa.table({"id": [2], "ts": [1], "v": ["c"]}),
        "upsert",
        options={"hoodie.cleaner.policy.failed.writes": policy},
    )
    assert result.instant > taken[0]
    assert (path / ".hoodie" / f"{taken[0]}.clean.requested").exists()
    assert not (path / ".hoodie" / ".heartbeat" / taken[0]).exists()
    _both(path, [(1, 1, "b"), (2, 1, "c")])
    done = run_clean(table, keep_one, mode="execute", instant=taken[0])
    assert (done.outcome, done.deleted_files) == (CleanOutcome.CLEANED, 1)
    _both(path, [(1, 1, "b"), (2, 1, "c")])


def _two_writes(tmp_path: Path) -> tuple[Path, LakeTable]:
    """A COW table holding an insert of keys 1 and 2, then an upsert of key 1."""
    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": [1, 2], "ts": [1, 1], "v": ["a", "a"]}), "insert")
    write(table, pa.table({"id": [1], "ts": [1], "v": ["b"]}), "upsert")
    return path, table


def _before_the_first_create(
    monkeypatch: pytest.MonkeyPatch, table: LakeTable, act: Callable[[str, dt.datetime], str]
) -> list[str]:
    """Run ``act(time, its moment)`` once, just before ``table``'s store creates its first requested
    instant (another process acting in that millisecond); the time ``act`` returns, once it ran."""
    create = table.store.create_requested
    taken: list[str] = []

    def first_act(timestamp: str, action: Action, content: bytes = b"") -> Instant:
        if not taken:
            taken.append(act(timestamp, instant_to_datetime(timestamp)))
        return create(timestamp, action, content)

    monkeypatch.setattr(table.store, "create_requested", first_act)
    return taken


def test_a_write_whose_instant_was_taken_retries_later_than_every_instant_on_the_timeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean in another process takes the write's chosen time, and a third process, whose clock
    runs 5 s ahead, schedules a clean too: the write's next time is later than that one as well,
    not merely later than its own first choice (Hudi's timeline only grows)."""
    path, table = _two_writes(tmp_path)

    def others_first(timestamp: str, at: dt.datetime) -> str:
        same = LakeTable.open(path, clock=InstantClock(now=lambda: at))
        keep_one = {
            "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
            "hoodie.cleaner.fileversions.retained": "1",
        }
        assert run_clean(same, keep_one, mode="schedule").instant == timestamp
        later = format_instant(at + dt.timedelta(seconds=5))
        plan = (path / ".hoodie" / f"{timestamp}.clean.requested").read_bytes()
        LakeTable.open(path).store.create_requested(later, Action.CLEAN, plan)
        return later

    taken = _before_the_first_create(monkeypatch, table, others_first)
    result = write(table, pa.table({"id": [2], "ts": [3], "v": ["c"]}), "upsert")
    assert taken and result.instant > taken[0]
    assert LakeTable.open(path).timeline().completed_commits[-1].timestamp == result.instant


def test_a_write_taking_the_cleans_instant_first_does_not_fail_the_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other way round: a write in another process creates its instant in the millisecond the
    clean chose, just before the clean creates its own. The clean takes a later instant and cleans
    (before the fix it failed with CommitConflictError); the write's instant is left alone."""
    path, table = _two_writes(tmp_path)

    def write_first(timestamp: str, at: dt.datetime) -> str:
        other = LakeTable.open(path, clock=InstantClock(now=lambda: at))  # the same millisecond
        assert write(other, pa.table({"id": [2], "ts": [1], "v": ["c"]}), "upsert").instant == timestamp
        return timestamp

    taken = _before_the_first_create(monkeypatch, table, write_first)
    result = run_clean(
        table,
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
    )
    assert (result.outcome, result.deleted_files) == (CleanOutcome.CLEANED, 1)
    assert result.instant is not None and result.instant > taken[0]
    assert (path / ".hoodie" / f"{taken[0]}.commit").exists()
    _both(path, [(1, 1, "b"), (2, 1, "c")])
