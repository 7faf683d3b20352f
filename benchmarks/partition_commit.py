"""Cost of one partition commit sensor poke on a large synthetic table (not a test).

Table: 5,000 partitions (``dt=.../hour=..``-style names), 1,000 completed commits, each writing 5
partitions (with the table schema and one write stat per partition, as our writer records them).
A poke is what ``PartitionCommitSensor`` does per look: open the table, refresh the write index,
read the commit state of the 10 partitions it waits for and plan (``commit_partitions(dry_run=True)``).
Measured:
  - a cold poke (no index yet: every commit file is read once),
  - warm pokes with 0 partitions committed before and with 4,990 committed before (must not grow),
  - a warm poke after one more write (the index reads only the new commit),
  - the first poke after an archival moved all but 20 commits out (one archive file read whole: the
    cost of catching up once), and a poke after a later archival of 11 commits (the index reads only
    the new archive file), against a warm poke measured in the same run.
Target: a warm poke <= 50 ms.

Then merge-small-files of a plain parquet directory (no ``.hoodie/``, files as another engine writes
them): ``--merge-files`` files of about ``--merge-file-kb`` KB into ``--target-mb`` MB targets with the
in-progress -> pending -> finished protocol, next to a plain pyarrow read of the same files + write of
the same rows into one file (the baseline, measured in the same run); the ratio is printed.

    python benchmarks/partition_commit.py [--partitions 5000] [--commits 1000] [--runs 7]
        [--merge-files 1000] [--merge-file-kb 100] [--target-mb 128] [--only-merge | --no-merge]
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

from airflow_lake_provider.lake.services.partition_commit.executor import commit_partitions  # noqa: E402
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat  # noqa: E402
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock  # noqa: E402

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


def small_files(folder: Path, files: int, file_kb: int) -> int:
    """``files`` parquet files of about ``file_kb`` KB each (random numbers: they do not compress)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    rows = max(1, file_kb * 1024 // 16)  # ~16 bytes a row once written (random int64 + float64)
    folder.mkdir(parents=True)
    for k in range(files):
        batch = pa.table({"id": np.arange(k * rows, (k + 1) * rows), "v": rng.random(rows)})
        pq.write_table(batch, folder / f"part-{k:05d}.snappy.parquet")
    return files * rows


def bench_merge(base: Path, files: int, file_kb: int, target_mb: int, runs: int) -> None:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from airflow_lake_provider.lake.services.partition_commit.plain import merge_plain_partition
    from airflow_lake_provider.lake.storage import LocalStorage

    ours, plain = [], []
    for run in range(runs):
        root = base / f"merge-{run}"
        rows = small_files(root / "dt=2024-01-05", files, file_kb)
        total = sum(f.stat().st_size for f in (root / "dt=2024-01-05").iterdir())
        began = time.perf_counter()
        result = merge_plain_partition(LocalStorage(root), "dt=2024-01-05", target_mb * 1024 * 1024)
        ours.append(time.perf_counter() - began)
        assert result.rows == rows and len(result.written) == -(-total // (target_mb * 1024 * 1024)), result
        assert ds.dataset(root, format="parquet").count_rows() == rows
        # Baseline: the same rows read with pyarrow, file by file, and written into one file.
        copy = base / f"baseline-{run}"
        rows = small_files(copy / "in", files, file_kb)
        began = time.perf_counter()
        table = pa.concat_tables(pq.read_table(f) for f in sorted((copy / "in").iterdir()))
        pq.write_table(table, copy / "out.parquet")
        plain.append(time.perf_counter() - began)
        assert table.num_rows == rows
        shutil.rmtree(root)
        shutil.rmtree(copy)
    a, b = statistics.median(ours), statistics.median(plain)
    print(
        f"merge-small-files, plain directory: {files} files of ~{file_kb} KB ({total / 1e6:.1f} MB) "
        f"into {target_mb} MB targets: {a:.2f} s; pyarrow read + write of the same rows: {b:.2f} s; "
        f"ratio {a / b:.2f}x (median of {runs})"
    )


def bench_archival(table: LakeTable, due: list[str], runs: int) -> None:
    """Pokes once archival (default ``hoodie.keep.*``: above 30 commits, down to 20) moved writes out
    of the active timeline: the index then reads what was added to the archive, nothing else."""
    from airflow_lake_provider.lake.table.archival.executor import run_archival

    poke(table.base_path, due)  # the index is up to date
    moved = run_archival(table)
    first, result = poke(table.base_path, due)  # catches up with one big archive file
    assert result["partitions"][due[0]]["writes"] >= 2, result
    warm = timed(table.base_path, due, runs)  # nothing new: the archive is not even listed
    indexed, unseen, active = [], [], []
    for _ in range(runs):
        # 11 writes a poke has indexed, then archived: the poke lists and reads the new archive file.
        for k in range(11):
            add_commit(table, [due[k % 10]])
        poke(table.base_path, due)
        assert len(run_archival(table).archived) == 11
        indexed.append(poke(table.base_path, due)[0])
        # 31 writes between two pokes, archived before the second (the index reads 11 of them from the
        # archive), against 31 writes between two pokes that no archival moved (all read as commits).
        new = [add_commit(table, [due[k % 10]]) for k in range(31)]
        assert new[10] in run_archival(table).archived
        took, result = poke(table.base_path, due)
        unseen.append(took)
        for k in range(31):
            add_commit(table, [due[k % 10]])
        active.append(poke(table.base_path, due)[0])
        run_archival(table)
        poke(table.base_path, due)
    a, b, c = statistics.median(indexed), statistics.median(unseen), statistics.median(active)
    print(
        f"after archiving {len(moved.archived)} instants, the first poke (reads that archive once): "
        f"{first * 1000:.1f} ms"
    )
    print(f"warm poke, 20 active commits, nothing new (baseline):  {warm * 1000:.1f} ms")
    print(
        f"poke after an archival of 11 indexed commits:          {a * 1000:.1f} ms, {a / warm:.2f}x baseline"
    )
    print(f"poke after 31 writes, 11 of them archived:             {b * 1000:.1f} ms")
    print(f"poke after 31 writes, none archived (same run):        {c * 1000:.1f} ms; ratio {b / c:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--merge-files", type=int, default=1000)
    parser.add_argument("--merge-file-kb", type=int, default=100)
    parser.add_argument("--target-mb", type=int, default=128)
    parser.add_argument("--merge-runs", type=int, default=3)
    parser.add_argument("--only-merge", action="store_true", help="skip the sensor poke part")
    parser.add_argument("--no-merge", action="store_true", help="skip the merge-small-files part")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="pc-bench-"))
    try:
        if not args.no_merge:
            bench_merge(folder, args.merge_files, args.merge_file_kb, args.target_mb, args.merge_runs)
        if args.only_merge:
            return
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
        bench_archival(table, due, args.runs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
