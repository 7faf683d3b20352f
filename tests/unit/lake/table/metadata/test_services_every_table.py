"""Compaction and clean with the metadata table (MDT) kept, under the default policy, on every table of
``tests/data/hudi-tables-1x`` that has one (``MDT_TABLES``: the Spark-written tables the repository keeps),
but the Lance ones, which are refused when opened (this engine reads parquet base files only).

Each table as Spark left it (its record index and secondary indexes included: compaction and clean
move no key): a forced compaction where it is merge-on-read (``COMPACTED``: one completed, where a
latest slice has logs), then a clean keeping one file version (as much as can go goes). hudi-rs lists these
tables through the MDT, so it reads the rows it read before only if each action kept the MDT: before
== after == ours, and ``lake metadata-table --check`` finds the files partition equal to a listing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mdt_tables import MDT_TABLES
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome as CleanOutcome
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from tests.unit.lake.table.metadata.test_commit import hudi_rs
from tests.unit.lake.table.metadata.test_services import _data_completion, _mdt_completion, _rows

RETAIN_ONE = {
    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
    "hoodie.cleaner.fileversions.retained": "1",
}
# Lance base files: every action (a read too) is refused when the table is opened, before its MDT
# is looked at: this engine reads and writes parquet base files only.
LANCE = {n for n in MDT_TABLES if "_lance_" in n}
# name -> (compaction outcome (merge-on-read only), clean outcome). No compaction where Spark's own
# compactions left no log in a latest slice; nothing to clean in the rollback table (one slice per
# file group).
OUTCOMES = {
    "cow_v9_timebasedkeygen_epochmillis": (None, "CLEANED"),
    "cow_v9_timebasedkeygen_nonhivestyle": (None, "CLEANED"),
    "cow_v9_timebasedkeygen_unixtimestamp": (None, "CLEANED"),
    "cow_v9_txns_complex_meta": (None, "CLEANED"),
    "cow_v9_txns_nonpart_meta": (None, "CLEANED"),
    "cow_v9_txns_simple_meta": (None, "CLEANED"),
    "cow_v9_txns_simple_overwrite": (None, "CLEANED"),
    "mdt_basic_mor_avro_v8_nonpartitioned": ("COMPLETED", "CLEANED"),
    "mor_avro_v9_nonpartitioned_rollback": ("NO_WORK", "NO_WORK"),
    "mor_avro_v9_timebasedkeygen_nonhivestyle": ("COMPLETED", "CLEANED"),
    "mor_avro_v9_txns_complex_meta": ("NO_WORK", "CLEANED"),
    "mor_avro_v9_txns_nonpart_meta": ("NO_WORK", "CLEANED"),
    "mor_avro_v9_txns_simple_meta": ("NO_WORK", "CLEANED"),
    "mor_avro_v9_txns_simple_overwrite": ("NO_WORK", "CLEANED"),
}


def test_every_table_with_a_metadata_table_is_covered() -> None:
    assert sorted(LANCE | set(OUTCOMES)) == sorted(MDT_TABLES)


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_compaction_and_clean_keep_every_spark_written_metadata_table(
    hudi_table_zip, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path: Path = hudi_table_zip(name)
    before = _rows(hudi_rs(path))
    assert _rows(read_snapshot(LakeTable.open(path))) == before
    compaction, clean = OUTCOMES[name]
    table = LakeTable.open(path)
    assert table.config.is_mor is (compaction is not None)
    if compaction is not None:
        _scheduled, done = run_compaction(table, {}, force=True)
        assert done.outcome.value == compaction
        if done.outcome is Outcome.COMPLETED:
            assert _mdt_completion(path, done.instant) < _data_completion(path, done.instant, "commit")
    cleaned = run_clean(LakeTable.open(path), RETAIN_ONE)
    assert cleaned.outcome.value == clean
    if cleaned.outcome is CleanOutcome.CLEANED:
        assert cleaned.deleted_files > 0
        assert _mdt_completion(path, cleaned.instant) < _data_completion(path, cleaned.instant, "clean")
    assert _rows(hudi_rs(path)) == before
    assert _rows(read_snapshot(LakeTable.open(path))) == before
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True


@pytest.mark.parametrize("name", sorted(LANCE))
def test_a_lance_table_is_refused_before_its_metadata_table_is_looked_at(
    hudi_table_zip, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path: Path = hudi_table_zip(name)
    digest = tree_digest(path)
    assert main(["clean", str(path), "--option", "hoodie.cleaner.commits.retained=1"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"lake: error: {path}/.hoodie/hoodie.properties: hoodie.table.base.file.format=LANCE is not "
        "supported (only PARQUET base files are read)"
    )
    assert tree_digest(path) == digest
