"""Writes on Hudi 1.x tables (versions 8 and 9): hudi-rs reads what we write exactly as we do, after
every write and as of every commit, on tables we create and on copies of Spark-written ones; MOR
logs are one new file per deltacommit named by its requested time; what is still refused is
refused by name with nothing changed."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, State
from tests.tree_digest import tree_digest

BASE_RE = re.compile(
    r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-0_\d+-\d+-\d+_(?P<instant>\d{17})\.parquet$"
)
LOG_RE = re.compile(r"^\.(?P<fid>.+)_(?P<instant>\d{17})\.log\.(?P<version>\d+)_(?P<token>.+)$")


def _hudi_rs(path: Path, as_of: str | None = None) -> pa.Table:
    table = HudiTableBuilder.from_base_uri(str(path)).build()
    batches = table.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else table.read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(row) for row in table.to_pylist())


def _assert_hudi_rs_reads_what_we_read(path: Path) -> pa.Table:
    """Snapshot and as of every completed commit: ours == hudi-rs, row for row, all columns."""
    table = LakeTable.open(path)
    for as_of in [None, *(i.timestamp for i in table.timeline().completed_commits)]:
        ours, theirs = read_snapshot(table, as_of), _hudi_rs(path, as_of)
        assert ours.num_rows == theirs.num_rows, as_of
        if theirs.num_rows:
            assert ours.column_names == theirs.column_names, as_of
            assert _rows(ours) == _rows(theirs), as_of
    return read_snapshot(table)


def _values(snapshot: pa.Table, key: str, column: str) -> dict[str, object]:
    return dict(zip(snapshot.column(key).to_pylist(), snapshot.column(column).to_pylist(), strict=True))


def _logs(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob(".*.log.*") if ".hoodie" not in p.parts)


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_writes_on_a_table_we_create_read_the_same_in_hudi_rs(
    version: int, table_type: str, tmp_path: Path
) -> None:
    path = tmp_path / "t"
    table = LakeTable.create(
        path,
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("region",),
        hive_style=True,
        table_version=version,
    )
    steps = [
        ("insert", {"id": ["a", "b", "c"], "ts": [1, 1, 1], "region": ["us", "us", "eu"], "v": [1, 2, 3]}),
        ("upsert", {"id": ["a", "c", "d"], "ts": [2, 2, 2], "region": ["us", "eu", "eu"], "v": [10, 30, 4]}),
        ("delete", {"id": ["b"], "ts": [3], "region": ["us"], "v": [0]}),
        (
            "upsert",
            {"id": ["a", "c"], "ts": [4, 1], "region": ["us", "eu"], "v": [100, -1]},
        ),  # c: older ts loses
    ]
    expected = [
        {"a": 1, "b": 2, "c": 3},
        {"a": 10, "b": 2, "c": 30, "d": 4},
        {"a": 10, "c": 30, "d": 4},
        {"a": 100, "c": 30, "d": 4},
    ]
    for (operation, rows), want in zip(steps, expected, strict=True):
        write(table, pa.table(rows), operation)
        assert _values(_assert_hudi_rs_reads_what_we_read(path), "id", "v") == want
    timeline = LakeTable.open(path).timeline()
    action = Action.DELTACOMMIT if table_type == "mor" else Action.COMMIT
    commits = timeline.completed_commits
    assert [i.action for i in commits] == [action] * 4
    times = [t for i in commits for t in (i.timestamp, i.completion_time)]
    assert times == sorted(times) and len(set(times)) == 8  # requested < completed < next requested
    # Every timeline file in .hoodie/timeline/, none in layout 1's place.
    assert not [p.name for p in (path / ".hoodie").iterdir() if p.name[:1].isdigit()]
    # Base files named as Hudi 1.x names them: <uuid>-0_<token>_<requested time of their commit>.
    requested = {i.timestamp for i in commits}
    for base in path.rglob("*.parquet"):
        m = BASE_RE.match(base.name)
        assert m is not None and m["instant"] in requested, base.name
    logs = _logs(path)
    if table_type == "cow":
        assert logs == []
        return
    # MOR: each update/delete wrote one new log file, named by its deltacommit's requested time.
    deltas = {i.timestamp for i in commits[1:]}
    named = [LOG_RE.match(p.name) for p in logs]
    assert all(m is not None and m["version"] == "1" and m["instant"] in deltas for m in named)
    assert len({(m["fid"], m["instant"]) for m in named if m}) == len(logs)  # never two per commit
    for log in logs:
        assert len(parse_log_bytes(log.read_bytes(), str(log))) == 1  # never appended to
    for instant in commits:
        stats = timeline.commit_metadata(instant).write_stats()
        for stat in stats:
            if stat.log_files:
                assert stat.log_files == (Path(stat.path).name,)
                assert LOG_RE.match(stat.log_files[0])["instant"] == instant.timestamp  # type: ignore[index]


# Copies of Spark-written tables without a metadata table: we append, hudi-rs reads.
SPARK_TABLES = {
    "cow_v8_nonpartitioned": ("id", "longField", "intField"),
    "cow_v8_simplekeygen_nonhivestyle": ("id", "longField", "intField"),
    "cow_v9_txns_simple_nometa": ("txn_id", "txn_ts", "merchant_name"),
    "cow_v9_txns_nonpart_nometa": ("txn_id", "txn_ts", "merchant_name"),
    "mor_avro_v9_txns_simple_nometa": ("txn_id", "txn_ts", "merchant_name"),
    "mor_avro_v9_txns_nonpart_nometa": ("txn_id", "txn_ts", "merchant_name"),
    "mor_avro_v9_txns_complex_nometa": ("txn_id", "txn_ts", "merchant_name"),
}


@pytest.mark.parametrize("name", sorted(SPARK_TABLES))
def test_writes_appended_to_a_spark_written_table_read_the_same_in_hudi_rs(
    name: str, hudi_table_zip: Callable[[str], Path]
) -> None:
    path = hudi_table_zip(name)
    key, order, column = SPARK_TABLES[name]
    table = LakeTable.open(path)
    before = _assert_hudi_rs_reads_what_we_read(path)
    data = before.drop_columns([c for c in before.column_names if c.startswith("_hoodie_")])
    data = data.sort_by(key)
    first, second = data.slice(0, 1), data.slice(1, 1)
    new_value = (
        pa.array(["written by lake"] * 1, data.schema.field(column).type) if column != "intField" else None
    )
    if new_value is None:
        new_value = pa.array([424242], data.schema.field(column).type)
    bumped = pc.add(first.column(order), pa.scalar(1_000_000, first.schema.field(order).type))
    update = first.set_column(first.schema.get_field_index(order), order, bumped)
    update = update.set_column(update.schema.get_field_index(column), column, new_value)
    write(table, update, "upsert")
    after = _assert_hudi_rs_reads_what_we_read(path)
    assert after.num_rows == before.num_rows
    assert _values(after, key, column)[first.column(key)[0].as_py()] == new_value[0].as_py()
    fresh = pc.binary_join_element_wise(first.column(key).cast(pa.string()), pa.scalar("-new"), "")
    if pa.types.is_integer(first.schema.field(key).type):
        fresh = pc.add(first.column(key), pa.scalar(10_000, first.schema.field(key).type))
    insert = first.set_column(
        first.schema.get_field_index(key), key, fresh.cast(first.schema.field(key).type)
    )
    write(table, insert, "insert")
    after = _assert_hudi_rs_reads_what_we_read(path)
    assert after.num_rows == before.num_rows + 1
    write(table, second, "delete")
    if table.config.is_mor:
        # hudi-rs 0.5.0 decodes a delete's long ordering value as a 32-bit varint, and these tables
        # order by epoch milliseconds (docs/compatibility.md): ours only, and hudi-rs's known error.
        with pytest.raises(Exception, match="varint overflow"):
            _hudi_rs(path)
        after = read_snapshot(LakeTable.open(path))
    else:
        after = _assert_hudi_rs_reads_what_we_read(path)
    assert after.num_rows == before.num_rows
    assert second.column(key)[0].as_py() not in _values(after, key, column)
    for log in _logs(path):
        m = LOG_RE.match(log.name)
        assert m is not None and m["version"] == "1"  # v8 naming, Spark's and ours


def test_metadata_table_drop_on_a_v8_table_then_write_hudi_rs_reads_by_listing(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    assert (path / ".hoodie" / "metadata" / ".hoodie" / "timeline").is_dir()  # a layout-2 MDT
    before = _assert_hudi_rs_reads_what_we_read(path)
    assert main(["metadata-table", str(path), "--drop"]) == 0, capsys.readouterr().err
    assert not (path / ".hoodie" / "metadata").exists()
    table = LakeTable.open(path)
    assert table.config.properties["hoodie.table.metadata.partitions"] == ""
    # hudi-rs now lists storage (no MDT to open): same rows as through the MDT before.
    assert _rows(_assert_hudi_rs_reads_what_we_read(path)) == _rows(before)
    key = table.config.record_key_fields[0]
    data = before.drop_columns([c for c in before.column_names if c.startswith("_hoodie_")]).sort_by(key)
    write(table, data.slice(0, 1), "delete")
    after = _assert_hudi_rs_reads_what_we_read(path)
    assert after.num_rows == before.num_rows - 1


def test_a_write_after_a_dead_writer_rolls_it_back_first_as_on_v6(tmp_path: Path) -> None:
    """EAGER: the dead writer's instant and its log file go by a layout-2 rollback instant
    (``<r>_<completion>.rollback``, Hudi 1.x's metadata schema), then the write commits; hudi-rs
    reads what we read."""
    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts", table_version=8
    )
    write(table, pa.table({"id": ["a"], "ts": [1]}), "insert")

    def die(point: str) -> None:
        if point == "commit":
            raise SystemExit("killed")  # not an Exception: the writer's own undo does not run

    with pytest.raises(SystemExit):
        write(table, pa.table({"id": ["a"], "ts": [2]}), "upsert", fault=die)
    (failed,) = table.timeline().pending
    (dead_log,) = _logs(path)
    assert LOG_RE.match(dead_log.name)["instant"] == failed.timestamp  # type: ignore[index]
    done = write(
        table,
        pa.table({"id": ["b"], "ts": [1]}),
        "insert",
        options={"hoodie.cleaner.policy.failed.writes": "EAGER"},
    )
    timeline = LakeTable.open(path).timeline()
    assert timeline.get(failed.timestamp) is None and not dead_log.exists()
    (rb,) = timeline.filter([Action.ROLLBACK], [State.COMPLETED])
    assert failed.timestamp < rb.timestamp < (rb.completion_time or "") < done.instant
    data = (path / table.layout.instant_path(rb)).read_bytes()
    (record,) = fastavro.reader(io.BytesIO(data), timeline_avro.schema_1x(timeline_avro.ROLLBACK_METADATA))
    assert record["commitsRollback"] == [failed.timestamp]
    assert record["partitionMetadata"][""]["successDeleteFiles"] == [table.storage.uri(dead_log.name)]
    assert record["partitionMetadata"][""]["logFilesFromFailedCommit"] == {}
    snapshot = _assert_hudi_rs_reads_what_we_read(path)
    assert _values(snapshot, "id", "ts") == {"a": 1, "b": 1}


def test_a_log_requested_before_a_new_base_but_completed_after_it_belongs_to_the_new_slice(
    tmp_path: Path,
) -> None:
    """Slicing by completion time, our log against another writer's base: while our upsert W is
    inflight (its log written), another writer commits C, a new base file of the same file group
    (rows as before). W completes after C, so W's log (named by W, before C) belongs to C's slice:
    ours and hudi-rs both read W's update; sliced by requested time it would be lost."""
    import shutil

    from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat

    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts", table_version=8
    )
    write(table, pa.table({"id": ["a", "b"], "ts": [1, 1], "v": [1, 2]}), "insert")
    (base,) = sorted(path.glob("*.parquet"))
    file_id = base.name.split("_")[0]
    timeline = table.timeline()
    schema = timeline.commit_metadata(timeline.completed_commits[0]).extra_metadata["schema"]
    other: dict[str, str] = {}

    def commit_other_base_while_inflight(point: str) -> None:
        if point != "commit":
            return
        c = table.clock.next(after=table.timeline().latest_time)
        name = f"{file_id}_0-9-9_{c}.parquet"
        shutil.copyfile(base, path / name)
        stat = WriteStat(file_id, "", name, "null", num_writes=2, total_write_bytes=1, file_size_in_bytes=1)
        body = CommitMetadata("INSERT", {"": (stat,)}, {"schema": schema})
        store = table.store
        inflight = store.transition_to_inflight(store.create_requested(c, Action.COMMIT), b"")
        other["instant"] = c
        other["completion"] = (
            store.transition_to_completed(inflight, body.to_avro_bytes()).completion_time or ""
        )

    done = write(
        table, pa.table({"id": ["a"], "ts": [2], "v": [10]}), "upsert", fault=commit_other_base_while_inflight
    )
    timeline = LakeTable.open(path).timeline()
    w_completion = timeline.completion_time(done.instant)
    assert done.instant < other["instant"] < other["completion"] < (w_completion or "")
    (log,) = _logs(path)
    assert LOG_RE.match(log.name)["instant"] == done.instant  # type: ignore[index]
    snapshot = _assert_hudi_rs_reads_what_we_read(path)
    assert _values(snapshot, "id", "v") == {"a": 10, "b": 2}


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_a_failed_write_on_v8_is_undone_without_a_rollback_instant(table_type: str, tmp_path: Path) -> None:
    """Its new files simply go (a v8 log file is the write's own), so no rollback is needed."""
    path = tmp_path / "t"
    table = LakeTable.create(
        path,
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=8,
    )
    write(table, pa.table({"id": ["a"], "ts": [1]}), "insert")
    before = tree_digest(path)

    def boom(point: str) -> None:
        if point == "commit":
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom") as info:
        write(table, pa.table({"id": ["a", "b"], "ts": [2, 2]}), "upsert", fault=boom)
    assert "was undone: nothing of it is left" in "".join(getattr(info.value, "__notes__", []))
    assert tree_digest(path) == before
