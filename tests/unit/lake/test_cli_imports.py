"""The ``lake`` CLI loads only what the command it runs uses (issue 31: its start-up is a share of
every whole-process read): the parser alone loads neither pyarrow nor the table core, and
``lake read`` loads no service (clean, compaction, partition commit, ...) and not the writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[3]
PROBE = """
import sys
from airflow_lake_provider.lake import cli
code = cli.main(sys.argv[1:]) if len(sys.argv) > 1 else 0
loaded = sorted(m for m in sys.modules if m == "pyarrow" or m.startswith("airflow_lake_provider.lake."))
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
