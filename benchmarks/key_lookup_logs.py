"""The write's key lookup in log files: a 20-row upsert into a merge-on-read table with logs,
against the same upsert by another checkout of the code (``--baseline``, e.g. one whose lookup read
base files only).

The table: one partition of ``--groups`` file groups of ``--rows`` rows each, then ``--log-writes``
upserts of 20 rows per group, so every group's slice has that many log files (the table a
compaction is due on). Every measured write meets that same table (a fresh copy, made untimed).
Measured, median of ``--runs``, wall and CPU time (on a shared machine the CPU time is the steadier
number): a 20-row upsert of keys in base files (updates: the lookup finds them all there and reads
no log), of new keys (inserts: every log file of the partition is searched, the worst case), and
half and half. Each version writes in its own long-lived process (each write opens the table
afresh, as a CLI or Airflow task does), alternating so the machine's drift hits both alike.

    mkdir /tmp/lake-base && git archive ed806ee | tar -x -C /tmp/lake-base   # the code to compare against
    PYTHONPATH=. .venv/bin/python benchmarks/key_lookup_logs.py --baseline /tmp/lake-base [--runs 9]

Without ``--baseline`` this checkout is measured twice (the ratio is then the noise floor).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
VARIANTS = ("updates", "inserts", "mixed")


def _batch(ids: list[str], ts: int):  # noqa: ANN202 (pyarrow is imported in the worker only)
    import pyarrow as pa

    return pa.table(
        {"id": ids, "ts": pa.array([ts] * len(ids), pa.int64()), "v": pa.array(range(len(ids)), pa.int64())}
    )


def build(path: Path, groups: int, rows: int, log_writes: int) -> None:
    """The table both versions write into (built by this checkout; the format is the same)."""
    from airflow_lake_provider.lake import LakeTable, write

    table = LakeTable.create(
        path, name="bench", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    for g in range(groups):  # one insert per group: one base file each
        write(table, _batch([f"k{g:03d}-{i:07d}" for i in range(rows)], 0), "insert", max_rows_per_file=rows)
    for n in range(log_writes):  # 20 rows per group per write: one log file per group per write
        ids = [f"k{g:03d}-{(n * 20 + i) * 7 % rows:07d}" for g in range(groups) for i in range(20)]
        write(table, _batch(ids, n + 1), "upsert")


def worker(pristine: Path, groups: int, rows: int) -> None:
    """Read ``variant run`` lines; write that upsert into a fresh copy of ``pristine`` (every write
    meets the same table); print its seconds."""
    from airflow_lake_provider.lake import LakeTable, write
    from airflow_lake_provider.lake.table.write import writer

    root = pristine.with_name(f"{pristine.name}-{os.getpid()}")
    shutil.copytree(pristine, root)
    # Imports and first-call costs, the log search included (a new key).
    write(LakeTable.open(root), _batch(["warm-up"], 1000), "upsert")
    print(f"ready {Path(writer.__file__).parents[4]}", flush=True)
    for line in sys.stdin:
        variant, run = line.split()
        n = int(run)
        updates = [f"k{(n + i) % groups:03d}-{(n * 13 + i * 7) % rows:07d}" for i in range(20)]
        inserts = [f"new-{variant}-{n}-{i:02d}" for i in range(20)]
        ids = {"updates": updates, "inserts": inserts, "mixed": updates[:10] + inserts[:10]}[variant]
        shutil.rmtree(root)
        shutil.copytree(pristine, root)
        wall, cpu = time.perf_counter(), time.process_time()
        write(LakeTable.open(root), _batch(ids, 2000 + n), "upsert")
        print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]), flush=True)


class _Version:
    def __init__(self, code: Path, table: Path, groups: int, rows: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(code)}
        argv = [
            sys.executable,
            __file__,
            "--worker",
            str(table),
            "--groups",
            str(groups),
            "--rows",
            str(rows),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        ready, self.code = self._line().split(" ", 1)  # where the worker's code was imported from
        assert ready == "ready" and Path(self.code) == code, (ready, self.code, code)

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def time(self, variant: str, run: int) -> tuple[float, float]:
        """(wall, CPU) seconds of one upsert."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{variant} {run}\n")
        self.proc.stdin.flush()
        wall, cpu = json.loads(self._line())
        return wall, cpu

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="checkout of the code to compare against")
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--log-writes", type=int, default=10)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.groups, args.rows)
        return
    sys.path.insert(0, str(HERE))
    baseline = (args.baseline or HERE).resolve()
    with tempfile.TemporaryDirectory(prefix="key_lookup_logs_") as tmp:
        root = Path(tmp)
        build(root / "table", args.groups, args.rows, args.log_writes)
        logs = sum(1 for p in (root / "table").iterdir() if ".log." in p.name)
        ours = _Version(HERE, root / "table", args.groups, args.rows)
        base = _Version(baseline, root / "table", args.groups, args.rows)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        try:
            for run in range(args.runs):
                for variant in VARIANTS:
                    pair = [("ours", ours), ("base", base)]
                    for name, version in pair if run % 2 else pair[::-1]:
                        times.setdefault((name, variant), []).append(version.time(variant, run))
        finally:
            ours.close()
            base.close()
    print(
        f"20-row upserts into one partition of {args.groups} file groups x {args.rows:,} rows, "
        f"{logs} log files ({args.log_writes} per group); median of {args.runs}"
    )
    print(f"  ours: code at {HERE}; baseline: code at {baseline}")
    for variant in VARIANTS:
        line = []
        for which, label in ((0, "wall"), (1, "CPU")):
            o = statistics.median(t[which] for t in times[("ours", variant)])
            b = statistics.median(t[which] for t in times[("base", variant)])
            line.append(f"{label} ours {o * 1000:6.1f} ms, baseline {b * 1000:6.1f} ms, ratio {o / b:.2f}")
        print(f"  {variant:>8}: " + "; ".join(line))
    print("  (target: ratio <= 1.5)")


if __name__ == "__main__":
    main()
