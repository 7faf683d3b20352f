"""How much faster two processes finish independent work than one, on this machine, right now.

The compaction benchmark's ``local[2]`` vs ``local[1]`` speedup can be no better than what the
machine gives two processes that share nothing. On a small VM that varies from minute to minute
(the vCPUs share the host with others), so ``compaction.py`` measures it beside every pair of Spark
runs, for two kinds of work, none of it ours:

- ``arrow``: of the same kind as a merge: write a 250,000-row table as snappy parquet into memory,
  read it back, sort it by key and hash the keys (tens of MB allocated and touched per unit);
- ``python``: an integer loop in the interpreter, which touches almost no memory.

One process does ``units`` of the work; then two processes do ``units / 2`` each, at the same
time. Process start and imports are not timed.

    python benchmarks/parallel_ceiling.py [--units 8] [--runs 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

ROWS = 250_000
KINDS = ("arrow", "python")


def _table():  # noqa: ANN202
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(7)
    keys = rng.permutation(ROWS)
    return pa.table(
        {
            "key": pa.array([f"key-{k:09d}" for k in keys]),
            "seq": pa.array(np.arange(ROWS, dtype=np.int64)),
            "value": pa.array(rng.random(ROWS)),
            "city": pa.array(rng.choice(["amsterdam", "berlin", "chennai", "denver"], ROWS)),
        }
    )


def _unit(table) -> int:  # noqa: ANN001
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    back = pq.ParquetFile(pa.BufferReader(sink.getvalue())).read()
    ordered = back.sort_by("key")
    return len(pc.unique(ordered.column("key")))


def _loop(_table: object) -> int:
    total = 0
    for i in range(3_000_000):
        total += i * i & 7
    return total


def _worker(kind: str, units: int, conn) -> None:  # noqa: ANN001
    import pyarrow as pa

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    table = _table() if kind == "arrow" else None
    unit = _unit if kind == "arrow" else _loop
    unit(table)  # first use of each kernel, and the heap it needs
    conn.send("ready")
    conn.recv()
    start = time.perf_counter()
    for _ in range(units):
        unit(table)
    conn.send(time.perf_counter() - start)


def _timed(kind: str, processes: int, units: int) -> float:
    """Wall seconds until ``processes`` processes, started together, each finished ``units``."""
    ctx = mp.get_context("spawn")
    started = []
    for _ in range(processes):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(kind, units, child))
        proc.start()
        child.close()  # so that a worker's death ends recv() with EOFError instead of a hang
        started.append((proc, parent))
    try:
        for _, parent in started:
            parent.recv()  # ready
        t0 = time.perf_counter()
        for _, parent in started:
            parent.send("go")
        for _, parent in started:
            parent.recv()
        wall = time.perf_counter() - t0
    except (EOFError, BrokenPipeError):
        for proc, _ in started:  # the others may wait for "go": left alive, they would hang the exit
            proc.terminate()
        raise SystemExit("a calibration worker died") from None
    for proc, _ in started:
        proc.join()
    return wall


def measure(kind: str = "arrow", units: int = 8) -> float:
    """Speedup of two processes over one on ``units`` of independent work of ``kind``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if units < 2 or units % 2:
        raise ValueError(f"units must be an even number >= 2, got {units}")
    return _timed(kind, 1, units) / _timed(kind, 2, units // 2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    got: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(args.runs):
        for kind in KINDS:  # alternating, so drift hits both alike
            got[kind].append(measure(kind, args.units))
    for kind in KINDS:
        print(
            f"two processes vs one, {kind} work: median {statistics.median(got[kind]):.2f}x "
            f"(runs {' / '.join(f'{g:.2f}' for g in got[kind])})"
        )


if __name__ == "__main__":
    main()
