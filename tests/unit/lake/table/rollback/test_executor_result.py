"""What a rollback reports: its result (and the dict the CLI and operators print) and its log line."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from crash_support import crashing, steps_of

from airflow_lake_provider.lake.errors import CorruptTimelineFileError, RollbackError
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.rollback.executor import (
    RollbackResult,
    describe_failed_writes,
    eligible_failed_writes,
    rollback,
    rollback_instant_locked,
)
from airflow_lake_provider.lake.table.rollback.policy import FailedWritesConfig, FailedWritesPolicy, now_ms
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, Instant, InstantClock, State

START = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def _table(path: Path) -> LakeTable:
    ticks = iter(range(10**6))
    return LakeTable.create(
        path,
        name="orders",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
        clock=InstantClock(now=lambda: START + dt.timedelta(milliseconds=next(ticks))),
    )


def _batch(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "city": pa.array(["a" if i % 2 else "b" for i in ids], pa.string()),
        }
    )


def _data_files(path: Path) -> set[str]:
    return {
        p.relative_to(path).as_posix()
        for p in path.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie_partition")
    }


def test_rollback_of_a_crashed_write_reports_exactly_what_it_undid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2], 10), "insert")
    before = _data_files(path)
    probe_table = _table(tmp_path / "probe")  # the same writes, counting the second one's steps
    write(probe_table, _batch([1, 2], 10), "insert")
    probe = crashing(probe_table)
    write(probe, _batch([3, 4], 20), "insert")
    # Crash the second write just before its completed file: its data files exist, it stays pending.
    completing = next(i for i, step in enumerate(steps_of(probe)) if step.endswith(".commit"))
    with pytest.raises(SimulatedCrash):
        write(
            crashing(table, completing),
            _batch([3, 4], 20),
            "insert",
            options={"hoodie.cleaner.policy.failed.writes": "NEVER"},
        )
    [failed] = table.timeline().pending
    made = sorted(_data_files(path) - before)
    assert len(made) == 2  # one base file per partition

    executor_log = "airflow_lake_provider.lake.table.rollback.executor"
    caplog.set_level(logging.INFO, logger=executor_log)
    caplog.clear()  # earlier tests may leave other loggers at INFO: only this rollback's lines count
    [result] = rollback(table)
    r = table.timeline().instants[-1].timestamp
    assert result == RollbackResult(r, failed.timestamp, "commit", tuple(made), (), False, ())
    assert result.to_dict() == {
        "instant": r,
        "rolled_back": failed.timestamp,
        "action": "commit",
        "deleted": made,
        "marked": [],
        "resumed": False,
        "failed": [],
    }
    assert _data_files(path) == before
    # The completed rollback names the same files, absolute, per partition.
    timeline = table.timeline()
    metadata = timeline.avro_record(timeline.instants[-1])
    taken = metadata.pop("timeTakenInMillis")
    assert isinstance(taken, int) and 0 <= taken < 60_000
    assert metadata == {
        "startRollbackTime": r,
        "totalFilesDeleted": 2,
        "commitsRollback": [failed.timestamp],
        "partitionMetadata": {
            f: {
                "partitionPath": f,
                "successDeleteFiles": [f"{path}/{m}" for m in made if m.startswith(f + "/")],
                "failedDeleteFiles": [],
                "rollbackLogFiles": None,
            }
            for f in ("city=a", "city=b")
        },
        "version": 1,
        "instantsRollback": [{"commitTime": failed.timestamp, "action": "commit"}],
    }
    assert [rec.getMessage() for rec in caplog.records if rec.name == executor_log] == [
        f"rolled back commit {failed.timestamp} at {r}: 2 deleted, 0 marked"
    ]


def _replace_requested(operation: str | None) -> bytes:
    return timeline_avro.write_avro(
        timeline_avro.REQUESTED_REPLACE_METADATA,
        {"operationType": operation, "clusteringPlan": None, "extraMetadata": None, "version": 1},
    )


def test_failed_writes_exclude_pending_clustering_and_policy_never_takes_none(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    store = table.store
    times = [f"20250601120000{n:03d}" for n in range(10, 17)]
    store.create_requested(times[0], Action.REPLACECOMMIT, _replace_requested("CLUSTER"))  # clustering
    store.transition_to_inflight(
        store.create_requested(times[1], Action.REPLACECOMMIT, _replace_requested("cluster"))
    )  # inflight clustering, the type in lower case
    store.create_requested(times[2], Action.REPLACECOMMIT, b"")  # an insert_overwrite, no plan
    store.create_requested(times[3], Action.REPLACECOMMIT, _replace_requested("INSERT_OVERWRITE"))
    store.create_requested(times[4], Action.REPLACECOMMIT, _replace_requested(None))
    store.create_requested(times[5], Action.DELTACOMMIT, _replace_requested("CLUSTER"))  # not a replace
    # An inflight replacecommit whose requested file is gone is a failed write too.
    (tmp_path / "t" / ".hoodie" / f"{times[6]}.replacecommit.inflight").write_bytes(b"")
    timeline = table.timeline()
    eager = eligible_failed_writes(table, timeline, FailedWritesConfig())
    assert [i.timestamp for i in eager] == times[2:]
    never = FailedWritesConfig(policy=FailedWritesPolicy.NEVER)
    assert eligible_failed_writes(table, timeline, never) == []
    # LAZY: no heartbeat file at all counts as expired (the writer is gone).
    lazy = FailedWritesConfig(policy=FailedWritesPolicy.LAZY)
    assert [i.timestamp for i in eligible_failed_writes(table, timeline, lazy)] == times[2:]
    store.heartbeats.beat(times[3], now_ms())  # a live writer: left alone
    assert [i.timestamp for i in eligible_failed_writes(table, timeline, lazy)] == [
        t for t in times[2:] if t != times[3]
    ]


def test_describing_failed_writes() -> None:
    assert describe_failed_writes("/t", []) == ""
    instants = [
        Instant("20250601120000010", State.INFLIGHT, Action.COMMIT),
        Instant("20250601120000011", State.REQUESTED, Action.DELTACOMMIT),
    ]
    assert describe_failed_writes("/t", instants) == (
        "failed or running write(s) 20250601120000010 (commit), 20250601120000011 (deltacommit); "
        "if they failed, roll them back with: lake rollback /t"
    )


NEVER = {"hoodie.cleaner.policy.failed.writes": "NEVER"}


def _two_failed_writes(tmp_path: Path) -> tuple[LakeTable, list[str]]:
    table = _table(tmp_path / "t")
    write(table, _batch([1, 2], 10), "insert")
    for ids in ([3], [4]):  # each crashes after its requested file: two pending writes
        with pytest.raises(SimulatedCrash):
            write(crashing(table, 1), _batch(ids, 20), "insert", options=NEVER)
    return table, [i.timestamp for i in table.timeline().pending]


def test_a_finished_pending_rollback_does_not_stop_the_other_failed_writes(tmp_path: Path) -> None:
    table, (a, b) = _two_failed_writes(tmp_path)
    with pytest.raises(SimulatedCrash):  # a rollback of a, stored but not finished
        rollback(crashing(table, 1), a)
    done = rollback(table)
    assert [(r.target, r.resumed) for r in done] == [(a, True), (b, False)]
    assert table.timeline().pending == []


def test_the_tables_failed_writes_policy_applies_and_options_override_it(tmp_path: Path) -> None:
    table, (a, b) = _two_failed_writes(tmp_path)
    table.store.update_properties({**table.config.properties, **NEVER})
    table = LakeTable.open(tmp_path / "t")
    assert rollback(table) == []
    assert [r.target for r in rollback(table, options={"hoodie.cleaner.policy.failed.writes": "EAGER"})] == [
        a,
        b,
    ]


def test_rollback_waits_for_the_write_lock(tmp_path: Path) -> None:
    table, (a, b) = _two_failed_writes(tmp_path)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(rollback(table, a)))
    with table.storage.lock(".hoodie/.aux/.lake-write.lock", "held by the test"):
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and outcome == []
        assert [i.timestamp for i in table.timeline().pending] == [a, b]
    worker.join(60)
    assert [[r.target for r in results] for results in outcome] == [[a]]


def test_locked_rollback_refuses_a_completed_write_unless_forced_and_names_a_corrupt_plan(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path / "t")
    write(table, _batch([1, 2], 10), "insert")
    last = table.timeline().last_completed_commit.timestamp
    with table.store.exclusive("write"):
        with pytest.raises(RollbackError, match=f"{last} is a completed commit; pass --force"):
            rollback_instant_locked(table, last)
    # A replacecommit whose requested file is not Avro: the error names the file, nothing is rolled back.
    t = "20250601120000100"
    table.store.create_requested(t, Action.REPLACECOMMIT, b"not avro")
    path = table.timeline().path_of(Instant(t, State.REQUESTED, Action.REPLACECOMMIT))
    with pytest.raises(CorruptTimelineFileError, match=f"^{re.escape(path)}: "):
        rollback(table)
    assert [i.timestamp for i in table.timeline().pending] == [t]


def test_rolling_back_a_named_write_first_finishes_pending_rollbacks(tmp_path: Path) -> None:
    table, (a, b) = _two_failed_writes(tmp_path)
    with pytest.raises(SimulatedCrash):  # a rollback of a, stored but not finished
        rollback(crashing(table, 1), a)
    # Naming a again finishes the stored rollback only.
    assert [(r.target, r.resumed) for r in rollback(table, a)] == [(a, True)]
    assert [i.timestamp for i in table.timeline().pending] == [b]
    # Naming another write: the stored rollback is finished first (here none is left), then b.
    assert [(r.target, r.resumed) for r in rollback(table, b)] == [(b, False)]
    assert table.timeline().pending == []


def test_a_refused_target_leaves_a_stored_rollback_unfinished(tmp_path: Path) -> None:
    table, (a, b) = _two_failed_writes(tmp_path)
    with pytest.raises(SimulatedCrash):
        rollback(crashing(table, 1), a)
    before = sorted(os.listdir(tmp_path / "t" / ".hoodie"))
    with pytest.raises(RollbackError, match="there is no instant 20990101000000000"):
        rollback(table, "20990101000000000")
    assert sorted(os.listdir(tmp_path / "t" / ".hoodie")) == before
