"""Benchmark: decode a 200,000-record AVRO_DATA block, polars fast path vs fastavro fallback.

Run from the repository root::

    python benchmarks/avro_decode.py [--records N] [--repeat R]

Prints the median of R runs for each decoder, their ratio and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_lake_provider.lake.format.avro_schema import META_FIELDS, arrow_to_avro  # noqa: E402
from airflow_lake_provider.lake.log_file.avro_decode import (
    decode_avro_data_block,
    decode_avro_data_block_fastavro,
)
from airflow_lake_provider.lake.log_file.data_block import avro_data_block
from airflow_lake_provider.lake.log_file.log_format import LogBlock, parse_log_bytes

INSTANT = "20240101000000000"


def build_table(records: int, seed: int = 42) -> pa.Table:
    """Make a 10-field table (5 meta + 5 data columns) of random rows.

    :param records: number of rows.
    :param seed: RNG seed, fixed so runs are comparable.
    """
    rng = np.random.default_rng(seed)
    ids = [f"id-{i:09d}" for i in range(records)]
    cities = np.array(["san_francisco", "sao_paulo", "chennai", "amsterdam"])[rng.integers(0, 4, records)]
    columns: dict[str, pa.Array] = {
        "_hoodie_commit_time": pa.array([INSTANT] * records),
        "_hoodie_commit_seqno": pa.array([f"{INSTANT}_0_{i}" for i in range(records)]),
        "_hoodie_record_key": pa.array(ids),
        "_hoodie_partition_path": pa.array([f"city={c}" for c in cities]),
        "_hoodie_file_name": pa.array(["5a226868-2934-4f84-a16f-55124630c68d-0"] * records),
        "id": pa.array(ids),
        "fare": pa.array(rng.random(records) * 100.0),
        "ts": pa.array(rng.integers(1_600_000_000_000, 1_700_000_000_000, records), pa.int64()),
        "updated_at": pa.array(rng.integers(1_600_000_000_000_000, 1_700_000_000_000_000, records)).cast(
            pa.timestamp("us", tz="UTC")
        ),
        "city": pa.array(cities.tolist()),
    }
    assert len(columns) == 10 and all(m in columns for m in META_FIELDS)
    return pa.table(columns)


def time_median(fn: Callable[[], pa.Table], repeat: int) -> tuple[float, list[float], pa.Table]:
    """Run ``fn`` ``repeat`` times; return the median seconds, all timings and the last result."""
    timings: list[float] = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        timings.append(time.perf_counter() - start)
    assert result is not None
    return statistics.median(timings), timings, result


def main() -> None:
    """Build the block, time both decoders and print the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    table = build_table(args.records)
    schema = arrow_to_avro(table.schema, "bench_record", "hoodie.bench")
    start = time.perf_counter()
    data = avro_data_block(table, schema, INSTANT)
    encode_s = time.perf_counter() - start
    (block,) = parse_log_bytes(data, "<benchmark>")
    assert isinstance(block, LogBlock)

    fast_med, fast_all, fast_table = time_median(lambda: decode_avro_data_block(block), args.repeat)
    slow_med, slow_all, slow_table = time_median(lambda: decode_avro_data_block_fastavro(block), args.repeat)
    assert fast_table.equals(slow_table), "fast and fallback decoders disagree"

    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"records: {args.records:,}  fields: {table.num_columns}  block: {len(data) / 2**20:.1f} MiB")
    print(f"encode (avro_data_block):    {encode_s:.3f} s")
    print(f"decode polars fast path:     median {fast_med:.3f} s  runs {[round(t, 3) for t in fast_all]}")
    print(f"decode fastavro fallback:    median {slow_med:.3f} s  runs {[round(t, 3) for t in slow_all]}")
    print(f"speed-up: {slow_med / fast_med:.1f}x   peak RSS: {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
