"""The small partitioned COW table the clean tests build, and one upsert on it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

RETAIN_ONE = {"hoodie.cleaner.commits.retained": "1"}


def cow_table(tmp_path: Path, version: int = 6) -> LakeTable:
    """``version``: 6, or Hudi 1.x's 8 (table-version neutral tests run on both)."""
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
    )


def upsert(table: LakeTable, ts: int, parts: tuple[str, ...] = ("x",)) -> str:
    """One upsert of key ``k<p>`` into each partition ``p`` of ``parts``; its instant."""
    batch = pa.table(
        {"id": [f"k{p}" for p in parts], "ts": pa.array([ts] * len(parts), pa.int64()), "p": parts}
    )
    return write(table, batch, "upsert").instant
