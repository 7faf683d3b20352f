"""What one write commits and says, exactly: the inflight and completed metadata, event times, the
log line, its instant against a timeline from a clock ahead of ours, heartbeats, and what it refuses
before an instant exists (a pending restore, a partition path one byte too long, a bad option)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest
from clean_support import cow_table, upsert
from compaction_support import crash_at

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    RollbackError,
    SchemaError,
    TableConfigError,
)
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table import progress
from airflow_lake_provider.lake.table.rollback import executor as rollback_executor
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import EVENT_TIME_FIELD, Operation, write, writer
from airflow_lake_provider.lake.timeline.instant import (
    Action,
    InstantClock,
    format_instant,
    instant_to_datetime,
)
from tests.unit.lake.services.clean.test_executor import _Contended

FROZEN = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
T1, T2, T3 = (format_instant(FROZEN + dt.timedelta(milliseconds=i)) for i in range(3))


def _table(path: Path, partition_fields: tuple[str, ...] = ()) -> LakeTable:
    return LakeTable.create(
        path,
        name="orders",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=partition_fields,
        clock=InstantClock(now=lambda: FROZEN),
    )


def _batch(ids: list[int], ts: list[int] | None = None) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "ts": pa.array(ts or [1] * len(ids), pa.int64())})


def _json(path: Path, name: str) -> dict:
    return json.loads((path / ".hoodie" / name).read_text())


def test_the_inflight_and_completed_metadata_of_a_write(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    inflight: list[dict] = []

    def look(point: str) -> None:
        if point == "inflight":
            inflight.append(_json(path, f"{T1}.inflight"))  # a commit's inflight file in v6

    done = write(
        table, _batch([1, 2], [5, 9]), "insert", fault=look, event_time_field="ts", extra_metadata={"by": "x"}
    )
    schema = {
        "type": "record",
        "name": "orders_record",
        "namespace": "hoodie.orders",
        "fields": [
            {"name": "id", "type": ["null", "long"], "default": None},
            {"name": "ts", "type": ["null", "long"], "default": None},
        ],
    }
    (first,) = inflight
    assert first["operationType"] == "INSERT" and first["partitionToWriteStats"] == {}
    assert first["extraMetadata"].keys() == {"by", "schema"} and first["extraMetadata"]["by"] == "x"
    assert json.loads(first["extraMetadata"]["schema"]) == schema
    completed = _json(path, f"{T1}.commit")
    assert completed["operationType"] == "INSERT"
    assert {k: v for k, v in completed["extraMetadata"].items() if k != "schema"} == {
        "by": "x",
        "lake.minEventTime": "5",
        "lake.maxEventTime": "9",
    }
    assert (done.instant, done.action, done.operation, done.inserted) == (T1, "commit", Operation.INSERT, 2)


def test_the_tables_event_time_field_is_used_when_the_write_names_none(tmp_path: Path) -> None:
    plain = _table(tmp_path / "t")
    config = TableConfig.from_properties({**plain.config.properties, EVENT_TIME_FIELD: "ts"})
    table = LakeTable(plain.storage, config, plain.clock)
    write(table, _batch([1, 2], [7, 3]), "insert")
    extra = _json(tmp_path / "t", f"{T1}.commit")["extraMetadata"]
    assert (extra["lake.minEventTime"], extra["lake.maxEventTime"]) == ("3", "7")
    # Named by the write, the write's field wins over the table's.
    write(
        table,
        pa.table({"id": pa.array([3], pa.int64()), "ts": pa.array([4], pa.int64())}),
        "insert",
        event_time_field="id",
    )
    extra = _json(tmp_path / "t", f"{T2}.commit")["extraMetadata"]
    assert (extra["lake.minEventTime"], extra["lake.maxEventTime"]) == ("3", "3")


def test_a_write_logs_what_it_committed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = _table(tmp_path / "t")
    write(table, _batch([1, 2]), "insert")
    caplog.set_level(logging.INFO, logger=writer.log.name)
    caplog.clear()
    write(table, _batch([2, 3]), "upsert")
    assert [r.getMessage() for r in caplog.records if r.name == writer.log.name] == [
        f"committed commit upsert at {T2}: 1 inserted, 1 updated, 0 deleted in 2 files"
    ]


def test_a_write_logs_its_progress_in_file_groups_files_and_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The start line (rows, file groups) and the last unit's line (files, and every row the groups
    wrote: inserted, updated and deleted alike); lines between come only every 2 s."""
    table = _table(tmp_path / "t")
    write(table, _batch([1, 2]), "insert")
    caplog.set_level(logging.INFO, logger=progress.log.name)
    lines: list[str] = []
    for ids, operation in (([2, 3, 4], "upsert"), ([1, 3], "delete")):  # 1 updated and 2 inserted; 2 deleted
        caplog.clear()
        write(table, _batch(ids), operation)
        logged = [r.getMessage().rsplit(", ", 1)[0] for r in caplog.records if r.name == progress.log.name]
        lines += [logged[0], logged[-1]]
    assert lines == [
        f"write {T2} of {table.uri}: 3 rows in 2 file groups",  # the inserts in a new group
        f"write {T2} of {table.uri}: 2/2 file groups, 2 files, 3 rows",
        f"write {T3} of {table.uri}: 2 rows in 2 file groups",
        f"write {T3} of {table.uri}: 2/2 file groups, 2 files, 2 rows",
    ]


def test_a_write_after_an_instant_from_a_clock_ahead_of_ours_comes_after_it(tmp_path: Path) -> None:
    ahead = format_instant(FROZEN + dt.timedelta(days=1))
    _table(tmp_path / "t")
    write(
        LakeTable.open(tmp_path / "t", clock=InstantClock(now=lambda: FROZEN + dt.timedelta(days=1))),
        _batch([1]),
        "insert",
    )
    done = write(
        LakeTable.open(tmp_path / "t", clock=InstantClock(now=lambda: FROZEN)), _batch([2]), "insert"
    )
    assert done.instant > ahead


def test_a_lazy_write_drops_its_heartbeat_when_it_commits(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    write(table, _batch([1]), "insert", options={"hoodie.cleaner.policy.failed.writes": "LAZY"})
    assert list((tmp_path / "t" / ".hoodie" / ".heartbeat").iterdir()) == []


def test_a_pending_restore_refuses_writes_and_a_finished_one_does_not(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1]), "insert")
    restore = format_instant(FROZEN + dt.timedelta(seconds=5))
    requested = table.store.create_requested(restore, Action.RESTORE, b"{}")
    before = sorted(p.name for p in (path / ".hoodie").iterdir())
    with pytest.raises(RollbackError) as caught:
        write(table, _batch([2]), "insert")
    assert str(caught.value) == (
        f"{table.uri}: restore {restore} is pending; finish it before writing "
        f"(lake restore {table.uri} --savepoint ...)"
    )
    assert sorted(p.name for p in (path / ".hoodie").iterdir()) == before
    inflight = table.store.transition_to_inflight(requested, b"{}")
    with pytest.raises(RollbackError, match=f"restore {restore} is pending"):
        write(table, _batch([2]), "insert")
    table.store.transition_to_completed(inflight, b"{}")
    assert write(table, _batch([2]), "insert").inserted == 1


def test_a_partition_path_one_byte_too_long_for_a_marker_is_refused_before_the_write(tmp_path: Path) -> None:
    # The longest path a write makes: .hoodie/.temp/<instant>/<partition>/<file name of 128 bytes>.
    fields = tuple(f"f{i}" for i in range(17))
    path = tmp_path / "t"
    table = _table(path, fields)
    fixed = len(str(path)) + len("/.hoodie/.temp/") + len(T1) + 1 + 1 + 128
    budget = 4096 - fixed - 16  # the 16 slashes between the 17 values; 4096 bytes do not fit (NUL)
    values = [budget // 17 + (1 if i < budget % 17 else 0) for i in range(17)]
    assert max(values) <= 255
    row = {"id": pa.array([1], pa.int64()), "ts": pa.array([1], pa.int64())}
    row |= {f: pa.array([chr(ord("a") + i) * n]) for i, (f, n) in enumerate(zip(fields, values, strict=True))}
    with pytest.raises(SchemaError, match="a path of 4096 bytes, where at most 4095 fit"):
        write(table, pa.table(row), "insert")
    assert table.timeline().instants == ()


# The one boolean parser: true/false in any case, anything else refused (a blank value is unset).
@pytest.mark.parametrize("value", ["maybe", "1", "yes"])
def test_a_bad_automatic_archival_setting_is_refused_naming_it(tmp_path: Path, value: str) -> None:
    table = _table(tmp_path / "t")
    with pytest.raises(TableConfigError) as caught:
        write(table, _batch([1]), "insert", options={"hoodie.archive.automatic": value})
    assert str(caught.value) == f"hoodie.archive.automatic={value!r} is not true or false"
    assert table.timeline().instants == ()


def test_a_lazy_write_rolls_back_a_failed_write_whose_heartbeat_expired_first(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    lazy = {"hoodie.cleaner.policy.failed.writes": "LAZY", "hoodie.client.heartbeat.interval_in_ms": "1"}
    lazy["hoodie.client.heartbeat.tolerable.misses"] = "1"

    with pytest.raises(SimulatedCrash):
        write(table, _batch([1]), "insert", options=lazy, fault=crash_at("file"))
    (path / ".hoodie" / ".heartbeat" / T1).write_text("0")  # its last beat, long ago
    done = write(table, _batch([2]), "insert", options=lazy)
    states = [(i.timestamp, i.action.value, i.state.name) for i in LakeTable.open(path).timeline().instants]
    assert states == [(T2, "rollback", "COMPLETED"), (done.instant, "commit", "COMPLETED")]
    assert sorted(p.name for p in path.glob("*.parquet")) == [
        p.name for p in path.glob(f"*_{done.instant}.parquet")
    ]


def test_the_tables_failed_writes_policy_applies_when_the_write_names_none(tmp_path: Path) -> None:
    plain = _table(tmp_path / "t")
    config = TableConfig.from_properties(
        {**plain.config.properties, "hoodie.cleaner.policy.failed.writes": "LAZY"}
    )
    table = LakeTable(plain.storage, config, plain.clock)
    beats: list[list[str]] = []

    def look(point: str) -> None:
        if point == "inflight":
            beats.append([p.name for p in (tmp_path / "t" / ".hoodie" / ".heartbeat").iterdir()])

    write(table, _batch([1]), "insert", fault=look)
    assert beats == [[T1]]  # LAZY writes beat


def test_a_write_first_finishes_a_rollback_left_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # T1 dies before its commit; a rollback of it dies right after its plan (T2 requested). The
    # next write (policy NEVER: no failed write is its to roll back) still finishes that rollback.
    path = tmp_path / "t"
    table = _table(path)

    with pytest.raises(SimulatedCrash):
        write(table, _batch([1]), "insert", fault=crash_at("file"))

    def crash(*_args: object, **_kw: object) -> None:
        raise SimulatedCrash("after the plan")

    with monkeypatch.context() as patch:
        patch.setattr(rollback_executor, "_execute", crash)
        with pytest.raises(SimulatedCrash):
            rollback_executor.rollback_instant_locked(table, T1)
    pending = [(i.timestamp, i.action.value, i.state.name) for i in table.timeline().instants]
    assert pending == [(T1, "commit", "INFLIGHT"), (T2, "rollback", "REQUESTED")]
    done = write(table, _batch([2]), "insert", options={"hoodie.cleaner.policy.failed.writes": "NEVER"})
    states = [(i.timestamp, i.action.value, i.state.name) for i in LakeTable.open(path).timeline().instants]
    assert states == [(T2, "rollback", "COMPLETED"), (done.instant, "commit", "COMPLETED")]


@pytest.mark.parametrize("collisions", [4, 5])
def test_a_write_takes_up_to_five_instant_times_when_others_take_them_first(
    tmp_path: Path, collisions: int
) -> None:
    """As a clean: each try takes the millisecond after the timeline's latest; when the fifth is
    taken too it gives up naming that time, leaving no instant or heartbeat of its own."""
    created = cow_table(tmp_path)
    upsert(created, 0)
    frozen = InstantClock(now=lambda: dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))  # behind them all
    storage = _Contended(created.base_path, collisions)
    table = LakeTable(storage, created.config, frozen)
    batch = pa.table({"id": ["kx"], "ts": pa.array([1], pa.int64()), "p": ["x"]})
    if collisions == 5:
        with pytest.raises(CommitConflictError) as raised:
            write(table, batch, "upsert")
        last = storage.taken[-1]
        assert len(storage.taken) == 5
        assert str(raised.value) == f"instant time {last} is already used by ['{last}.commit.requested']"
        assert not list((created.base_path / ".hoodie/.heartbeat").glob("*"))
        return
    done = write(table, batch, "upsert")
    assert len(storage.taken) == 4
    after = format_instant(instant_to_datetime(storage.taken[-1]) + dt.timedelta(milliseconds=1))
    assert done.instant == after
