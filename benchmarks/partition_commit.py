"""Cost of one partition commit sensor poke on a large synthetic table (not a test).

Table: 5,000 partitions (``dt=.../hour=..``-style names), 1,000 completed commits, each writing 5
partitions (with the table schema and one write stat per partition, as our writer records them).
A poke is what ``PartitionCommitSensor`` does per look: open the table, refresh the write index,
read the commit state of the 10 partitions it waits for and plan (``commit_partitions(dry_run=True)``).
Measured:
  - a cold poke (no index yet: every commit file is read once),
  - warm pokes with 0 partitions committed before and with 4,990 committed before (must not grow),
  - a warm poke after one more write (the index reads only the new commit).
Target: a warm poke <= 50 ms.

    python benchmarks/partition_commit.py [--partitions 5000] [--commits 1000] [--runs 7]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.format.commit_metadata import CommitMetadata, WriteStat  # noqa: E402
from airflow_lake_provider.lake.format.instant import Action, InstantClock  # noqa: E402
from airflow_lake_provider.lake.services.partition_commit.executor import commit_partitions  # noqa: E402
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "events_record",
        "namespace": "hoodie.events",
        "fields": [{"name": n, "type": t} for n, t in (("id", "string"), ("ts", "long"), ("p", "string"))],
    }
)


def partition_name(i: int) -> str:
    day, hour = divmod(i, 24)
    moment = dt.datetime(2020, 1, 1) + dt.timedelta(days=day, hours=hour)
    return moment.strftime("year=%Y/month=%m/day=%d/hour=%H")


def build(base: Path, partitions: int, commits: int) -> LakeTable:
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    ticks = iter(start + dt.timedelta(seconds=i) for i in range(commits * 2 + 10))
    table = LakeTable.create(
        base,
        name="events",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("year", "month", "day", "hour"),
        hive_style=True,
        clock=InstantClock(lambda: next(ticks)),
    )
    per_commit = max(1, partitions // commits)
    for c in range(commits):
        add_commit(table, [partition_name((c * per_commit + k) % partitions) for k in range(per_commit)])
    return table


def add_commit(table: LakeTable, parts: list[str]) -> str:
    timeline = table.timeline()
    instant = table.clock.next(after=timeline.latest_time)
    stats = {
        p: (WriteStat(file_id=f"f{i}-{instant}", partition_path=p, path=f"{p}/f.parquet", num_writes=10),)
        for i, p in enumerate(parts)
    }
    body = CommitMetadata("UPSERT", stats, {"schema": SCHEMA, "lake.maxEventTime": "1700000000000"})
    requested = table.store.create_requested(instant, Action.COMMIT)
    inflight = table.store.transition_to_inflight(requested, b"")
    table.store.transition_to_completed(inflight, body.to_json_bytes())
    return instant


def poke(base: Path, parts: list[str]) -> tuple[float, dict]:
    began = time.perf_counter()
    table = LakeTable.open(base)
    result = commit_partitions(table, parts, dry_run=True, require_existing=False).to_dict()
    return time.perf_counter() - began, result


def timed(base: Path, parts: list[str], runs: int) -> float:
    return statistics.median(poke(base, parts)[0] for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="pc-bench-"))
    try:
        began = time.perf_counter()
        table = build(folder / "t", args.partitions, args.commits)
        took = time.perf_counter() - began
        print(f"built {args.partitions} partitions, {args.commits} commits in {took:.1f} s")
        due = [partition_name(args.partitions - 10 + k) for k in range(10)]
        cold, result = poke(table.base_path, due)
        assert result["outcome"] == "PLANNED" and len(result["partitions"]) == 10, result
        assert all(v["decision"] == "DUE" for v in result["partitions"].values()), result
        warm_none = timed(table.base_path, due, args.runs)
        earlier = [partition_name(i) for i in range(args.partitions - 10)]
        began = time.perf_counter()
        for k in range(0, len(earlier), 500):  # commit every other partition first
            commit_partitions(table, earlier[k : k + 500])
        print(f"committed {len(earlier)} earlier partitions in {time.perf_counter() - began:.1f} s")
        warm_many = timed(table.base_path, due, args.runs)
        add_commit(table, [due[0]])
        after_write, result = poke(table.base_path, due)
        assert result["partitions"][due[0]]["writes"] >= 2, result
        print(f"cold poke (index built from {args.commits} commits): {cold * 1000:.1f} ms")
        print(f"warm poke, 0 partitions committed before:         {warm_none * 1000:.1f} ms")
        print(f"warm poke, {len(earlier)} partitions committed before:  {warm_many * 1000:.1f} ms")
        print(f"poke after one more write (index reads 1 commit):  {after_write * 1000:.1f} ms")
        print(f"target: warm poke <= 50 ms -> {'met' if max(warm_none, warm_many) <= 0.05 else 'NOT met'}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
