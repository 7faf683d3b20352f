"""A damaged metadata table (MDT) of a version 6 table, with ``lake.metadata-table.maintain=true``:
the ``lake`` CLI refuses with one ``lake: error:`` line naming the damaged path (no traceback) and
changes nothing."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mdt_v6_tables import add_v6_metadata_table
from metadata_table_support import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable

MAINTAIN = ["--option", "lake.metadata-table.maintain=true"]
MDT = Path(".hoodie/metadata")


def _refused(table: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """A maintained upsert of one row of ``table``: refused, nothing changed; its stderr lines."""
    rows = read_snapshot(LakeTable.open(table))
    data = table.parent / "in.parquet"
    meta = [c for c in rows.column_names if c.startswith("_hoodie_")]
    pq.write_table(rows.drop_columns(meta).slice(0, 1), data)
    digest = tree_digest(table)
    capsys.readouterr()
    assert main(["write", str(table), "--input", str(data), "--operation", "upsert", *MAINTAIN]) == 1
    assert tree_digest(table) == digest
    return capsys.readouterr().err.splitlines()


def test_an_mdt_properties_file_that_is_not_text_is_named(hudi_table_zip, capsys) -> None:
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(table)
    props = table / MDT / ".hoodie/hoodie.properties"
    props.write_bytes(b"\x00\xffhoodie.table.version=6\n")
    assert _refused(table, capsys) == [f"lake: error: {props}: cannot read (not UTF-8 text)"]
    assert main(["metadata-table", str(table), "--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"lake: error: {props}: cannot read (not UTF-8 text)"]


def test_an_mdt_whose_initialisation_did_not_complete_is_refused_before_the_write(
    hudi_table_zip, capsys
) -> None:
    """A writer that died after writing the initialisation's HFile, before completing its
    deltacommit: the HFile is no file group of the MDT's yet (Java initialises it again)."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    (table / MDT / f".hoodie/{init}.deltacommit").unlink()
    assert _refused(table, capsys) == [
        f"lake: error: {table / MDT / 'files'}: no files-0000-0 base file of a completed instant to take "
        f"the record schema from (files-0000-0_0-0-0_{init}.hfile: its instant {init} is pending)"
    ]


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_an_unreadable_mdt_base_file_is_named(hudi_table_zip, capsys, damage: str) -> None:
    """The only ``files`` base file cut short: the one error line names it and what is wrong (no
    warning before it about skipping it)."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    base = table / MDT / f"files/files-0000-0_0-0-0_{init}.hfile"
    size = base.stat().st_size // 2 if damage == "truncated" else 0
    base.write_bytes(base.read_bytes()[:size])
    assert _refused(table, capsys) == [
        f"lake: error: {table / MDT / 'files'}: no files-0000-0 base file of a completed instant to take "
        f"the record schema from ({base}: {size} bytes, shorter than an HFile v3 trailer)"
    ]
