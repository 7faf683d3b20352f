"""Timeline operations on a long-lived table: 10,000 completed instants (then archived) vs 30.

Builds two merge-on-read tables whose timelines hold ``--instants`` and 30 completed deltacommits
(synthetic commit metadata written through the timeline store; no data files, so only the
timeline's size differs between the two), then times
``lake timeline``'s work (loading the timeline) and compaction scheduling (dry run: plan, write
nothing) on each: before archival, and after archival with Hudi's defaults (keep 20..30 commits).
Target: the long table after archival <= 1.5x the short one.

    PYTHONPATH=. .venv/bin/python benchmarks/timeline_size.py [--instants 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake import LakeTable  # noqa: E402
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction  # noqa: E402
from airflow_lake_provider.lake.table.archival.executor import run_archival  # noqa: E402
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock  # noqa: E402

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "r",
        "fields": [{"name": "id", "type": "string"}, {"name": "ts", "type": "long"}],
    }
)


def build(path: Path, instants: int) -> LakeTable:
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    clock = InstantClock()
    previous = None
    for n in range(instants):
        t = clock.next(after=previous)
        previous = t
        file_id = f"{n:08d}-0000-0000-0000-000000000000-0"
        name = f"{file_id}_0-1-0_{t}.parquet"
        meta = {
            "partitionToWriteStats": {
                "": [{"fileId": file_id, "path": name, "prevCommit": "null", "numWrites": 1}]
            },
            "compacted": False,
            "extraMetadata": {"schema": SCHEMA},
            "operationType": "UPSERT",
        }
        requested = table.store.create_requested(t, Action.DELTACOMMIT)
        inflight = table.store.transition_to_inflight(requested)
        table.store.transition_to_completed(inflight, json.dumps(meta).encode())
    return table


def timed(fn, runs: int) -> float:
    fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def measure(table: LakeTable, runs: int) -> tuple[float, float]:
    load = timed(lambda: LakeTable.open(table.storage.root).timeline(), runs)
    schedule = timed(lambda: schedule_compaction(table, force=True, dry_run=True), runs)
    return load, schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instants", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="timeline_size_") as tmp:
        started = time.perf_counter()
        long_table = build(Path(tmp) / "long", args.instants)
        short_table = build(Path(tmp) / "short", 30)
        print(f"built {args.instants:,} and 30 instants in {time.perf_counter() - started:.1f} s")
        short = measure(short_table, args.runs)
        before = measure(long_table, args.runs)
        archived = run_archival(long_table)
        after = measure(long_table, args.runs)
        print(f"archived {len(archived.archived):,} instants into {archived.archive_file}")
        print(f"{'measure':<32}{'30 instants':>14}{'long, active':>14}{'long, archived':>16}{'ratio':>8}")
        for label, i in (("timeline load (lake timeline)", 0), ("compaction scheduling (dry run)", 1)):
            ratio = after[i] / short[i]
            print(
                f"{label:<32}{short[i] * 1000:>12.1f}ms{before[i] * 1000:>12.1f}ms"
                f"{after[i] * 1000:>14.1f}ms{ratio:>8.2f}"
            )
        print("target: long table after archival <= 1.5x the 30-instant table")


if __name__ == "__main__":
    main()
