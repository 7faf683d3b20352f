"""`lake read` loads pyarrow with its allocator's transparent huge pages off (their zeroing was a
fifth of a whole-process read's CPU time) and numpy's OpenBLAS on one thread, without leaving the
settings in the environment, and leaves a user's own settings alone; then the objects loaded so far
are frozen out of the garbage collector's full collections."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[3]
# mimalloc prints its options to stderr when it starts (MIMALLOC_VERBOSE); the probe then prints
# whether the option is still in the environment after the command.
PROBE = """
import ctypes, gc, os, sys
from airflow_lake_provider.lake import cli
code = cli.main(sys.argv[1:])
print("frozen objects:", gc.get_freeze_count())
print("left in environment:", os.environ.get("MIMALLOC_ALLOW_THP"), os.environ.get("OPENBLAS_NUM_THREADS"))
blas = [l.split()[-1] for l in open("/proc/self/maps") if "libscipy_openblas" in l]
if blas:  # numpy's OpenBLAS, as loaded
    print("openblas threads:", ctypes.CDLL(blas[0]).scipy_openblas_get_num_threads64_())
sys.exit(code)
"""


def _read(tmp_path: Path, **env: str) -> tuple[str, str]:
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": ["a", "b"], "ts": pa.array([1, 1], pa.int64())}), "insert")
    out = tmp_path / "out.parquet"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MIMALLOC_", "OPENBLAS_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "read", str(table.base_path), "--output", str(out)],
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": str(REPO_ROOT), "MIMALLOC_VERBOSE": "1", **env},
        check=True,
    )
    assert pq.read_table(out).column("id").to_pylist() == ["a", "b"]
    return done.stdout, done.stderr


@pytest.fixture(autouse=True)
def _mimalloc() -> None:
    if pa.default_memory_pool().backend_name != "mimalloc":
        pytest.skip("Arrow's default allocator here is not mimalloc")


def test_lake_read_loads_arrow_without_huge_pages_and_restores_the_environment(tmp_path: Path) -> None:
    stdout, stderr = _read(tmp_path)
    assert "option 'allow_thp': 0" in stderr
    assert "left in environment: None None" in stdout  # spark-submit and other children inherit nothing


def test_lake_read_moves_the_loaded_modules_out_of_the_garbage_collectors_way(tmp_path: Path) -> None:
    stdout, _ = _read(tmp_path)
    frozen = int(stdout.split("frozen objects:")[1].split()[0])
    assert frozen > 10_000  # pyarrow's and numpy's objects, and the CLI's


def test_lake_read_loads_numpy_with_one_openblas_thread(tmp_path: Path) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("OpenBLAS runs one thread on one core anyway")
    stdout, _ = _read(tmp_path)
    if "openblas threads:" not in stdout:
        pytest.skip("numpy here does not bundle scipy-openblas")
    assert "openblas threads: 1" in stdout


def test_lake_read_keeps_the_users_own_settings(tmp_path: Path) -> None:
    stdout, stderr = _read(tmp_path, MIMALLOC_ALLOW_THP="1", OPENBLAS_NUM_THREADS="2")
    assert "option 'allow_thp': 1" in stderr
    assert "left in environment: 1 2" in stdout
