"""Writes that keep Hudi's metadata table (MDT) ``files`` partition (``lake.metadata-table.maintain``).

On copies of Spark-written v8/v9 tables whose MDT keeps only ``files`` (the other partitions dropped
as Hudi drops an index): hudi-rs lists these tables through the MDT, so after each insert, upsert and
delete it must read exactly our rows (it would miss a new file of a stale MDT), and the files partition
equals a full listing (``lake metadata-table --check``). The MDT deltacommit is Java's: same requested
time as the data instant, completed before it, its timeline files and log block shaped as those
Hudi wrote beside it. What the policy cannot keep is refused with nothing changed.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest
from hudi import HudiTableBuilder
from mdt_tables import keep_files_partition_only
from metadata_table_support import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import MetadataTableConfigError, TableConfigError
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.log_file.hfile_block import decode_hfile_block, hfile_of_block
from airflow_lake_provider.lake.log_file.log_format import HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.storage import Storage, open_storage
from airflow_lake_provider.lake.table.metadata.files import read_files_partition, read_partition_records
from airflow_lake_provider.lake.table.metadata.listing import check_files_partition, list_table_files
from airflow_lake_provider.lake.table.metadata.stats import (
    log_column_stats,
    parquet_column_stats,
    partition_stats,
    slices_seen_by,
)
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write

MAINTAIN = {"lake.metadata-table.maintain": "true"}
# name -> (record key, ordering field, partition field or None, three new keys)
TABLES = {
    "mor_avro_v9_txns_simple_meta": ("txn_id", "txn_ts", "region", ("new-1", "new-2", "new-3")),
    "cow_v9_txns_simple_meta": ("txn_id", "txn_ts", "region", ("new-1", "new-2", "new-3")),
    "mdt_basic_mor_avro_v8_nonpartitioned": ("id", "longField", None, (1001, 1002, 1003)),
}


def _keys(rows: pa.Table, key: str) -> list[str]:
    return sorted(rows.column(key).to_pylist())


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(row) for row in table.to_pylist())


def hudi_rs(path: Path) -> pa.Table:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches)


def assert_consistent(path: Path, *, referee: bool = True) -> pa.Table:
    """hudi-rs (listing through the MDT) reads our rows; the files partition equals the listing."""
    ours = read_snapshot(LakeTable.open(path))
    if referee:
        assert _rows(hudi_rs(path)) == _rows(ours)
    check = check_files_partition(open_storage(path))
    assert check.consistent, check.to_dict()
    return ours


INDEXES = ("column_stats", "partition_stats")


def _file_stats(storage: Storage, partition: str, file: str) -> dict[str, dict]:
    rel = "" if partition == "." else partition
    if file.endswith(".parquet"):
        return parquet_column_stats(storage, rel, file)
    return log_column_stats(storage, rel, file)


def assert_index_consistent(path: Path, *, partitions: bool = True) -> None:
    """The MDT's column_stats and partition_stats (those it has; ``partitions`` false: column_stats
    only) equal a recomputation: every file of a completed instant in storage has its column stats;
    every partition its stats over its latest slices as its last write saw them."""
    storage = open_storage(path)
    table = LakeTable.open(path)
    kept = set(table.config.properties["hoodie.table.metadata.partitions"].split(","))
    if "column_stats" in kept:
        by_file: dict[str, dict[str, dict]] = {}
        for key, record in read_partition_records(storage, "column_stats").items():
            by_file.setdefault(record["ColumnStatsMetadata"]["fileName"], {})[key] = record[
                "ColumnStatsMetadata"
            ]
        for partition, files in list_table_files(storage).items():
            for file in files:
                assert by_file.get(file) == _file_stats(storage, partition, file), file
    if "partition_stats" in kept and partitions:
        theirs = {
            k: r["ColumnStatsMetadata"]
            for k, r in read_partition_records(storage, "partition_stats").items()
            if not r["ColumnStatsMetadata"]["isDeleted"]  # (a partition a rollback emptied)
        }
        timeline = table.timeline()
        view = FileSystemView.build(table.config, timeline)
        last_write = {
            p: i.timestamp for i in timeline.completed_commits for p in timeline.commit_metadata(i).partitions
        }
        ours: dict[str, dict] = {}
        for partition in list_table_files(storage):
            rel = "" if partition == "." else partition
            files = [
                stats
                for piece in slices_seen_by(view, rel, last_write.get(rel))
                for file in piece.files
                for stats in _file_stats(storage, partition, file.file_name).values()
            ]
            ours.update(partition_stats(partition, files))
        assert ours == theirs


def files_only(hudi_table_zip, name: str) -> Path:
    return keep_files_partition_only(hudi_table_zip(name))


def _batch(snapshot: pa.Table, key: str, ordering: str, take: list[int], keys: list[str]) -> pa.Table:
    data = snapshot.drop_columns([c for c in snapshot.column_names if c.startswith("_hoodie_")])
    batch = data.take(take)
    batch = batch.set_column(batch.column_names.index(key), key, pa.array(keys, batch.schema.field(key).type))
    bumped = pa.array([v + 1 for v in batch.column(ordering).to_pylist()], batch.schema.field(ordering).type)
    return batch.set_column(batch.column_names.index(ordering), ordering, bumped)


@pytest.mark.parametrize("also", [(), INDEXES], ids=["files", "files+stats"])
@pytest.mark.parametrize("name", sorted(TABLES))
def test_insert_upsert_delete_keep_the_metadata_table(
    hudi_table_zip, name: str, also: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    key, ordering, partition, (new1, new2, new3) = TABLES[name]
    path = keep_files_partition_only(hudi_table_zip(name), also)
    before = assert_consistent(path)
    table = LakeTable.open(path)
    old = _keys(before, key)
    # Insert: new keys (in a new partition too, where the table has partitions).
    batch = _batch(before, key, ordering, [0, 1], [new1, new2])
    if partition is not None:
        batch = batch.set_column(
            batch.column_names.index(partition),
            partition,
            pa.array(["mars", "eu"], batch.schema.field(partition).type),
        )
    inserted = write(table, batch, "insert", options=MAINTAIN)
    after = assert_consistent(path)
    assert _keys(after, key) == sorted([*old, new1, new2])
    if partition is not None:
        assert "region=mars" in read_files_partition(open_storage(path)).partitions
    # Upsert: an old key and a new one.
    row_of_old = after.column(key).to_pylist().index(old[0])  # (keys are indexed per partition)
    upsert = _batch(after, key, ordering, [row_of_old, row_of_old], [old[0], new3])
    upserted = write(table, upsert, "upsert", options=MAINTAIN)
    after = assert_consistent(path)
    assert _keys(after, key) == sorted([*old, new1, new2, new3])
    # Delete: an old key and one of ours.
    gone = after.filter(pa.compute.is_in(after.column(key), pa.array([old[1], new1])))
    deleted = write(
        table,
        gone.drop_columns([c for c in gone.column_names if c.startswith("_hoodie_")]),
        "delete",
        options=MAINTAIN,
    )
    # hudi-rs 0.5 cannot decode a delete block whose ordering value is a long past 32 bits (txn_ts,
    # epoch ms: "varint overflow", docs/compatibility.md), MDT or not: our check stands alone there.
    after = assert_consistent(path, referee=name != "mor_avro_v9_txns_simple_meta")
    assert _keys(after, key) == sorted({*old, new2, new3} - {old[1]})
    # Each write's MDT log is in the listing hudi-rs merged (not a fallback to storage listing).
    assert_index_consistent(path)
    listing = read_files_partition(open_storage(path))
    # (Or in the base file of the MDT compaction a write ran after it, when the MDT had 10 deltacommits.)
    results = [inserted, upserted, deleted]
    compacted = [(i, r.metadata_compaction) for i, r in enumerate(results) if r.metadata_compaction]
    since = compacted[-1][0] + 1 if compacted else 0
    if compacted:
        assert listing.base_file is not None and listing.base_file.endswith(f"_{compacted[-1][1]}.hfile")
    logs = [f".hoodie/metadata/files/.files-0000-0_{r.instant}.log.1_0-0-0" for r in results[since:]]
    assert [log for log in logs if log in listing.log_files] == logs
    # The automatic archival after each write runs quietly (stopping at the MDT's last compaction).
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def _avro(path: Path) -> dict:
    return next(iter(fastavro.reader(io.BytesIO(path.read_bytes()))))


def test_the_mdt_deltacommit_is_shaped_as_the_java_writers(hudi_table_zip) -> None:
    path = files_only(hudi_table_zip, "mor_avro_v9_txns_simple_meta")
    mdt_timeline = path / ".hoodie/metadata/.hoodie/timeline"
    spark = "20260307162607806"  # an upsert writing one log file in one partition, as ours below
    (spark_done,) = mdt_timeline.glob(f"{spark}_*.deltacommit")
    (spark_log,) = (path / ".hoodie/metadata/files").glob(f".files-0000-0_{spark}.log.*")
    table = LakeTable.open(path)
    before = read_snapshot(table)
    eu = before.filter(pa.compute.equal(before.column("region"), "eu"))
    result = write(
        table,
        _batch(eu, "txn_id", "txn_ts", [0], [eu.column("txn_id")[0].as_py()]),
        "upsert",
        options=MAINTAIN,
    )
    t = result.instant
    # Same requested time as the data instant, completed before it; requested empty as Java's.
    (data_done,) = (path / ".hoodie/timeline").glob(f"{t}_*.deltacommit")
    (ours_done,) = mdt_timeline.glob(f"{t}_*.deltacommit")
    assert ours_done.name.split("_")[1] < data_done.name.split("_")[1]
    assert (mdt_timeline / f"{t}.deltacommit.requested").read_bytes() == b""
    assert _avro(mdt_timeline / f"{t}.deltacommit.inflight") == _avro(
        mdt_timeline / f"{spark}.deltacommit.inflight"
    )
    ours, theirs = _avro(ours_done), _avro(spark_done)
    assert ours["extraMetadata"] == theirs["extraMetadata"]  # the record schema without meta fields
    assert (ours["operationType"], ours["compacted"]) == (theirs["operationType"], theirs["compacted"])
    assert list(ours["partitionToWriteStats"]) == ["files"]
    (stat,) = ours["partitionToWriteStats"]["files"]
    (java,) = theirs["partitionToWriteStats"]["files"]
    log = path / ".hoodie/metadata/files" / f".files-0000-0_{t}.log.1_0-0-0"
    size = log.stat().st_size
    assert set(stat) == set(java)
    assert {k: stat[k] for k in stat if k != "runtimeStats"} == {
        **{k: java[k] for k in java if k != "runtimeStats"},
        "path": f"files/{log.name}",
        "prevCommit": t,
        "totalWriteBytes": size,
        "fileSizeInBytes": size,
        "logFiles": [log.name],
    }
    # One HFILE_DATA block: Java's headers, schema and HFile dialect; the records of the change.
    (block,) = parse_log_bytes(log.read_bytes(), str(log))
    (java_block,) = parse_log_bytes(spark_log.read_bytes(), str(spark_log))
    assert list(block.header) == list(java_block.header)
    assert block.header[HeaderKey.SCHEMA] == java_block.header[HeaderKey.SCHEMA]
    assert block.header[HeaderKey.INSTANT_TIME] == t
    assert hfile_of_block(block).dialect is hfile_of_block(java_block).dialect
    records = dict(decode_hfile_block(block))
    (written,) = [f.rsplit("/", 1)[-1] for f in result.files]
    size = (path / "region=eu" / written).stat().st_size
    assert records["region=eu"]["filesystemMetadata"] == {written: {"size": size, "isDeleted": False}}
    assert records["__all_partitions__"]["filesystemMetadata"] == {
        "region=eu": {"size": 0, "isDeleted": False}
    }
    assert sorted(records) == ["__all_partitions__", "region=eu"]


def test_the_policy_refuses_what_it_cannot_keep_with_nothing_changed(hudi_table_zip) -> None:
    path = files_only(hudi_table_zip, "mor_avro_v9_txns_simple_meta")
    snapshot = read_snapshot(LakeTable.open(path))
    batch = _batch(snapshot, "txn_id", "txn_ts", [0], ["new-1"])
    props = path / ".hoodie/hoodie.properties"
    kept = props.read_text()
    # A secondary index is not kept: refused before anything is written.
    props.write_text(kept.replace("metadata.partitions=files", "metadata.partitions=files,secondary_index_x"))
    digest = tree_digest(path)
    with pytest.raises(
        TableConfigError,
        match=r"\[files, secondary_index_x\] \(only \[column_stats, files, partition_stats\] are kept",
    ):
        write(LakeTable.open(path), batch, "insert", options=MAINTAIN)
    assert tree_digest(path) == digest
    # column_stats listed, but its folder gone: no file group to write to.
    props.write_text(kept.replace("metadata.partitions=files", "metadata.partitions=column_stats,files"))
    digest = tree_digest(path)
    with pytest.raises(
        TableConfigError, match=r"column_stats: the metadata table partition has no file group"
    ):
        write(LakeTable.open(path), batch, "insert", options=MAINTAIN)
    assert tree_digest(path) == digest
    props.write_text(kept)
    digest = tree_digest(path)
    with pytest.raises(MetadataTableConfigError, match="lake.metadata-table.maintain"):
        write(LakeTable.open(path), batch, "insert", options={"lake.metadata-table.maintain": "maybe"})
    # lake.metadata-table.maintain=false refuses.
    with pytest.raises(
        TableConfigError, match="which this engine does not update under lake.metadata-table.maintain=false"
    ):
        write(LakeTable.open(path), batch, "insert", options={"lake.metadata-table.maintain": "false"})
    assert tree_digest(path) == digest


def test_a_stand_in_mdt_of_a_v6_table_is_refused_before_anything_is_written(hudi_table_zip, capsys) -> None:
    """A folder that is not Hudi's MDT (its properties name no table version) is refused by name
    before any lock file, by default and when asked for, for a service and a write alike."""
    from metadata_table_support import add_metadata_table

    path = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_metadata_table(path)
    digest = tree_digest(path)
    misfit = (
        f"{path}/.hoodie/metadata/.hoodie/hoodie.properties: not the metadata table of this table: table "
        "version (none), not its data table's 6; the action would leave it stale"
    )
    assert main(["clean", str(path)]) == 1
    err = capsys.readouterr().err
    assert "clean refused" in err and "keeps up to date by default, but cannot for this action" in err
    assert misfit in err
    assert tree_digest(path) == digest
    snapshot = read_snapshot(LakeTable.open(path))
    batch = snapshot.drop_columns([c for c in snapshot.column_names if c.startswith("_hoodie_")]).slice(0, 1)
    for options in (None, MAINTAIN):
        with pytest.raises(TableConfigError) as raised:
            write(LakeTable.open(path), batch, "upsert", options=options)
        assert misfit in str(raised.value)
        assert ("and lake.metadata-table.maintain=true cannot keep it" in str(raised.value)) is (
            options is MAINTAIN
        )
    assert tree_digest(path) == digest


def test_lake_write_with_the_opt_in_then_check_finds_no_difference(
    hudi_table_zip, tmp_path: Path, capsys
) -> None:
    import pyarrow.parquet as pq

    path = files_only(hudi_table_zip, "cow_v9_txns_simple_meta")
    snapshot = read_snapshot(LakeTable.open(path))
    pq.write_table(_batch(snapshot, "txn_id", "txn_ts", [0], ["cli-1"]), tmp_path / "in.parquet")
    write_args = ["write", str(path), "--input", str(tmp_path / "in.parquet"), "--operation", "insert"]
    assert main([*write_args, "--option", "lake.metadata-table.maintain=false"]) != 0  # refused
    assert "which this engine does not update" in capsys.readouterr().err
    assert main(write_args) == 0  # kept by default
    capsys.readouterr()
    assert main(["metadata-table", str(path), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["consistent"] is True and report["missing_files"] == []
    assert "cli-1" in _keys(assert_consistent(path), "txn_id")


def test_a_maintained_write_on_s3(hudi_table_zip, s3_endpoint: str, s3_bucket: str) -> None:
    """Every byte through the storage seam: the same write on S3 (moto), hudi-rs listing through
    the MDT, the files partition equal to the bucket's listing."""
    import os

    from s3_helpers import hudi_s3_options, s3_client

    path = keep_files_partition_only(hudi_table_zip("mor_avro_v9_txns_simple_meta"), INDEXES)
    client = s3_client(s3_endpoint)
    for folder, _dirs, files in os.walk(path):
        for name in files:
            full = Path(folder) / name
            client.put_object(Bucket=s3_bucket, Key=f"t/{full.relative_to(path)}", Body=full.read_bytes())
    uri = f"s3://{s3_bucket}/t"
    table = LakeTable.open(uri)
    snapshot = read_snapshot(table)
    result = write(table, _batch(snapshot, "txn_id", "txn_ts", [0], ["s3-1"]), "insert", options=MAINTAIN)
    ours = read_snapshot(LakeTable.open(uri))
    assert "s3-1" in ours.column("txn_id").to_pylist()
    batches = (
        HudiTableBuilder.from_base_uri(uri).with_storage_options(hudi_s3_options(s3_endpoint)).build().read()
    )
    assert _rows(pa.Table.from_batches(batches)) == _rows(ours)
    check = check_files_partition(open_storage(uri))
    assert check.consistent, check.to_dict()
    listing = read_files_partition(open_storage(uri))
    assert f".hoodie/metadata/files/.files-0000-0_{result.instant}.log.1_0-0-0" in listing.log_files
