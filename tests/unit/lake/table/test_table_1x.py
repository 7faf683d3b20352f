"""Tables of versions 8 and 9 (Hudi 1.x) on the Spark-written test tables: a write on a table whose
metadata table keeps a record index is refused as on version 6, inspection changes nothing, and
``lake init`` does not overwrite them. (Each table service on these versions is tested in its own
modules.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import SchemaError, TableConfigError
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from tests.tree_digest import tree_digest

# (zip, a completed commit of it): a v8 MOR table with Hudi's metadata table, a v9 MOR table without.
TABLES = {
    "mdt_basic_mor_avro_v8_nonpartitioned": ("8", "20260101054316354"),
    "mor_avro_v9_txns_simple_nometa": ("9", "20260307135827749"),
}


def test_write_on_a_v8_table_with_a_record_index_refused_as_on_v6(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """The path of ``LakeWriteOperator`` and the Spark write job: ``writer.write``; a table with a
    record index in its metadata table is refused as on version 6 (every MDT of the 1.x test tables
    has one), before the metadata-table policy."""
    table_dir = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    table = LakeTable.open(table_dir)
    before = tree_digest(table_dir)
    rows = pa.table({"id": ["x"], "txn_id": ["x"], "txn_ts": [1], "region": ["us"]})
    with pytest.raises(TableConfigError, match="keeps a record index"):
        write(table, rows, "upsert")
    assert tree_digest(table_dir) == before


def test_lake_write_refused_for_a_record_index_names_the_drop_which_then_lets_it_write(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table_dir = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    table = LakeTable.open(table_dir)
    rows = read_snapshot(table)
    row = rows.slice(0, 1).drop_columns([c for c in rows.column_names if c.startswith("_hoodie_")])
    batch = tmp_path / "row.parquet"
    pq.write_table(row, batch)
    before = tree_digest(table_dir)
    args = ["write", str(table_dir), "--input", str(batch), "--operation", "upsert"]
    assert main(args) == 1
    assert capsys.readouterr().err == (
        f"lake: error: {table.uri}: the table keeps a record index (hoodie.table.metadata.partitions has "
        "record_index), which this writer does not update; write this table with Spark, or drop the "
        f"metadata table with its record index as Hudi does ('lake metadata-table {table.uri} --drop', "
        "or option hoodie.metadata.enable=false on the write)\n"
    )
    assert tree_digest(table_dir) == before
    # The hint works: the write drops the metadata table (and its record index) first, as Hudi does.
    assert main([*args, "--option", "hoodie.metadata.enable=false"]) == 0
    capsys.readouterr()
    after = LakeTable.open(table_dir)
    assert after.config.properties.get("hoodie.table.metadata.partitions", "") == ""
    assert not (table_dir / ".hoodie" / "metadata").exists()
    assert read_snapshot(after).num_rows == rows.num_rows


def test_a_bad_batch_with_the_drop_option_fails_before_the_metadata_table_is_dropped(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """hoodie.metadata.enable=false drops the MDT (record index included) for good: a batch the write
    refuses anyway must fail first and leave the table, MDT included, as it was."""
    table_dir = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    batch = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"name": ["no key"]}), batch)
    before = tree_digest(table_dir)
    args = ["write", str(table_dir), "--input", str(batch), "--operation", "upsert"]
    assert main([*args, "--option", "hoodie.metadata.enable=false"]) == 1
    assert capsys.readouterr().err == (
        "lake: error: batch is missing required column(s) ['id', 'longField'] "
        "(record key, partition, precombine)\n"
    )
    assert tree_digest(table_dir) == before


def test_a_keys_only_delete_with_the_drop_option_drops_the_metadata_table_and_deletes(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """The batch checked before the drop is checked as the write's own operation: a delete needs only
    the key (and precombine) columns, so it is not refused there as an upsert with missing columns."""
    table_dir = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    table = LakeTable.open(table_dir)
    rows = read_snapshot(table)
    key = rows.column("id")[0].as_py()
    doomed = rows.slice(0, 1).select(["id", "longField"])
    write(table, doomed, "delete", options={"hoodie.metadata.enable": "false"})
    after = LakeTable.open(table_dir)
    assert after.config.properties.get("hoodie.table.metadata.partitions", "") == ""
    assert not (table_dir / ".hoodie" / "metadata").exists()
    left = read_snapshot(after)
    assert left.num_rows == rows.num_rows - 1
    assert key not in left.column("id").to_pylist()


def test_a_bad_event_time_field_with_the_drop_option_fails_before_the_metadata_table_is_dropped(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    table_dir = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    table = LakeTable.open(table_dir)
    rows = read_snapshot(table)
    row = rows.slice(0, 1).drop_columns([c for c in rows.column_names if c.startswith("_hoodie_")])
    before = tree_digest(table_dir)
    with pytest.raises(SchemaError, match="^event time field 'nope' is not a column of the batch$"):
        write(table, row, "upsert", event_time_field="nope", options={"hoodie.metadata.enable": "false"})
    assert tree_digest(table_dir) == before


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (
            ["rollback", "--instant", "20990101000000000"],
            "there is no instant 20990101000000000 on the timeline",
        ),
        (
            ["restore", "--savepoint", "20990101000000000"],
            "there is no savepoint at 20990101000000000 (savepoints: none)",
        ),
        (
            ["compact", "--mode", "execute", "--instant", "20990101000000000"],
            "there is no compaction at instant 20990101000000000",
        ),
        (
            ["compact", "--mode", "schedule", "--force", "--instant", "20250101000000000"],
            "cannot schedule a compaction at 20250101000000000: it must be later than the last "
            "completed instant 20260101054337849",
        ),
    ],
    ids=["rollback", "restore", "compaction", "schedule-too-old"],
)
def test_a_missing_target_with_the_drop_option_fails_before_the_metadata_table_is_dropped(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str], command: list[str], error: str
) -> None:
    table_dir = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    uri = LakeTable.open(table_dir).uri
    before = tree_digest(table_dir)
    assert main([command[0], str(table_dir), *command[1:], "--option", "hoodie.metadata.enable=false"]) == 1
    prefix = "" if "schedule" in command else f"{uri}: "  # the schedule's refusals name the instant only
    assert capsys.readouterr().err == f"lake: error: {prefix}{error}\n"
    assert tree_digest(table_dir) == before


@pytest.mark.parametrize("name", sorted(TABLES))
def test_timeline_and_show_work_on_v8_v9(
    name: str, hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    table = hudi_table_zip(name)
    before = tree_digest(table)
    _, instant = TABLES[name]
    assert main(["timeline", str(table)]) == 0
    out = capsys.readouterr().out
    timeline = LakeTable.open(table).timeline()
    first = timeline.instants[0]
    assert first.completion_time is not None
    assert out.splitlines()[0] == (
        f"{first.timestamp}  {first.completion_time}  {first.action.value:<14} {first.state.name}"
    )
    assert main(["show", str(table), instant]) == 0
    completion = timeline.completion_time(instant)
    assert capsys.readouterr().out.startswith(
        f"instant {instant} deltacommit COMPLETED\ncompleted at {completion}\noperation: "
    )
    assert tree_digest(table) == before


@pytest.mark.parametrize("name", sorted(TABLES))
def test_init_over_a_v8_v9_table_refused_and_table_unchanged(
    name: str, hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    table = hudi_table_zip(name)
    before = tree_digest(table)
    argv = [
        "init",
        str(table),
        "--table-type",
        "mor",
        "--name",
        "t",
        "--record-key",
        "id",
        "--precombine",
        "ts",
    ]
    assert main(argv) == 1
    assert "already holds a table" in capsys.readouterr().err
    assert tree_digest(table) == before
