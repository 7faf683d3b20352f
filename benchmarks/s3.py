"""S3 benchmark on a local S3 server (moto, 127.0.0.1): reads, clean planning, requests per operation.

Starts moto's ThreadedMotoServer, then measures, against baselines taken in the same run:

* slice read: our ``read_snapshot`` of an s3:// MOR table (one file group: a base file of ``--rows``
  rows + one log file of ``--updates`` updates) vs hudi-rs reading the same s3:// table;
* clean planning over a synthetic COW table of ~20,000 (empty) base files vs a bare recursive
  listing of the same prefix (names and sizes: one LIST per 1,000 keys);
* S3 requests per operation (every obstore call S3Storage makes is counted): open, MOR upsert,
  snapshot read, clean plan, clean, compaction.

moto is an in-process Python server, so absolute times are far slower than AWS's; the ratios and
request counts are what carry over.

    PYTHONPATH=. python benchmarks/s3.py [--rows 200000] [--updates 40000] [--partitions 100]
        [--groups 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402

from airflow_lake_provider.lake.services.clean.config import CleanConfig  # noqa: E402
from airflow_lake_provider.lake.services.clean.executor import plan, run_clean  # noqa: E402
from airflow_lake_provider.lake.services.compaction.executor import run_compaction  # noqa: E402
from airflow_lake_provider.lake.storage import s3 as storage_s3  # noqa: E402
from airflow_lake_provider.lake.table.reader import read_snapshot  # noqa: E402
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402
from airflow_lake_provider.lake.table.write import write  # noqa: E402
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat  # noqa: E402
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock  # noqa: E402

KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
COUNTED = ("get", "get_range", "head", "put", "list", "list_with_delimiter", "delete")
REQUESTS: Counter[str] = Counter()
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "b_record",
        "namespace": "hoodie.b",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "ts", "type": "long"},
            {"name": "p", "type": "string"},
        ],
    }
)


def start_server() -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.update({**KEYS, "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"})
    return server, endpoint


def count_requests() -> None:
    """Wrap the obstore calls S3Storage makes: one call is one request (a listing: one per page)."""
    for name in COUNTED:
        real = getattr(storage_s3.obstore, name)

        def wrapper(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
            REQUESTS[_name] += 1
            return _real(*args, **kwargs)

        setattr(storage_s3.obstore, name, wrapper)


def requests_of(fn: Callable[[], Any]) -> tuple[Any, Counter[str]]:
    REQUESTS.clear()
    result = fn()
    return result, Counter(REQUESTS)


def median_time(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def make_bucket(endpoint: str, name: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                 aws_secret_access_key="bench").create_bucket(Bucket=name)  # fmt: skip


# -- slice read ------------------------------------------------------------------------------------
def slice_table(uri: str, rows: int, updates: int) -> LakeTable:
    import numpy as np

    rng = np.random.default_rng(20240601)
    table = LakeTable.create(
        uri, name="s", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )

    def batch(ids: np.ndarray, ts: int) -> pa.Table:
        n = len(ids)
        return pa.table(
            {
                "id": pa.array([f"id-{i:09d}" for i in ids.tolist()]),
                "ts": pa.array(np.full(n, ts), pa.int64()),
                "price": pa.array(rng.random(n) * 1000.0),
                "qty": pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
                "note": pa.array([f"note-{v:x}" for v in rng.integers(0, 2**40, n).tolist()]),
            }
        )

    write(table, batch(np.arange(rows), 1), "insert", max_rows_per_file=rows)
    write(table, batch(rng.choice(rows, updates, replace=False), 2), "upsert")
    return table


def hudi_read(uri: str, endpoint: str) -> pa.Table:
    from hudi import HudiTableBuilder

    options = {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }
    return pa.Table.from_batches(
        HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build().read()
    )


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    cols = ["_hoodie_record_key", "ts", "price"]
    # hudi-rs marks the meta columns not-null, we do not: compare values, not schemas.
    key = "_hoodie_record_key"
    return a.select(cols).sort_by(key).to_pylist() == b.select(cols).sort_by(key).to_pylist()


# -- clean planning ----------------------------------------------------------------------------------
def synthetic_commit(table: LakeTable, partitions: list[str], groups: int, pool: ThreadPoolExecutor) -> str:
    """A COW commit rewriting every file group of ``partitions`` with empty base files."""
    t = table.clock.next(after=table.timeline().latest_time)
    inflight = table.store.transition_to_inflight(table.store.create_requested(t, Action.COMMIT))
    stats: dict[str, tuple[WriteStat, ...]] = {}
    names = []
    for part in partitions:
        part_stats = []
        for g in range(groups):
            fid = f"{int(part.split('=')[1]):08d}-0000-0000-0000-{g:012d}-0"
            rel = f"{part}/{fid}_0-1-0_{t}.parquet"
            names.append(rel)
            part_stats.append(WriteStat(fid, part, rel, num_writes=1, total_write_bytes=0))
        stats[part] = tuple(part_stats)
    list(pool.map(lambda rel: table.storage.write(rel, b""), names))
    table.store.transition_to_completed(
        inflight, CommitMetadata("UPSERT", stats, {"schema": SCHEMA}).to_json_bytes()
    )
    return t


def clean_table(uri: str, partitions: int, groups: int) -> LakeTable:
    table = LakeTable.create(
        uri, name="b", table_type="cow", record_key_fields=("id",), precombine_field="ts",
        partition_fields=("p",), hive_style=True, clock=InstantClock(),
    )  # fmt: skip
    names = [f"p={i}" for i in range(partitions)]
    with ThreadPoolExecutor(16) as pool:
        for k in range(90):
            synthetic_commit(table, [n for i, n in enumerate(names) if i % 9 == k % 9], groups, pool)
        for _ in range(10):
            synthetic_commit(table, [names[0]], groups, pool)
    return table


def bare_listing(table: LakeTable) -> int:
    """Every key under the table with its size: the recursive LIST a planner cannot do without."""
    store = table.storage.store  # type: ignore[attr-defined]
    prefix = table.storage.prefix + "/"  # type: ignore[attr-defined]
    return sum(len(chunk) for chunk in storage_s3.obstore.list(store, prefix, chunk_size=1000))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--updates", type=int, default=40_000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server, endpoint = start_server()
    try:
        make_bucket(endpoint, "bench")
        count_requests()

        uri = "s3://bench/slice"
        t0 = time.perf_counter()
        slice_table(uri, args.rows, args.updates)
        print(f"slice table: {args.rows} rows + {args.updates} updates in {time.perf_counter() - t0:.1f} s")
        ours_s, ours = median_time(lambda: read_snapshot(LakeTable.open(uri)), args.runs)
        hudi_s, theirs = median_time(lambda: hudi_read(uri, endpoint), args.runs)
        assert same_rows(ours, theirs), "ours and hudi-rs differ"

        curi = "s3://bench/clean"
        t0 = time.perf_counter()
        ctable = clean_table(curi, args.partitions, args.groups)
        files = bare_listing(ctable)
        print(f"clean table: {files} objects, 100 commits in {time.perf_counter() - t0:.1f} s")
        listing_s, _ = median_time(lambda: bare_listing(ctable), args.runs)
        plan_s, full_plan = median_time(
            lambda: plan(LakeTable.open(curi), CleanConfig(incremental=False)), args.runs
        )
        print(f"full plan: {full_plan.file_count} files in {len(full_plan.files_per_partition)} partitions")

        print()
        print(f"{'measure':<44}{'median s':>10}{'ratio':>8}")
        print(f"{'slice read: hudi-rs (baseline)':<44}{hudi_s:>10.3f}{1.0:>8.2f}")
        print(f"{'slice read: ours':<44}{ours_s:>10.3f}{ours_s / hudi_s:>8.2f}")
        print(f"{'bare recursive listing with sizes (baseline)':<44}{listing_s:>10.3f}{1.0:>8.2f}")
        print(f"{'clean plan, full (KEEP_LATEST_COMMITS 10)':<44}{plan_s:>10.3f}{plan_s / listing_s:>8.2f}")

        # Requests per operation (a fresh handle each time: nothing cached between them).
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("open table (slice)", lambda: LakeTable.open(uri)),
            (
                "MOR upsert of 1,000 rows",
                lambda: write(
                    LakeTable.open(uri),
                    ours.slice(0, 1000)
                    .drop_columns([c for c in ours.column_names if c.startswith("_hoodie")])
                    .set_column(1, "ts", pa.array([3] * 1000, pa.int64())),
                    "upsert",
                ),
            ),  # fmt: skip
            ("snapshot read (slice)", lambda: read_snapshot(LakeTable.open(uri))),
            (
                "compaction schedule + execute (slice)",
                lambda: run_compaction(LakeTable.open(uri), {"hoodie.compact.inline.max.delta.commits": "1"}),
            ),  # fmt: skip
            ("bare listing (clean table)", lambda: bare_listing(ctable)),
            (
                "clean plan, full (clean table)",
                lambda: plan(LakeTable.open(curi), CleanConfig(incremental=False)),
            ),
            ("clean: plan + delete (clean table)", lambda: run_clean(LakeTable.open(curi))),
        ]
        print()
        print(f"{'S3 requests per operation':<44}{'total':>7}  by kind")
        for label, fn in steps:
            _, counted = requests_of(fn)
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(counted.items()))
            print(f"{label:<44}{sum(counted.values()):>7}  {kinds}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
