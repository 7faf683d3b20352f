"""Benchmark (issue 27): a snapshot read of one MOR slice in a table of version 8 vs the same data in a
table of version 6, measured in the same run.

Builds two tables with ``read_slice.build_table`` (same seed, so the same rows: a ``--rows`` base file
and one log file of ``--updates`` updates), one per table version, then reads each ``--runs`` times,
the versions alternated round by round so the machine's drift hits both: ours
(``read_snapshot``) and hudi-rs, each reader in its own fresh process per round (after a warm-up read
in that process). Prints the medians, the ratio v8/v6 for each reader (target for ours: <= 1.1) and
each reader's peak RSS, and checks that the rows of v8 and v6 are the same.

    PYTHONPATH=. .venv/bin/python benchmarks/read_versions.py [--rows 1000000] [--updates 200000] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import read_slice  # noqa: E402  (the same slice builder and reader processes)

VERSIONS = (6, 8)
READERS = ("ours", "hudi-rs table")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3, help="rounds; each reads every version once")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="read_versions_"))
    try:
        for version in VERSIONS:
            start = time.perf_counter()
            read_slice.build_table(workdir / f"v{version}", args.rows, args.updates, table_version=version)
            print(f"built the v{version} table in {time.perf_counter() - start:.1f} s")
        times: dict[tuple[int, str], list[float]] = {(v, r): [] for v in VERSIONS for r in READERS}
        rss: dict[tuple[int, str], list[float]] = {(v, r): [] for v in VERSIONS for r in READERS}
        for round_no in range(args.runs):
            for version in VERSIONS if round_no % 2 == 0 else VERSIONS[::-1]:
                out = workdir / f"out-v{version}"
                out.mkdir(exist_ok=True)
                results = read_slice.run_readers(list(READERS), workdir / f"v{version}", 1, out)
                for reader, result in results.items():
                    if "error" in result:
                        raise SystemExit(f"v{version} {reader}: {result['error']}")
                    times[(version, reader)] += result["times"]
                    rss[(version, reader)].append(result["hwm_kib"] / 1024)

        import pyarrow.feather as feather

        same = all(
            feather.read_table(read_slice._out_file(workdir / "out-v6", r)).equals(
                feather.read_table(read_slice._out_file(workdir / "out-v8", r))
            )
            for r in READERS
        )
        head = ("reader", "v6 median s", "v8 median s", "v8/v6", "RSS v6 MB", "RSS v8 MB")
        print("\n{:<14} {:>11} {:>11} {:>6} {:>9} {:>9}".format(*head))
        for reader in READERS:
            v6, v8 = (statistics.median(times[(v, reader)]) for v in VERSIONS)
            r6, r8 = (max(rss[(v, reader)]) for v in VERSIONS)
            print(f"{reader:<14} {v6:>11.3f} {v8:>11.3f} {v8 / v6:>6.2f} {r6:>9.0f} {r8:>9.0f}")
        ours = statistics.median(times[(8, "ours")]) / statistics.median(times[(6, "ours")])
        verdict = "OK" if ours <= 1.1 else "over"
        rows = "yes" if same else "NO"
        print(f"SUMMARY: ours v8/v6 = {ours:.2f} (target <= 1.1: {verdict}); rows of v8 == v6: {rows}")
        return 0 if same else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
