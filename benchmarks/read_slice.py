"""Benchmark: read one MOR file slice (large base file + one log file of updates).

Builds, with our writer, a non-partitioned MOR table whose only file group has one base file of
``--rows`` rows and one log file holding ``--updates`` updates of existing keys in one Avro data
block (10-field schema, fixed seed). Then times, each in its own child process (so that each has
its own RSS high-water mark), after one warm-up:

* ``ours``: ``airflow_lake_provider.lake.table.reader.read_snapshot(table)``;
* ``hudi-rs table``: ``HudiTableBuilder.from_base_uri(path).build().read()``;
* ``hudi-rs fg-reader``: ``HudiFileGroupReader.read_file_slice_from_paths`` on the same slice
  (when the installed ``hudi`` package has it).

Prints the median of ``--runs`` runs, the ratio ours / hudi-rs and the peak RSS of each reader,
and checks that the readers return the same rows (key, ts and one value column, sorted by key).

Then the same read as whole processes (``--skip-process`` to skip): ``lake read T --output x.parquet``
vs a small hudi-rs script writing the same parquet file, each a fresh interpreter, alternated, wall
and CPU seconds and peak RSS of the process (``wait4``), median of ``--runs``. And the ``lake``
CLI's start-up: ``python -X importtime`` of ``lake read`` (cumulative import time of the CLI module).

``--baseline DIR``: the source tree of another revision (e.g. ``git archive`` of main unpacked in
DIR) is measured in the same run, interleaved with the others: its in-process read ("baseline"), its
``lake read`` process and its start-up, so that before/after ratios share the machine's load.

Usage::

    PYTHONPATH=. python benchmarks/read_slice.py [--rows 1000000] [--updates 200000] [--runs 3]
        [--workdir DIR] [--skip-process] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
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


def build_table(path: Path, rows: int, updates: int, table_version: int = 6) -> None:
    """Create the MOR table: one insert into a single base file, one upsert into one log file."""
    import numpy as np
    import pyarrow as pa

    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import writer

    rng = np.random.default_rng(SEED)
    ids = pa.array([f"key{i:09d}" for i in range(rows)], pa.string())
    base = _make_rows(rows, ids, rng.integers(1, 1_000_000, rows), rng)
    table = LakeTable.create(
        path,
        name="read_slice_bench",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=table_version,
    )
    writer.write(table, base, "insert", max_rows_per_file=max(rows, 1_000_000))
    picked = np.sort(rng.choice(rows, size=updates, replace=False))
    upd_ids = ids.take(pa.array(picked))
    upd_ts = base.column("ts").to_numpy()[picked] + rng.integers(1, 1000, updates)
    upd = _make_rows(updates, upd_ids, upd_ts, rng)
    writer.write(table, upd, "upsert", max_rows_per_file=max(rows, 1_000_000))

    slices = table.file_system_view().latest_slices()
    if len(slices) != 1:
        raise SystemExit(f"expected exactly one file slice, got {len(slices)}")
    (slice_,) = slices
    if slice_.base_file is None or len(slice_.log_files) != 1:
        raise SystemExit(f"expected one base file and one log file, got {slice_}")
    from airflow_lake_provider.lake.log_file.log_format import BlockType
    from airflow_lake_provider.lake.log_file.scanner import read_log_blocks

    blocks = read_log_blocks(table.storage, slice_.log_files[0].relative_path)
    if len(blocks) != 1 or blocks[0].block_type is not BlockType.AVRO_DATA:
        kinds = [b.block_type.name for b in blocks]
        raise SystemExit(f"expected one AVRO_DATA block in the log file, got {kinds}")


def slice_paths(path: Path) -> tuple[str, list[str], int, int]:
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(path)
    (slice_,) = table.file_system_view().latest_slices()
    base = slice_.base_file.relative_path
    logs = [f.relative_path for f in slice_.log_files]
    return base, logs, (path / base).stat().st_size, sum((path / p).stat().st_size for p in logs)


# ------------------------------------------------------------------------------------------------
# Readers (each runs in a child process)
# ------------------------------------------------------------------------------------------------


def _read_ours(path: str):  # noqa: ANN202
    from airflow_lake_provider.lake.table.reader import read_snapshot
    from airflow_lake_provider.lake.table.table import LakeTable

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
    batches = [batch] if isinstance(batch, pa.RecordBatch) else list(batch)
    return pa.Table.from_batches(batches)


READERS = {
    "ours": _read_ours,
    "baseline": _read_ours,  # the same call, with the --baseline tree first on sys.path
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


def _cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)  # all threads of this process
    return usage.ru_utime + usage.ru_stime


def _child(name: str, path: str, out_file: str, conn, source: str | None = None) -> None:  # noqa: ANN001
    """Serve timing requests for one reader: "run" -> seconds of one read; "finish" -> stats.
    ``source``: a source tree to import the project from (the baseline's)."""
    if source is not None:
        sys.path.insert(0, source)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.feather as feather

    read = READERS[name]
    result = None
    try:
        while True:
            command = conn.recv()
            if command == "run":
                result = None
                cpu0 = _cpu_seconds()
                start = time.perf_counter()
                result = read(path)
                conn.send((time.perf_counter() - start, _cpu_seconds() - cpu0))
                continue
            hwm = _vm_hwm_kib()
            # Outside the timing: the rows to compare, sorted by key.
            cols = [KEY, "ts", VALUE_COLUMN]
            small = result.select(cols)
            small = small.take(pc.sort_indices(small, sort_keys=[(KEY, "ascending")]))
            types = (pa.string(), pa.int64(), pa.float64())
            small = pa.table([c.cast(t) for c, t in zip(small.columns, types, strict=True)], names=cols)
            feather.write_feather(small, out_file, compression="uncompressed")
            conn.send({"hwm_kib": hwm, "rows": result.num_rows})
            return
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
        raise


def run_readers(
    names: list[str], path: Path, runs: int, workdir: Path, baseline: Path | None = None
) -> dict[str, dict]:
    """One long-lived child process per reader (so each has its own RSS high-water mark); the
    timed runs are interleaved round-robin so that background load hits every reader alike."""
    ctx = mp.get_context("spawn")  # a fresh interpreter: the RSS peak is this reader's alone
    children = {}
    for name in names:
        parent_end, child_end = ctx.Pipe()
        source = str(baseline) if name == "baseline" and baseline else None
        args = (name, str(path), str(_out_file(workdir, name)), child_end, source)
        proc = ctx.Process(target=_child, args=args)
        proc.start()
        children[name] = (proc, parent_end)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    failed: dict[str, str] = {}
    for round_no in range(runs + 1):  # round 0 is the warm-up
        for name, (_, conn) in children.items():
            if name in failed:
                continue
            try:
                conn.send("run")
                got = conn.recv()
            except (EOFError, OSError) as exc:
                got = {"error": f"child process died: {exc!r}"}
            if isinstance(got, dict):
                failed[name] = got["error"]
            elif round_no:
                times[name].append(got[0])
                cpu[name].append(got[1])
    results = {}
    for name, (proc, conn) in children.items():
        if name in failed:
            results[name] = {"error": failed[name]}
        else:
            try:
                conn.send("finish")
                results[name] = {"times": times[name], "cpu": cpu[name], **conn.recv()}
            except (EOFError, OSError) as exc:
                results[name] = {"error": f"child process died: {exc!r}"}
        proc.join()
    return results


def _out_file(workdir: Path, name: str) -> Path:
    return workdir / f"{name.replace(' ', '_')}.arrow"


# ------------------------------------------------------------------------------------------------
# Whole processes
# ------------------------------------------------------------------------------------------------

# Each process reports its own peak RSS at exit (VmHWM of its own memory map: wait4's ru_maxrss would
# count the parent's RSS at the fork, as Linux keeps it across exec).
PEAK = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('VmHWM ' + [l for l in open('/proc/self/status') "
    "if l.startswith('VmHWM')][0].split()[1] + chr(10)))\n"
)
HUDI_RS_SCRIPT = (
    PEAK
    + """
import sys
import pyarrow as pa, pyarrow.parquet as pq
from hudi import HudiTableBuilder
pq.write_table(pa.Table.from_batches(HudiTableBuilder.from_base_uri(sys.argv[1]).build().read()), sys.argv[2])
"""
)
LAKE_CLI = PEAK + "from airflow_lake_provider.lake.cli import main; import sys; sys.exit(main())"


ROOT = Path(__file__).resolve().parent.parent


def _run_process(argv: list[str], source: Path = ROOT) -> tuple[float, float, float]:
    """Wall s, CPU s (user + system, all threads) and peak RSS MB of one fresh process (``PEAK``),
    importing the project from ``source``."""
    env = dict(os.environ, PYTHONPATH=str(source))
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode:
        raise SystemExit(f"{argv[:4]} failed ({proc.returncode}): {err[-1500:]}")
    peak = [line.split()[1] for line in err.splitlines() if line.startswith("VmHWM ")]
    return wall, usage.ru_utime + usage.ru_stime, int(peak[-1]) / 1024


def whole_process(table_path: Path, workdir: Path, runs: int, baseline: Path | None = None) -> None:
    python = sys.executable
    commands: dict[str, list[str]] = {
        "lake read": [
            python,
            "-c",
            LAKE_CLI,
            "read",
            str(table_path),
            "--output",
            str(workdir / "ours.parquet"),
        ],
        "hudi-rs script": [python, "-c", HUDI_RS_SCRIPT, str(table_path), str(workdir / "theirs.parquet")],
    }
    sources = dict.fromkeys(commands, ROOT)
    if baseline is not None:
        out = str(workdir / "baseline.parquet")
        commands["lake read baseline"] = [python, "-c", LAKE_CLI, "read", str(table_path), "--output", out]
        sources["lake read baseline"] = baseline
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
    for round_no in range(runs + 1):  # round 0 warms the page cache
        for name, argv in commands.items():  # alternated: drift hits all alike
            measured = _run_process(argv, sources[name])
            if round_no:
                got[name].append(measured)
    import pyarrow.parquet as pq

    ours_rows = pq.ParquetFile(workdir / "ours.parquet").metadata.num_rows
    theirs_rows = pq.ParquetFile(workdir / "theirs.parquet").metadata.num_rows
    print(f"\nwhole processes (fresh interpreters, alternated, median of {runs}):")
    print(f"{'process':<18} {'wall s':>7} {'CPU s':>7} {'peak RSS MB':>11}   runs (wall)")
    med = {}
    for name, values in got.items():
        wall, cpu, rss = (statistics.median(v[i] for v in values) for i in range(3))
        med[name] = (wall, cpu, rss)
        runs_text = " / ".join(f"{v[0]:.2f}" for v in values)
        print(f"{name:<18} {wall:>7.3f} {cpu:>7.2f} {rss:>11.0f}   {runs_text}")
    (ow, oc, orss), (hw, hc, hrss) = med["lake read"], med["hudi-rs script"]
    print(
        f"SUMMARY whole process: wall ratio {ow / hw:.2f} (target <= 0.7), CPU ratio {oc / hc:.2f}, "
        f"RSS ratio {orss / hrss:.2f}; rows {ours_rows} vs {theirs_rows}"
    )
    if baseline is not None:
        bw, bc, brss = med["lake read baseline"]
        print(
            f"SUMMARY whole process, baseline: wall ratio {bw / hw:.2f}, CPU ratio {bc / hc:.2f}, "
            f"RSS ratio {brss / hrss:.2f}; ours/baseline wall {ow / bw:.2f}"
        )
    startup(python, table_path, workdir, runs)
    if baseline is not None:
        startup(python, table_path, workdir, runs, baseline)


def startup(python: str, table_path: Path, workdir: Path, runs: int, source: Path = ROOT) -> None:
    """``python -X importtime`` of a whole ``lake read``: its imports against its wall time."""
    env = dict(os.environ, PYTHONPATH=str(source))
    argv = [python, "-X", "importtime", "-c", LAKE_CLI, "read", str(table_path), "--output"]
    shares, imports, walls, watched = [], [], [], {}
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(argv + [str(workdir / "ours.parquet")], env=env, capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        if out.returncode:
            raise SystemExit(f"lake read failed: {out.stderr[-1500:]}")
        total, watched = _imports(out.stderr)
        imports.append(total)
        shares.append(total / walls[-1])
    which = "" if source == ROOT else " baseline"
    print(
        f"start-up of `lake read`{which} (python -X importtime, median of {runs}): imports "
        f"{statistics.median(imports):.3f} s of {statistics.median(walls):.3f} s wall = share "
        f"{statistics.median(shares):.2f}; cumulative: "
        + ", ".join(f"{k} {v:.3f} s" for k, v in watched.items())
    )


WATCHED = ("airflow_lake_provider.lake.cli", "pyarrow", "pyarrow.parquet", "numpy", "polars", "fastavro")


def _imports(stderr: str) -> tuple[float, dict[str, float]]:
    """Seconds of all top-level imports, and the cumulative seconds of the watched modules."""
    total, found = 0, {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        _, cumulative, raw = line[len("import time:") :].split("|")
        if not cumulative.strip().isdigit():
            continue
        name = raw.strip()
        if len(raw) - len(raw.lstrip()) == 1:  # not imported by another module: count it once
            total += int(cumulative)
        if name in WATCHED:
            found[name] = int(cumulative) / 1e6
    return total / 1e6, found


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
    parser.add_argument("--skip-process", action="store_true", help="skip the whole-process comparison")
    parser.add_argument(
        "--baseline", type=Path, default=None, help="source tree of another revision, measured alongside"
    )
    args = parser.parse_args(argv)
    if args.updates > args.rows:
        parser.error("--updates cannot exceed --rows")
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        if not (args.baseline / "airflow_lake_provider" / "lake").is_dir():
            parser.error(f"--baseline {args.baseline} holds no airflow_lake_provider/lake")

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

        names = [n.strip() for n in args.readers.split(",") if n.strip() and n.strip() != "baseline"]
        if args.baseline is not None:
            names.insert(1, "baseline")
        if "hudi-rs fg-reader" in names and not hasattr(hudi, "HudiFileGroupReader"):
            names.remove("hudi-rs fg-reader")
        results = {}
        for name, out in run_readers(names, table_path, args.runs, workdir, args.baseline).items():
            if "error" in out:
                print(f"{name}: FAILED {out['error']}")
                continue
            results[name] = out

        import pyarrow.feather as feather

        ok = True
        ref_name = "ours" if "ours" in results else next(iter(results), None)
        ref = feather.read_table(_out_file(workdir, ref_name)) if ref_name else None
        checks = {}
        for name in results:
            got = feather.read_table(_out_file(workdir, name))
            same = got.num_rows == args.rows and got.equals(ref)
            checks[name] = same
            ok &= same

        hudi_rs = results.get("hudi-rs table")
        hudi_median = statistics.median(hudi_rs["times"]) if hudi_rs else None
        print()
        print(
            f"{'reader':<18} {'median s':>9} {'runs s':>26} {'ours/this':>9} {'CPU s':>6} "
            f"{'peak RSS MB':>11} {'rows':>8} {'same':>4}"
        )
        ours_median = statistics.median(results["ours"]["times"]) if "ours" in results else None
        for name, out in results.items():
            med = statistics.median(out["times"])
            ratio = f"{ours_median / med:.2f}" if ours_median else "-"
            runs = "/".join(f"{t:.2f}" for t in out["times"])
            print(
                f"{name:<18} {med:>9.3f} {runs:>26} {ratio:>9} {statistics.median(out['cpu']):>6.2f} "
                f"{out['hwm_kib'] / 1024:>11.0f} {out['rows']:>8} {'yes' if checks[name] else 'NO':>4}"
            )
        if ours_median and hudi_median:
            ratio = ours_median / hudi_median
            verdict = "<= 1.0 OK" if ratio <= 1.0 else "> 1.0 SLOWER"
            print(
                f"\nSUMMARY: ours {ours_median:.3f} s vs hudi-rs {hudi_median:.3f} s => ratio {ratio:.2f} "
                f"({verdict}); rows identical: {'yes' if ok else 'NO'}; "
                f"peak RSS ours {results['ours']['hwm_kib'] / 1024:.0f} MB vs hudi-rs "
                f"{results['hudi-rs table']['hwm_kib'] / 1024:.0f} MB "
                f"(RSS ratio {results['ours']['hwm_kib'] / results['hudi-rs table']['hwm_kib']:.2f})"
            )
            if "baseline" in results:
                base = results["baseline"]
                base_median = statistics.median(base["times"])
                print(
                    f"SUMMARY baseline: {base_median:.3f} s => ratio {base_median / hudi_median:.2f}; "
                    f"peak RSS {base['hwm_kib'] / 1024:.0f} MB "
                    f"(RSS ratio {base['hwm_kib'] / results['hudi-rs table']['hwm_kib']:.2f})"
                )
        if not args.skip_process:
            whole_process(table_path, workdir, args.runs, args.baseline)
        return 0 if ok and len(results) == len(names) else 1
    finally:
        if cleanup:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
