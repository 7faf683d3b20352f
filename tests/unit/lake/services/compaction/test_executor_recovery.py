"""What a compaction leaves after crashes and retried task attempts, exactly: the files an earlier
attempt wrote are removed (named in the result and the log), markers do not outlive the attempt that
wrote them, a failed task attempt's file is removed at the commit, and run_compaction executes the
plan it scheduled even when an older plan is pending."""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from compaction_support import DUE, batch, crash_at, empty_mor, mor, store, timeline_file
from crash_support import crashing, steps_of
from mdt_v6_tables import add_v6_metadata_table
from savepoint_support import savepoint
from tree_digest import tree_digest
from write_support import hudi_rows, our_rows

from airflow_lake_provider.lake.cli import main as lake_main
from airflow_lake_provider.lake.errors import (
    CompactionError,
    CorruptTimelineFileError,
    RollbackError,
    SavepointError,
)
from airflow_lake_provider.lake.format import bloom_filter
from airflow_lake_provider.lake.log_file.log_format import rollback_command_block
from airflow_lake_provider.lake.services.compaction import executor, operation
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.operation import run_operation
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import savepoints
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.metadata.listing import check_files_partition
from airflow_lake_provider.lake.table.metadata.policy import kept_metadata_table
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import (
    RollbackResult,
    describe_rollbacks,
    rollback,
    rollback_instant_locked,
)
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, State
from tests.unit.lake.table.rollback.test_written import _compacted_then_upserted


def _rows(table: LakeTable) -> list[tuple[str, int, str]]:
    snap = read_snapshot(table).select(["id", "ts", "p"])
    return sorted(tuple(r.values()) for r in snap.to_pylist())


def _at(table: LakeTable, instant: str) -> list[str]:
    """Data files named with ``instant``, relative to the base path."""
    return sorted(
        p.relative_to(table.base_path).as_posix()
        for p in table.base_path.rglob(f"*{instant}*")
        if ".hoodie" not in p.parts
    )


def test_a_recovery_removes_the_earlier_attempts_file_and_its_markers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    c = schedule_compaction(table, DUE).instant
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("file"))
    (partial,) = _at(table, c)
    assert [m.relative_path for m in store(table).markers.read(c)] == [partial]
    caplog.set_level(logging.INFO, logger=executor.log.name)
    caplog.clear()  # what came before (the schedule, the crash) may be captured already
    # The retry dies right after its cleanup, before it writes anything of its own.
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("inflight"))
    assert _at(table, c) == [] and store(table).markers.read(c) == []
    assert [r.getMessage() for r in caplog.records if r.name == executor.log.name] == [
        f"compaction {c}: removed 1 files of an earlier attempt"
    ]
    caplog.clear()
    done = execute_compaction(table, c)
    assert (done.outcome, done.recovered, done.removed_files) == (Outcome.COMPLETED, True, ())
    assert not any("earlier attempt" in r.getMessage() for r in caplog.records)
    assert _at(table, c) == [done.files[0]]
    assert _rows(table) == [("a", 2, "x"), ("b", 1, "x"), ("c", 1, "y")]


def test_a_recovery_finds_a_partial_file_whose_marker_is_lost(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    c = schedule_compaction(table, DUE).instant
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("file"))
    (partial,) = _at(table, c)
    store(table).markers.delete(c)
    # Not ours: another instant's name in a planned group, and our instant in an unplanned group.
    other_instant = table.base_path / partial.replace(c, "20250301000000999")
    other_instant.write_bytes(b"")
    (group_y,) = [p.name.split("_")[0] for p in (table.base_path / "y").glob("*.parquet")]
    unplanned = table.base_path / "y" / f"{group_y}_0-1-0_{c}.parquet"
    unplanned.write_bytes(b"")
    done = execute_compaction(table, c)
    assert (done.outcome, done.recovered, done.removed_files) == (Outcome.COMPLETED, True, (partial,))
    assert other_instant.exists() and unplanned.exists()
    assert sorted(set(_at(table, c)) - {unplanned.relative_to(table.base_path).as_posix()}) == [done.files[0]]


def test_the_commit_removes_a_failed_task_attempts_file(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    c = schedule_compaction(table, DUE).instant

    def two_attempts(
        table: LakeTable,
        timeline: Timeline,
        schema: pa.Schema,
        instant: str,
        ops: Sequence[CompactionOperation],
    ) -> list[WriteStat | str]:
        # Like a Spark task retried after its executor died: the first attempt's file stays behind.
        (op,) = ops
        run_operation(table, timeline, schema, instant, 0, op, attempt=0)
        return [run_operation(table, timeline, schema, instant, 0, op, attempt=1)]

    done = execute_compaction(table, c, runner=two_attempts)
    assert done.outcome is Outcome.COMPLETED and not done.recovered
    assert _at(table, c) == [done.files[0]] and done.files[0].split("_")[1] == "0-1-1"
    assert store(table).markers.read(c) == []
    assert _rows(table) == [("a", 2, "x"), ("b", 1, "x"), ("c", 1, "y")]


def test_run_compaction_executes_its_own_plan_not_an_older_pending_one(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    older = schedule_compaction(table, DUE).instant  # plans x: y has no log yet
    write(table, batch(["c"], 5, "y"), "upsert")
    scheduled, done = run_compaction(table, DUE)
    assert scheduled.outcome is Outcome.SCHEDULED and scheduled.instant > older
    assert [op.partition for op in scheduled.plan.operations] == ["y"]
    assert (done.outcome, done.instant) == (Outcome.COMPLETED, scheduled.instant)
    assert [i.timestamp for i in table.timeline().pending_compactions()] == [older]


def test_a_compactions_write_stat_is_exact(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)  # x: a, b in the base; a updated in a log
    write(table, batch(["b"], 3, "x"), "delete")
    scheduled = schedule_compaction(table, DUE)
    (op,) = scheduled.plan.operations
    done = execute_compaction(table, scheduled.instant)
    (stat,) = done.stats
    logs = [table.base_path / "x" / name for name in op.delta_file_names]
    assert len(logs) >= 1 and all(p.is_file() for p in logs)
    size = (table.base_path / stat.path).stat().st_size
    assert (stat.file_id, stat.partition_path, stat.prev_commit) == (op.file_id, "x", op.base_instant)
    assert (stat.num_writes, stat.num_deletes, stat.num_update_writes, stat.num_inserts) == (1, 1, 1, 0)
    assert (stat.total_write_bytes, stat.file_size_in_bytes) == (size, size)
    assert (stat.total_log_records, stat.total_updated_records_compacted) == (2, 1)
    assert stat.total_log_files_compacted == len(logs)
    assert stat.total_log_size_compacted == sum(p.stat().st_size for p in logs)
    assert (done.records_written, done.log_records_merged, done.bytes_written) == (1, 2, size)
    assert _rows(table) == [("a", 2, "x"), ("c", 1, "y")]


def test_a_log_only_slice_counts_its_rows_as_inserts(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    scheduled = schedule_compaction(table, DUE)
    (op,) = scheduled.plan.operations
    log_only = CompactionOperation(op.partition, op.file_id, op.base_instant, None, op.delta_file_names)
    timeline = table.timeline()
    stat = operation.execute_operation(
        table, timeline, operation.output_schema(table, timeline), scheduled.instant, log_only, token="9-9-9"
    )
    assert stat.path == f"x/{op.file_id}_9-9-9_{scheduled.instant}.parquet"
    assert (stat.num_writes, stat.num_deletes, stat.num_update_writes, stat.num_inserts) == (1, 0, 0, 1)
    assert (stat.total_log_records, stat.total_updated_records_compacted) == (1, 0)


def test_a_failed_operation_is_named_in_the_log_and_the_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    write(table, batch(["c"], 2, "y"), "upsert")  # y gets a log too: two operations
    scheduled = schedule_compaction(table, DUE)
    c = scheduled.instant
    ops = {op.partition: op for op in scheduled.plan.operations}
    assert sorted(ops) == ["x", "y"]
    (log_y,) = ops["y"].delta_file_names
    (table.base_path / "y" / log_y).unlink()  # y's operation cannot read its slice
    caplog.set_level(logging.INFO, logger=operation.log.name)
    caplog.clear()
    with pytest.raises(CompactionError) as raised:
        execute_compaction(table, c)
    group_y = f"y/{ops['y'].file_id}"
    prefix = f"compaction {c}: 1 of 2 operations failed; the instant stays inflight for a retry: {group_y}: "
    message = str(raised.value)
    assert message.startswith(prefix) and len(message) > len(prefix)
    reason = message[len(prefix) :]
    assert [r.getMessage() for r in caplog.records if r.name == operation.log.name] == [
        f"compaction {c}: file group {group_y} failed: {reason}"
    ]
    # x's operation ran (first attempt, task 0): its file stays until the retry removes it.
    assert _at(table, c) == [f"x/{ops['x'].file_id}_0-1-0_{c}.parquet"]
    assert table.timeline().get(c).is_inflight


def test_a_plan_with_an_operation_lacking_its_file_id_is_named_by_path(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    scheduled = schedule_compaction(table, DUE)
    requested = timeline_file(table, scheduled.instant, State.REQUESTED)
    plan = timeline_avro.read_avro(requested.read_bytes(), str(requested))
    plan["operations"][0]["fileId"] = ""
    requested.write_bytes(timeline_avro.write_avro(timeline_avro.COMPACTION_PLAN, plan))
    folder = table.base_path / table.layout.folder
    timeline_files = sorted(p.name for p in folder.iterdir() if p.is_file())
    data_files = _at(table, "")
    with pytest.raises(
        CorruptTimelineFileError,
        match=f"^{re.escape(str(requested))}: a compaction operation lacks fileId or baseInstantTime$",
    ):
        execute_compaction(table, scheduled.instant)
    assert sorted(p.name for p in folder.iterdir() if p.is_file()) == timeline_files
    assert _at(table, "") == data_files


def test_a_compaction_keeps_a_base_row_with_the_larger_ordering_value(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)  # x: a (ts 2 in a log), b (ts 1)
    write(table, batch(["b"], 0, "x"), "upsert")  # arrives later with a smaller ts: loses
    _, done = run_compaction(table, DUE)
    assert done.outcome is Outcome.COMPLETED
    assert _rows(table) == [("a", 2, "x"), ("b", 1, "x"), ("c", 1, "y")]
    (stat,) = done.stats
    assert (stat.num_writes, stat.num_update_writes, stat.total_log_records) == (2, 2, 2)  # both touched


def test_an_operation_whose_logs_hold_no_committed_block_rewrites_the_base(
    tmp_path: Path, table_version: int
) -> None:
    table = mor(tmp_path, table_version=table_version)

    def die(point: str) -> None:
        if point == "commit":
            raise SimulatedCrash(point)

    with pytest.raises(SimulatedCrash):
        write(table, batch(["c"], 7, "y"), "upsert", fault=die)  # a log block of an uncommitted write
    timeline = table.timeline()
    (base,) = [p.name for p in (table.base_path / "y").glob("*.parquet")]
    (log,) = [p.name for p in (table.base_path / "y").glob(".*.log.*")]
    file_id = base.split("_")[0]
    base_instant = timeline.completed_commits[0].timestamp
    op = CompactionOperation("y", file_id, base_instant, base, (log,))
    at = "20250301010000000"
    schema = operation.output_schema(table, timeline)
    stat = operation.execute_operation(table, timeline, schema, at, op, token="0-1-0")
    written = pq.read_table(table.base_path / stat.path)
    assert written.select(["id", "ts", "p"]).to_pylist() == [{"id": "c", "ts": 1, "p": "y"}]
    assert written.column("_hoodie_file_name").to_pylist() == [stat.path.split("/")[1]]
    assert (stat.num_writes, stat.num_update_writes, stat.num_deletes, stat.total_log_records) == (1, 0, 0, 0)
    assert [(m.file_name, m.io_type) for m in store(table).markers.read(at)] == [(stat.path[2:], "MERGE")]
    # Without a base file the marker says CREATE.
    log_only = CompactionOperation("y", file_id, base_instant, None, (log,))
    stat = operation.execute_operation(table, timeline, schema, at, log_only, token="0-1-1")
    assert pq.read_table(table.base_path / stat.path).num_rows == 0
    assert ("y", stat.path[2:], "CREATE") in {
        (m.partition, m.file_name, m.io_type) for m in store(table).markers.read(at)
    }


def test_plan_slice_is_exactly_the_planned_files(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    write(table, batch(["a"], 3, "x"), "upsert")  # a second log file in x
    scheduled = schedule_compaction(table, DUE)
    (op,) = scheduled.plan.operations
    write(table, batch(["a"], 4, "x"), "upsert")  # logged after the plan: not in the slice
    slice_ = operation.plan_slice(table, op)
    folder = table.base_path / "x"
    assert (slice_.partition, slice_.file_id, slice_.base_instant) == ("x", op.file_id, op.base_instant)
    assert slice_.base_file is not None and slice_.base_file.file_name == op.data_file_name
    assert slice_.base_file.size == (folder / op.data_file_name).stat().st_size
    assert [(f.partition, f.file_name, f.size) for f in slice_.log_files] == [
        ("x", name, (folder / name).stat().st_size) for name in sorted(op.delta_file_names, key=_log_order)
    ]
    assert len(slice_.log_files) == 2


def _log_order(name: str) -> tuple[int, str]:
    return int(name.split(".log.")[1].split("_")[0]), name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"data_file_name": "bogus.parquet"},
            "compaction plan names 'bogus.parquet', which is not a base file name",
        ),
        (
            {"delta_file_names": ("bogus.log",)},
            "compaction plan names 'bogus.log', which is not a log file name",
        ),
    ],
)
def test_plan_slice_refuses_names_that_are_no_data_files(
    tmp_path: Path, table_version: int, change: dict, message: str
) -> None:
    table = mor(tmp_path, table_version=table_version)
    (op,) = schedule_compaction(table, DUE).plan.operations
    with pytest.raises(CompactionError, match=f"^{re.escape(message)}$"):
        operation.plan_slice(table, replace(op, **change))


def test_plan_slice_names_a_missing_planned_file(tmp_path: Path, table_version: int) -> None:
    table = mor(tmp_path, table_version=table_version)
    (op,) = schedule_compaction(table, DUE).plan.operations
    for gone in (op.data_file_name, op.delta_file_names[0]):
        (table.base_path / "x" / gone).rename(table.base_path / "x" / "moved")
        message = f"compaction of file group {op.file_id}: planned file x/{gone} is missing"
        with pytest.raises(CompactionError, match=f"^{re.escape(message)}$"):
            operation.plan_slice(table, op)
        (table.base_path / "x" / "moved").rename(table.base_path / "x" / gone)


@pytest.fixture(params=[1, 2], ids=["one-core", "two-cores"])
def arrow_cores(request: pytest.FixtureRequest) -> Iterator[int]:
    # One core writes the file, then counts; more overlap the two: both must give the same file and stat.
    before = pa.cpu_count()
    pa.set_cpu_count(request.param)
    try:
        yield request.param
    finally:
        pa.set_cpu_count(before)


def test_a_compacted_file_and_stat_on_one_core_and_on_more(
    tmp_path: Path, table_version: int, arrow_cores: int
) -> None:
    table = mor(tmp_path, table_version=table_version)
    write(table, batch(["b"], 3, "x"), "delete")
    scheduled = schedule_compaction(table, DUE)
    done = execute_compaction(table, scheduled.instant)
    (stat,) = done.stats
    path = table.base_path / stat.path
    assert (stat.num_writes, stat.num_deletes, stat.num_update_writes, stat.num_inserts) == (1, 1, 1, 0)
    assert stat.total_write_bytes == stat.file_size_in_bytes == path.stat().st_size
    written = pq.read_table(path)
    assert written.select(["id", "ts"]).to_pylist() == [{"id": "a", "ts": 2}]
    assert written.column("_hoodie_file_name").to_pylist() == [path.name]
    # The footer carries the record-key bloom filter sized by the table's settings: the old base
    # file's filter carried over (laid out as a new one of 1 key is), so the deleted key b is
    # still set, a false positive only.
    footer = pq.ParquetFile(path).metadata.metadata
    got = bloom_filter.from_footer(footer)
    expected = bloom_filter.build(pa.array(["a"]), table.config.bloom_settings)
    layout = ("type_code", "vector_size", "num_hashes", "row_capacity", "active_count")
    assert [getattr(got, f) for f in layout] == [getattr(expected, f) for f in layout]
    assert len(got.rows) == len(expected.rows) == 1
    assert got.might_contain(pa.array(["a", "b"])).tolist() == [True, True]
    assert got.rows != expected.rows


def test_logs_merge_in_the_order_of_their_writes_whatever_their_write_tokens(
    tmp_path: Path, table_version: int
) -> None:
    """Version 8 names each log after its write, with the write's token for the file group (the
    n-th group a write touches gets ``n-1-0``): a later write's log may carry a smaller token. The
    compaction merged a slice's logs in token order, so on a tie of ordering values an older
    version of ``c`` won over the newer one that readers return (v6 logs differ by version)."""
    table = empty_mor(tmp_path, table_version=table_version)

    def rows(ids: list[str], parts: list[str], v: str) -> pa.Table:
        ts = pa.array([1] * len(ids), pa.int64())
        return pa.table({"id": ids, "ts": ts, "p": parts, "v": [v] * len(ids)})

    write(table, rows(["a", "c"], ["x", "y"], "first"), "insert")
    second = write(table, rows(["a", "c"], ["x", "y"], "second"), "upsert").instant
    third = write(table, rows(["c"], ["y"], "third"), "upsert").instant
    logs = sorted(p.name for p in (table.base_path / "y").glob(".*.log.*"))
    if table_version == 8:  # the third write's token sorts before the second's
        by_token = sorted(logs, key=lambda n: n.rsplit("_", 1)[1])
        assert [third in by_token[0], second in by_token[1]] == [True, True]
    expected = [("a", "second"), ("c", "third")]
    assert sorted((r["id"], r["v"]) for r in read_snapshot(table).select(["id", "v"]).to_pylist()) == expected
    _, done = run_compaction(table, DUE)
    assert done.outcome is Outcome.COMPLETED
    assert sorted((r["id"], r["v"]) for r in read_snapshot(table).select(["id", "v"]).to_pylist()) == expected
    assert hudi_rows(table.base_path, "id", "v") == expected


def test_no_compaction_is_scheduled_or_run_while_a_restore_is_pending(tmp_path: Path) -> None:
    """A restore that crashed half way (one of its two rollbacks done): its plan was fixed when it
    started. Scheduling or running a compaction now, which could redo the compaction it is rolling
    back or take slices it will delete, is refused and changes nothing, as a write is; finishing the
    restore then leaves the savepoint's rows."""
    table, c, at_savepoint = _compacted_then_upserted(tmp_path / "t", 1)
    point = savepoints(table.timeline())[0].instant
    with pytest.raises(SimulatedCrash):
        restore(crashing(table, _first_rollback_done(table, point)), point)
    before = tree_digest(Path(table.storage.root))
    (r,) = table.timeline().filter([Action.RESTORE], [State.INFLIGHT])
    for attempt, doing in (
        (lambda: schedule_compaction(table, {**DUE}, force=True), "scheduling a compaction"),
        (lambda: execute_compaction(table), "running a compaction"),
        (lambda: execute_compaction(table, c), "running a compaction"),
    ):
        with pytest.raises(CompactionError) as refused:
            attempt()
        assert str(refused.value) == (
            f"{table.uri}: restore {r.timestamp} is pending; finish it before {doing} "
            f"(lake restore {table.uri} --savepoint {point})"
        )
        assert tree_digest(Path(table.storage.root)) == before
    making = rf"restore \d+ is pending; finish it before making a savepoint .* --savepoint {point}\)$"
    with pytest.raises(SavepointError, match=making):
        savepoint(table, c)
    hoodie = Path(table.storage.root) / ".hoodie"
    assert sorted(p.name for p in hoodie.glob("*.savepoint*")) == [
        f"{point}.savepoint",
        f"{point}.savepoint.inflight",
    ]
    restore(table, point)
    assert read_snapshot(table).sort_by("id").column("ts").to_pylist() == (
        at_savepoint.sort_by("id").column("ts").to_pylist()
    )


def _first_rollback_done(table: LakeTable, point: str) -> int:
    """The durable step of a restore to ``point`` after which its first rollback completed."""
    counting = crashing(
        LakeTable.open(shutil.copytree(table.storage.root, Path(table.storage.root + "-count")))
    )
    restore(counting, point)
    return next(n for n, s in enumerate(steps_of(counting), 1) if s.endswith(".rollback"))


@pytest.mark.parametrize("recorded", [True, False])
def test_a_compaction_hudi_rolled_back_to_retry_it_runs_again(tmp_path: Path, recorded: bool) -> None:
    """Hudi retries a failed compaction C by a completed rollback of the pending C (recorded with
    action ``compaction``) and C requested again, its plan and the logs on its slices kept
    (``rollbackInflightCompaction``). That is not a compaction undone: a write keeps it, and the
    next run executes it; we read what hudi-rs reads. The same when the rollback's record leaves
    ``instantsRollback`` empty (no action recorded): C is requested, not inflight, so retried."""
    table = mor(tmp_path)
    c = schedule_compaction(table, DUE).instant
    assert c is not None
    write(table, batch(["a"], 3, "x"), "upsert")  # a log on C's slice
    root = Path(table.storage.root)
    plan = root / ".hoodie" / f"{c}.compaction.requested"
    kept = {p: p.read_bytes() for p in [plan, *root.rglob(f".*_{c}.log.*")]}
    for p in kept:
        if ".log." in p.name:
            p.unlink()  # (Hudi's rollback of a pending compaction keeps them; ours would delete them)
    with table.store.exclusive("write"):
        (undo,) = rollback_instant_locked(table, c, compaction=True, restoring=True)
    for p, data in kept.items():
        p.write_bytes(data)
    assert undo.target_action == "compaction" and not plan.with_suffix(".inflight").exists()
    if not recorded:
        record_file = root / ".hoodie" / f"{undo.instant}.rollback"
        record = timeline_avro.read_avro(record_file.read_bytes(), str(record_file))
        assert [i["commitTime"] for i in record["instantsRollback"]] == [c]
        record_file.write_bytes(
            timeline_avro.write_avro(timeline_avro.ROLLBACK_METADATA, {**record, "instantsRollback": []})
        )
    write(table, batch(["b"], 4, "x"), "upsert")
    assert plan.exists()
    result = execute_compaction(table)
    assert (result.outcome, result.instant) == (Outcome.COMPLETED, c)
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 3), ("b", 4), ("c", 1)]


def _compaction_crashed(table: LakeTable, after_scheduling: Callable[[LakeTable], None] | None = None) -> str:
    """Compaction C of a ``mor`` table crashed after writing a base file, with a log (a, ts 3) on
    its slice (none with ``upsert=False``); ``after_scheduling`` runs once C is scheduled. C."""
    c = schedule_compaction(table, DUE).instant
    assert c is not None
    if after_scheduling is not None:
        after_scheduling(table)
    write(table, batch(["a"], 3, "x"), "upsert")
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("file"))
    return c


def _interrupt_hudi_retry(table: LakeTable, c: str, crash_after: int | None) -> list[str]:
    """Hudi's retry of the crashed compaction C: a rollback of the pending C whose plan names C's
    partial file only (Hudi keeps the logs on C's slice), stopped right after its durable step
    ``crash_after`` (``None``: run through, counting). Returns the steps."""
    logs = {p: p.read_bytes() for p in Path(table.storage.root).rglob(f".*_{c}.log.*")}
    assert logs
    for p in logs:
        p.unlink()  # so that our planner, which deletes them, leaves them out of the plan
    counting = crashing(table, crash_after)
    with table.store.exclusive("write"), contextlib.suppress(SimulatedCrash):
        rollback_instant_locked(counting, c, compaction=True, restoring=True)
    for p, data in logs.items():
        p.write_bytes(data)
    return steps_of(counting)


def _hudi_retry_interrupted(path: Path, crash_after: int | None) -> tuple[LakeTable, str, list[str]]:
    table = mor(path)
    c = _compaction_crashed(table)
    return table, c, _interrupt_hudi_retry(table, c, crash_after)


def _pending_rollback(table: LakeTable) -> str:
    (r,) = table.timeline().filter([Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT])
    return r.timestamp


def test_hudis_retry_of_a_compaction_interrupted_before_its_rollback_completed_ends_as_hudi_ends_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Interrupted at every durable step before the pending compaction C would leave the timeline,
    Hudi's retry of C resumes (here through the next write) as Hudi resumes it: the rollback
    completes and C is requested again, its plan and the logs on its slice kept (not removed, which
    would leave committed logs on the slice of a compaction that is gone); then C runs, and we read
    what hudi-rs reads."""
    _, c, steps = _hudi_retry_interrupted(tmp_path / "count", None)
    last = next(n for n, s in enumerate(steps, 1) if f"{c}.compaction" in s) - 1
    assert last >= 3  # the rollback's requested and inflight files and C's partial file
    for k in range(1, last + 1):
        table, c, _ = _hudi_retry_interrupted(tmp_path / str(k), k)
        root = Path(table.storage.root)
        assert timeline_file(table, c, State.INFLIGHT).exists(), k
        interrupted = (
            rf"{c} is being rolled back by \d+, which a crash interrupted: lake rollback .* finishes"
        )
        with pytest.raises(CompactionError, match=interrupted):
            execute_compaction(table, c)  # undone while the rollback is pending: never run
        caplog.clear()
        assert execute_compaction(table).outcome is Outcome.NO_WORK
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
            f"compaction {c} of {root} is not run: is being rolled back by {_pending_rollback(table)}, "
            f"which a crash interrupted: lake rollback {root} finishes that (if it is Hudi's retry of "
            "the compaction, the compaction then runs again)"
        ], k
        caplog.clear()
        with caplog.at_level(logging.INFO):
            write(table, batch(["b"], 4, "x"), "upsert")
        again = f"compaction {c} of {root} is requested again: Hudi's retry of it was interrupted"
        assert caplog.messages.count(again) == 1, k
        assert timeline_file(table, c, State.REQUESTED).exists(), k
        assert not timeline_file(table, c, State.INFLIGHT).exists(), k
        assert [i.state for i in table.timeline().filter(None, None) if i.action.value == "rollback"] == [
            State.COMPLETED
        ], k
        result = execute_compaction(table)
        assert (result.outcome, result.instant) == (Outcome.COMPLETED, c), k
        expected = [("a", 3), ("b", 4), ("c", 1)]
        assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == expected, k


@pytest.mark.parametrize(
    "savepoint_after_c, retry_after_restore", [(True, False), (False, False), (True, True)]
)
def test_a_restore_finishes_an_interrupted_hudi_retry_and_rolls_the_compaction_back_only_if_its_plan_says(
    tmp_path: Path, savepoint_after_c: bool, retry_after_restore: bool
) -> None:
    """A restore started while Hudi's retry of compaction C is pending finishes that rollback first,
    as Hudi would (C requested again): a savepoint after C keeps C, which then runs; one before C
    rolls C back itself, after the writes on its slice, so no log of a write it keeps is hidden.
    The same when the retry began after the restore (a crash stopped the restore at once): that
    rollback is not the restore's own, whose plan does not name C."""
    table = mor(tmp_path / "t")
    points: list[str] = []

    def savepoint_latest(table: LakeTable) -> None:
        latest = table.timeline().last_completed_commit
        assert latest is not None
        savepoint(table, latest.timestamp)
        points.append(latest.timestamp)

    if savepoint_after_c:

        def upsert_and_savepoint(table: LakeTable) -> None:
            write(table, batch(["a"], 3, "x"), "upsert")
            savepoint_latest(table)

        c = _compaction_crashed(table, upsert_and_savepoint)  # (a, 3) is upserted again after it
        write(table, batch(["b"], 5, "x"), "upsert")
        expected = [("a", 3), ("b", 1), ("c", 1)]
    else:
        savepoint_latest(table)
        c = _compaction_crashed(table)
        expected = [("a", 2), ("b", 1), ("c", 1)]
    if retry_after_restore:
        with pytest.raises(SimulatedCrash):
            restore(crashing(table, 1), points[0])
    _interrupt_hudi_retry(table, c, 2)
    r = _pending_rollback(table)
    (started,) = table.timeline().filter([Action.RESTORE], None) or [None]
    assert (started is not None and r > started.timestamp) == retry_after_restore
    restore(table, points[0])
    timeline = table.timeline()
    assert timeline.get(r) is not None and timeline.get(r).is_completed
    root = Path(table.storage.root)
    if savepoint_after_c:
        assert [i.timestamp for i in timeline.pending_compactions()] == [c]
        assert not timeline_file(table, c, State.INFLIGHT).exists()
        result = execute_compaction(table)
        assert (result.outcome, result.instant) == (Outcome.COMPLETED, c)
    else:
        assert timeline.get(c) is None and list(root.rglob(f"*_{c}.*")) == []
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == expected


def test_an_interrupted_hudi_retry_whose_mdt_record_completed_keeps_the_compaction(tmp_path: Path) -> None:
    """Java's rollback completes its metadata-table deltacommit before the rollback itself: a crash
    in between, then the next write finishes the rollback; the compaction is requested again all
    the same, runs, and the rows and the MDT's listing are what hudi-rs and the files say."""
    base = mor(tmp_path / "t")
    add_v6_metadata_table(Path(base.storage.root))
    table = LakeTable.open(Path(base.storage.root), clock=base.clock)
    c = schedule_compaction(table, DUE).instant
    assert c is not None
    write(table, batch(["a"], 3, "x"), "upsert")
    with pytest.raises(SimulatedCrash):
        execute_compaction(table, c, fault=crash_at("file"))
    _interrupt_hudi_retry(table, c, 2)
    r = _pending_rollback(table)
    mdt = kept_metadata_table(table)
    assert mdt is not None
    mdt.commit_rollback_logs(r, [], [])  # the rollback's MDT deltacommit, completed
    write(table, batch(["b"], 4, "x"), "upsert")
    assert (
        timeline_file(table, c, State.REQUESTED).exists()
        and not timeline_file(table, c, State.INFLIGHT).exists()
    )
    result = execute_compaction(table)
    assert (result.outcome, result.instant) == (Outcome.COMPLETED, c)
    root = Path(table.storage.root)
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 3), ("b", 4), ("c", 1)]
    check = check_files_partition(table.storage)
    assert (check.missing_files, check.extra_files, check.size_mismatches) == ((), (), ())


@pytest.mark.parametrize("plan", ["empty", "missing"])
def test_an_interrupted_hudi_retry_of_a_compaction_without_its_plan_is_refused_while_logs_hold_writes(
    tmp_path: Path, plan: str
) -> None:
    """A damaged timeline: Hudi's retry of C is pending and C's requested file (its plan) is empty
    or gone, so C could only be removed, which would hide the completed write in the log on its
    slice. Writes and rollbacks are refused, naming the rollback, C and the log, and nothing
    changes; with the plan back, the next write finishes the retry and C runs."""
    table, c, _ = _hudi_retry_interrupted(tmp_path / "t", 2)
    point = table.timeline().completed_commits[0].timestamp
    savepoint(table, point)
    r = _pending_rollback(table)
    requested = timeline_file(table, c, State.REQUESTED)
    kept = requested.read_bytes()
    if plan == "empty":
        requested.write_bytes(b"")
    else:
        requested.unlink()
    root = Path(table.storage.root)
    (log,) = root.rglob(f".*_{c}.log.*")
    before = tree_digest(root)
    for attempt in (
        lambda: write(table, batch(["b"], 4, "x"), "upsert"),
        lambda: rollback(table),
        lambda: restore(table, point),  # refused before its instant is made
    ):
        with pytest.raises(
            RollbackError, match=rf"rollback {r} retries compaction {c}, whose plan .*{log.name}"
        ):
            attempt()
        assert tree_digest(root) == before
    with pytest.raises(RollbackError, match=f"{r} is a pending rollback; it is finished, not rolled back"):
        rollback(table, r)
    assert tree_digest(root) == before
    requested.write_bytes(kept)
    write(table, batch(["b"], 4, "x"), "upsert")
    assert (execute_compaction(table).instant, table.timeline().pending_compactions()) == (c, [])
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 3), ("b", 4), ("c", 1)]


def test_an_interrupted_hudi_retry_of_a_compaction_without_its_plan_nor_writes_on_its_slice_removes_it(
    tmp_path: Path,
) -> None:
    """As above, but the log on C's slice holds no completed write (its upsert was rolled back
    before the retry): C goes with the rollback, and nothing is lost."""
    table, c, _ = _hudi_retry_interrupted(tmp_path / "t", 2)
    r = _pending_rollback(table)
    timeline_file(table, c, State.REQUESTED).unlink()
    root = Path(table.storage.root)
    (log,) = root.rglob(f".*_{c}.log.*")
    upsert = next(i for i in reversed(table.timeline().completed_commits) if i.timestamp > c)
    table.store.remove_completed(upsert)  # the upsert undone, as a crashed write: its block stays
    write(table, batch(["b"], 4, "x"), "upsert")  # finishes r, rolls the upsert back
    timeline = table.timeline()
    assert timeline.get(c) is None and timeline.get(r).is_completed
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 2), ("b", 4), ("c", 1)]
    assert not log.exists()


@pytest.mark.parametrize("restored_before", [False, True])
def test_a_restore_crashed_in_its_rollback_of_a_pending_compaction_rolls_it_back_once(
    tmp_path: Path, restored_before: bool
) -> None:
    """Our restore's own rollback of a pending compaction C, resumed after a crash at any of its
    steps, is for good (not Hudi's retry, which it resembles: it started after the restore): C
    goes with that one rollback, and the savepoint's rows are what both readers read. The same
    with an earlier, completed restore on the timeline (only the pending one's plan counts)."""

    def prepared(path: Path) -> LakeTable:
        table = mor(path)
        savepoint(table, table.timeline().completed_commits[-1].timestamp)
        if restored_before:
            write(table, batch(["d"], 1, "y"), "insert")
            restore(table, savepoints(table.timeline())[0].instant)
        return table

    counting = prepared(tmp_path / "count")
    _compaction_crashed(counting)
    point = savepoints(counting.timeline())[0].instant
    restored = crashing(counting)
    restore(restored, point)
    steps = steps_of(restored)
    first = next(n for n, s in enumerate(steps, 1) if s.endswith(".rollback.requested"))
    last = len(steps) - 1  # the restore's completion
    assert last - first >= 3  # the rollback's requested, inflight, C's partial file...
    for k in range(first, last):
        table = prepared(tmp_path / str(k))
        c = _compaction_crashed(table)
        with pytest.raises(SimulatedCrash):
            restore(crashing(table, k), point)
        restore(table, point)
        timeline = table.timeline()
        undoing = [
            r.timestamp
            for r in timeline.filter([Action.ROLLBACK], [State.COMPLETED])
            if c in (timeline.avro_record(r).get("commitsRollback") or ())
        ]
        assert (len(undoing), timeline.get(c)) == (1, None), (k, steps[k - 1])
        root = Path(table.storage.root)
        assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 2), ("b", 1), ("c", 1)], k


def test_lake_rollback_says_that_a_compaction_hudi_was_retrying_is_requested_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, c, _ = _hudi_retry_interrupted(tmp_path / "t", 2)
    r = _pending_rollback(table)
    assert lake_main(["rollback", table.storage.root]) == 0
    assert capsys.readouterr().out == (
        f"finished rollback {r} of compaction {c} (Hudi's retry of it): 1 files deleted, 0 log files "
        "marked; the compaction is requested again\n"
    )
    assert [i.timestamp for i in table.timeline().pending_compactions()] == [c]


def test_each_rollback_is_described_by_what_it_undid_and_whether_it_was_resumed(tmp_path: Path) -> None:
    """``lake rollback``'s lines: Hudi's retry of a compaction still on the timeline, a rolled-back
    compaction gone from it (resumed), a write rolled back."""
    table = mor(tmp_path)
    c = schedule_compaction(table, DUE).instant
    gone, write_time = "20250301000090000", "20250301000091000"
    results = [
        RollbackResult("20250301000100000", c, "compaction", ("x/f.parquet",), ()),
        RollbackResult("20250301000101000", gone, "compaction", (), (), resumed=True),
        RollbackResult("20250301000102000", write_time, "deltacommit", ("x/a", "x/b"), ("x/c",)),
    ]
    assert describe_rollbacks(table, results) == [
        f"finished rollback 20250301000100000 of compaction {c} (Hudi's retry of it): 1 files deleted, "
        "0 log files marked; the compaction is requested again",
        f"rolled back compaction {gone} at 20250301000101000: 0 files deleted, 0 log files marked "
        "(finished an interrupted rollback)",
        f"rolled back deltacommit {write_time} at 20250301000102000: 2 files deleted, 1 log files marked",
    ]


def test_no_savepoint_of_a_commit_a_pending_rollback_undoes_and_no_restore_to_one_gone(
    tmp_path: Path,
) -> None:
    """A forced rollback of the latest commit X, interrupted: X still reads as completed, but the
    next write finishes its rollback. A savepoint of X is refused (naming the rollback and the
    command); one an earlier version made anyway is refused by restore once X is gone."""
    table = mor(tmp_path / "t")
    x = table.timeline().completed_commits[-1].timestamp
    with pytest.raises(SimulatedCrash), table.store.exclusive("write"):
        rollback_instant_locked(crashing(table, 2), x, force=True)
    r = _pending_rollback(table)
    root = Path(table.storage.root)
    with pytest.raises(
        SavepointError, match=rf"{x} is being rolled back by {r}, which a crash interrupted: lake rollback"
    ):
        savepoint(table, x)
    assert list((root / ".hoodie").glob(f"{x}.savepoint*")) == []
    table.store.create_savepoint(x, b"")  # (as an earlier version did)
    write(table, batch(["c"], 4, "y"), "upsert")  # finishes the rollback: X is gone
    with pytest.raises(RollbackError, match=f"the commit of savepoint {x} is no longer on the timeline"):
        restore(table, x)


@pytest.mark.parametrize("crash_after", [3, 4])  # C's completed file deleted; then its base file too
def test_our_forced_rollback_of_a_completed_compaction_resumed_removes_it_for_good(
    tmp_path: Path, crash_after: int
) -> None:
    """Our forced rollback of a completed compaction C (recorded with action ``commit``) left
    pending by a crash once C was un-completed: finished, it removes C's pending files (it is no
    Hudi retry, which would keep C's plan), and C never runs again."""
    table = mor(tmp_path / "t")
    _, done = run_compaction(table, DUE)
    c = done.instant
    assert c is not None
    with pytest.raises(SimulatedCrash):
        rollback(crashing(table, crash_after), c, force=True)
    hoodie = Path(table.storage.root) / ".hoodie"
    assert sorted(p.name for p in hoodie.glob(f"{c}.*")) == [
        f"{c}.compaction.inflight",
        f"{c}.compaction.requested",
    ]
    (undo,) = rollback(table)
    assert (undo.target, undo.target_action, undo.resumed) == (c, "commit", True)
    assert list(hoodie.glob(f"{c}.*")) == []
    assert execute_compaction(table).outcome is Outcome.NO_WORK
    root = Path(table.storage.root)
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 2), ("b", 1), ("c", 1)]


def _undone_compaction_left(path: Path) -> tuple[LakeTable, str, str]:
    """A completed compaction C rolled back for good (R1, action ``commit``) whose pending files a
    crash left (as after a rollback that corrected a metadata table), then a newer rollback R2 of
    another write. The table, C and R1."""
    table = mor(path)
    _, done = run_compaction(table, DUE)
    c = done.instant
    assert c is not None
    hoodie = Path(table.storage.root) / ".hoodie"
    left = {p: p.read_bytes() for p in hoodie.glob(f"{c}.compaction.*")}
    (r1,) = rollback(table, c, force=True)
    with pytest.raises(SimulatedCrash):
        write(crashing(table, 3), batch(["d"], 5, "y"), "upsert")
    (r2,) = rollback(table)
    assert r1.instant < r2.instant and r2.target != c
    for p, data in left.items():
        p.write_bytes(data)
    return table, c, r1.instant


def test_a_compaction_a_rollback_undid_stays_undone_behind_newer_rollbacks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """R1 is still found behind R2, so C is refused, never run, and the next write removes it."""
    table, c, r1 = _undone_compaction_left(tmp_path / "t")
    with pytest.raises(CompactionError, match=f"compaction {c} is rolled back by {r1}"):
        execute_compaction(table, c)
    with caplog.at_level(logging.INFO, logger="airflow_lake_provider.lake.table.rollback.executor"):
        write(table, batch(["b"], 4, "x"), "upsert")
    removed = f"removed compaction {c} of {table.uri}: rolled back by {r1} already"
    assert [m for m in caplog.messages if m.startswith("removed ")] == [removed]
    assert list((Path(table.storage.root) / ".hoodie").glob(f"{c}.*")) == []
    root = Path(table.storage.root)
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 2), ("b", 4), ("c", 1)]


def test_a_rollback_run_reports_the_compaction_it_removed_as_finished_by_the_earlier_rollback(
    tmp_path: Path,
) -> None:
    table, c, r1 = _undone_compaction_left(tmp_path / "t")
    assert rollback(table) == [RollbackResult(r1, c, "compaction", (), (), resumed=True)]
    assert list((Path(table.storage.root) / ".hoodie").glob(f"{c}.*")) == []
    assert rollback(table) == []


def test_a_restore_to_a_savepoint_whose_commit_was_archived_is_not_refused(tmp_path: Path) -> None:
    """Java can archive past a savepoint (``hoodie.archive.beyond.savepoint``): the savepoint's commit
    is then older than the whole active timeline, which is no sign of a rolled-back commit; the
    restore goes on."""
    table = mor(tmp_path / "t")
    first = table.timeline().completed_commits[0].timestamp
    savepoint(table, first)
    write(table, batch(["b"], 4, "x"), "upsert")
    hoodie = Path(table.storage.root) / ".hoodie"
    for p in hoodie.glob(f"{first}.*"):
        if "savepoint" not in p.name:
            p.unlink()  # (as archived)
    result = restore(table, first)
    assert result.instant is not None and len(result.rolled_back) == 2


def test_a_rollback_block_on_the_slice_of_a_compaction_without_its_plan_is_no_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Hudi's retry of C is pending and C's plan is gone; the log on C's slice holds a failed
    write's block and a completed rollback's command block (Hudi appends one to a shared log), and
    a torn tail. A command block is no write: nothing completed is hidden, so C goes with the
    rollback; the torn log is named by its path."""
    table = mor(tmp_path)
    c = _compaction_crashed(table)
    root = Path(table.storage.root)
    (log,) = root.rglob(f".*_{c}.log.*")
    u1 = table.timeline().completed_commits[-1]
    write(table, batch(["a"], 4, "x"), "upsert")
    u2 = table.timeline().completed_commits[-1]
    table.store.remove_completed(u2)
    (undo_u2,) = rollback(table)
    assert undo_u2.target == u2.timestamp and table.timeline().get(undo_u2.instant).is_completed
    with log.open("ab") as f:
        f.write(rollback_command_block(undo_u2.instant, u2.timestamp) + b"torn")
    table.store.remove_completed(u1)  # its block stays: a failed write
    _interrupt_hudi_retry(table, c, 2)
    r = _pending_rollback(table)
    timeline_file(table, c, State.REQUESTED).unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        write(table, batch(["b"], 5, "x"), "upsert")  # finishes r, then rolls u1 back
    timeline = table.timeline()
    assert timeline.get(c) is None and timeline.get(r).is_completed
    assert our_rows(root, "id", "ts") == hudi_rows(root, "id", "ts") == [("a", 2), ("b", 5), ("c", 1)]
    named = f"log file {table.storage.uri(log.relative_to(root).as_posix())}: "
    torn = [m for m in caplog.messages if "trailing bytes" in m]
    assert torn and all(m.startswith(named) for m in torn)


def test_an_unpartitioned_tables_retry_without_its_plan_is_refused_while_its_log_holds_a_write(
    tmp_path: Path,
) -> None:
    """As the partitioned case: the log of a table without partitions lies at the base path."""
    table = empty_mor(tmp_path, partition_fields=())
    write(table, batch(["a", "b"], 1, "x"), "insert")
    write(table, batch(["a"], 2, "x"), "upsert")
    c = _compaction_crashed(table)
    _interrupt_hudi_retry(table, c, 2)
    r = _pending_rollback(table)
    timeline_file(table, c, State.REQUESTED).unlink()
    root = Path(table.storage.root)
    (log,) = root.glob(f".*_{c}.log.*")
    before = tree_digest(root)
    named = re.escape(table.storage.uri(log.name))
    with pytest.raises(RollbackError, match=rf"rollback {r} retries compaction {c}, .* writes: {named}\. "):
        write(table, batch(["b"], 4, "x"), "upsert")
    assert tree_digest(root) == before
