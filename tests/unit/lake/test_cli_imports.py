"""The ``lake`` CLI loads only what the command it runs uses (issue 31: its start-up is a share of
every whole-process read): the parser alone loads neither pyarrow nor the table core, and
``lake read`` loads no service (clean, compaction, partition commit, ...) and not the writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[3]
# Third-party modules a `lake read` need not load: each costs 5-25 ms of every fresh process.
NOT_FOR_READ = {"fastavro", "secrets", "numpy.ma", "pyarrow.dataset", "pyarrow.acero"}
POLARS_LOADS = {"secrets", "numpy.ma"}
PROBE = f"""
import sys
WATCHED = {sorted(NOT_FOR_READ | {"pyarrow"})!r}
from airflow_lake_provider.lake import cli
code = cli.main(sys.argv[1:]) if len(sys.argv) > 1 else 0
loaded = sorted(m for m in sys.modules if m in WATCHED or m.startswith("airflow_lake_provider.lake."))
print(code, " ".join(loaded))
"""


def _loaded(*argv: str) -> tuple[int, set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        check=True,
    )
    code, _, names = out.stdout.strip().splitlines()[-1].partition(" ")  # after the command's output
    return int(code), set(names.split())


HEAVY = {
    "table.table",
    "table.reader",
    "table.write.writer",
    "table.archival.executor",
    "services.clean.executor",
    "services.compaction.executor",
    "services.partition_commit.executor",
    "services.restore",
    "services.savepoint",
    "services.rollback",
}


def _heavy(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m.removeprefix("airflow_lake_provider.lake.") in HEAVY}


def test_importing_the_cli_loads_no_pyarrow_and_no_command() -> None:
    # Option names and choices only: the commands' own modules are loaded when they run.
    _, loaded = _loaded()
    assert "pyarrow" not in loaded
    assert _heavy(loaded) == set()


def test_lake_read_loads_no_service_and_not_the_writer(tmp_path: Path) -> None:
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": ["a", "b"], "ts": pa.array([1, 1], pa.int64())}), "insert")
    code, loaded = _loaded("read", str(table.base_path), "--output", str(tmp_path / "out.parquet"))
    assert code == 0
    prefix = "airflow_lake_provider.lake."
    assert _heavy(loaded) == {prefix + "table.table", prefix + "table.reader"}
    assert {m for m in loaded if m.startswith(prefix + "services")} == set()  # not even their options
    assert loaded & NOT_FOR_READ == set()


def test_lake_read_of_a_merged_slice_loads_only_what_it_uses(tmp_path: Path) -> None:
    # A log of updates to merge (an Avro data block): the merge and the Avro decode load no
    # fallback decoder, no query engine, no masked arrays; the output file's name needs no secrets.
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, pa.table({"id": ["a", "b"], "ts": pa.array([1, 1], pa.int64())}), "insert")
    write(table, pa.table({"id": ["b"], "ts": pa.array([2], pa.int64())}), "upsert")
    assert any(p.name.startswith(".") and ".log." in p.name for p in table.base_path.iterdir())
    code, loaded = _loaded("read", str(table.base_path), "--output", str(tmp_path / "out.parquet"))
    assert code == 0
    assert pq.read_table(tmp_path / "out.parquet").column("ts").to_pylist() == [1, 2]
    assert "pyarrow" in loaded
    # The polars package (the Avro decode) loads secrets and numpy.ma itself; the rest stays out.
    assert loaded & (NOT_FOR_READ - POLARS_LOADS) == set()
