"""The writer's smaller rules, exactly: which batch types a table column accepts, what a failed
write tells its caller, the delete blocks and log write stats of merge-on-read writes (on a table
Spark wrote, too), and appends to a file group that has no base file."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from tree_digest import tree_digest
from write_support import T1, T2, T3, add_log_only_group
from write_support import base_file as _base_file
from write_support import base_file_at as _base_file_at
from write_support import batch as _batch
from write_support import hudi_rows as _hudi_rows
from write_support import our_rows as _our_rows
from write_support import table as _table

from airflow_lake_provider.lake.errors import CorruptDataFileError, LakeError, RollbackError, StorageError
from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.format.avro_schema import with_meta_fields
from airflow_lake_provider.lake.log_file.data_block import avro_data_block
from airflow_lake_provider.lake.log_file.delete_block import DeleteRecord, decode_delete_block
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes
from airflow_lake_provider.lake.storage import LocalStorage, SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import (
    FileGroupWrite,
    WriteContext,
    write,
    write_file_group,
    writer,
)


def _stats(path: Path, instant: str, action: str) -> list[dict]:
    metadata = json.loads((path / ".hoodie" / f"{instant}.{action}").read_text())
    return [s for stats in metadata["partitionToWriteStats"].values() for s in stats]


# -- what a failed write tells its caller ---------------------------------------------------------
def _fail_at(point: str):
    def fault(at: str) -> None:
        if at == point:
            raise RuntimeError(f"disk gone at {at}")

    return fault


def test_a_write_failing_after_its_instant_exists_is_undone_without_a_trace_and_says_so(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path / "t")
    before = tree_digest(tmp_path / "t")
    with pytest.raises(RuntimeError, match="disk gone at file") as caught:  # its base file was made
        write(table, _batch([1]), "insert", fault=_fail_at("file"))
    assert caught.value.__notes__ == [
        f"the write's instant {T1} of {table.uri} was undone: nothing of it is left"
    ]
    assert LakeTable.open(tmp_path / "t").timeline().instants == ()
    # Only the metadata of the partition it was the first to write stays (as Hudi's writers leave it).
    after = tree_digest(tmp_path / "t")
    locks = {".hoodie/.aux/.lake-write.lock", ".hoodie/.aux/.lake-instant.lock"}  # made once, kept
    assert after.keys() - before.keys() == {".hoodie_partition_metadata", *locks}
    assert {k: after[k] for k in before} == before


def test_a_failed_rollback_of_the_write_is_logged_and_noted_and_the_write_error_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    table = _table(tmp_path / "t")

    def stuck(_table: LakeTable, instant: str) -> None:
        raise RollbackError(f"rollback of {instant} is stuck")

    monkeypatch.setattr(writer, "discard_failed_write", stuck)
    caplog.set_level(logging.ERROR, logger=writer.log.name)
    caplog.clear()
    with pytest.raises(RuntimeError, match="disk gone at inflight") as caught:
        write(table, _batch([1]), "insert", fault=_fail_at("inflight"))
    assert caught.value.__notes__ == [
        f"its instant {T1} is not rolled back yet: run lake rollback {table.uri}"
    ]
    assert [r.getMessage() for r in caplog.records if r.name == writer.log.name] == [
        f"could not roll back failed write {T1} of {table.uri}: rollback of {T1} is stuck"
    ]
    # Left pending for the next writer (or lake rollback) to finish.
    assert [
        (i.timestamp, i.state.name.lower()) for i in LakeTable.open(tmp_path / "t").timeline().instants
    ] == [(T1, "inflight")]


def test_a_failed_write_its_discard_cannot_undo_is_rolled_back_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the discard declines (a log the write appended to holds committed blocks, as Spark's
    writers append), the instant is rolled back instead: a rollback instant, the files gone."""
    table = _table(tmp_path / "t")
    monkeypatch.setattr(writer, "discard_failed_write", lambda _table, _instant: False)
    with pytest.raises(RuntimeError, match="disk gone at file") as caught:
        write(table, _batch([1]), "insert", fault=_fail_at("file"))
    assert caught.value.__notes__ == [f"the write's instant {T1} of {table.uri} was rolled back"]
    instants = LakeTable.open(tmp_path / "t").timeline().instants
    assert [(i.timestamp, i.action.value, i.state.name.lower()) for i in instants] == [
        (T2, "rollback", "completed")
    ]
    assert list((tmp_path / "t").glob("*.parquet")) == []


def test_a_write_failing_once_its_requested_file_exists_undoes_it_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error after the store made the requested file (before it returned): the instant goes
    with the error, which says so."""
    table = _table(tmp_path / "t")
    made = table.store.create_requested

    def made_then_failed(*args: object, **kwargs: object) -> None:
        made(*args, **kwargs)
        raise StorageError("the store failed after making the requested file")

    monkeypatch.setattr(table.store, "create_requested", made_then_failed)
    with pytest.raises(StorageError, match="after making") as caught:
        write(table, _batch([1]), "insert")
    assert caught.value.__notes__ == [
        f"the write's instant {T1} of {table.uri} was undone: nothing of it is left"
    ]
    assert LakeTable.open(tmp_path / "t").timeline().instants == ()


def test_a_write_whose_instant_was_never_created_drops_its_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(tmp_path / "t")

    def refused(*_args: object) -> None:
        raise StorageError("the store refused the requested file")

    monkeypatch.setattr(table.store, "create_requested", refused)
    lazy = {"hoodie.cleaner.policy.failed.writes": "LAZY"}
    with pytest.raises(StorageError, match="refused") as caught:
        write(table, _batch([1]), "insert", options=lazy)
    assert not hasattr(caught.value, "__notes__")  # nothing was created, so nothing to roll back
    assert sorted(p.name for p in (tmp_path / "t" / ".hoodie" / ".heartbeat").iterdir()) == []
    assert list(LakeTable.open(tmp_path / "t").timeline().instants) == []


# -- merge-on-read: delete blocks and log write stats ---------------------------------------------
SF = "city=san_francisco"
RIDER_A = "334e26e9-8355-45cc-97c6-c31daf0df330"  # in the base file only: ts 1695159649087
RIDER_D = "9909a8b1-2d15-4d3d-8ec9-efc48c536a00"  # updated in the log by Spark: ts 1695046462179
RIDER_C = "e96c4396-3fad-413a-a942-4cb36106d721"


def _delete_batch(keys: list[str], ts: int = 0) -> pa.Table:
    return pa.table(
        {
            "uuid": pa.array(keys, pa.string()),
            "ts": pa.array([ts] * len(keys), pa.int64()),
            "city": pa.array(["san_francisco"] * len(keys), pa.string()),
        }
    )


def _new_log(path: Path, before: set[str]) -> Path:
    (log_file,) = [p for p in (path / SF).iterdir() if p.name not in before]
    return log_file


def _deletes(log_file: Path) -> list[DeleteRecord]:
    (block,) = parse_log_bytes(log_file.read_bytes(), str(log_file))
    return decode_delete_block(block)


def test_deletes_from_a_commit_time_table_carry_the_stored_ordering_values(hudi_table_zip) -> None:
    # Spark's table orders by commit time (OverwriteWithLatestAvroPayload) with ts as its ordering
    # field: a delete block carries each key's current value (so Java deletes too), taken from the
    # merged slice: rider-C's from our log (ts 2), not from its base row.
    path = hudi_table_zip("moravro_v6_trips_8i1u")
    table = LakeTable.open(path)
    current = read_snapshot(table).filter(pc.equal(pc.field("uuid"), RIDER_C))
    rider_c = current.drop_columns([c for c in current.column_names if c.startswith("_hoodie")])
    write(
        table,
        rider_c.set_column(rider_c.schema.get_field_index("ts"), "ts", pa.array([2], pa.int64())),
        "upsert",
    )
    before = {p.name for p in (path / SF).iterdir()}
    done = write(table, _delete_batch([RIDER_D, RIDER_A, RIDER_C], ts=5), "delete")
    log_file = _new_log(path, before)
    group = "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0"
    assert log_file.name == f".{group}_20250331030642808.log.3_1-1-0"
    assert _deletes(log_file) == [
        DeleteRecord(RIDER_A, SF, 1695159649087, "long"),
        DeleteRecord(RIDER_D, SF, 1695046462179, "long"),
        DeleteRecord(RIDER_C, SF, 2, "long"),
    ]
    (stat,) = _stats(path, done.instant, "deltacommit")
    size = log_file.stat().st_size
    assert (stat["baseFile"], stat["logFiles"], stat["logVersion"], stat["logOffset"]) == (
        f"{group}_0-13-60_20250331030642808.parquet",
        [log_file.name],
        3,
        0,
    )
    assert (stat["numDeletes"], stat["numWrites"], stat["totalWriteBytes"], stat["fileSizeInBytes"]) == (
        3,
        0,
        size,
        size,
    )
    left = [("rider-E",), ("rider-F",), ("rider-G",), ("rider-I",), ("rider-J",)]
    assert _our_rows(path, "rider") == left
    # hudi-rs 0.5.0 decodes a delete's long ordering value as a 32-bit varint: epoch milliseconds
    # (valid Avro longs, as Spark writes them too) stop it (docs/compatibility.md).
    with pytest.raises(Exception, match="varint overflow"):
        _hudi_rows(path, "rider")

    # A key deleted already is still in the base file, so it is routed to its group again: the
    # delete carries no ordering value (the key has none left), beside one that still has its own.
    before = {p.name for p in (path / SF).iterdir()}
    write(LakeTable.open(path), _delete_batch([RIDER_A, "1dced545-862b-4ceb-8b43-d2a568f6616b"]), "delete")
    assert _deletes(_new_log(path, before)) == [
        DeleteRecord("1dced545-862b-4ceb-8b43-d2a568f6616b", SF, 1695332066204, "long"),
        DeleteRecord(RIDER_A, SF, None, None),
    ]
    assert _our_rows(path, "rider") == left[1:]


def test_deletes_from_an_event_time_table_carry_their_own_ordering_values(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", "mor", partitioned=True)
    rows = pa.table({"id": [1, 2, 3], "ts": [10, 10, 10], "v": ["a", "b", "c"], "p": ["x", "x", "x"]})
    write(table, rows, "insert")
    write(table, rows.slice(0, 2).set_column(1, "ts", pa.array([7, 12])), "delete")
    (log_file,) = (tmp_path / "t" / "x").glob(".*.log.*")
    assert _deletes(log_file) == [DeleteRecord("1", "x", 7, "long"), DeleteRecord("2", "x", 12, "long")]
    # Event time: the delete of id 1 (ts 7) loses to the stored version (ts 10).
    assert (
        _our_rows(tmp_path / "t", "id", "v") == _hudi_rows(tmp_path / "t", "id", "v") == [(1, "a"), (3, "c")]
    )


# -- a file group with no base file ---------------------------------------------------------------
def test_an_append_to_a_group_without_a_base_file_records_no_base_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path, "mor")
    write(table, _batch([1]), "insert")
    # Another writer (e.g. one whose index puts inserts into logs) made a group of logs only at T1.
    group = "0a0a0a0a-0000-4000-8000-000000000000-0"
    add_log_only_group(path, group, T1, 2, "x2")
    assert _our_rows(path, "id", "v") == _hudi_rows(path, "id", "v") == [(1, "x1"), (2, "x2")]

    done = write(table, _batch([2], ts=2, v="y"), "upsert")
    assert done.instant == T2
    (stat,) = _stats(path, T2, "deltacommit")
    second_log = LogFileName.create(group, T1, 2, "1-1-0").name
    assert (stat["fileId"], stat["baseFile"], stat["logFiles"], stat["prevCommit"]) == (
        group,
        "",
        [second_log],
        T1,
    )
    assert stat["totalWriteBytes"] == stat["fileSizeInBytes"] == (path / second_log).stat().st_size
    assert _our_rows(path, "id", "v") == _hudi_rows(path, "id", "v") == [(1, "x1"), (2, "y2")]


def test_deletes_from_a_table_without_an_ordering_field_carry_no_ordering_value(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = LakeTable.create(path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="")
    write(table, pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}), "insert")
    write(table, pa.table({"id": pa.array([2, 1], pa.int64())}), "delete")
    (log_file,) = path.glob(".*.log.*")
    assert _deletes(log_file) == [DeleteRecord("1", "", None, None), DeleteRecord("2", "", None, None)]
    assert _our_rows(path, "id") == _hudi_rows(path, "id") == []


# -- copy-on-write rewrites: stats, markers, damaged and unusual base files -------------------------
def _rewrite_parquet(base: Path, change) -> None:
    """Rewrite ``base`` in place through ``change`` (rows -> rows), keeping its footer's key-values."""
    rows = pq.read_table(base)
    pq.write_table(change(rows).replace_schema_metadata(rows.schema.metadata), base)


def test_a_rewrite_records_its_marker_and_exact_write_stat(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2, 3]), "insert")
    markers: list[str] = []

    def look(point: str) -> None:
        if point == "file":
            markers.extend(sorted(p.name for p in (path / ".hoodie" / ".temp" / T2).iterdir()))

    write(table, _batch([2], ts=2, v="y"), "upsert", fault=look)
    name = _base_file_at(path, T2).name
    assert markers == [f"{name}.marker.MERGE"]
    (stat,) = _stats(path, T2, "commit")
    assert (stat["numWrites"], stat["numUpdateWrites"], stat["prevCommit"]) == (3, 1, T1)
    assert stat["totalWriteBytes"] == stat["fileSizeInBytes"] == (path / name).stat().st_size


def test_a_stored_null_ordering_value_loses_to_an_update(tmp_path: Path) -> None:
    # Other writers may have stored a null ordering value (ours refuse one in a batch): an update of
    # that key wins, as a version with no ordering value loses to one with a value when merging.
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    _rewrite_parquet(_base_file(path), lambda rows: rows.set_column(6, "ts", pa.array([None, 1], pa.int64())))
    write(table, _batch([1, 2], ts=0, v="y"), "upsert")
    assert (
        _our_rows(path, "id", "ts", "v") == _hudi_rows(path, "id", "ts", "v") == [(1, 0, "y1"), (2, 1, "x2")]
    )


def _damage_column(base: Path, column: str) -> None:
    """Overwrite the page header of ``column``'s first chunk: the footer still reads."""
    meta = pq.ParquetFile(base).metadata
    index = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == column)
    offset = meta.row_group(0).column(index).data_page_offset
    raw = bytearray(base.read_bytes())
    raw[offset : offset + 12] = b"\xff" * 12
    base.write_bytes(bytes(raw))


@pytest.mark.parametrize("column", ["_hoodie_record_key", "v"])
def test_a_damaged_base_file_is_named_and_the_write_changes_nothing(tmp_path: Path, column: str) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    base = _base_file(path)
    _damage_column(base, column)
    with pytest.raises(CorruptDataFileError, match=f"^cannot read base file {base}: "):
        write(table, _batch([2], ts=2, v="y"), "upsert")
    assert sorted(p.name for p in path.glob("*.parquet")) == [base.name]


def _log_rows(group: str, instant: str, ids: list[int], v: str) -> pa.Table:
    """Rows of a data block as another writer logs them in a non-partitioned table."""
    return pa.table(
        {
            "_hoodie_commit_time": [instant] * len(ids),
            "_hoodie_commit_seqno": [f"{instant}_0_{i}" for i in ids],
            "_hoodie_record_key": [str(i) for i in ids],
            "_hoodie_partition_path": [""] * len(ids),
            "_hoodie_file_name": [group] * len(ids),
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([1] * len(ids), pa.int64()),
            "v": [f"{v}{i}" for i in ids],
        }
    )


def test_a_copy_on_write_group_with_a_log_is_rewritten_with_the_log_merged(tmp_path: Path) -> None:
    # COW writers write no logs; a slice that has one anyway is read as a reader merges it.
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    group = _base_file(path).name.split("_")[0]
    avro = with_meta_fields(table.data_avro_schema(table.timeline()))
    log = LogFileName.create(group, T1, 1, "0-0-0").name
    (path / log).write_bytes(avro_data_block(_log_rows(group, T1, [2], "L"), avro, T1))
    write(table, _batch([1], ts=2, v="y"), "upsert")
    rewritten = pq.read_table(_base_file_at(path, T2)).select(["id", "v"]).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rewritten) == [(1, "y1"), (2, "L2")]


def test_an_append_marks_its_log_file_before_the_crash_point(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path, "mor")
    write(table, _batch([1, 2]), "insert")
    markers: list[str] = []

    def crash(point: str) -> None:
        if point == "file":
            markers.extend(p.name for p in (path / ".hoodie" / ".temp" / T2).iterdir())
            raise SimulatedCrash(point)

    with pytest.raises(SimulatedCrash):
        write(table, _batch([2], ts=2, v="y"), "upsert", fault=crash)
    (log,) = path.glob(".*.log.*")
    assert markers == [f"{log.name}.marker.APPEND"]


def test_a_base_file_that_is_not_parquet_is_named(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    base = _base_file(path)
    base.write_bytes(b"not a parquet file at all")
    with pytest.raises(CorruptDataFileError, match=f"^cannot read base file {base}: "):
        write(table, _batch([2], ts=2, v="y"), "upsert")


def test_an_insert_marks_and_records_each_new_file_exactly(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    markers: list[str] = []

    def look(point: str) -> None:
        if point == "commit":
            markers.extend(sorted(p.name for p in (path / ".hoodie" / ".temp" / T1).iterdir()))

    done = write(table, _batch([1, 2, 3]), "insert", max_rows_per_file=1, fault=look)
    names = sorted(p.name for p in path.glob("*.parquet"))
    assert len(names) == 3 and done.inserted == 3
    assert markers == [f"{name}.marker.CREATE" for name in names]
    stats = sorted(_stats(path, T1, "commit"), key=lambda s: s["path"])
    assert [(s["path"], s["prevCommit"], s["numInserts"], s["numWrites"]) for s in stats] == [
        (name, "null", 1, 1) for name in names
    ]
    assert [s["totalWriteBytes"] for s in stats] == [(path / name).stat().st_size for name in names]
    assert [s["fileSizeInBytes"] for s in stats] == [(path / name).stat().st_size for name in names]


def test_a_failed_archival_after_a_write_is_logged_and_the_write_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    table = _table(tmp_path / "t")

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise StorageError("the archive folder is read-only")

    monkeypatch.setattr(writer, "run_archival", unavailable)
    caplog.set_level(logging.WARNING, logger=writer.log.name)
    caplog.clear()
    done = write(table, _batch([1]), "insert")
    assert (done.instant, done.archived) == (T1, ())
    assert [r.getMessage() for r in caplog.records if r.name == writer.log.name] == [
        f"automatic archival after a write to {table.uri} did not run: the archive folder is read-only"
    ]
    assert _our_rows(tmp_path / "t", "id") == [(1,)]


def test_a_base_file_without_a_record_key_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2]), "insert")
    base = _base_file(path)
    rows = pq.read_table(base)
    pq.write_table(rows.drop_columns(["_hoodie_record_key"]), base)
    with pytest.raises(CorruptDataFileError, match=f"^cannot read base file {base}: "):
        write(table, _batch([2], ts=2, v="y"), "upsert")


def test_commit_sequence_numbers_run_on_across_the_files_of_a_write(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1, 2, 3, 4, 5]), "insert", max_rows_per_file=2)
    seqnos = sorted(read_snapshot(LakeTable.open(path)).column("_hoodie_commit_seqno").to_pylist())
    assert seqnos == [f"{T1}_1_0", f"{T1}_1_1", f"{T1}_2_2", f"{T1}_2_3", f"{T1}_3_4"]


def test_a_runner_that_loses_file_groups_fails_the_write(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    with pytest.raises(LakeError, match=rf"^write {T1}: 0 results for 1 file groups\n"):
        write(table, _batch([1]), "insert", runner=lambda *_args: [])
    assert LakeTable.open(tmp_path / "t").timeline().instants == ()  # undone without a trace


def test_a_runner_that_returns_some_file_groups_only_fails_the_write(tmp_path: Path) -> None:
    """Two file groups (two rows a file), one result: the write fails rather than commit without the
    lost group's row, and the file the runner did write goes with its instant."""
    table = _table(tmp_path / "t")

    def first_only(t: LakeTable, context: Any, units: Any) -> list[Any]:
        return [write_file_group(t, context, unit) for unit in units[:1]]

    with pytest.raises(LakeError, match=rf"^write {T1}: 1 results for 2 file groups\n"):
        write(table, _batch([1, 2, 3]), "insert", max_rows_per_file=2, runner=first_only)
    reopened = LakeTable.open(tmp_path / "t")
    assert reopened.timeline().instants == ()  # undone without a trace
    assert [k for k in tree_digest(tmp_path / "t") if k.endswith(".parquet")] == []
    assert read_snapshot(reopened).num_rows == 0


# -- open base files: each closed as soon as the write needs it no more -----------------------------
class TrackingStorage(LocalStorage):
    """A local table that knows which of its base files are open for reading right now."""

    def __init__(self, root: str | Path) -> None:
        super().__init__(root)
        self.handles: list[tuple[str, Any]] = []

    def open_input(self, rel: str) -> Any:
        handle = super().open_input(rel)
        self.handles.append((rel, handle))
        return handle

    def open_now(self) -> list[str]:
        return sorted(rel for rel, handle in self.handles if not handle.closed)


def _three_files(path: Path, kind: str) -> tuple[LakeTable, TrackingStorage, list[str]]:
    """Files A (keys 1, 2), B (5, 6) and C (8, 9), and the table opened anew over a tracking storage
    (so no footer summary is cached)."""
    table = _table(path, kind)
    for ids in ([1, 2], [5, 6], [8, 9]):
        write(table, _batch(ids), "insert")
    storage = TrackingStorage(path)
    files = [_base_file_at(path, t).name for t in (T1, T2, T3)]
    return LakeTable(storage, table.config, table.clock), storage, files


def test_cow_rewrites_keep_only_the_file_being_rewritten_open(tmp_path: Path) -> None:
    table, storage, (a, b, c) = _three_files(tmp_path / "t", "cow")
    seen: list[list[str]] = []
    write(
        table,
        _batch([2, 5], ts=2, v="y"),
        "upsert",
        fault=lambda p: seen.append(storage.open_now()) if p == "file" else None,
    )
    # C is ruled out by the lookup and closed at once; A and B stay open for their rewrites (which
    # read them from the lookup's open file), each closed once rewritten.
    first, second = seen
    assert first == sorted([a, b]) and len(second) == 1 and second[0] in (a, b)
    assert storage.open_now() == []
    assert sorted(rel for rel, _ in storage.handles) == sorted([a, b, c])


def test_mor_appends_keep_no_base_file_open(tmp_path: Path) -> None:
    table, storage, (a, _b, _c) = _three_files(tmp_path / "t", "mor")
    seen: list[list[str]] = []
    write(
        table,
        _batch([2], ts=2, v="y"),
        "upsert",
        fault=lambda p: seen.append(storage.open_now()) if p == "file" else None,
    )
    assert seen == [[]]  # A held key 2, but a log append never reads the base file
    assert storage.open_now() == []


def test_a_write_through_a_runner_closes_every_base_file(tmp_path: Path) -> None:
    table, storage, _files = _three_files(tmp_path / "t", "cow")

    def runner(t: LakeTable, context: WriteContext, units: Sequence[FileGroupWrite]) -> list:
        return [write_file_group(t, context, unit) for unit in units]

    done = write(table, _batch([2, 5], ts=2, v="y"), "upsert", runner=runner)
    assert done.updated == 2 and storage.open_now() == []


def test_a_commit_time_delete_of_a_key_stored_twice_carries_its_log_versions_ordering_value(
    tmp_path: Path,
) -> None:
    """A base file holding k1 twice (ts 1, then ts 3: Hudi's bulk_insert), its first row updated in
    the log to ts 5: the read shows the second row as stored and the log's version. A delete then
    carries 5, the log version's value: Java's log scan drops a delete whose ordering value is
    smaller than the logged version's (even by commit time), the stored row's 3 would leave k1 at
    ts 5 for Java while we and hudi-rs read it deleted."""
    path = tmp_path / "t"
    LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts", table_version=6
    )
    properties = path / ".hoodie" / "hoodie.properties"
    payload = "hoodie.compaction.payload.class=org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
    properties.write_text(properties.read_text() + payload + "\n")
    write(LakeTable.open(path), _batch([0, 1], ts=1), "insert")
    (base,) = path.glob("*.parquet")
    rows = pq.read_table(base)
    again = rows.filter(pc.equal(rows.column("id"), 1))
    again = again.set_column(again.schema.get_field_index("ts"), "ts", pa.array([3], pa.int64()))
    pq.write_table(pa.concat_tables([rows, again]).replace_schema_metadata(rows.schema.metadata), base)
    write(LakeTable.open(path), _batch([1], ts=5), "upsert")
    assert _our_rows(path, "id", "ts") == [(0, 1), (1, 3), (1, 5)] == _hudi_rows(path, "id", "ts")
    before = {p.name for p in path.iterdir()}
    write(LakeTable.open(path), _batch([1], ts=0), "delete")
    (log_file,) = [p for p in path.iterdir() if p.name not in before]
    assert _deletes(log_file) == [DeleteRecord("1", "", 5, "long")]
    assert _our_rows(path, "id", "ts") == [(0, 1), (1, 3)] == _hudi_rows(path, "id", "ts")


def _cow_with_key_twice(path: Path, first: int, second: int, version: int, commit_time: bool = False) -> None:
    """A COW table whose base file holds k0 once and k1 twice: ts ``first``, then ts ``second``."""
    LakeTable.create(
        path,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=version,
    )
    if commit_time:
        properties = path / ".hoodie" / "hoodie.properties"
        mode = (
            "hoodie.record.merge.mode=COMMIT_TIME_ORDERING"
            if version >= 8
            else (
                "hoodie.compaction.payload.class=org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
            )
        )
        properties.write_text(properties.read_text() + mode + "\n")
    write(LakeTable.open(path), _batch([0, 1], ts=first), "insert")
    (base,) = path.glob("*.parquet")
    rows = pq.read_table(base)
    again = rows.filter(pc.equal(rows.column("id"), 1))
    again = again.set_column(again.schema.get_field_index("ts"), "ts", pa.array([second], pa.int64()))
    pq.write_table(pa.concat_tables([rows, again]).replace_schema_metadata(rows.schema.metadata), base)


@pytest.mark.parametrize("version", [6, 8])
@pytest.mark.parametrize(
    ("first", "second", "operation", "expected", "counts"),
    [
        (9, 1, "upsert", [(0, 9), (1, 5), (1, 9)], (1, 0)),  # the copy at 9 stays, the one at 1 goes
        (1, 9, "upsert", [(0, 5), (1, 5), (1, 9)], (2, 0)),  # (was: the copy at 9 lost, k1 at 5 only)
        (1, 2, "upsert", [(0, 5), (1, 5)], (2, 0)),  # both copies give way to the one new version
        (9, 1, "delete", [(0, 9), (1, 9)], (0, 1)),  # the copy at 9 outlives a delete at 5
        (9, 9, "upsert", [(0, 9), (1, 9), (1, 9)], (0, 0)),  # no copy gives way: nothing applies
    ],
)
def test_a_copy_on_write_update_meets_each_stored_copy_of_a_key_by_ordering(
    tmp_path: Path,
    version: int,
    first: int,
    second: int,
    operation: str,
    expected: list[tuple],
    counts: tuple[int, int],
) -> None:
    """A key a base file holds twice (Hudi's bulk_insert) meets an event-time update or delete copy
    by copy, as Java's merge handle meets it: a copy with a larger ordering value stays, the others
    give way to the new version (written once). k0 is stored once at ``first``; both come at 5."""
    path = tmp_path / "t"
    _cow_with_key_twice(path, first, second, version)
    done = write(LakeTable.open(path), _batch([0, 1], ts=5), operation)
    assert _our_rows(path, "id", "ts") == expected == _hudi_rows(path, "id", "ts")
    assert (done.updated, done.deleted) == counts


@pytest.mark.parametrize("version", [6, 8])
def test_a_commit_time_copy_on_write_update_replaces_every_stored_copy(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    _cow_with_key_twice(path, 9, 1, version, commit_time=True)
    write(LakeTable.open(path), _batch([1], ts=5), "upsert")
    assert _our_rows(path, "id", "ts") == [(0, 9), (1, 5)] == _hudi_rows(path, "id", "ts")


@pytest.mark.parametrize(("table_type", "version"), [("cow", 6), ("cow", 8), ("mor", 6), ("mor", 9)])
def test_rows_a_write_marks_hoodie_is_deleted_are_deletes_not_stored_rows(
    tmp_path: Path, table_type: str, version: int
) -> None:
    """``_hoodie_is_deleted`` true in a write's rows is Hudi's delete marker: an existing key so
    marked is deleted (a copy-on-write rewrite leaves it out, a log carries the marked version) and a
    new key so marked is not written; before, both were stored as live rows, read by us and hudi-rs."""
    path = tmp_path / "t"
    LakeTable.create(
        path,
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=version,
    )

    def rows(ids: list[int], ts: int, flags: list[bool | None]) -> pa.Table:
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "ts": pa.array([ts] * len(ids), pa.int64()),
                "_hoodie_is_deleted": pa.array(flags, pa.bool_()),
            }
        )

    # A null marker is no delete (as for Hudi): key 1 stays, here and in the upsert.
    write(LakeTable.open(path), rows([0, 1, 2], 1, [False, None, True]), "insert")
    assert _our_rows(path, "id", "ts") == [(0, 1), (1, 1)] == _hudi_rows(path, "id", "ts")
    done = write(LakeTable.open(path), rows([0, 1, 3], 2, [True, None, True]), "upsert")
    assert _our_rows(path, "id", "ts", "_hoodie_is_deleted") == [(1, 2, None)]
    assert _hudi_rows(path, "id", "ts", "_hoodie_is_deleted") == [(1, 2, None)]
    assert done.inserted == 0
