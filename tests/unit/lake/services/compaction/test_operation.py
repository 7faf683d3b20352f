"""services/compaction/operation.py exactly: a base file of several row groups merged one group at a
time (rows, order, counts, the new file's bloom filter), how often the base file is opened, a row
group without record keys, and planned log files that a completed rollback deleted (left out with a
log line, in a moved table too; pending rollbacks and paths of no file of the table ignored)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from compaction_support import DUE, batch, crash_at, empty_mor, mor, recorded
from crash_support import crashing, steps_of, unraisable_after
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.errors import CompactionError, CorruptDataFileError
from airflow_lake_provider.lake.format import bloom_filter
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.services.compaction import operation
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.commit_metadata import WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, State, format_instant, instant_to_datetime

AT = "20250301010000000"  # the compaction instant the operations are run for
KEYS = ["k0", "k1", "k2", "k3", "k4", "k5"]


@pytest.fixture(autouse=True, params=["small", "large"])
def base_size(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: its base file read as a small one (in the merging thread, its keys
    with its rows) and as a large one (its key column first, alone, then its row groups on a
    read-ahead thread)."""
    if request.param == "large":
        monkeypatch.setattr(operation, "READ_AHEAD_MIN_BYTES", 0)
    return str(request.param)


def _base_of(table: LakeTable, partition: str) -> Path:
    (base,) = (table.base_path / partition).glob("*.parquet")
    return base


def _regroup(
    table: LakeTable,
    path: Path,
    rows_per_group: int,
    *,
    drop: str | None = None,
    null_keys_from: int | None = None,
) -> None:
    """Rewrite a base file in place with row groups of ``rows_per_group`` rows (Hudi cuts row groups
    by size: a large base file has several). ``drop``: a key left out, the footer's bloom filter and
    key range then built anew without it (a file that never held it, as when a writer logs inserts).
    ``null_keys_from``: the rows from there on lose their record key."""
    source = pq.ParquetFile(path)
    rows, footer = source.read(), dict(source.metadata.metadata)
    if drop is not None:
        rows = rows.filter(pc.not_equal(rows.column("_hoodie_record_key"), drop))
        keys = rows.column("_hoodie_record_key").combine_chunks()
        footer |= bloom_filter.build(keys, table.config.bloom_settings).footer()
        footer |= {b"hoodie_min_record_key": min(keys.to_pylist()).encode()}
        footer |= {b"hoodie_max_record_key": max(keys.to_pylist()).encode()}
    if null_keys_from is not None:
        keys = rows.column("_hoodie_record_key").to_pylist()
        keys[null_keys_from:] = [None] * (len(keys) - null_keys_from)
        index = rows.schema.get_field_index("_hoodie_record_key")
        rows = rows.set_column(index, "_hoodie_record_key", pa.array(keys, pa.string()))
    pq.write_table(rows.replace_schema_metadata(footer), path, row_group_size=rows_per_group)


def _run(table: LakeTable, op: CompactionOperation) -> WriteStat:
    timeline = table.timeline()
    schema = operation.output_schema(table, timeline)
    return operation.execute_operation(table, timeline, schema, AT, op, token="0-1-0")


def _three_groups(tmp_path: Path) -> tuple[LakeTable, CompactionOperation]:
    """x: k0..k5 in a base file of three row groups (k0 k1 | k2 k3 | k4 k5); a log updates k1 (group
    0) and k5 (group 2) and inserts k9 (the base file is rewritten without it: our writer sends new
    keys to new file groups, Flink's log them), another deletes k2 (group 1) and k4 (group 2)."""
    table = empty_mor(tmp_path)
    write(table, batch([*KEYS, "k9"], 1, "x"), "insert")
    write(table, batch(["k1", "k5", "k9"], 2, "x"), "upsert")
    _regroup(table, _base_of(table, "x"), 2, drop="k9")
    groups = pq.ParquetFile(_base_of(table, "x"))
    ids = [groups.read_row_group(i, columns=["id"]).column("id") for i in range(groups.num_row_groups)]
    assert [i.to_pylist() for i in ids] == [["k0", "k1"], ["k2", "k3"], ["k4", "k5"]]
    write(table, batch(["k2", "k4"], 3, "x"), "delete")
    (op,) = schedule_compaction(table, DUE).plan.operations
    return table, op


def test_a_base_file_of_several_row_groups_is_merged_group_by_group(tmp_path: Path) -> None:
    table, op = _three_groups(tmp_path)
    stat = _run(table, op)
    written = pq.read_table(table.base_path / stat.path)
    # Updated rows where their base rows were, deleted rows gone, the inserted key last.
    assert written.select(["id", "ts"]).to_pylist() == [
        {"id": "k0", "ts": 1},
        {"id": "k1", "ts": 2},
        {"id": "k3", "ts": 1},
        {"id": "k5", "ts": 2},
        {"id": "k9", "ts": 2},
    ]
    assert written.column("_hoodie_file_name").to_pylist() == [stat.path.split("/")[1]] * 5
    # Counted over every group: group 1 updates nothing (its k2 is deleted, not logged as data).
    assert (stat.num_writes, stat.num_deletes, stat.num_update_writes, stat.num_inserts) == (5, 2, 2, 1)
    assert (stat.total_updated_records_compacted, stat.total_log_records, stat.total_log_files_compacted) == (
        2,
        5,
        2,
    )


def test_the_new_files_bloom_filter_holds_the_inserted_keys_too(tmp_path: Path) -> None:
    table, op = _three_groups(tmp_path)
    stat = _run(table, op)
    found = bloom_filter.from_footer(pq.ParquetFile(table.base_path / stat.path).metadata.metadata)
    assert found is not None
    # The old file's filter is carried over (its keys are not hashed again; the deleted k2 and k4
    # stay set, false positives only), and the inserted k9 is added to it.
    assert found.might_contain(pa.array([*KEYS, "k9"])).tolist() == [True] * 7
    old = bloom_filter.build(pa.array(KEYS), table.config.bloom_settings)
    assert old.might_contain(pa.array(["k9"])).tolist() == [False]


def test_a_compaction_that_only_deletes_carries_the_old_filters_bits_over(tmp_path: Path) -> None:
    """The kept base rows' keys are the old file's: they are not hashed again, even where they move
    to another row of a dynamic filter (two keys a row here: k2 was in row 1 and is now row 0's)."""
    created = empty_mor(tmp_path)
    options = {**created.config.properties, "hoodie.index.bloom.num_entries": "2"}
    table = LakeTable(created.storage, TableConfig.from_properties(options), created.clock)
    write(table, batch(KEYS[:4], 1, "x"), "insert")
    old = pq.ParquetFile(_base_of(table, "x")).metadata.metadata
    write(table, batch(["k0"], 2, "x"), "delete")
    (op,) = schedule_compaction(table, DUE).plan.operations
    stat = _run(table, op)
    assert pq.read_table(table.base_path / stat.path).column("id").to_pylist() == ["k1", "k2", "k3"]
    carried = bloom_filter.from_footer(pq.ParquetFile(table.base_path / stat.path).metadata.metadata)
    before = bloom_filter.from_footer(old)
    assert carried is not None and before is not None
    assert (carried.type_code, len(carried.rows)) == ("DYNAMIC_V0", 2)
    assert carried.rows == before.rows  # the same bits; only the key count in the header is new


def test_the_output_schema_is_the_given_timelines(tmp_path: Path) -> None:
    """The schema of the timeline the compaction runs on (a plan's), not of one read anew."""
    table = empty_mor(tmp_path)
    before = table.timeline()
    write(table, batch(["a"], 1, "x"), "insert")
    with pytest.raises(CompactionError) as raised:
        operation.output_schema(table, before)
    assert str(raised.value) == f"{table.uri}: the table has no schema (no commit records one)"
    assert operation.output_schema(table, table.timeline()).names == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
        "id",
        "ts",
        "p",
    ]


@pytest.mark.parametrize("logs", [True, False], ids=["with-logs", "base-only"])
def test_a_large_base_file_is_opened_once_more_when_logs_are_merged_and_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logs: bool, base_size: str
) -> None:
    """A large base file with log records to merge: its key column is read first, alone (matched
    against the log's keys at once), then its row groups, on a read-ahead thread. A small one, or one
    with nothing to merge, is opened once; a small one is read without a thread."""
    table = mor(tmp_path)
    (op,) = schedule_compaction(table, DUE).plan.operations
    op = op if logs else CompactionOperation(op.partition, op.file_id, op.base_instant, op.data_file_name, ())
    counted, storage = recorded(table)
    threads: list[object] = []
    real = operation.read_ahead
    monkeypatch.setattr(operation, "read_ahead", lambda parts: threads.append(parts) or real(parts))
    stat = _run(counted, op)
    large = base_size == "large"
    assert storage.events.count(("read", f"x/{op.data_file_name}")) == (2 if logs and large else 1)
    assert len(threads) == (1 if large else 0)
    assert stat.num_update_writes == (1 if logs else 0)


def test_a_row_group_without_record_keys_fails_the_operation_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key column read alone has nulls: the groups are read with their own keys, and the damaged
    one is named (the groups before it were merged without the whole file's keys). The half-written
    new base file is given up: its writer closed at once, the file gone."""
    table = empty_mor(tmp_path)
    write(table, batch(KEYS[:4], 1, "x"), "insert")
    base = _base_of(table, "x")
    _regroup(table, base, 2, null_keys_from=2)
    write(table, batch(["k0"], 2, "x"), "upsert")
    (op,) = schedule_compaction(table, DUE).plan.operations
    message = (
        f"{table.storage.uri('x/' + base.name)}: 2 rows have no record key (_hoodie_record_key is null): "
        "not a base file Hudi wrote"
    )
    unraisable = unraisable_after(monkeypatch)
    with pytest.raises(CorruptDataFileError) as raised:
        _run(table, op)
    assert str(raised.value) == message
    del raised  # its traceback holds the operation's frames, the writer among them
    gc.collect()
    assert unraisable == []  # was "ValueError: write to closed file", from the writer's __del__
    assert sorted(p.name for p in (table.base_path / "x").glob("*.parquet")) == [base.name]


# -- planned log files a completed rollback deleted ----------------------------------------------------
def _rolled_back_log(tmp_path: Path) -> tuple[LakeTable, CompactionOperation, str]:
    """x's plan, fitted before a write that failed (its log file planned), then rolled back."""
    table = mor(tmp_path)
    with pytest.raises(SimulatedCrash):
        write(table, batch(["a"], 9, "x"), "upsert", fault=crash_at("commit"))
    (failed,) = table.timeline().pending
    between = format_instant(instant_to_datetime(failed.timestamp) - dt.timedelta(milliseconds=1))
    planned = schedule_compaction(table, DUE, instant=between)
    (op,) = planned.plan.operations
    (done,) = rollback(table)
    (gone,) = done.deleted
    assert gone.rsplit("/", 1)[-1] in op.delta_file_names and len(op.delta_file_names) == 2
    return table, op, gone


def _kept_logs(table: LakeTable, op: CompactionOperation) -> list[str]:
    return [f.relative_path for f in operation.plan_slice(table, op, table.timeline()).log_files]


def test_a_planned_log_a_completed_rollback_deleted_is_left_out_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table, op, gone = _rolled_back_log(tmp_path)
    with caplog.at_level(logging.INFO, logger=operation.__name__):
        kept = _kept_logs(table, op)
    assert kept == [f"x/{n}" for n in op.delta_file_names if f"x/{n}" != gone]
    assert [r.getMessage() for r in caplog.records if r.name == operation.__name__] == [
        f"compaction of file group {op.file_id}: planned log {gone} was rolled back"
    ]
    # Without the timeline the missing log is an error, as any planned file.
    with pytest.raises(CompactionError, match=f"planned file {gone} is missing$"):
        operation.plan_slice(table, op)


def test_a_rollback_written_where_the_table_lived_before_still_names_the_log(tmp_path: Path) -> None:
    """Hudi's rollback metadata holds absolute paths: in a copied table they name the old place, and
    the file name in the entry's partition is the file here."""
    table, op, gone = _rolled_back_log(tmp_path)
    shutil.copytree(table.base_path, tmp_path / "moved")
    moved = LakeTable.open(tmp_path / "moved")
    assert _kept_logs(moved, op) == [f"x/{n}" for n in op.delta_file_names if f"x/{n}" != gone]


def test_rollback_entries_of_no_file_of_the_table_are_skipped_not_the_rest(tmp_path: Path) -> None:
    table, op, gone = _rolled_back_log(tmp_path)
    (done,) = table.timeline().filter([Action.ROLLBACK], [State.COMPLETED])
    path = table.base_path / ".hoodie" / f"{done.timestamp}.rollback"
    record = timeline_avro.read_avro(path.read_bytes(), str(path))
    files = record["partitionMetadata"]["x"]["successDeleteFiles"]
    record["partitionMetadata"]["x"]["successDeleteFiles"] = ["/elsewhere/notes.txt", *files]
    path.write_bytes(timeline_avro.write_avro(timeline_avro.ROLLBACK_METADATA, record))
    assert _kept_logs(table, op) == [f"x/{n}" for n in op.delta_file_names if f"x/{n}" != gone]


def test_a_pending_rollback_is_not_read_for_deleted_files(tmp_path: Path) -> None:
    """Only completed rollbacks deleted files: a rollback that crashed once inflight (its inflight
    file is empty) is not read."""
    table, op, gone = _rolled_back_log(tmp_path)
    with pytest.raises(SimulatedCrash):
        write(table, batch(["c"], 9, "y"), "upsert", fault=crash_at("commit"))
    shutil.copytree(table.base_path, tmp_path / "probe")
    probe = crashing(LakeTable.open(tmp_path / "probe", clock=table.clock))
    rollback(probe)
    step = next(i for i, s in enumerate(steps_of(probe), 1) if s.endswith(".rollback.inflight"))
    with pytest.raises(SimulatedCrash):
        rollback(crashing(table, step))
    pending = table.timeline().filter([Action.ROLLBACK], [State.INFLIGHT])
    assert len(pending) == 1
    assert _kept_logs(table, op) == [f"x/{n}" for n in op.delta_file_names if f"x/{n}" != gone]


@pytest.mark.parametrize("table_version", [6, 8])
def test_a_key_stored_twice_in_the_base_file_is_read_and_compacted_as_hudi_reads_it(
    tmp_path: Path, table_version: int
) -> None:
    """A base file holding k1 twice (Hudi's bulk_insert writes such files), in two row groups, and
    a log updating k1: the first row meets the update, the second is read as stored, by our reader
    and hudi-rs alike; the compacted file holds what that read showed, in base order, and counts
    one update."""
    table = empty_mor(tmp_path, table_version=table_version)
    write(table, batch(["k0", "k1", "k2"], 1, "x"), "insert")
    path = _base_of(table, "x")
    source = pq.ParquetFile(path)
    rows, footer = source.read(), dict(source.metadata.metadata)
    again = rows.filter(pc.equal(rows.column("id"), "k1"))
    again = again.set_column(again.schema.get_field_index("ts"), "ts", pa.array([3], pa.int64()))
    pq.write_table(pa.concat_tables([rows, again]).replace_schema_metadata(footer), path, row_group_size=2)
    write(table, batch(["k1"], 2, "x"), "upsert")
    expected = [("k0", 1), ("k1", 2), ("k1", 3), ("k2", 1)]
    assert _snapshot(table) == expected == hudi_rs_rows(table.base_path)
    (op,) = schedule_compaction(table, DUE).plan.operations
    stat = _run(table, op)
    written = pq.read_table(table.base_path / stat.path).select(["id", "ts"])
    assert [tuple(r.values()) for r in written.to_pylist()] == [("k0", 1), ("k1", 2), ("k2", 1), ("k1", 3)]
    assert (stat.num_writes, stat.num_update_writes, stat.num_inserts) == (4, 1, 0)


def _snapshot(table: LakeTable) -> list[tuple]:
    rows = read_snapshot(LakeTable.open(table.base_path)).select(["id", "ts"])
    return sorted(tuple(r.values()) for r in rows.to_pylist())


def hudi_rs_rows(path: Path) -> list[tuple]:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    rows = pa.Table.from_batches(batches).select(["id", "ts"])
    return sorted(tuple(r.values()) for r in rows.to_pylist())


@pytest.mark.parametrize("table_version", [6, 8])
def test_a_natural_order_delete_of_a_key_stored_twice_takes_its_first_row_as_hudi_reads_it(
    tmp_path: Path, table_version: int
) -> None:
    """Without an ordering field a delete is in natural order: of k1, stored twice, it takes the
    first row; our reader, hudi-rs and the compacted file keep the second."""
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="",
        partition_fields=("p",),
        table_version=table_version,
    )
    write(table, batch(["k0", "k1"], 1, "x"), "insert")
    path = _base_of(table, "x")
    source = pq.ParquetFile(path)
    rows, footer = source.read(), dict(source.metadata.metadata)
    again = rows.filter(pc.equal(rows.column("id"), "k1"))
    again = again.set_column(again.schema.get_field_index("ts"), "ts", pa.array([3], pa.int64()))
    pq.write_table(pa.concat_tables([rows, again]).replace_schema_metadata(footer), path)
    write(table, batch(["k1"], 2, "x"), "delete")
    assert _snapshot(table) == [("k0", 1), ("k1", 3)] == hudi_rs_rows(table.base_path)
    (op,) = schedule_compaction(table, DUE).plan.operations
    stat = _run(table, op)
    written = pq.read_table(table.base_path / stat.path).select(["id", "ts"])
    assert [tuple(r.values()) for r in written.to_pylist()] == [("k0", 1), ("k1", 3)]
    assert (stat.num_writes, stat.num_deletes, stat.num_update_writes) == (2, 1, 0)


@pytest.mark.parametrize("table_version", [6, 8])
def test_a_version_flagged_hoodie_is_deleted_is_compacted_away_as_hudi_rs_reads_it(
    tmp_path: Path, table_version: int
) -> None:
    """An upsert flagging k1 ``_hoodie_is_deleted`` logs a delete: the compacted file holds k0 alone
    (and keeps the column), as the read before it and hudi-rs after it."""
    table = empty_mor(tmp_path, table_version=table_version)
    flagged = batch(["k0", "k1"], 1, "x").append_column("_hoodie_is_deleted", pa.array([False, False]))
    write(table, flagged, "insert")
    write(table, batch(["k1"], 2, "x").append_column("_hoodie_is_deleted", pa.array([True])), "upsert")
    assert _snapshot(table) == [("k0", 1)] == hudi_rs_rows(table.base_path)
    (op,) = schedule_compaction(table, DUE).plan.operations
    stat = _run(table, op)
    written = pq.read_table(table.base_path / stat.path)
    assert written.select(["id", "ts", "_hoodie_is_deleted"]).to_pylist() == [
        {"id": "k0", "ts": 1, "_hoodie_is_deleted": False}
    ]
    assert (stat.num_writes, stat.num_deletes) == (1, 1)


def test_a_delete_the_base_row_beats_by_ordering_is_no_update_and_no_delete(tmp_path: Path) -> None:
    """A delete block whose ordering value is below the base row's (k0: 1 < 5) leaves the row as it
    was: counted neither as an update (no data version of k0 was logged) nor as a delete; k1's (9)
    deletes it."""
    table = empty_mor(tmp_path)
    write(table, batch(KEYS[:3], 5, "x"), "insert")
    write(table, batch(["k0"], 1, "x"), "delete")
    write(table, batch(["k1"], 9, "x"), "delete")
    (op,) = schedule_compaction(table, DUE).plan.operations
    stat = _run(table, op)
    assert pq.read_table(table.base_path / stat.path).column("id").to_pylist() == ["k0", "k2"]
    assert (stat.num_writes, stat.num_deletes, stat.num_update_writes, stat.num_inserts) == (2, 1, 0, 0)


def test_the_runtime_stats_are_the_log_scans_and_the_writes_milliseconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Hudi's compactor reports them: the scan's time, then the write's as an upsert (a slice with
    a base file) or a create (a log-only slice), in whole milliseconds."""
    table = empty_mor(tmp_path)
    write(table, batch(KEYS[:2], 1, "x"), "insert")
    write(table, batch(["k0"], 2, "x"), "upsert")
    (op,) = schedule_compaction(table, DUE).plan.operations
    log_only = dataclasses.replace(op, data_file_name=None)  # the slice's log alone: a create
    ticks = iter([100.0, 102.0, 103.5, 200.0, 203.0, 205.25])  # started, scanned, written; twice
    monkeypatch.setattr(operation.time, "monotonic", lambda: next(ticks))
    runtimes = [_run(table, o).runtime_stats for o in (op, log_only)]
    assert [(r.total_scan_time, r.total_upsert_time, r.total_create_time) for r in runtimes if r] == [
        (2000, 1500, 0),
        (3000, 0, 2250),
    ]
