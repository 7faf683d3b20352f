"""The key lookup's bloom filter check: probing the footer text vs decoding the filter whole.

A base file's footer holds its bloom filter as base64 text (431 KB at Hudi's defaults, 60,000
entries at 1e-9). The lookup asks it about the few keys of a write that fall in the file's key
range. ``probe_footer`` decodes only the quads those keys' bits lie in; the baseline decodes the
whole filter (``from_footer``) and asks it (``might_contain``), as the lookup did before. Both
answer the same, bit for bit (tests/unit/lake/table/index/test_bloom.py). Median of ``--runs``,
alternated so the machine's drift hits both.

    PYTHONPATH=. .venv/bin/python benchmarks/bloom_probe.py [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.format import bloom_filter as bf  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    footer = bf.build(pa.array([f"key-{i:08d}" for i in range(10_000)])).footer()
    print(f"default filter: {len(footer[bf.FILTER_KEY.encode()]):,} characters of base64")
    for count in (1, 20, 1_000):
        keys = pa.array([f"key-{i:08d}" for i in range(0, 2 * count, 2)])
        whole, probe = [], []
        for _ in range(args.runs):
            started = time.perf_counter()
            expected = bf.from_footer(footer).might_contain(keys)  # type: ignore[union-attr]
            whole.append(time.perf_counter() - started)
            started = time.perf_counter()
            answer = bf.probe_footer(footer, keys)
            probe.append(time.perf_counter() - started)
            assert answer is not None and answer.tolist() == expected.tolist()
        w, p = statistics.median(whole) * 1000, statistics.median(probe) * 1000
        print(f"{count:>5} keys: decode whole {w:.3f} ms, probe {p:.3f} ms, ratio {p / w:.2f}")


if __name__ == "__main__":
    main()
