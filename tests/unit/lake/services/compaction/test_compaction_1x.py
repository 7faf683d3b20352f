"""Compaction on Hudi 1.x tables (versions 8 and 9) as Hudi 1.x writes it: the plan, inflight and
commit files decode under Hudi 1.x's schemas exactly like the Spark-written ones (and in Java's Avro),
and copies of the Spark-written MOR tables compact with hudi-rs reading them as before, as we do;
tables with Hudi's metadata table follow its policy (refused, or dropped first on request)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from compaction_support import DUE, batch, commit_record, mor, timeline_file
from hudi import HudiTableBuilder
from write_support import hudi_rows

from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import State
from tests.tree_digest import tree_digest

# A Spark-written v9 MOR table with a compaction (plan, empty inflight, commit) on its timeline.
SPARK_TABLE = "mor_avro_v9_txns_simple_nometa"
SPARK_COMPACTION = "20260307135839895"
# Copies of the Spark-written MOR tables without a metadata table; with one (MDT policy applies).
NOMETA = [
    "mor_avro_v9_txns_simple_nometa",
    "mor_avro_v9_txns_complex_nometa",
    "mor_avro_v9_txns_nonpart_nometa",
]
WITH_MDT = ["mdt_basic_mor_avro_v8_nonpartitioned", "mor_avro_v9_timebasedkeygen_nonhivestyle"]


def _decoded(data: bytes, full_name: str) -> tuple[dict, dict]:
    """The writer schema in the file's header and its one record read under Hudi 1.x's schema."""
    writer = fastavro.reader(io.BytesIO(data)).writer_schema
    (record,) = fastavro.reader(io.BytesIO(data), reader_schema=timeline_avro.schema_1x(full_name))
    return writer, record


def _spark_file(folder: Path, suffix: str) -> bytes:
    (found,) = folder.glob(f"{SPARK_COMPACTION}{suffix}")
    return found.read_bytes()


def test_a_v8_compaction_writes_its_files_as_hudi_1x_does(
    tmp_path: Path, hudi_table_zip: Callable[[str], Path]
) -> None:
    spark_timeline = hudi_table_zip(SPARK_TABLE) / ".hoodie" / "timeline"
    table = mor(tmp_path, table_version=8)
    scheduled = schedule_compaction(table, DUE)
    c = scheduled.instant
    plan_bytes = timeline_file(table, c, State.REQUESTED).read_bytes()
    ours_schema, ours = _decoded(plan_bytes, timeline_avro.COMPACTION_PLAN)
    theirs_schema, theirs = _decoded(
        _spark_file(spark_timeline, ".compaction.requested"), timeline_avro.COMPACTION_PLAN
    )
    assert ours_schema == theirs_schema  # the writer schema in the header: Hudi 1.x's own
    assert list(ours) == list(theirs)
    assert list(ours["operations"][0]) == list(theirs["operations"][0])
    (op,) = scheduled.plan.operations
    assert ours == {
        "operations": [op.to_avro()],
        "extraMetadata": {
            "hoodie.compaction.strategy": scheduled.plan.extra_metadata["hoodie.compaction.strategy"]
        },
        "version": 2,
        "strategy": None,
        "preserveHoodieMetadata": False,
        "missingSchedulePartitions": [],
    }
    done = execute_compaction(table, c)
    assert done.outcome is Outcome.COMPLETED
    # The inflight file is empty, as Spark's; the completed one is <c>_<completion>.commit in Avro.
    assert (
        timeline_file(table, c, State.INFLIGHT).read_bytes()
        == b""
        == _spark_file(spark_timeline, ".compaction.inflight")
    )
    completed = timeline_file(table, c, State.COMPLETED)
    assert completed.name == f"{c}_{table.timeline().get(c).completion_time}.commit"
    ours_schema, ours = _decoded(completed.read_bytes(), timeline_avro.COMMIT_METADATA)
    theirs_schema, theirs = _decoded(_spark_file(spark_timeline, "_*.commit"), timeline_avro.COMMIT_METADATA)
    assert ours_schema == theirs_schema and list(ours) == list(theirs)
    assert (
        (ours["compacted"], ours["operationType"])
        == (theirs["compacted"], theirs["operationType"])
        == (
            True,
            "COMPACT",
        )
    )
    (stat,) = [s for stats in ours["partitionToWriteStats"].values() for s in stats]
    assert (stat["path"], stat["prevCommit"], stat["totalLogFilesCompacted"]) == (
        done.files[0],
        op.base_instant,
        1,
    )
    assert commit_record(table, c) == ours


def test_java_avro_reads_our_v8_compaction_plan_and_commit(tmp_path: Path, spark: Any) -> None:
    """Java's Avro (in Spark's JVM) opens the plan and the commit of a v8 compaction, resolving each to
    the shipped Hudi 1.x schema."""
    table = mor(tmp_path, table_version=8)
    _, done = run_compaction(table, DUE)
    c = done.instant
    jvm = spark.sparkContext._jvm
    read: dict[str, Any] = {}
    for what, state, stem in (
        ("plan", State.REQUESTED, "HoodieCompactionPlan.1x"),
        ("commit", State.COMPLETED, "HoodieCommitMetadata.1x"),
    ):
        shipped = jvm.org.apache.avro.Schema.Parser().parse(json.dumps(timeline_avro.load_schema_text(stem)))
        reader = jvm.org.apache.avro.file.DataFileReader(
            jvm.java.io.File(str(timeline_file(table, c, state))),
            jvm.org.apache.avro.generic.GenericDatumReader(None, shipped),
        )
        record = reader.next()
        assert not reader.hasNext()
        reader.close()
        read[what] = json.loads(record.toString())
    (op,) = read["plan"]["operations"]
    (stat,) = done.stats
    assert (op["fileId"], op["baseInstantTime"], read["plan"]["missingSchedulePartitions"]) == (
        stat.file_id,
        stat.prev_commit,
        [],
    )
    assert read["commit"]["operationType"] == "COMPACT" and read["commit"]["compacted"] is True
    (java_stat,) = read["commit"]["partitionToWriteStats"]["x"]
    assert (java_stat["fileId"], java_stat["path"]) == (stat.file_id, stat.path)


def _hudi_rs(path: Path) -> list[str]:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return _rows(pa.Table.from_batches(batches))


def _rows(table: pa.Table, drop: tuple[str, ...] = ("_hoodie_file_name",)) -> list[str]:
    return sorted(repr(sorted((k, v) for k, v in r.items() if k not in drop)) for r in table.to_pylist())


def _upsert_some(table: LakeTable) -> None:
    """Our v8/v9 upsert of a third of the rows, their ordering value one higher: logs to compact on
    top of Spark's base files."""
    rows = read_snapshot(table)
    keep = [c for c in rows.column_names if not c.startswith("_hoodie_")]
    some = rows.select(keep).take(pa.array(range(0, rows.num_rows, 3)))
    ordering = table.config.precombine_field
    assert ordering is not None
    column = some.column(ordering)
    some = some.set_column(
        some.column_names.index(ordering), ordering, pc.add(column, pa.scalar(1, column.type))
    )
    write(table, some, "upsert")


@pytest.mark.parametrize("name", NOMETA)
def test_compacting_copies_of_spark_written_1x_tables(
    hudi_table_zip: Callable[[str], Path], name: str
) -> None:
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    _upsert_some(table)
    before = _hudi_rs(path)
    assert _rows(read_snapshot(table)) == before
    scheduled, done = run_compaction(table, force=True)
    assert done.outcome is Outcome.COMPLETED and scheduled.plan is not None
    assert _hudi_rs(path) == before  # only the file names of rows that moved changed
    assert _rows(read_snapshot(LakeTable.open(path))) == before


@pytest.mark.parametrize("name", WITH_MDT)
def test_spark_written_1x_tables_with_a_metadata_table_follow_its_policy(
    hudi_table_zip: Callable[[str], Path], name: str
) -> None:
    """Their latest slices hold Spark's logs. Refused under ``lake.metadata-table.maintain=false``
    (kept by default: ``metadata/test_services``), the table unchanged; with
    ``hoodie.metadata.enable=false`` the MDT is dropped first, then hudi-rs (listing the files now)
    reads the compacted table as it read the table before."""
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    before, digest = _hudi_rs(path), tree_digest(path)
    with pytest.raises(TableConfigError, match="metadata table"):
        schedule_compaction(table, {"lake.metadata-table.maintain": "false"}, force=True)
    assert tree_digest(path) == digest
    scheduled, done = run_compaction(table, {"hoodie.metadata.enable": "false"}, force=True)
    assert done.outcome is Outcome.COMPLETED and scheduled.plan is not None
    assert not (path / ".hoodie" / "metadata").exists()
    assert all(op.delta_file_names for op in scheduled.plan.operations)
    assert _hudi_rs(path) == before
    assert _rows(read_snapshot(LakeTable.open(path))) == before


@pytest.mark.parametrize("table_version", [6, 8, 9])
def test_a_plan_records_the_partitions_it_leaves_out_on_v8_only(tmp_path: Path, table_version: int) -> None:
    """Version 8 and 9 plans carry Hudi 1.x's ``missingSchedulePartitions`` (so Java's incremental
    scheduling plans y next); version 6 plans keep 0.x's three fields, as before. The plan runs."""
    table = mor(tmp_path, table_version=table_version)  # x has a log file
    write(table, batch(["c"], 2, "y"), "upsert")  # y too
    only_x = {
        **DUE,
        "hoodie.compaction.strategy": "PartitionRegexBasedCompactionStrategy",
        "hoodie.compaction.partition.path.regex": "x",
    }
    scheduled = schedule_compaction(table, only_x)
    assert [op.partition for op in scheduled.plan.operations] == ["x"]
    data = timeline_file(table, scheduled.instant, State.REQUESTED).read_bytes()
    (record,) = fastavro.reader(io.BytesIO(data))
    if table_version >= 8:
        assert record["missingSchedulePartitions"] == ["y"] and scheduled.plan.missing_partitions == ("y",)
    else:
        assert list(record) == ["operations", "extraMetadata", "version"]
        assert scheduled.plan.missing_partitions == ()
    expected = hudi_rows(table.base_path, "id", "ts", "p")
    assert execute_compaction(table).outcome is Outcome.COMPLETED
    assert (
        hudi_rows(table.base_path, "id", "ts", "p")
        == expected
        == [("a", 2, "x"), ("b", 1, "x"), ("c", 2, "y")]
    )


@pytest.mark.parametrize("version", [6, 8])
def test_compaction_write_stats_name_the_replaced_base_file_and_the_runtime_stats(
    tmp_path: Path, version: int
) -> None:
    """As Hudi's compactor (and the Spark-written v9 compaction here): ``prevBaseFile`` is the name
    of the slice's base file it replaced, ``runtimeStats`` the log scan's and the merge handle's
    (upsert) milliseconds, no create time; v8/v9 also record the scan as ``totalLogReadTimeMs``."""
    table = mor(tmp_path, table_version=version)
    (base,) = sorted(p.name for p in (table.base_path / "x").glob("*.parquet"))
    scheduled = schedule_compaction(table, DUE)
    c = scheduled.instant
    assert c is not None and execute_compaction(table, c).outcome is Outcome.COMPLETED
    (stat,) = [s for stats in commit_record(table, c)["partitionToWriteStats"].values() for s in stats]
    (op,) = scheduled.plan.operations
    assert (stat["prevBaseFile"], stat["prevCommit"]) == (base, op.base_instant)
    runtime = stat["runtimeStats"]
    assert sorted(runtime) == ["totalCreateTime", "totalScanTime", "totalUpsertTime"]
    assert runtime["totalCreateTime"] == 0
    assert all(isinstance(v, int) and v >= 0 for v in runtime.values())
    if version == 8:
        assert stat["totalLogReadTimeMs"] == runtime["totalScanTime"]
    timeline = table.timeline()
    (parsed,) = timeline.commit_metadata(timeline.get(c)).write_stats()
    assert parsed.prev_base_file == base and parsed.runtime_stats is not None
    assert parsed.runtime_stats.to_json() == runtime
