"""Writing one base file: our parquet settings against Arrow's defaults, measured in the same run.

The rows are a 250,000-row base file of the compaction benchmark's file groups (Hudi meta columns
first; record keys, sequence numbers and most measures unique; names and cities repeating). Both
writers encode to memory (no disk, no fsync), single-threaded as in a Spark task, interleaved,
median of ``--runs``. Also prints, per column, whether the chunk kept its dictionary.

    python benchmarks/parquet_write.py [--rows 250000] [--runs 7]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import read_slice  # noqa: E402  (the same row generator)

from airflow_lake_provider.lake.format.base_file import (  # noqa: E402
    DICTIONARY_PAGE_LIMIT,
    ROW_GROUP_ROWS,
    dictionary_columns,
)
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402
from airflow_lake_provider.lake.table.write import writer  # noqa: E402


def base_rows(folder: Path, n: int) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(read_slice.SEED)
    ids = pa.array([f"key{i:09d}" for i in range(n)], pa.string())
    table = LakeTable.create(
        folder / "t", name="parquet_bench", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    writer.write(table, read_slice._make_rows(n, ids, rng.integers(1, 1_000_000, n), rng), "insert")
    (path,) = table.base_path.glob("*.parquet")
    return pq.read_table(path)


def encode(rows: pa.Table, **options: object) -> tuple[float, bytes]:
    out = io.BytesIO()
    start = time.perf_counter()
    pq.write_table(rows, out, compression="snappy", **options)
    return time.perf_counter() - start, out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    pa.set_cpu_count(1)
    with tempfile.TemporaryDirectory(prefix="lake-parquet-bench-") as folder:
        rows = base_rows(Path(folder), args.rows)
    # As BaseFileWriter writes: dictionaries for the columns its sample judges repetitive.
    ours_opts = {
        "dictionary_pagesize_limit": DICTIONARY_PAGE_LIMIT,
        "use_dictionary": dictionary_columns(rows.slice(0, ROW_GROUP_ROWS)),
    }
    times: dict[str, list[float]] = {"arrow": [], "ours": []}
    files: dict[str, bytes] = {}
    for _ in range(args.runs + 1):  # the first round warms up
        for name, opts in (("arrow", {}), ("ours", ours_opts)):
            seconds, files[name] = encode(rows, **opts)
            times[name].append(seconds)
    arrow_s, ours_s = (statistics.median(times[k][1:]) for k in ("arrow", "ours"))
    print(f"{args.rows:,} rows x {rows.num_columns} columns, median of {args.runs}:")
    for name, seconds in (("Arrow defaults (1 MB dictionary pages)", arrow_s), ("ours (judged)", ours_s)):
        key = "arrow" if name.startswith("Arrow") else "ours"
        print(f"    {name:<40} {seconds:.3f} s   {len(files[key]) / 1e6:6.2f} MB")
    print(
        f"    time ratio ours/Arrow = {ours_s / arrow_s:.2f}; "
        f"size ratio {len(files['ours']) / len(files['arrow']):.2f}"
    )
    if not pq.read_table(pa.BufferReader(files["ours"])).equals(rows):
        raise SystemExit("our file does not read back as the rows written")
    meta = pq.ParquetFile(pa.BufferReader(files["ours"])).metadata.row_group(0)
    kept = [
        rows.column_names[i]
        for i in range(meta.num_columns)
        if meta.column(i).has_dictionary_page and meta.column(i).total_uncompressed_size < 2 * args.rows
    ]
    print(f"    columns fully dictionary-encoded in ours: {', '.join(kept)}")


if __name__ == "__main__":
    main()
