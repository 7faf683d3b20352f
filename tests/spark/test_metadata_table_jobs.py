"""The Spark jobs on a Spark-written table with Hudi's metadata table added: the write, compaction and
clean jobs refuse in the driver before anything is written (the tree byte-identical); the write job
with ``--option hoodie.metadata.enable=false`` drops the metadata table as Hudi does, then writes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder
from metadata_table_support import add_metadata_table, tree_digest

from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable

pytestmark = pytest.mark.spark
MOR = "morparquet_v6_simplekeygen_nonhivestyle"


def _job(name: str, table: Path, source: Path, *extra: str) -> tuple[Any, list[str]]:
    from airflow_lake_provider.spark_jobs import clean, compact, write

    if name == "write":
        return write, ["--table", str(table), "--input", str(source), "--operation", "upsert", *extra]
    if name == "compact":
        return compact, ["--table", str(table), *extra]
    return clean, [
        "--table",
        str(table),
        "--option",
        "hoodie.cleaner.policy=KEEP_LATEST_FILE_VERSIONS",
        *extra,
    ]


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((r["_hoodie_partition_path"], r["id"], r["name"]) for r in table.to_pylist())


@pytest.mark.parametrize(
    ("job", "drop"), [("write", False), ("compact", False), ("clean", False), ("write", True)]
)
def test_job_refuses_or_drops_the_metadata_table(
    spark: Any, hudi_table_zip: Callable[[str], Path], tmp_path: Path, job: str, drop: bool
) -> None:
    path = hudi_table_zip(MOR)
    add_metadata_table(path)
    existing = read_snapshot(LakeTable.open(path))
    source = tmp_path / "in.parquet"
    # One existing key (id 1, partition 10) updated with the table's own schema.
    first = existing.filter(pa.compute.equal(existing.column("id"), 1)).drop_columns(
        [c for c in existing.column_names if c.startswith("_hoodie_")]
    )
    pq.write_table(first.set_column(first.schema.get_field_index("name"), "name", pa.array(["Zed"])), source)
    module, args = _job(job, path, source, *(["--option", "hoodie.metadata.enable=false"] if drop else []))
    before = tree_digest(path)
    if not drop:
        action = {"write": r"write \(upsert\)", "compact": "compaction execute", "clean": "clean"}[job]
        with pytest.raises(TableConfigError, match=rf"^{action} refused: {path} has Hudi's metadata table"):
            module.run(module.parse_args(args), spark)
        assert tree_digest(path) == before
        return
    result = module.run(module.parse_args(args), spark)
    assert result["outcome"] == "COMMITTED" and result["updated"] == 1
    assert not (path / ".hoodie" / "metadata").exists()
    want = sorted((p, i, "Zed" if i == 1 else n) for p, i, n in _rows(existing))
    assert _rows(read_snapshot(LakeTable.open(path))) == want
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    assert _rows(pa.Table.from_batches(batches)) == want
