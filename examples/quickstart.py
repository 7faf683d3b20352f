"""Quick start: a merge-on-read table on local disk, three batches, a read back and the timeline.

Run with ``make example`` (or ``.venv/bin/python examples/quickstart.py [--path DIR]``).
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

import pyarrow as pa

from airflow_lake_provider.lake import LakeTable, read_snapshot, write
from airflow_lake_provider.lake.table.reader import sort_by_key

CITIES = ["san_francisco", "sao_paulo", "chennai"]


def trips(rng: random.Random, ids: range, ts: int) -> pa.Table:
    """Generated trip records: ``uuid`` is the record key, ``ts`` orders versions of a trip."""
    return pa.table(
        {
            "uuid": [f"trip-{i:04d}" for i in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "rider": [f"rider-{rng.choice('ABCDEFGH')}" for _ in ids],
            "fare": [round(rng.uniform(5, 80), 2) for _ in ids],
            "city": [CITIES[i % len(CITIES)] for i in ids],
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", default="example-data/trips", help="table folder (recreated)")
    args = parser.parse_args()
    path = Path(args.path)
    shutil.rmtree(path, ignore_errors=True)
    rng = random.Random(7)

    table = LakeTable.create(
        path,
        name="trips",
        table_type="mor",
        record_key_fields=("uuid",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
    )
    print(f"created MERGE_ON_READ table 'trips' at {table.base_path}")

    first = write(table, trips(rng, range(30), ts=1), "insert")
    print(f"{first.instant}  insert: {first.inserted} trips")
    second = write(table, trips(rng, range(20, 40), ts=2), "upsert")
    print(f"{second.instant}  upsert: {second.updated} updated, {second.inserted} inserted")
    gone = trips(rng, range(5), ts=3).select(["uuid", "ts", "city"])
    third = write(table, gone, "delete")
    print(f"{third.instant}  delete: {third.deleted} trips")

    snapshot = sort_by_key(read_snapshot(table))
    print(f"\nsnapshot: {snapshot.num_rows} trips (expected 35); first five:")
    for row in (
        snapshot.select(["_hoodie_commit_time", "uuid", "ts", "rider", "fare", "city"])
        .slice(0, 5)
        .to_pylist()
    ):
        print("  ", row)
    before = read_snapshot(table, as_of=first.instant)
    print(f"as of {first.instant}: {before.num_rows} trips (time travel)")

    print("\ntimeline:")
    for instant in table.timeline().instants:
        print(f"  {instant.timestamp}  {instant.action.value:<12} {instant.state.name}")
    if snapshot.num_rows != 35 or before.num_rows != 30:
        raise SystemExit("unexpected row counts")


if __name__ == "__main__":
    main()
