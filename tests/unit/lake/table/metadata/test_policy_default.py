"""Maintain is the default policy: with ``lake.metadata-table.maintain`` unset, every action that can
keep a table's metadata table (MDT) keeps it; one that cannot refuses, naming why and the ways out;
``lake.metadata-table.maintain=false`` refuses as before.

Through the ``lake`` command, on copies of Spark-written v8/v9 tables: hudi-rs lists them through
the MDT, so it reads our rows after each action only if the MDT is current, and ``lake
metadata-table --check`` finds the files partition equal to a listing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mdt_tables import keep_files_partition_only
from metadata_table_support import add_metadata_table, tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome as CleanOutcome
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from tests.unit.lake.table.metadata.test_commit import INDEXES, _batch, assert_consistent, hudi_rs
from tests.unit.lake.table.metadata.test_services import _data_completion, _mdt_completion, _rows

ONE_VERSION = ["--option", "hoodie.cleaner.policy=KEEP_LATEST_FILE_VERSIONS"]
ONE_VERSION += ["--option", "hoodie.cleaner.fileversions.retained=1"]
JVM = (
    "To drop the metadata table as Hudi does, run with option hoodie.metadata.enable=false (--option, "
    "operator options or the lake connection's extra) or run 'lake metadata-table {path} --drop'; "
    "Spark/Flink writers of this table must run with hoodie.metadata.enable=false too, or their next "
    "commit rebuilds the metadata table from a full listing"
)


def _partitions(path: Path) -> str:
    """The MDT partitions as the refusals name them."""
    return LakeTable.open(path).config.properties["hoodie.table.metadata.partitions"].replace(",", ", ")


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata-table", str(path), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["consistent"] is True and report["missing_files"] == report["extra_files"] == []


def test_write_compaction_and_clean_keep_the_metadata_table_by_default(
    hudi_table_zip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A v9 merge-on-read table whose MDT holds files, column_stats and partition_stats: an upsert,
    a compaction and a clean with no metadata-table option each add their MDT deltacommit
    (completed before their own instant); hudi-rs reads our rows after each."""
    path = keep_files_partition_only(hudi_table_zip("mor_avro_v9_txns_simple_meta"), INDEXES)
    snapshot = read_snapshot(LakeTable.open(path))
    key = sorted(snapshot.column("txn_id").to_pylist())[0]
    at = snapshot.column("txn_id").to_pylist().index(key)
    batch = _batch(snapshot, "txn_id", "txn_ts", [at], [key])
    pq.write_table(batch, tmp_path / "in.parquet")
    mdt = path / ".hoodie/metadata/.hoodie/timeline"

    assert main(["write", str(path), "--input", str(tmp_path / "in.parquet"), "--operation", "upsert"]) == 0
    w = capsys.readouterr().out.strip()
    assert _mdt_completion(path, w) < _data_completion(path, w, "deltacommit")
    after = assert_consistent(path)
    (row,) = [r for r in after.to_pylist() if r["txn_id"] == key]
    assert row["txn_ts"] == batch.column("txn_ts")[0].as_py()
    assert after.num_rows == snapshot.num_rows
    rows = _rows(hudi_rs(path))

    assert main(["compact", str(path), "--mode", "run", "--force"]) == 0
    compacted = json.loads(capsys.readouterr().out)
    assert compacted["outcome"] == "COMPLETED", compacted
    c = compacted["execute"]["instant"]
    assert _mdt_completion(path, c) < _data_completion(path, c, "commit")
    assert _rows(hudi_rs(path)) == rows
    assert _rows(assert_consistent(path)) == rows

    assert main(["clean", str(path), *ONE_VERSION]) == 0
    cleaned = json.loads(capsys.readouterr().out)
    assert cleaned["outcome"] == "CLEANED" and cleaned["deleted_files"] > 0, cleaned
    t = cleaned["instant"]
    assert len(list(mdt.glob(f"{t}_*.deltacommit"))) == 1
    assert _mdt_completion(path, t) < _data_completion(path, t, "clean")
    assert _rows(hudi_rs(path)) == rows
    assert _rows(assert_consistent(path)) == rows
    _check(path, capsys)


def test_a_record_index_is_kept_by_compaction_and_clean_and_a_write_refuses_naming_it(
    hudi_table_zip, capsys: pytest.CaptureFixture[str]
) -> None:
    """A v8 table whose MDT has a record index and a secondary index: compaction and clean (which
    move no key) keep it by default; a forced rollback (which would move keys) refuses naming the
    index, and so does a write, nothing changed."""
    path = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    rows = _rows(hudi_rs(path))
    props = _partitions(path)
    assert "record_index" in props

    scheduled, done = run_compaction(LakeTable.open(path), {}, force=True)
    assert done.outcome is Outcome.COMPLETED and scheduled.plan is not None
    assert _mdt_completion(path, done.instant) < _data_completion(path, done.instant, "commit")
    assert _rows(hudi_rs(path)) == rows
    cleaned = run_clean(
        LakeTable.open(path),
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
    )
    assert cleaned.outcome is CleanOutcome.CLEANED and cleaned.deleted_files > 0
    assert _mdt_completion(path, cleaned.instant) < _data_completion(path, cleaned.instant, "clean")
    assert _rows(hudi_rs(path)) == rows
    assert _rows(assert_consistent(path)) == rows
    _check(path, capsys)

    digest = tree_digest(path)
    assert main(["rollback", str(path), "--instant", done.instant, "--force"]) == 1
    assert _error(capsys) == (
        f"lake: error: rollback refused: {path} has Hudi's metadata table (partitions [{props}], folder "
        ".hoodie/metadata/), which this engine keeps up to date by default, but cannot for this action: "
        f"partitions [{props}] (only [column_stats, files, partition_stats] are kept so "
        "far; record_index and secondary_index_* only by the actions that move no key (compaction, clean, "
        "archival)); the action would leave it stale for Hudi's Java/Flink writers and services. Nothing "
        f"was changed. {JVM.format(path=path)}"
    )
    snapshot = read_snapshot(LakeTable.open(path))
    batch = snapshot.drop_columns([c for c in snapshot.column_names if c.startswith("_hoodie_")]).slice(0, 1)
    with pytest.raises(TableConfigError, match=r"keeps a record index \(hoodie.table.metadata.partitions"):
        write(LakeTable.open(path), batch, "upsert")
    assert tree_digest(path) == digest


@pytest.mark.parametrize("partitions", ["files,column_stats", "column_stats", ""])
def test_a_v6_table_with_an_mdt_the_default_cannot_keep_refuses_naming_why(
    hudi_table_zip, capsys: pytest.CaptureFixture[str], partitions: str
) -> None:
    """Version 6 is kept by default, its ``files`` partition only (as Hudi 0.14/0.15 writers keep
    it): another partition, or none, is refused by name, under false too (saying the default would
    refuse)."""
    path = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_metadata_table(path, partitions=partitions)
    listed = partitions.replace(",", ", ")
    digest = tree_digest(path)
    assert main(["clean", str(path)]) == 1
    assert _error(capsys) == (
        f"lake: error: clean refused: {path} has Hudi's metadata table (partitions [{listed}], "
        "folder .hoodie/metadata/), which this engine keeps up to date by default, but cannot for this "
        f"action: partitions [{listed}] (only [files] on table version 6); the action would leave "
        f"it stale for Hudi's Java/Flink writers and services. Nothing was changed. {JVM.format(path=path)}"
    )
    assert tree_digest(path) == digest
    assert main(["clean", str(path), "--option", "lake.metadata-table.maintain=false"]) == 1
    assert (
        f"Nothing was changed. (Without that option it would refuse too: partitions [{listed}] "
        "(only [files] on table version 6).) To drop the metadata table"
    ) in _error(capsys)
    assert tree_digest(path) == digest


def test_maintain_false_refuses_naming_the_option_and_what_the_default_would_do(
    hudi_table_zip, capsys: pytest.CaptureFixture[str]
) -> None:
    path = keep_files_partition_only(hudi_table_zip("mor_avro_v9_txns_simple_meta"), INDEXES)
    digest = tree_digest(path)
    off = ["--option", "lake.metadata-table.maintain=false"]
    assert main(["compact", str(path), "--mode", "run", "--force", *off]) == 1
    assert _error(capsys) == (
        f"lake: error: compaction schedule refused: {path} has Hudi's metadata table (partitions "
        f"[{_partitions(path)}], folder .hoodie/metadata/), which this engine does not update under "
        "lake.metadata-table.maintain=false; the action would leave it stale for Hudi's Java/Flink "
        "writers and services. Nothing was changed. "
        "Without that option (its default is true) the action keeps the metadata table up to date. "
        f"{JVM.format(path=path)}"
    )
    assert tree_digest(path) == digest
