"""Reads of Hudi 1.x tables (table versions 8 and 9, ``tests/data/hudi-tables-1x``) equal hudi-rs's:
the snapshot and a read as of every completed commit of the active timeline, through ``LakeTable``
and through ``lake read``.

hudi-rs lists v8/v9 tables through the metadata table's ``files`` partition where there is one; we
list storage: on these tables both listings agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import ConfigError, TableConfigError, UnsupportedLogBlockError
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, encode_block, parse_log_bytes
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from tests.conftest import HUDI_TABLES_1X
from tests.tree_digest import tree_digest

ZIPS = sorted(p.stem for p in HUDI_TABLES_1X.glob("*.zip"))
# Lance base files (table version 9): hudi-rs reads them, we refuse the table by name.
LANCE = {name for name in ZIPS if "_lance_" in name}
# hudi-rs gives a TIMESTAMP key generator's partition field as a string column (its partition
# schema); the table schema and the base files hold a long, which we keep. Compared as strings.
STRING_IN_HUDI_RS = {
    "cow_v9_timebasedkeygen_epochmillis": "ts_millis",
    "cow_v9_timebasedkeygen_unixtimestamp": "ts_epoch",
}


def test_all_29_tables_are_here() -> None:
    assert len(ZIPS) == 29
    assert len(LANCE) == 4


def _hudi_rs(path: Path, as_of: str | None) -> pa.Table:
    table = HudiTableBuilder.from_base_uri(str(path)).build()
    batches = table.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else table.read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _rows(table: pa.Table, key_fields: tuple[str, ...], stringify: str | None) -> list[tuple]:
    if stringify and stringify in table.column_names:
        at = table.column_names.index(stringify)
        table = table.set_column(at, stringify, table.column(stringify).cast(pa.string()))
    keys = ("_hoodie_partition_path", "_hoodie_record_key")
    keys = keys if keys[1] in table.column_names else key_fields
    rows = table.to_pylist()
    # By record key, then the whole row (a table may hold one key twice, e.g. in two file groups).
    return sorted((tuple(str(r[k]) for k in keys), repr(r)) for r in rows)


def _assert_same(ours: pa.Table, theirs: pa.Table, name: str, table: LakeTable, as_of: str | None) -> None:
    stringify = STRING_IN_HUDI_RS.get(name)
    assert ours.num_rows == theirs.num_rows, (name, as_of)
    if theirs.num_rows == 0:
        return
    assert ours.column_names == theirs.column_names, (name, as_of)
    for field in theirs.schema:
        if field.name != stringify:
            assert ours.schema.field(field.name).type == field.type, (name, field.name)
    keys = table.config.record_key_fields
    assert _rows(ours, keys, stringify) == _rows(theirs, keys, stringify), (name, as_of)


@pytest.mark.parametrize("name", ZIPS)
def test_read_1x_table_equals_hudi_rs(name: str, hudi_table_zip: Callable[[str], Path]) -> None:
    path = hudi_table_zip(name)
    if name in LANCE:
        with pytest.raises(TableConfigError, match=r"base\.file\.format=LANCE is not supported"):
            LakeTable.open(path)
        assert _hudi_rs(path, None).num_rows > 0  # hudi-rs reads them: this is our limit, not the table's
        return
    table = LakeTable.open(path)
    assert table.config.table_version in (8, 9)
    timeline = table.timeline()
    for as_of in [None, *(i.timestamp for i in timeline.completed_commits)]:
        _assert_same(read_snapshot(table, as_of), _hudi_rs(path, as_of), name, table, as_of)


@pytest.mark.parametrize("name", sorted(set(ZIPS) - LANCE))
def test_lake_read_cli_1x_table_equals_hudi_rs(
    name: str, hudi_table_zip: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    commits = table.timeline().completed_commits
    for as_of in [None, commits[0].timestamp] if commits else [None]:
        out = tmp_path / f"out-{as_of}.parquet"
        argv = ["read", str(path), "--output", str(out)] + (["--as-of", as_of] if as_of else [])
        assert main(argv) == 0, capsys.readouterr().err
        _assert_same(pq.read_table(out), _hudi_rs(path, as_of), name, table, as_of)


def test_partial_update_log_block_refused_naming_the_log_file(hudi_table_zip: Callable[[str], Path]) -> None:
    """A block with header IS_PARTIAL=true holds some columns only: refused by name, never read as
    whole records (the others would come out null)."""
    path = hudi_table_zip("mor_avro_v9_txns_simple_nometa")
    log = path / "region=us" / ".db2fca8f-03b7-4da7-b042-4b617ab79b9d-0_20260307135830801.log.1_0-10-23"
    blocks = parse_log_bytes(log.read_bytes(), str(log))
    assert [b.block_type for b in blocks] == [BlockType.AVRO_DATA]
    header = {**blocks[0].header, HeaderKey.IS_PARTIAL: "true"}
    log.write_bytes(encode_block(blocks[0].block_type, header, blocks[0].content))
    table = LakeTable.open(path)
    with pytest.raises(UnsupportedLogBlockError, match=rf"{re.escape(str(log))} offset 0: a partial-update"):
        read_snapshot(table, "20260307135832616")
    # The read that no longer reaches that slice is unaffected (the group was replaced since).
    assert read_snapshot(table).num_rows == 12


def test_as_of_before_the_active_timeline_with_an_unpublished_history_file_reads_nothing(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """A parquet file no manifest names (a crashed archival's) is not part of the history: the
    instants before the active timeline are none, as in a table whose history is empty."""
    path = hudi_table_zip("cow_v9_txns_simple_nometa")
    table = LakeTable.open(path)
    first = table.timeline().instants[0].timestamp
    history = path / ".hoodie" / "timeline" / "history"
    assert read_snapshot(table, "20200101000000000").num_rows == 0  # an empty history: nothing archived
    (history / "20200101000000000_20200102000000000_0.parquet").write_bytes(b"PAR1")
    before = tree_digest(path)
    assert read_snapshot(table, "20200101000000000").num_rows == 0
    assert read_snapshot(table, first).num_rows > 0  # the active timeline still reads
    assert tree_digest(path) == before


@pytest.mark.parametrize("given", ["region=eu", "region=eu/", "/region=eu", "./region=eu"])
def test_a_partition_given_with_slashes_reads_what_hudi_rs_reads_of_it(
    given: str, hudi_table_zip: Callable[[str], Path]
) -> None:
    """Before, ``region=eu/`` listed the partition under another key than the replacecommit's
    replaced file groups: 9 rows (stale copies of TXN-011 and TXN-012 among them) instead of 3."""
    name = "mor_avro_v9_txns_simple_meta"
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    theirs = _hudi_rs(path, None).filter(pa.compute.equal(pa.compute.field("region"), "eu"))
    ours = read_snapshot(table, partitions=[given])
    assert sorted(ours.column("_hoodie_record_key").to_pylist()) == ["TXN-011", "TXN-012", "TXN-018"]
    _assert_same(ours, theirs, name, table, None)


def test_partitions_given_as_one_string_are_refused_by_name(hudi_table_zip: Callable[[str], Path]) -> None:
    """Before, ``partitions="region=eu"`` was read as the partitions "r", "e", "g"...: 0 rows, no error."""
    table = LakeTable.open(hudi_table_zip("mor_avro_v9_txns_simple_meta"))
    with pytest.raises(
        ConfigError, match="partitions must be a list of partition paths, not the string 'region=eu'"
    ):
        read_snapshot(table, partitions="region=eu")
