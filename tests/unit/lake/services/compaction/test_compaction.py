"""Compaction end to end: schedule, execute, recover, concurrency, CLI, and parity with hudi-rs."""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake import cli
from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    CompactionScheduleConflictError,
    ServiceBusyError,
)
from airflow_lake_provider.lake.file_group.file_names import BaseFileName
from airflow_lake_provider.lake.services.compaction.executor import (
    commit_compaction,
    execute_compaction,
    run_compaction,
)
from airflow_lake_provider.lake.services.compaction.operation import (
    execute_operation,
    load_plan,
    output_schema,
)
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import plan_instant, schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import (
    Action,
    Instant,
    InstantClock,
    State,
    format_instant,
    instant_to_datetime,
)

DUE = {"hoodie.compact.inline.max.delta.commits": "1"}
DATA = ["id", "ts", "city", "fare"]
REAL_MOR_WITH_LOGS = [
    "moravro_v6_trips_8i1u",
    "moravro_v6_trips_8i3d",
    "morparquet_v6_complexkeygen_hivestyle",
    "morparquet_v6_nonpartitioned",
    "morparquet_v6_nonpartitioned_rollback",
    "morparquet_v6_simplekeygen_nonhivestyle",
]


def _rows(table: pa.Table, drop: tuple[str, ...] = ()) -> list[str]:
    return sorted(repr(sorted((k, v) for k, v in row.items() if k not in drop)) for row in table.to_pylist())


def _hudi_rs(path: Path) -> pa.Table:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches)


class Model:
    """The rows a table must hold: key -> data columns."""

    def __init__(self) -> None:
        self.rows: dict[int, dict] = {}

    def apply(self, batch: pa.Table, op: str) -> None:
        for row in batch.to_pylist():
            if op == "delete":
                self.rows.pop(row["id"], None)
            else:
                self.rows[row["id"]] = row

    def expected(self) -> list[str]:
        return _rows(pa.Table.from_pylist(list(self.rows.values())).select(DATA)) if self.rows else []


def _batch(ids: list[int], ts: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "city": [["sf", "nyc", "la"][i % 3] for i in ids],
            "fare": [f"{tag}{i}" for i in ids],
        }
    )


@pytest.fixture(params=[6, 8], ids=["v6", "v8"])
def mor(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[LakeTable, Model]:
    """A MOR table of table version 6 and one of 8 (Hudi 1.x: timeline layout 2, a log file per
    deltacommit, slices by completion time, Avro plans and commit metadata)."""
    table = LakeTable.create(
        tmp_path / "trips",
        name="trips",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        table_version=request.param,
    )
    model = Model()
    for batch, op in [
        (_batch(list(range(12)), 1, "a"), "insert"),
        (_batch([0, 1, 4, 7], 2, "b"), "upsert"),
        (_batch([2, 5], 3, "c"), "delete"),
        (_batch([1, 3, 8], 4, "d"), "upsert"),
    ]:
        write(table, batch, op)
        model.apply(batch, op)
    return table, model


def _check(table: LakeTable, model: Model, *, hudi: bool = True) -> pa.Table:
    ours = read_snapshot(table)
    assert _rows(ours.select(DATA)) == model.expected()
    if hudi:
        theirs = _hudi_rs(table.base_path)
        assert _rows(theirs) == _rows(ours)
    return ours


def _instant_file(table: LakeTable, c: str, state: State, action: Action = Action.COMPACTION) -> Path:
    """The timeline file of ``c`` in ``state`` (a completed one found by name: layout 2 adds the
    completion time)."""
    if state is State.COMPLETED:
        (found,) = [i for i in table.timeline().instants if i.timestamp == c and i.is_completed]
        return table.base_path / table.layout.instant_path(found)
    return table.base_path / table.layout.instant_path(Instant(c, state, action))


def _compaction_commit(table: LakeTable, c: str) -> dict:
    """The completed compaction's metadata record: JSON in version 6, Avro under Hudi 1.x's schema in 8."""
    data = _instant_file(table, c, State.COMPLETED).read_bytes()
    if not table.layout.has_completion_times:
        return json.loads(data)
    return timeline_avro.read_commit_metadata(data, "commit")


def _files(table: LakeTable) -> set[str]:
    return {
        str(p.relative_to(table.base_path))
        for p in table.base_path.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and p.name != ".hoodie_partition_metadata"
    }


# -- happy path ---------------------------------------------------------------------------------------
def test_schedule_execute_then_both_readers_agree_and_files_are_exact(mor: tuple[LakeTable, Model]) -> None:
    table, model = mor
    before_files = _files(table)
    scheduled = schedule_compaction(table, DUE)
    assert scheduled.outcome is Outcome.SCHEDULED and scheduled.plan is not None
    c = scheduled.instant
    plan_groups = sorted(op.group for op in scheduled.plan.operations)
    assert len(plan_groups) == 3  # every partition's group has logs
    assert _instant_file(table, c, State.REQUESTED).is_file()
    _check(table, model, hudi=False)  # hudi-rs ignores nothing yet, but only compare when settled

    result = execute_compaction(table)
    assert result.outcome is Outcome.COMPLETED and result.instant == c and result.operations == 3
    assert result.records_written == len(model.rows)
    ours = _check(table, model)
    # Exactly one new base file per planned group, named <fileId>_<token>_<c>.parquet; old files kept.
    new = _files(table) - before_files
    assert sorted((f.split("/")[0], BaseFileName.parse(f.split("/")[1]).file_id) for f in new) == plan_groups
    assert all(BaseFileName.parse(f.split("/")[1]).instant == c for f in new)
    assert set(ours.column("_hoodie_file_name").to_pylist()) == {f.split("/")[1] for f in new}
    # Rows keep the commit time of the write that produced them.
    times = dict(
        zip(ours.column("id").to_pylist(), ours.column("_hoodie_commit_time").to_pylist(), strict=True)
    )
    assert times[0] == times[4] == times[7] and times[1] == times[3] == times[8] and times[0] < times[1]
    # Completed as <c>.commit: compacted, COMPACT, compaction write stats.
    hoodie = table.base_path / ".hoodie"
    assert not (hoodie / ".temp" / c).exists()
    (done,) = [i for i in table.timeline().instants if i.timestamp == c]
    assert done.action is Action.COMMIT and done.is_completed
    meta = table.timeline().commit_metadata(done)
    body = _compaction_commit(table, c)
    assert body["compacted"] is True and body["operationType"] == "COMPACT" and meta.schema
    stats = meta.write_stats()
    assert sorted(s.path for s in stats) == sorted(new)
    assert all(s.total_log_files_compacted >= 1 and s.total_log_size_compacted > 0 for s in stats)
    assert sum(s.num_writes for s in stats) == len(model.rows)
    assert sum(s.num_deletes for s in stats) == 2
    assert sum(s.total_log_records for s in stats) == 9  # 4 + 2 + 3 log records
    # Nothing left to do: NO_WORK, never an error.
    assert execute_compaction(table).outcome is Outcome.NO_WORK
    assert schedule_compaction(table, DUE).outcome is Outcome.NO_WORK


def test_second_round_compacts_logs_written_after_the_first(mor: tuple[LakeTable, Model]) -> None:
    table, model = mor
    run_compaction(table, DUE)
    for batch, op in [(_batch([0, 9, 20], 5, "e"), "upsert"), (_batch([3, 11], 6, "f"), "delete")]:
        write(table, batch, op)
        model.apply(batch, op)
    _check(table, model)
    scheduled, executed = run_compaction(table, DUE)
    assert executed.outcome is Outcome.COMPLETED
    # sf (0, 9 updated; 3 deleted) and la (11 deleted) have logs; id 20 is an insert into a new base file.
    assert sorted(op.partition for op in scheduled.plan.operations) == ["la", "sf"]
    _check(table, model)


def test_trigger_not_due_and_cow_tables_give_no_work(mor: tuple[LakeTable, Model], tmp_path: Path) -> None:
    table, _ = mor
    result = schedule_compaction(table)  # 4 delta commits < 5
    assert result.outcome is Outcome.NO_WORK and "4 delta commit(s)" in result.reason
    assert schedule_compaction(table, force=True).outcome is Outcome.SCHEDULED
    cow = LakeTable.create(
        tmp_path / "cow", name="c", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    assert schedule_compaction(cow, DUE).outcome is Outcome.NO_WORK


def test_the_trigger_reads_hoodie_properties_and_the_callers_option_overrides_it(
    mor: tuple[LakeTable, Model],
) -> None:
    """docs/services.md: a service's options come from the run or from hoodie.properties (as clean's)."""
    table, _ = mor
    props = table.base_path / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.compact.inline.max.delta.commits=4\n")
    table = LakeTable.open(table.base_path)
    over = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "5"}, dry_run=True)
    assert over.outcome is Outcome.NO_WORK and "(need 5)" in over.reason
    assert schedule_compaction(table).outcome is Outcome.SCHEDULED  # 4 delta commits, 4 needed


def test_dry_run_writes_nothing(mor: tuple[LakeTable, Model]) -> None:
    table, _ = mor
    listing = sorted(p.name for p in (table.base_path / ".hoodie").iterdir())
    result = schedule_compaction(table, DUE, dry_run=True)
    assert result.outcome is Outcome.PLANNED and result.dry_run and result.plan is not None
    assert sorted(p.name for p in (table.base_path / ".hoodie").iterdir()) == listing


def test_operation_without_base_file_writes_log_records_as_the_base(mor: tuple[LakeTable, Model]) -> None:
    table, _ = mor
    plan = schedule_compaction(table, DUE).plan
    op = next(o for o in plan.operations if o.partition == "sf")  # ids 0, 3, 6, 9; logs touch 0, 3
    log_only = CompactionOperation(op.partition, op.file_id, op.base_instant, None, op.delta_file_names)
    timeline = table.timeline()
    c = timeline.pending_compactions()[0].timestamp
    stat = execute_operation(table, timeline, output_schema(table, timeline), c, log_only, token="9-9-9")
    written = pq.read_table(table.base_path / stat.path)
    assert sorted(written.column("id").to_pylist()) == [0, 3]
    assert (
        stat.num_inserts == 2 and stat.prev_commit == op.base_instant and stat.path.endswith(f"_{c}.parquet")
    )


# -- writers during a pending compaction ---------------------------------------------------------------
def test_writes_while_compaction_is_pending_are_not_lost(mor: tuple[LakeTable, Model]) -> None:
    table, model = mor
    scheduled = schedule_compaction(table, DUE)
    c = scheduled.instant
    v8 = table.layout.has_completion_times
    writes = []
    for batch, op in [
        (_batch([0, 3, 6], 7, "g"), "upsert"),
        (_batch([4, 30, 31], 8, "h"), "upsert"),
        (_batch([7, 9], 9, "i"), "delete"),
    ]:
        writes.append(write(table, batch, op).instant)
        model.apply(batch, op)
        # hudi-rs hides logs written against a pending compaction (v6); on v8 it reads them.
        _check(table, model, hudi=v8)
    if v8:
        # Version 8: each write's log is named after the write and belongs to the slice at c (it
        # completed after c was requested), which readers fold into the slice before.
        new_logs = [f for f in _files(table) if any(f"_{w}.log." in f for w in writes)]
        in_c = {
            f"{s.partition}/{f.file_name}"
            for s in table.file_system_view().latest_slices()
            for f in s.log_files
        }
        slices_c = [
            f"{s.partition}/{f.file_name}"
            for g in table.file_system_view().file_groups()
            for s in g.slices
            if s.base_instant == c
            for f in s.log_files
        ]
        assert sorted(slices_c) == sorted(new_logs) and set(new_logs) <= in_c
    else:
        new_logs = [f for f in _files(table) if f"_{c}.log." in f]
    assert new_logs, "writers append against the pending compaction's instant"
    result = execute_compaction(table)
    assert result.outcome is Outcome.COMPLETED
    # The plan's files only: the logs named with c stay logs and merge onto the new base.
    assert all(f in _files(table) for f in new_logs)
    _check(table, model)
    scheduled2, executed2 = run_compaction(table, DUE)
    assert executed2.outcome is Outcome.COMPLETED
    assert all(op.base_instant == c for op in scheduled2.plan.operations)
    _check(table, model)


def test_scheduling_while_a_write_runs_is_refused_and_nothing_is_lost(mor: tuple[LakeTable, Model]) -> None:
    """A plan written between a writer reading its file groups and committing would take the slices
    the writer appends logs to (and the logs would be lost): scheduling waits for no writer."""
    table, model = mor
    refused: list[Exception] = []

    def schedule_mid_write(point: str) -> None:
        if point == "inflight":
            with pytest.raises(ServiceBusyError, match="another write is running") as caught:
                schedule_compaction(table, DUE)
            refused.append(caught.value)

    batch = _batch([0, 1, 40], 9, "w")
    write(table, batch, "upsert", fault=schedule_mid_write)
    model.apply(batch, "upsert")
    assert len(refused) == 1 and table.timeline().pending_compactions() == []
    scheduled, executed = run_compaction(table, DUE)
    assert scheduled.outcome is Outcome.SCHEDULED and executed.outcome is Outcome.COMPLETED
    _check(table, model)


def test_a_second_writer_waits_for_the_first(mor: tuple[LakeTable, Model]) -> None:
    table, model = mor
    inside, release = threading.Event(), threading.Event()
    first, second = _batch([0, 50], 9, "x"), _batch([0, 51], 10, "y")

    def hold(point: str) -> None:
        if point == "inflight":
            inside.set()
            assert release.wait(10)

    holder = threading.Thread(target=write, args=(table, first, "upsert"), kwargs={"fault": hold})
    holder.start()
    assert inside.wait(10)
    waiter_done: list[object] = []
    waiter = threading.Thread(target=lambda: waiter_done.append(write(table, second, "upsert")))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and not waiter_done  # blocked on the lock, nothing requested yet
    release.set()
    holder.join(10)
    waiter.join(10)
    assert len(waiter_done) == 1
    model.apply(first, "upsert")
    model.apply(second, "upsert")
    _check(table, model)


# -- crash and retry -----------------------------------------------------------------------------------
class Crash(RuntimeError):
    pass


def test_crash_after_first_file_then_retry_completes_without_duplicates(mor: tuple[LakeTable, Model]) -> None:
    table, model = mor
    c = schedule_compaction(table, DUE).instant
    before = _hudi_rs(table.base_path)
    files_before = _files(table)

    def crash(point: str) -> None:
        if point == "file":
            raise Crash(point)

    with pytest.raises(Crash):
        execute_compaction(table, fault=crash)
    partial = _files(table) - files_before
    assert len(partial) == 1 and f"_{c}.parquet" in next(iter(partial))
    assert _instant_file(table, c, State.INFLIGHT).is_file()
    assert table.timeline().get(c).is_inflight  # not completed
    # Readers ignore the partial output of the uncommitted instant.
    assert _rows(_hudi_rs(table.base_path)) == _rows(before)
    _check(table, model)

    result = execute_compaction(table)
    assert result.outcome is Outcome.COMPLETED and result.recovered and result.instant == c
    assert list(result.removed_files) == sorted(partial)
    ours = _check(table, model)
    assert ours.num_rows == len(set(ours.column("_hoodie_record_key").to_pylist()))
    new = _files(table) - files_before
    assert len(new) == 3 and all(f"_{c}.parquet" in f for f in new)


def test_recovery_removes_only_the_compactions_own_files(mor: tuple[LakeTable, Model]) -> None:
    table, model = mor
    c = schedule_compaction(table, DUE).instant
    with pytest.raises(Crash):
        execute_compaction(
            table, fault=lambda p: (_ for _ in ()).throw(Crash(p)) if p == "inflight" else None
        )
    write(table, _batch([0], 10, "j"), "upsert")  # a log named with c: must survive the recovery
    model.apply(_batch([0], 10, "j"), "upsert")
    stray = table.base_path / "sf" / "unrelated.txt"
    stray.write_text("keep me")
    kept = _files(table)
    result = execute_compaction(table, c)
    assert result.recovered and result.removed_files == ()
    assert kept <= _files(table)
    _check(table, model)


# -- scheduling rules ----------------------------------------------------------------------------------
def test_schedule_refuses_while_an_older_write_is_inflight(mor: tuple[LakeTable, Model]) -> None:
    table, _ = mor

    def stop(point: str) -> None:
        if point == "inflight":
            raise SimulatedCrash(point)  # a killed writer: its instant stays pending

    with pytest.raises(SimulatedCrash):
        write(table, _batch([1], 9, "x"), "upsert", fault=stop)
    pending = table.timeline().pending[0].timestamp
    with pytest.raises(CompactionScheduleConflictError, match=rf"{pending} .*lake rollback {table.uri}"):
        schedule_compaction(table, DUE)
    assert table.timeline().pending_compactions() == []


def test_schedule_fits_a_plan_before_an_inflight_write_when_the_clock_allows(
    mor: tuple[LakeTable, Model],
) -> None:
    table, _ = mor
    # The last completed instant; on v8 its completion time (a plan must follow every log's).
    last_completed = table.timeline().latest_time
    slow = instant_to_datetime(last_completed) + dt.timedelta(milliseconds=5)
    inflight_write = format_instant(slow + dt.timedelta(seconds=1))
    # a write's first step
    table.store.create_requested(inflight_write, Action.DELTACOMMIT)
    table.clock = InstantClock(now=lambda: slow)  # a clock behind the pending write
    result = schedule_compaction(table, DUE)
    assert result.outcome is Outcome.SCHEDULED and last_completed < result.instant < inflight_write
    timeline = table.timeline()
    with pytest.raises(CompactionScheduleConflictError, match="taken"):
        plan_instant(table, timeline, result.instant)
    with pytest.raises(CompactionScheduleConflictError, match=f"last completed instant {last_completed}"):
        plan_instant(
            table,
            timeline,
            format_instant(instant_to_datetime(last_completed) - dt.timedelta(milliseconds=1)),
        )
    with pytest.raises(CompactionScheduleConflictError, match=inflight_write):
        plan_instant(table, timeline, format_instant(slow + dt.timedelta(seconds=2)))


# -- concurrency ---------------------------------------------------------------------------------------
def test_two_concurrent_executions_commit_exactly_once(mor: tuple[LakeTable, Model]) -> None:
    table, model = mor
    c = schedule_compaction(table, DUE).instant
    inside, second_done = threading.Event(), threading.Event()
    outcomes: dict[str, object] = {}

    def first_fault(point: str) -> None:
        if point == "inflight":
            inside.set()
            second_done.wait(10)

    def first() -> None:
        outcomes["first"] = execute_compaction(LakeTable.open(table.base_path), c, fault=first_fault).outcome

    def second() -> None:
        inside.wait(10)
        try:
            outcomes["second"] = execute_compaction(LakeTable.open(table.base_path), c).outcome
        except ServiceBusyError as exc:
            outcomes["second"] = exc
        finally:
            second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcomes["first"] is Outcome.COMPLETED
    assert isinstance(outcomes["second"], ServiceBusyError)
    assert execute_compaction(table, c).outcome is Outcome.ALREADY_COMPLETED
    assert [p.name for p in (table.base_path / table.layout.folder).glob(f"{c}*.commit")] == [
        _instant_file(table, c, State.COMPLETED).name
    ]
    _check(table, model)


def test_a_second_commit_of_the_same_instant_conflicts(mor: tuple[LakeTable, Model]) -> None:
    table, _ = mor
    result = run_compaction(table, DUE)[1]
    with pytest.raises(CommitConflictError, match=result.instant):
        commit_compaction(table, result.instant, result.stats)


# -- real Hudi tables ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", REAL_MOR_WITH_LOGS)
def test_compacting_real_tables_keeps_the_hudi_rs_snapshot(hudi_table_zip, name: str) -> None:
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    before = _hudi_rs(path)
    scheduled = schedule_compaction(table, force=True)
    assert scheduled.outcome is Outcome.SCHEDULED, scheduled.reason
    result = execute_compaction(table)
    assert result.outcome is Outcome.COMPLETED
    after = _hudi_rs(path)
    assert after.column_names == before.column_names
    # Only the file name of rows that moved into a new base file changes.
    assert _rows(after, drop=("_hoodie_file_name",)) == _rows(before, drop=("_hoodie_file_name",))
    new_names = {Path(f).name for f in result.files}
    moved = set(after.column("_hoodie_file_name").to_pylist()) - set(
        before.column("_hoodie_file_name").to_pylist()
    )
    assert moved <= new_names
    assert _rows(read_snapshot(table)) == _rows(after)
    plan = load_plan(table.timeline(), result.instant)
    assert sorted(op.file_id for op in plan.operations) == sorted(s.file_id for s in result.stats)


# -- CLI -----------------------------------------------------------------------------------------------
def test_cli_compact_modes(mor: tuple[LakeTable, Model], capsys: pytest.CaptureFixture[str]) -> None:
    table, model = mor
    path = str(table.base_path)
    assert (
        cli.main(
            [
                "compact",
                path,
                "--mode",
                "schedule",
                "--strategy",
                "unbounded",
                "--option",
                "hoodie.compact.inline.max.delta.commits=1",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "SCHEDULED" and out["schedule"]["plan"]["operations"] == 3
    assert cli.main(["compact", path, "--mode", "execute"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "COMPLETED" and out["execute"]["operations"] == 3
    assert cli.main(["compact", path, "--mode", "run"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "NO_WORK"
    assert cli.main(["compact", path, "--mode", "execute"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "NO_WORK"
    # Nothing due: NO_WORK, exit 0, and no Spark job is submitted.
    assert cli.main(["compact", path, "--mode", "run", "--spark"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "NO_WORK"
    assert cli.main(["compact", path, "--mode", "run", "--strategy", "Nope"]) == 1
    assert "Nope" in capsys.readouterr().err
    _check(table, model)


def test_a_plan_before_a_failed_write_runs_after_the_write_is_rolled_back(
    mor: tuple[LakeTable, Model],
) -> None:
    """A plan fitted before a failed write (a clock behind it, or ``--instant``) lists the log files
    the write left on version 6, as it lists every log file of the slices (not on version 8, where
    a log's own deltacommit must be completed); rolling the write back deletes them.
    The compaction then runs without them (their blocks were never committed): before the fix it
    failed for good ("planned file ... is missing") and stayed inflight, and no rollback may undo a
    pending compaction."""
    table, model = mor

    def stop(point: str) -> None:
        if point == "commit":
            raise SimulatedCrash(point)  # a killed writer, its log files written

    with pytest.raises(SimulatedCrash):
        write(table, _batch([0, 3], 9, "dead"), "upsert", fault=stop)
    (failed,) = table.timeline().pending
    last_completed = table.timeline().completed_commits[-1].timestamp
    between = format_instant(instant_to_datetime(failed.timestamp) - dt.timedelta(milliseconds=1))
    assert last_completed < between
    planned = schedule_compaction(table, DUE, instant=between)
    assert planned.outcome is Outcome.SCHEDULED
    (rolled_back,) = rollback(table)
    assert rolled_back.target == failed.timestamp and rolled_back.deleted
    planned_logs = {n for op in planned.plan.operations for n in op.delta_file_names}
    deleted = {rel.rsplit("/", 1)[-1] for rel in rolled_back.deleted}
    if table.layout.has_completion_times:
        # Version 8: a log is named for its own deltacommit and sliced by completion time, so the
        # failed write's (never completed) logs were not planned.
        assert deleted.isdisjoint(planned_logs)
    else:
        # The write's log files (named for the slices' base instants, as every log is) were planned.
        assert deleted <= planned_logs
    done = execute_compaction(table, planned.instant)
    assert done.outcome is Outcome.COMPLETED
    assert table.timeline().pending == []
    _check(table, model)
