"""Decoding an Avro data block with polars does not keep its garbage: unless the process loaded
polars already or chose a setting, polars' allocator (jemalloc) returns freed memory at once (it kept
about twice the decoded block for the rest of a read: 610 MB peak for a 400,000-update slice, 503 MB
after; benchmarks/read_slice.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[4]
PROBE = """
import os, sys
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
assert "polars" not in sys.modules
rows = read_snapshot(LakeTable.open(sys.argv[1])).num_rows
print(rows, "polars" in sys.modules, os.environ.get("_RJEM_MALLOC_CONF"))
"""


def _probe(path: Path, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**clean, "PYTHONPATH": str(REPO_ROOT), **env},
    )
    return out.stdout.strip().splitlines()[-1]


def test_polars_returns_freed_memory_unless_told_otherwise(tmp_path: Path) -> None:
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": ["a", "b"], "ts": pa.array([1, 1], pa.int64())}), "insert")
    write(table, pa.table({"id": ["a"], "ts": pa.array([2], pa.int64())}), "upsert")  # an Avro log block
    # polars puts its own defaults first and the process's setting after them (the last one counts).
    rows, loaded, conf = _probe(table.base_path).split()
    assert (rows, loaded) == ("2", "True") and conf.endswith(",dirty_decay_ms:0,muzzy_decay_ms:0")
    rows, loaded, conf = _probe(table.base_path, _RJEM_MALLOC_CONF="narenas:1").split()
    assert (rows, loaded) == ("2", "True") and conf.endswith(",narenas:1") and "decay_ms:0" not in conf
