"""``lake read --output`` streams the snapshot into the parquet file (table/export.py): the file holds
exactly ``read_snapshot``'s rows in its order, row group by row group, with dictionary encoding only
where values repeat, and appears whole or not at all."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.export import export_parquet
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

ROWS = 150_000


def _mor_table(path: Path, rows: int = ROWS) -> LakeTable:
    """Three file groups (base files of 50,000 rows), then logs of updates and deletes in two."""
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    ids = [f"k{i:07d}" for i in range(rows)]
    write(
        table,
        pa.table({"id": ids, "ts": pa.array([1] * rows, pa.int64()), "city": ["x", "y", "z"] * (rows // 3)}),
        "insert",
        max_rows_per_file=rows // 3,
    )
    updated = ids[10 : rows // 2 : 7]
    write(
        table,
        pa.table(
            {"id": updated, "ts": pa.array([2] * len(updated), pa.int64()), "city": ["u"] * len(updated)}
        ),
        "upsert",
    )
    write(
        table,
        pa.table({"id": ids[5:rows:1000], "ts": pa.array([3] * len(ids[5:rows:1000]), pa.int64())}),
        "delete",
    )
    return table


def test_cli_read_output_is_the_snapshot_streamed_in_row_groups(tmp_path: Path) -> None:
    table = _mor_table(tmp_path / "t")
    assert len(table.file_system_view().latest_slices()) == 3
    expected = read_snapshot(table)
    assert expected.num_rows == ROWS - ROWS // 1000

    assert main(["read", str(table.base_path), "--output", str(tmp_path / "out" / "x.parquet")]) == 0

    written = pq.ParquetFile(tmp_path / "out" / "x.parquet")
    assert written.read().equals(expected)  # the same rows in the same order, types and all
    # Written while read, never the whole table at once: slices of about 50,000 rows, gathered up to
    # 65,536 rows per row group.
    sizes = [written.metadata.row_group(i).num_rows for i in range(written.metadata.num_row_groups)]
    assert sum(sizes) == expected.num_rows and len(sizes) > 1
    assert sorted(os.listdir(tmp_path / "out")) == ["x.parquet"]  # no hidden in-progress file left


def test_cli_read_dictionary_encodes_only_repeated_columns(tmp_path: Path) -> None:
    table = _mor_table(tmp_path / "t")
    assert main(["read", str(table.base_path), "--output", str(tmp_path / "x.parquet")]) == 0
    group = pq.ParquetFile(tmp_path / "x.parquet").metadata.row_group(0)
    encodings = {group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)}
    # Unique per row: a dictionary would only be built to be given up (CPU and a larger file).
    for unique in ("_hoodie_record_key", "_hoodie_commit_seqno", "id"):
        assert "RLE_DICTIONARY" not in encodings[unique], unique
    for repeated in ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name", "ts", "city"):
        assert "RLE_DICTIONARY" in encodings[repeated], repeated


@pytest.mark.parametrize("kind", ["mor", "cow"])
def test_export_of_a_table_without_commits_is_an_empty_file(tmp_path: Path, kind: str) -> None:
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type=kind, record_key_fields=("id",), precombine_field="ts"
    )
    folder = open_storage(str(tmp_path))
    assert export_parquet(table, folder, "x.parquet") == 0
    got = pq.read_table(tmp_path / "x.parquet")
    assert got.num_rows == 0 and got.num_columns == 0
    assert sorted(os.listdir(tmp_path)) == ["t", "x.parquet"]


def test_export_failing_mid_stream_leaves_no_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    table = _mor_table(tmp_path / "t")
    slices = table.file_system_view().latest_slices()
    broken = table.base_path / slices[-1].base_file.relative_path  # the last slice: after parts were written
    broken.write_bytes(b"PAR1 not a parquet file PAR1")
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.parquet").write_bytes(b"previous")
    with pytest.raises(CorruptDataFileError, match=slices[-1].base_file.relative_path.split("/")[-1]):
        export_parquet(table, open_storage(str(out)), "x.parquet")
    assert sorted(os.listdir(out)) == ["x.parquet"]
    assert (out / "x.parquet").read_bytes() == b"previous"


def test_export_under_the_longest_file_name_publishes_it_and_leaves_no_hidden_file(tmp_path: Path) -> None:
    """The hidden ``.NAME.lake-inprogress`` of a 255-byte name was 272 bytes: "File name too long"
    (exit 1) on a name the file system takes."""
    table = _mor_table(tmp_path / "t", rows=300)
    name = "é" * 100 + "a" * 47 + ".parquet"  # 255 bytes of UTF-8
    assert len(name.encode()) == 255
    out = tmp_path / "out"
    assert export_parquet(table, open_storage(str(out)), name) == 299  # one of 300 deleted
    assert os.listdir(out) == [name]
    assert pq.read_table(out / name).equals(read_snapshot(table))


def test_runs_to_the_same_output_at_once_each_write_their_own_hidden_file(tmp_path: Path) -> None:
    """Three `lake read`s to one output at the same time: every run used `.NAME.lake-inprogress`,
    so runs wrote into one file and two failed ("... does not exist") once the first had published
    and removed it; a run could publish another's half-written file. Each run now has its own."""
    import threading

    table = _mor_table(tmp_path / "t", rows=300)
    out = tmp_path / "out"
    out.mkdir()
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def run() -> None:
        start.wait()
        try:
            export_parquet(table, open_storage(str(out)), "x.parquet")
        except BaseException as exc:  # noqa: BLE001 (collected for the assertion)
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert os.listdir(out) == ["x.parquet"]
    assert pq.read_table(out / "x.parquet").equals(read_snapshot(table))


def test_a_killed_runs_hidden_file_is_removed_once_stale_and_only_then(tmp_path: Path) -> None:
    table = _mor_table(tmp_path / "t", rows=300)
    out = tmp_path / "out"
    out.mkdir()
    stale, fresh = out / ".x.parquet.0123abcd.lake-inprogress", out / ".x.parquet.89abcdef.lake-inprogress"
    foreign = out / ".x.parquet.notours.lake-inprogress"
    for leftover in (stale, fresh, foreign):
        leftover.write_bytes(b"half a parquet file")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    os.utime(foreign, (two_hours_ago, two_hours_ago))
    export_parquet(table, open_storage(str(out)), "x.parquet")
    assert sorted(os.listdir(out)) == sorted(["x.parquet", fresh.name, foreign.name])
