"""Benchmark: read one MOR file slice (large base file + one log file of updates).

Builds, with our writer, a non-partitioned MOR table whose only file group has one base file of
``--rows`` rows and one log file holding ``--updates`` updates of existing keys in one Avro data
block (10-field schema, fixed seed). Then times, each in its own child process (so that each has
its own RSS high-water mark), after one warm-up:

* ``ours``: ``airflow_lake_provider.lake.reader.read_snapshot(table)``;
* ``hudi-rs table``: ``HudiTableBuilder.from_base_uri(path).build().read()``;
* ``hudi-rs fg-reader``: ``HudiFileGroupReader.read_file_slice_from_paths`` on the same slice
  (when the installed ``hudi`` package has it).

Prints the median of ``--runs`` runs, the ratio ours / hudi-rs and the peak RSS of each reader,
and checks that the readers return the same rows (key, ts and one value column, sorted by key).

Usage::

    PYTHONPATH=. python benchmarks/read_slice.py [--rows 1000000] [--updates 200000] [--runs 3]
        [--workdir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

SEED = 20240601
KEY = "_hoodie_record_key"
VALUE_COLUMN = "price"


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def _make_rows(n: int, ids, ts, rng):  # noqa: ANN001, ANN202 - numpy/pyarrow types
    import numpy as np
    import pyarrow as pa

    cities = np.array(["amsterdam", "berlin", "chennai", "denver", "essen", "florence", "geneva", "houston"])
    names = np.array([f"name_{i:04d}" for i in range(2000)])
    return pa.table(
        {
            "id": ids,
            "ts": pa.array(ts, pa.int64()),
            "qty": pa.array(rng.integers(0, 1000, n, dtype=np.int32), pa.int32()),
            "count": pa.array(rng.integers(0, 10**12, n, dtype=np.int64), pa.int64()),
            "price": pa.array(rng.random(n) * 1000.0, pa.float64()),
            "score": pa.array(rng.normal(0.0, 1.0, n), pa.float64()),
            "name": pa.array(names[rng.integers(0, len(names), n)], pa.string()),
            "city": pa.array(cities[rng.integers(0, len(cities), n)], pa.string()),
            "note": pa.array([f"note-{v:x}" for v in rng.integers(0, 2**40, n).tolist()], pa.string()),
            "code": pa.array(rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int32), pa.int32()),
        }
    )


def build_table(path: Path, rows: int, updates: int) -> None:
    """Create the MOR table: one insert into a single base file, one upsert into one log file."""
    import numpy as np
    import pyarrow as pa

    from airflow_lake_provider.lake import writer
    from airflow_lake_provider.lake.table import LakeTable

    rng = np.random.default_rng(SEED)
    ids = pa.array([f"key{i:09d}" for i in range(rows)], pa.string())
    base = _make_rows(rows, ids, rng.integers(1, 1_000_000, rows), rng)
    table = LakeTable.create(
        path, name="read_slice_bench", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    writer.write(table, base, "insert", max_rows_per_file=max(rows, 1_000_000))
    picked = np.sort(rng.choice(rows, size=updates, replace=False))
    upd_ids = ids.take(pa.array(picked))
    upd_ts = base.column("ts").to_numpy()[picked] + rng.integers(1, 1000, updates)
    writer.write(table, _make_rows(updates, upd_ids, upd_ts, rng), "upsert", max_rows_per_file=max(rows, 1_000_000))

    slices = table.file_system_view().latest_slices()
    if len(slices) != 1:
        raise SystemExit(f"expected exactly one file slice, got {len(slices)}")
    (slice_,) = slices
    if slice_.base_file is None or len(slice_.log_files) != 1:
        raise SystemExit(f"expected one base file and one log file, got {slice_}")
    from airflow_lake_provider.lake import log_format

    blocks = log_format.read_log_blocks(table.base_path / slice_.log_files[0].relative_path)
    if len(blocks) != 1 or blocks[0].block_type is not log_format.BlockType.AVRO_DATA:
        raise SystemExit(f"expected one AVRO_DATA block in the log file, got {[b.block_type for b in blocks]}")


def slice_paths(path: Path) -> tuple[str, list[str], int, int]:
    from airflow_lake_provider.lake.table import LakeTable

    table = LakeTable.open(path)
    (slice_,) = table.file_system_view().latest_slices()
    base = slice_.base_file.relative_path
    logs = [f.relative_path for f in slice_.log_files]
    return base, logs, (path / base).stat().st_size, sum((path / p).stat().st_size for p in logs)


# ------------------------------------------------------------------------------------------------
# Readers (each runs in a child process)
# ------------------------------------------------------------------------------------------------


def _read_ours(path: str):  # noqa: ANN202
    from airflow_lake_provider.lake.reader import read_snapshot
    from airflow_lake_provider.lake.table import LakeTable

    return read_snapshot(LakeTable.open(path))


def _read_hudi_table(path: str):  # noqa: ANN202
    import pyarrow as pa
    from hudi import HudiTableBuilder

    return pa.Table.from_batches(HudiTableBuilder.from_base_uri(path).build().read())


def _read_hudi_fg(path: str):  # noqa: ANN202
    import pyarrow as pa
    from hudi import HudiFileGroupReader

    base, logs, _, _ = slice_paths(Path(path))
    batch = HudiFileGroupReader(path).read_file_slice_from_paths(base, logs)
    return pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else pa.Table.from_batches(batch)


READERS = {
    "ours": _read_ours,
    "hudi-rs table": _read_hudi_table,
    "hudi-rs fg-reader": _read_hudi_fg,
}


def _vm_hwm_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(name: str, path: str, runs: int, out_file: str, queue) -> None:  # noqa: ANN001
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.feather as feather

    read = READERS[name]
    try:
        result = read(path)  # warm-up (imports, page cache)
        times = []
        for _ in range(runs):
            del result
            start = time.perf_counter()
            result = read(path)
            times.append(time.perf_counter() - start)
        hwm = _vm_hwm_kib()
        # Outside the timing: the rows to compare, sorted by key.
        cols = [KEY, "ts", VALUE_COLUMN]
        small = result.select(cols)
        small = small.take(pc.sort_indices(small, sort_keys=[(KEY, "ascending")]))
        small = pa.table([c.cast(t) for c, t in zip(small.columns, (pa.string(), pa.int64(), pa.float64()))],
                         names=cols)
        feather.write_feather(small, out_file, compression="uncompressed")
        queue.put({"times": times, "hwm_kib": hwm, "rows": result.num_rows})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def run_reader(name: str, path: Path, runs: int, out_file: Path) -> dict:
    ctx = mp.get_context("spawn")  # a fresh interpreter: the RSS peak is this reader's alone
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(name, str(path), runs, str(out_file), queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the base file")
    parser.add_argument("--updates", type=int, default=200_000, help="updated keys in the log block")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per reader (after one warm-up)")
    parser.add_argument("--workdir", type=Path, default=None, help="where to build the table (kept)")
    parser.add_argument("--readers", default=",".join(READERS), help="comma-separated subset of readers")
    args = parser.parse_args(argv)
    if args.updates > args.rows:
        parser.error("--updates cannot exceed --rows")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="read_slice_"))
    cleanup = args.workdir is None
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        table_path = workdir / "table"
        if (table_path / ".hoodie").exists():
            print(f"reusing table at {table_path}")
        else:
            start = time.perf_counter()
            build_table(table_path, args.rows, args.updates)
            print(f"built table at {table_path} in {time.perf_counter() - start:.1f} s")
        base, logs, base_size, log_size = slice_paths(table_path)
        print(f"slice: base {base} ({base_size / 1e6:.1f} MB), log {logs[0]} ({log_size / 1e6:.1f} MB)")

        import hudi

        names = [n.strip() for n in args.readers.split(",") if n.strip()]
        if "hudi-rs fg-reader" in names and not hasattr(hudi, "HudiFileGroupReader"):
            names.remove("hudi-rs fg-reader")
        results = {}
        for name in names:
            out = run_reader(name, table_path, args.runs, workdir / f"{name.replace(' ', '_')}.arrow")
            if "error" in out:
                print(f"{name}: FAILED {out['error']}")
                continue
            results[name] = out
            print(f"{name}: " + " / ".join(f"{t:.2f}" for t in out["times"]) + " s", flush=True)

        import pyarrow.feather as feather

        ok = True
        ref_name = "ours" if "ours" in results else next(iter(results), None)
        ref = feather.read_table(workdir / f"{ref_name.replace(' ', '_')}.arrow") if ref_name else None
        checks = {}
        for name in results:
            got = feather.read_table(workdir / f"{name.replace(' ', '_')}.arrow")
            same = got.num_rows == args.rows and got.equals(ref)
            checks[name] = same
            ok &= same

        hudi_median = statistics.median(results["hudi-rs table"]["times"]) if "hudi-rs table" in results else None
        print()
        print(f"{'reader':<20} {'median s':>9} {'runs s':>20} {'ours/this':>10} {'peak RSS MB':>12} {'rows':>9} {'same':>5}")
        ours_median = statistics.median(results["ours"]["times"]) if "ours" in results else None
        for name, out in results.items():
            med = statistics.median(out["times"])
            ratio = f"{ours_median / med:.2f}" if ours_median else "-"
            runs = "/".join(f"{t:.2f}" for t in out["times"])
            print(f"{name:<20} {med:>9.3f} {runs:>20} {ratio:>10} {out['hwm_kib'] / 1024:>12.0f} "
                  f"{out['rows']:>9} {'yes' if checks[name] else 'NO':>5}")
        if ours_median and hudi_median:
            ratio = ours_median / hudi_median
            print(f"\nSUMMARY: ours {ours_median:.3f} s vs hudi-rs {hudi_median:.3f} s => ratio {ratio:.2f} "
                  f"({'<= 1.0 OK' if ratio <= 1.0 else '> 1.0 SLOWER'}); rows identical: {'yes' if ok else 'NO'}; "
                  f"peak RSS ours {results['ours']['hwm_kib'] / 1024:.0f} MB vs hudi-rs "
                  f"{results['hudi-rs table']['hwm_kib'] / 1024:.0f} MB")
        return 0 if ok and len(results) == len(names) else 1
    finally:
        if cleanup:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
