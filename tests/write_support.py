"""Shared by the writer's tests (``table/write``, ``table/index``): a small non-partitioned table on a
frozen clock, batches of ``id``/``ts``/``v``, its base files, and its rows as ours and hudi-rs read them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import InstantClock, format_instant

FROZEN = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
T1, T2, T3 = (format_instant(FROZEN + dt.timedelta(milliseconds=i)) for i in range(3))


def table(path: Path, kind: str = "cow", partitioned: bool = False) -> LakeTable:
    return LakeTable.create(
        path,
        name="t",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",) if partitioned else (),
        clock=InstantClock(now=lambda: FROZEN),
    )


def batch(ids: list[int], ts: int = 1, v: str = "x") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": pa.array([f"{v}{i}" for i in ids], pa.string()),
        }
    )


def hudi_rows(path: Path, *columns: str) -> list[tuple]:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    rows = pa.Table.from_batches(batches).select(list(columns)).to_pylist() if batches else []
    return sorted(tuple(r.values()) for r in rows)


def our_rows(path: Path, *columns: str) -> list[tuple]:
    return sorted(
        tuple(r.values()) for r in read_snapshot(LakeTable.open(path)).select(list(columns)).to_pylist()
    )


def base_file(path: Path) -> Path:
    (base,) = path.glob("*.parquet")
    return base


def base_file_at(path: Path, instant: str) -> Path:
    (base,) = path.glob(f"*_{instant}.parquet")
    return base


def log_only_group(path: Path, version: int = 9) -> tuple[LakeTable, list[str], list[str]]:
    """A merge-on-read table (``version`` 8 or 9) whose one file group holds log files only, as Flink
    and Spark's bucket index write inserts: our writer's first insert (``id`` 1, 2) with its base file
    and instant removed, leaving a deltacommit per log (updating 1, then 2, then 1). The table, the
    deltacommits' instants, the log files' names (in that order)."""
    lake = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=version,
    )
    first = write(lake, batch([1, 2], 1), operation="upsert").instant
    instants = [
        write(lake, batch([i], ts, "u"), operation="upsert").instant for ts, i in ((2, 1), (3, 2), (4, 1))
    ]
    base_file(path).unlink()
    for name in (path / ".hoodie" / "timeline").glob(f"{first}*"):
        name.unlink()
    logs = sorted(p.name for p in path.glob(".*.log.*"))
    assert [name.split("_")[1].split(".")[0] for name in logs] == instants
    return LakeTable.open(path), instants, logs


def add_log_only_group(path: Path, group: str, instant: str, key: int, v: str) -> str:
    """Write, as another writer would (one whose index puts inserts into logs), a file group of
    one log file at the completed ``instant`` of the non-partitioned table at ``path``, holding row
    ``key`` (ts 1, ``v``). Returns the log file's name."""
    from airflow_lake_provider.lake.file_group.file_names import LogFileName
    from airflow_lake_provider.lake.format.avro_schema import with_meta_fields
    from airflow_lake_provider.lake.log_file.data_block import avro_data_block

    lake = LakeTable.open(path)
    avro = with_meta_fields(lake.data_avro_schema(lake.timeline()))
    rows = pa.table(
        {
            "_hoodie_commit_time": [instant],
            "_hoodie_commit_seqno": [f"{instant}_0_9"],
            "_hoodie_record_key": [str(key)],
            "_hoodie_partition_path": [""],
            "_hoodie_file_name": [group],
            "id": pa.array([key], pa.int64()),
            "ts": pa.array([1], pa.int64()),
            "v": [v],
        }
    )
    name = LogFileName.create(group, instant, 1, "0-0-0").name
    (path / name).write_bytes(avro_data_block(rows, avro, instant))
    return name
