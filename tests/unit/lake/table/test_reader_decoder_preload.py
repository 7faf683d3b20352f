"""A read of a slice with a large log starts loading the Avro decoder (polars, 0.15 s of CPU) while
the log file is read, on a thread of its own, instead of after the read (issue 31: the import was on
the critical path of every fresh ``lake read`` of a merged slice); a small log (perhaps only
deletes) loads it only when a data block is decoded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from airflow_lake_provider.lake.table.reader import PRELOAD_DECODER_LOG_BYTES
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[4]
# Records the thread that first looks polars up; finds nothing itself (the normal finders do).
PROBE = """
import sys, threading
class Watch:
    thread = None
    def find_spec(self, name, path=None, target=None):
        if name == "polars" and Watch.thread is None:
            Watch.thread = threading.current_thread().name
        return None
sys.meta_path.insert(0, Watch())
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
rows = read_snapshot(LakeTable.open(sys.argv[1]))
print(rows.num_rows, sorted(set(rows.column("v").to_pylist()))[-1], Watch.thread)
"""


def _table(path: Path, updates: int) -> LakeTable:
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    ids = [f"k{i:06d}" for i in range(updates)]
    write(
        table,
        pa.table({"id": ids, "ts": pa.array([1] * updates, pa.int64()), "v": ["a"] * updates}),
        "insert",
    )
    wide = "x" * 100
    write(
        table,
        pa.table({"id": ids, "ts": pa.array([2] * updates, pa.int64()), "v": [wide] * updates}),
        "upsert",
    )
    return table


def _probe(table: LakeTable) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(table.base_path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    return out.stdout.strip().splitlines()[-1].split()


def _log_bytes(table: LakeTable) -> int:
    return sum(p.stat().st_size for p in table.base_path.iterdir() if ".log." in p.name)


def test_a_large_log_starts_loading_polars_on_its_own_thread(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 10_000)
    assert _log_bytes(table) >= PRELOAD_DECODER_LOG_BYTES
    assert _probe(table) == ["10000", "x" * 100, "polars-import"]


def test_a_small_log_loads_polars_where_a_data_block_is_decoded(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 2)
    assert _log_bytes(table) < PRELOAD_DECODER_LOG_BYTES
    rows, value, thread = _probe(table)
    assert (rows, value) == ("2", "x" * 100) and thread != "polars-import"
