"""Which files a rollback takes as its target's, exactly: from the markers (a file not made yet
included), from a completed instant's write stats, and by listing the table when neither is left
(base files named with the instant, and logs only where the instant wrote a block or named the slice)."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from compaction_support import DUE, crash_at, mor
from hudi import HudiTableBuilder
from tree_digest import tree_digest

from airflow_lake_provider.lake.errors import CorruptTimelineFileError, RollbackError, StorageError
from airflow_lake_provider.lake.log_file.log_format import log as log_block_log
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes, rollback_command_block
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint, savepoints
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback import executor as executor_module
from airflow_lake_provider.lake.table.rollback.executor import (
    discard_failed_write,
    gather,
    rollback_instant_locked,
)
from airflow_lake_provider.lake.table.rollback.executor import log as executor_log
from airflow_lake_provider.lake.table.rollback.planner import WrittenFile
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock, format_instant

START = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
T1, T2, T3 = (format_instant(START + dt.timedelta(milliseconds=i)) for i in range(3))
LATER = format_instant(START + dt.timedelta(days=1))


def _batch(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "city": pa.array(["a" if i % 2 else "b" for i in ids], pa.string()),
        }
    )


def _mor(path: Path, partition_fields: tuple[str, ...]) -> LakeTable:
    """A hive-style MOR table keyed by id, ordered by ts, its clock a millisecond on per instant."""
    ticks = iter(range(10**6))
    return LakeTable.create(
        path,
        name="orders",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=partition_fields,
        hive_style=True,
        clock=InstantClock(now=lambda: START + dt.timedelta(milliseconds=next(ticks))),
    )


@pytest.fixture
def t(tmp_path: Path) -> LakeTable:
    """T1 inserts 1 (city=a) and 2 (city=b); T2 updates 1 (a log in city=a); T3 updates 2 (a log in
    city=b) and inserts 3 (a new base file in city=a), then dies before its commit."""
    table = _mor(tmp_path / "t", ("city",))
    write(table, _batch([1, 2], 1), "insert")
    write(table, _batch([1], 2), "upsert")
    with pytest.raises(SimulatedCrash):
        write(table, _batch([2, 3], 3), "upsert", fault=crash_at("commit"))
    return table


def _root(table: LakeTable) -> Path:
    return Path(table.storage.root)


def _one(table: LakeTable, pattern: str) -> str:
    (found,) = _root(table).glob(pattern)
    return found.relative_to(_root(table)).as_posix()


def _file(table: LakeTable, rel: str, instants: set[str] | None = None) -> WrittenFile:
    return WrittenFile(rel, (_root(table) / rel).stat().st_size, frozenset(instants or ()))


def _gather(table: LakeTable, instant: str) -> list[WrittenFile]:
    timeline = table.timeline()
    found = timeline.get(instant)
    assert found is not None
    return gather(table, timeline, found)


def test_a_pending_write_is_gathered_from_its_markers(t: LakeTable) -> None:
    new_base = _one(t, f"city=a/*_{T3}.parquet")
    log_b = _one(t, f"city=b/.*_{T1}.log.1_*")
    assert _gather(t, T3) == [_file(t, new_base), _file(t, log_b, {T3})]
    # A marked file not made yet (a late executor may still make it) is named with size 0.
    (_root(t) / new_base).unlink()
    assert _gather(t, T3) == [WrittenFile(new_base, 0), _file(t, log_b, {T3})]


def test_a_completed_write_is_gathered_from_its_write_stats(t: LakeTable) -> None:
    log_a = _one(t, f"city=a/.*_{T1}.log.1_*")
    assert _gather(t, T2) == [_file(t, log_a, {T2})]
    # A file its stats name that is gone is left out (nothing to roll back there).
    (_root(t) / log_a).unlink()
    assert _gather(t, T2) == []
    bases = sorted(_one(t, f"city={c}/*_{T1}.parquet") for c in "ab")
    assert _gather(t, T1) == [_file(t, rel) for rel in bases]


def test_a_pending_write_without_markers_is_gathered_by_listing(t: LakeTable) -> None:
    shutil.rmtree(_root(t) / ".hoodie" / ".temp" / T3)
    new_base = _one(t, f"city=a/*_{T3}.parquet")
    log_a = _one(t, f"city=a/.*_{T1}.log.1_*")  # T2's block only: not T3's
    log_b = _one(t, f"city=b/.*_{T1}.log.1_*")
    group_a = log_a.split("/")[1][1:].split("_")[0]
    root = _root(t)
    # A slice named with T3 counts whatever its blocks are; a slice after T3 is not looked at.
    named = f"city=a/.{group_a}_{T3}.log.1_0-0-0"
    shutil.copy(root / log_a, root / named)
    shutil.copy(root / log_a, root / f"city=a/.{group_a}_{LATER}.log.1_0-0-0")
    # Rollback command blocks do not count as the instant's blocks.
    appended = f"city=b/{log_b.split('/')[1].replace('.log.1_', '.log.2_')}"
    (root / appended).write_bytes((root / log_b).read_bytes() + rollback_command_block(LATER, T1))
    assert _gather(t, T3) == sorted(
        [
            _file(t, named, {T2}),
            _file(t, new_base),
            _file(t, log_b, {T3}),
            _file(t, appended, {T3}),
        ],
        key=lambda f: f.path,
    )


# -- a pending compaction: rolled back only when the caller says so (restore) ---------------------
def test_a_pending_compaction_is_rolled_back_only_when_asked_for(tmp_path: Path) -> None:
    table = mor(tmp_path)
    scheduled = schedule_compaction(table, DUE)
    c = scheduled.instant
    assert c is not None
    hoodie = tmp_path / "t" / ".hoodie"
    before = sorted(p.name for p in hoodie.iterdir())
    with pytest.raises(RollbackError, match=f"{c} is a pending compaction; it is finished, not rolled back"):
        rollback_instant_locked(table, c)
    assert sorted(p.name for p in hoodie.iterdir()) == before
    (result,) = rollback_instant_locked(table, c, compaction=True)
    assert (result.target, result.target_action, result.deleted, result.marked) == (c, "compaction", (), ())
    timeline = LakeTable.open(tmp_path / "t").timeline()
    assert timeline.get(c) is None and timeline.pending_compactions() == []


# -- executing the plan -----------------------------------------------------------------------------
def test_a_rollback_marks_itself_inflight_with_an_empty_file(
    t: LakeTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(_rel: str) -> bool:
        raise SimulatedCrash("while deleting")

    monkeypatch.setattr(t.storage, "delete_data_file", crash)
    with pytest.raises(SimulatedCrash):
        rollback_instant_locked(t, T3)
    (inflight,) = (_root(t) / ".hoodie").glob("*.rollback.inflight")
    assert inflight.read_bytes() == b""


def test_a_file_a_rollback_cannot_delete_is_named_and_recorded_as_failed(
    t: LakeTable, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    new_base = _one(t, f"city=a/*_{T3}.parquet")
    delete = t.storage.delete_data_file

    def refuse(rel: str) -> bool:
        if rel == new_base:
            raise StorageError("permission denied")
        return delete(rel)

    monkeypatch.setattr(t.storage, "delete_data_file", refuse)
    caplog.set_level(logging.WARNING, logger=executor_log.name)
    caplog.clear()
    (result,) = rollback_instant_locked(t, T3)
    assert result.failed == (new_base,) and new_base not in result.deleted
    assert [r.getMessage() for r in caplog.records if r.name == executor_log.name] == [
        f"rollback {result.instant} of {T3} could not delete {t.storage.uri(new_base)}: permission denied"
    ]


def test_a_log_in_a_nested_partition_is_read_for_its_blocks(tmp_path: Path) -> None:
    table = _mor(tmp_path / "t", ("city", "day"))
    rows = _batch([1], 1).append_column("day", pa.array(["d1"]))
    first = write(table, rows, "insert")
    with pytest.raises(SimulatedCrash):
        write(table, rows.set_column(1, "ts", pa.array([2], pa.int64())), "upsert", fault=crash_at("commit"))
    pending = table.timeline().pending[-1]
    (log,) = (tmp_path / "t" / "city=a" / "day=d1").glob(".*.log.*")
    rel = f"city=a/day=d1/{log.name}"
    assert gather(table, table.timeline(), pending) == [
        WrittenFile(rel, log.stat().st_size, frozenset({pending.timestamp}))
    ]
    assert first.instant < pending.timestamp


# -- logs shared with committed instants: marked with a command block, not deleted -----------------
@pytest.fixture
def shared(tmp_path: Path) -> tuple[LakeTable, list[str]]:
    """T1 inserts 1 (city=a) and 2 (city=b), T2 updates both (a log in each partition); T3 updates
    both and dies before its commit, its blocks appended to T2's logs as Hudi's writers append (so
    each log holds a committed and a failed block). Returns the table and the two logs, in order."""
    table = _mor(tmp_path / "t", ("city",))
    write(table, _batch([1, 2], 1), "insert")
    write(table, _batch([1, 2], 2), "upsert")
    with pytest.raises(SimulatedCrash):
        write(table, _batch([1, 2], 3), "upsert", fault=crash_at("commit"))
    root = _root(table)
    logs = []
    for own in sorted(root.glob("city=*/.*.log.2_*")):
        previous = own.with_name(own.name.replace(".log.2_", ".log.1_"))
        previous.write_bytes(previous.read_bytes() + own.read_bytes())
        own.unlink()
        (marker,) = (root / ".hoodie" / ".temp" / T3).glob(f"{own.parent.name}/{own.name}.marker.*")
        marker.rename(marker.with_name(previous.name + ".marker.APPEND"))
        logs.append(previous.relative_to(root).as_posix())
    return table, logs


def _blocks(table: LakeTable, rel: str) -> list[tuple[str, str, str | None]]:
    data = (_root(table) / rel).read_bytes()
    return [(b.block_type.name, b.instant_time, b.target_instant_time) for b in parse_log_bytes(data, rel)]


def _ts(table: LakeTable) -> dict[int, int]:
    rows = read_snapshot(table).to_pylist()
    return {r["id"]: r["ts"] for r in rows}


def test_a_failed_write_whose_logs_hold_committed_blocks_is_not_discarded(
    shared: tuple[LakeTable, list[str]],
) -> None:
    """Its blocks need a rollback command block in the shared logs: the writer's discard does
    nothing and says so (a rollback follows), the files untouched and the instant still pending."""
    table, _logs = shared
    before = tree_digest(_root(table))
    assert discard_failed_write(table, T3) is False
    assert tree_digest(_root(table)) == before
    assert [i.timestamp for i in table.timeline().pending] == [T3]


def test_shared_logs_are_marked_and_the_failed_blocks_stop_counting(
    shared: tuple[LakeTable, list[str]],
) -> None:
    table, logs = shared
    assert _ts(table) == {1: 2, 2: 2}
    (result,) = rollback_instant_locked(table, T3)
    assert (result.deleted, result.marked) == ((), tuple(logs))
    for rel in logs:
        assert _blocks(table, rel) == [
            ("AVRO_DATA", T2, None),
            ("AVRO_DATA", T3, None),
            ("COMMAND", result.instant, T3),
        ]
    assert _ts(LakeTable.open(_root(table))) == {1: 2, 2: 2}


def test_a_log_holding_another_rollbacks_block_still_gets_its_own(
    shared: tuple[LakeTable, list[str]],
) -> None:
    """Blocks of other rollbacks (one of another instant, one of T3 by a rollback not ours, as a
    Hudi writer's crashed attempt leaves) do not stand in for this rollback's block."""
    table, (log_a, log_b) = shared
    root = _root(table)
    with (root / log_a).open("ab") as f:
        f.write(rollback_command_block(LATER, T1))
    with (root / log_b).open("ab") as f:
        f.write(rollback_command_block(LATER, T3))
    (result,) = rollback_instant_locked(table, T3)
    assert result.marked == (log_a, log_b)
    assert _blocks(table, log_a)[2:] == [("COMMAND", LATER, T1), ("COMMAND", result.instant, T3)]
    assert _blocks(table, log_b)[2:] == [("COMMAND", LATER, T3), ("COMMAND", result.instant, T3)]


def test_a_log_to_mark_that_is_gone_is_skipped_and_the_rest_marked(
    shared: tuple[LakeTable, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    table, (log_a, log_b) = shared

    def crash(*_args: object) -> None:
        raise SimulatedCrash("before inflight")

    monkeypatch.setattr(table.store, "transition_to_inflight", crash)
    with pytest.raises(SimulatedCrash):
        rollback_instant_locked(table, T3)
    monkeypatch.undo()
    (_root(table) / log_a).unlink()  # gone since the plan was stored (say, by hand)
    (result,) = rollback_instant_locked(LakeTable.open(_root(table)), T3)
    assert (result.resumed, result.deleted, result.marked) == (True, (), (log_b,))
    assert _blocks(table, log_b)[-1] == ("COMMAND", result.instant, T3)


def test_a_damaged_log_is_named_each_time_it_is_read(
    shared: tuple[LakeTable, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    table, (log_a, log_b) = shared
    root = _root(table)
    size = (root / log_b).stat().st_size
    with (root / log_b).open("ab") as f:
        f.write(b"\x00" * 7)  # a torn tail
    caplog.set_level(logging.WARNING, logger=log_block_log.name)
    caplog.clear()
    (result,) = rollback_instant_locked(table, T3)
    # Read twice (gathering, then before marking); the command block goes after the torn bytes.
    named = f"log file {table.storage.uri(log_b)}:"
    torn = [
        f"{named} no block magic at offset {size}, scanning forward",
        f"{named} dropping 7 trailing bytes after offset {size}",
    ]
    assert [r.getMessage() for r in caplog.records if r.name == log_block_log.name] == torn + torn
    assert result.marked == (log_a, log_b)
    assert _blocks(table, log_b)[-1] == ("COMMAND", result.instant, T3)


def test_the_rollback_records_how_long_it_took(
    shared: tuple[LakeTable, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    table, _logs = shared
    clock = iter([100.0, 102.25])
    monkeypatch.setattr(executor_module, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    (result,) = rollback_instant_locked(table, T3)
    metadata = timeline_avro.read_avro(
        (_root(table) / ".hoodie" / f"{result.instant}.rollback").read_bytes(), "x"
    )
    assert metadata["timeTakenInMillis"] == 2250


def test_a_damaged_pending_rollback_plan_is_named_and_nothing_changes(t: LakeTable) -> None:
    plan = timeline_avro.write_avro(
        timeline_avro.ROLLBACK_PLAN,
        {"instantToRollback": {"commitTime": T3, "action": "bogus"}, "RollbackRequests": [], "version": 1},
    )
    requested = _root(t) / ".hoodie" / f"{LATER}.rollback.requested"
    requested.write_bytes(plan)
    before = sorted(p.relative_to(_root(t)).as_posix() for p in _root(t).rglob("*"))
    with pytest.raises(CorruptTimelineFileError) as err:
        rollback_instant_locked(t, T3)
    assert str(err.value) == f"{t.storage.uri(f'.hoodie/{LATER}.rollback.requested')}: unknown action 'bogus'"
    assert sorted(p.relative_to(_root(t)).as_posix() for p in _root(t).rglob("*")) == before


def _compacted_then_upserted(path: Path, upserts: int) -> tuple[LakeTable, str, pa.Table]:
    """A MOR table without a metadata table: two writes, a savepoint, a compaction C, then
    ``upserts`` upserts of key 1 onto C's slice (logs named after C); the rows at the savepoint."""
    table = _mor(path, ())
    write(table, _batch([1, 2], 1), "insert")
    write(table, _batch([1], 2), "upsert")
    at_savepoint = read_snapshot(table)
    create_savepoint(table, table.timeline().completed_commits[-1].timestamp)
    c = run_compaction(table, DUE)[1].instant
    assert c is not None
    for n in range(upserts):
        write(table, _batch([1], 3 + n), "upsert")
    return table, c, at_savepoint


KEEP = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.compact.inline.max.delta.commits": "1",  # (archival keeps what it would compact)
}


def _archive_past(table: LakeTable, point: str) -> None:
    """The savepoint deleted, four upserts of key 2 (ts 10 to 13) and a clean after the second:
    archival (after each write) moves the active timeline past the restore's rollbacks."""
    delete_savepoint(table, point)
    for n in range(4):
        write(table, _batch([2], 10 + n), "upsert", options=KEEP)
        if n == 1:
            run_clean(table, KEEP)


@pytest.mark.parametrize("upserts", [1, 2])
def test_a_restore_past_a_compaction_deletes_the_logs_on_its_slices_so_archival_cannot_expose_them(
    tmp_path: Path, upserts: int
) -> None:
    """The compaction's rollback deletes its base files and every log named after its slices
    (their writes were rolled back first). Left, such a log holds only rolled-back blocks; once
    archival passes the rollbacks it reads as a committed slice without a base file and hides the
    file group's older rows. After the restore, writes, a clean and archival, we and hudi-rs read
    the same rows, the savepoint's with the new writes."""
    table, c, at_savepoint = _compacted_then_upserted(tmp_path / "t", upserts)
    root = _root(table)
    on_slice = sorted(p.name for p in root.rglob(f".*_{c}.log.*"))
    assert len(on_slice) == upserts
    point = savepoints(table.timeline())[0].instant
    restore(table, point)
    assert not list(root.rglob(f"*_{c}*")), "the compaction's base files and its slices' logs"
    timeline = table.timeline()
    records = [timeline.avro_record(r) for r in timeline.filter([Action.ROLLBACK])]
    deleted = {
        p.rsplit("/", 1)[1]
        for record in records
        for m in record["partitionMetadata"].values()
        for p in m["successDeleteFiles"]
    }
    assert set(on_slice) <= deleted  # (without an MDT, each upsert's rollback deletes its own log)
    (rollback_of_c,) = [
        r
        for r, rec in zip(timeline.filter([Action.ROLLBACK]), records, strict=True)
        if c in rec["commitsRollback"]
    ]
    _archive_past(table, point)
    assert rollback_of_c.timestamp not in {i.timestamp for i in table.timeline().instants}
    ours = read_snapshot(table).sort_by("id")
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(root)).build().read()).sort_by("id")
    assert ours.column("id").to_pylist() == theirs.column("id").to_pylist() == [1, 2]
    assert ours.column("ts").to_pylist() == theirs.column("ts").to_pylist()
    assert ours.column("ts").to_pylist() == [at_savepoint.sort_by("id").column("ts")[0].as_py(), 13]


def test_rolling_back_a_pending_compaction_refuses_a_log_on_its_slice_holding_a_completed_write(
    tmp_path: Path,
) -> None:
    """Only a restore rolls back a pending compaction, after every write since. Asked directly
    while a completed upsert's log sits on its slice, the rollback names the log and the write and
    changes nothing: deleting that log would lose the write."""
    table = _mor(tmp_path / "t", ())
    write(table, _batch([1, 2], 1), "insert")
    write(table, _batch([1], 2), "upsert")
    c = schedule_compaction(table, DUE).instant
    assert c is not None
    u = write(table, _batch([1], 3), "upsert").instant
    before = tree_digest(_root(table))
    with pytest.raises(RollbackError, match=rf"_{c}\.log\.1.*slice compaction {c} began.*{u}"):
        rollback_instant_locked(table, c, compaction=True, restoring=True)
    assert tree_digest(_root(table)) == before
    # A second upsert appended to the same log, as Hudi's writers append: both writes are named.
    u2 = write(table, _batch([1], 4), "upsert").instant
    log1, log2 = sorted(_root(table).glob(f".*_{c}.log.*"))
    log1.write_bytes(log1.read_bytes() + log2.read_bytes())
    log2.unlink()
    before = tree_digest(_root(table))
    with pytest.raises(RollbackError) as err:
        rollback_instant_locked(table, c, compaction=True, restoring=True)
    assert str(err.value) == (
        f"{table.storage.uri(log1.name)} is on the slice compaction {c} began and holds blocks of "
        f"completed write(s) {u}, {u2}: roll those back first"
    )
    assert tree_digest(_root(table)) == before
