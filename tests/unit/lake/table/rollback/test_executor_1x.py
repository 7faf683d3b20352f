"""Rollback and restore on copies of the Spark-written Hudi 1.x tables (versions 8 and 9), hudi-rs
the judge: a write whose completed file is gone (its writer died before completing) is rolled back
from a listing of its files, the latest completed write is rolled back with ``--force``; the tables
with Hudi's metadata table are refused with nothing changed, or dropped first when the caller sets
``hoodie.metadata.enable=false``. What we write decodes under Hudi 1.x's schemas."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from tests.tree_digest import tree_digest

# Spark-written tables without a metadata table, of both types and versions.
NO_MDT = [
    "cow_v8_complexkeygen_hivestyle",
    "cow_v8_nonpartitioned",
    "cow_v8_simplekeygen_nonhivestyle",
    "cow_v9_txns_complex_nometa",
    "cow_v9_txns_nonpart_nometa",
    "cow_v9_txns_simple_nometa",
    "mor_avro_v9_txns_complex_nometa",
    "mor_avro_v9_txns_nonpart_nometa",
    "mor_avro_v9_txns_simple_nometa",
]
# With Hudi's metadata table (hudi-rs lists through its ``files`` partition).
WITH_MDT = [
    "cow_v9_txns_simple_meta",
    "mdt_basic_mor_avro_v8_nonpartitioned",
    "mor_avro_v9_txns_simple_meta",
    "mor_avro_v9_nonpartitioned_rollback",
]


def _rows(table: pa.Table) -> list[str]:
    cols = sorted(c for c in table.column_names if c != "_hoodie_file_name")
    return sorted(repr(r) for r in table.select(cols).to_pylist())


def _hudi_rs(path: Path) -> pa.Table:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _assert_reads(path: Path, expected: list[str]) -> None:
    """Ours == hudi-rs == ``expected`` (rows, every column but the file name), none pending."""
    table = LakeTable.open(path)
    assert _rows(read_snapshot(table)) == expected
    theirs = _hudi_rs(path)
    assert (_rows(theirs) if theirs.num_rows else []) == expected
    assert [i for i in table.timeline().pending if i.action is not Action.CLUSTERING] == []


def _files_of(path: Path, instant: str) -> list[Path]:
    """Data files named with ``instant`` (base files it wrote, v8/v9 log files of its deltacommit)."""
    out = []
    for p in path.rglob("*"):
        if ".hoodie" in p.parts or not p.is_file():
            continue
        base, log = BaseFileName.parse(p.name), LogFileName.parse(p.name)
        named = base.instant if base else log.base_instant if log else None
        if named == instant:
            out.append(p)
    return sorted(out)


def _last_write(table: LakeTable) -> Instant:
    return max(table.timeline().completed_commits, key=lambda i: i.completion_time or "")


def _decodes_as_hudi_1x(path: Path, table: LakeTable, rb: Instant) -> dict:
    """The completed rollback file decodes under Hudi 1.x's rollback metadata schema."""
    data = (path / table.layout.instant_path(rb)).read_bytes()
    schema = timeline_avro.schema_1x(timeline_avro.ROLLBACK_METADATA)
    (record,) = fastavro.reader(io.BytesIO(data), reader_schema=schema)
    return record


@pytest.mark.parametrize("name", NO_MDT)
def test_a_dead_spark_write_is_rolled_back_from_a_listing(
    name: str, hudi_table_zip: Callable[[str], Path]
) -> None:
    """The latest Spark write loses its completed file (its writer "died" before completing; Spark
    removed its markers): the rollback finds its files by name, deletes exactly them, and the table
    reads as before the write, in hudi-rs too."""
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    last = _last_write(table)
    before = [i for i in table.timeline().completed_commits if i.timestamp != last.timestamp]
    expected = _rows(read_snapshot(table, before[-1].timestamp)) if before else []
    made = _files_of(path, last.timestamp)
    assert made, f"{name}: the latest write {last.timestamp} named no file"
    (path / table.layout.instant_path(last)).unlink()
    [result] = rollback(LakeTable.open(path))
    assert result.target == last.timestamp
    assert sorted(result.deleted) == sorted(str(p.relative_to(path)) for p in made)
    assert result.marked == ()
    assert [p for p in made if p.exists()] == []
    _assert_reads(path, expected)
    timeline = LakeTable.open(path).timeline()
    (rb,) = [i for i in timeline.filter([Action.ROLLBACK], [State.COMPLETED]) if i.timestamp > last.timestamp]
    record = _decodes_as_hudi_1x(path, table, rb)
    assert record["commitsRollback"] == [last.timestamp] and record["totalFilesDeleted"] == len(made)


@pytest.mark.parametrize("name", NO_MDT)
def test_forced_rollback_of_the_latest_spark_write(name: str, hudi_table_zip: Callable[[str], Path]) -> None:
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    last = _last_write(table)
    earlier = [i.timestamp for i in table.timeline().completed_commits if i.timestamp != last.timestamp]
    expected = _rows(read_snapshot(table, earlier[-1])) if earlier else []
    [result] = rollback(table, last.timestamp, force=True)
    assert result.target == last.timestamp and result.marked == ()
    _assert_reads(path, expected)
    assert LakeTable.open(path).timeline().get(last.timestamp) is None


@pytest.mark.parametrize("name", WITH_MDT)
def test_rollback_on_a_table_with_a_metadata_table_refused_or_dropped_first(
    name: str, hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before anything is written (hudi-rs would list through a stale MDT), unless the caller
    drops it (``hoodie.metadata.enable=false``, as a Hudi 1.x writer does); then hudi-rs lists files
    and reads what we read."""
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    last = _last_write(table)
    earlier = [i.timestamp for i in table.timeline().completed_commits if i.timestamp != last.timestamp]
    expected = _rows(read_snapshot(table, earlier[-1])) if earlier else []
    (path / table.layout.instant_path(last)).unlink()  # a dead writer's instant
    before = tree_digest(path)
    assert main(["rollback", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lake: error: rollback refused: {path} has Hudi's metadata table (") and (
        "Nothing was changed." in err
    )
    assert tree_digest(path) == before
    code = main(["rollback", str(path), "--option", "hoodie.metadata.enable=false"])
    assert code == 0, capsys.readouterr().err
    assert not (path / ".hoodie" / "metadata").exists()
    _assert_reads(path, expected)


def _plain(node: object) -> object:
    """A parsed fastavro schema as plain Avro JSON (without fastavro's own keys)."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if not k.startswith("__")}
    if isinstance(node, list):
        return [_plain(n) for n in node]
    return node


def test_java_avro_reads_our_rollback_and_restore_files_under_hudi_1x_schemas(
    tmp_path: Path, hudi_table_zip: Callable[[str], Path], spark: Any
) -> None:
    """Java's Avro (in Spark's JVM) opens the plan and metadata files of a v8 rollback and restore,
    resolving each to Hudi 1.x's schema of its record: the rollback plan's as a Spark-written v9
    plan carries it, the shipped 1.x rollback and restore metadata, the restore plan (unchanged)."""
    import json

    from savepoint_support import savepoint

    from airflow_lake_provider.lake.services.restore import restore
    from airflow_lake_provider.lake.table.write import write

    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts", table_version=8
    )
    point = write(table, pa.table({"id": ["a", "b"], "ts": [1, 1]}), "insert").instant
    savepoint(table, point)
    write(table, pa.table({"id": ["a"], "ts": [2]}), "upsert")

    def die(at: str) -> None:
        if at == "commit":
            raise SystemExit("killed")

    with pytest.raises(SystemExit):
        write(table, pa.table({"id": ["b"], "ts": [3]}), "upsert", fault=die)
    rollback(table)
    restore(table, point)
    timeline = LakeTable.open(path).timeline()
    spark_plan = hudi_table_zip("mor_avro_v9_nonpartitioned_rollback") / ".hoodie/timeline"
    with (spark_plan / "20260403184259077.rollback.requested").open("rb") as f:
        plan_1x = fastavro.reader(f).writer_schema
    schemas = {
        Action.ROLLBACK: (plan_1x, timeline_avro.load_schema_text("HoodieRollbackMetadata.1x")),
        Action.RESTORE: (
            _plain(timeline_avro.schema(timeline_avro.RESTORE_PLAN)),
            timeline_avro.load_schema_text("HoodieRestoreMetadata.1x"),
        ),
    }
    jvm = spark.sparkContext._jvm
    read: dict[tuple[str, str], Any] = {}
    for action, (plan_schema, metadata_schema) in schemas.items():
        for done in timeline.filter([action], [State.COMPLETED]):
            for instant, schema in ((done.with_state(State.REQUESTED), plan_schema), (done, metadata_schema)):
                parsed = jvm.org.apache.avro.Schema.Parser().parse(json.dumps(schema))
                file = path / table.layout.instant_path(instant)
                reader = jvm.org.apache.avro.file.DataFileReader(
                    jvm.java.io.File(str(file)), jvm.org.apache.avro.generic.GenericDatumReader(None, parsed)
                )
                record = reader.next()
                assert not reader.hasNext()
                reader.close()
                read[(done.timestamp, instant.state.name)] = json.loads(record.toString())
    rollbacks = timeline.filter([Action.ROLLBACK], [State.COMPLETED])
    assert len(rollbacks) == 2  # the failed write, then the restore's, of the upsert after the savepoint
    (restored,) = timeline.filter([Action.RESTORE], [State.COMPLETED])
    plan = read[(restored.timestamp, "REQUESTED")]
    metadata = read[(restored.timestamp, "COMPLETED")]
    assert plan["savepointToRestoreTimestamp"] == point
    assert metadata["instantsToRollback"] == [i["commitTime"] for i in plan["instantsToRollback"]]
    for r in rollbacks:
        meta = read[(r.timestamp, "COMPLETED")]
        assert meta["startRollbackTime"] == r.timestamp
        assert all(m["logFilesFromFailedCommit"] == {} for m in meta["partitionMetadata"].values())


def test_a_log_a_late_executor_writes_after_a_v8_rollback_stays_invisible(tmp_path: Path) -> None:
    """A v8 rollback deletes the failed deltacommit's own log files; a late executor (a zombie Spark
    task) that writes one after the rollback makes a log named with an instant no timeline holds:
    ours and hudi-rs both skip it, before and after the next write. (Archival of such an instant's
    history is the archival's concern.)"""
    from airflow_lake_provider.lake.table.write import write

    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts", table_version=8
    )
    write(table, pa.table({"id": ["a", "b"], "ts": [1, 1]}), "insert")
    write(table, pa.table({"id": ["a"], "ts": [2]}), "upsert")

    def die(at: str) -> None:
        if at == "commit":
            raise SystemExit("killed")

    with pytest.raises(SystemExit):
        write(table, pa.table({"id": ["b"], "ts": [9]}), "upsert", fault=die)
    (failed,) = table.timeline().pending
    logs = {p: p.read_bytes() for p in path.glob(f".*_{failed.timestamp}.log.*")}
    assert logs
    [result] = rollback(table)
    assert sorted(result.deleted) == sorted(p.name for p in logs)
    for p, data in logs.items():  # the late executor's file, after the rollback
        p.write_bytes(data)
    expected = sorted(repr(r) for r in [{"id": "a", "ts": 2}, {"id": "b", "ts": 1}])

    def both() -> tuple[list[str], list[str]]:
        ours = read_snapshot(LakeTable.open(path)).select(["id", "ts"])
        theirs = _hudi_rs(path).select(["id", "ts"])
        return sorted(repr(r) for r in ours.to_pylist()), sorted(repr(r) for r in theirs.to_pylist())

    assert both() == (expected, expected)
    write(table, pa.table({"id": ["c"], "ts": [1]}), "insert")
    expected = sorted([*expected, repr({"id": "c", "ts": 1})])
    assert both() == (expected, expected)
