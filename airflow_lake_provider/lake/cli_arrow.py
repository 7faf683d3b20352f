"""How a ``lake`` command loads pyarrow: set up for a short process.

Arrow's allocator (mimalloc) asks for transparent huge pages: when the kernel has them, every
2 MiB page a process touches first is zeroed whole. A ``lake read`` touches most of its memory once
(decoded row groups, the log, the output's pages), and that zeroing was then a fifth of its CPU
time (``benchmarks/read_slice.py``); on 4 KiB pages the same work cost 0.2-0.3 s less.
pyarrow also loads numpy, whose OpenBLAS starts a thread per core that spins for a while (3% of
the read's CPU) though nothing here does linear algebra: one thread is asked for. Then the objects
loaded so far (modules, classes, functions: they live as long as the process) are moved out of the
cyclic garbage collector's way: its full collections, triggered by the imports that follow (polars,
for the Avro decode), walked them all again, up to ~0.1 s of CPU.
A long-lived process (an Airflow worker, a Spark Python worker) is left as it is: only the CLI
calls this, before anything loads pyarrow.
"""

from __future__ import annotations

import gc
import os
import sys

# Read from the environment once, when the library loads (libarrow's mimalloc, numpy's OpenBLAS).
SETTINGS = {"MIMALLOC_ALLOW_THP": "0", "OPENBLAS_NUM_THREADS": "1"}


def load_arrow() -> None:
    """Import pyarrow with ``SETTINGS``, each unless the user set it, then freeze what is loaded
    (``gc.freeze``); nothing when pyarrow is loaded already. The environment is restored after the
    import: the commands' child processes (spark-submit) inherit it unchanged."""
    if "pyarrow" in sys.modules:
        return
    added = {k: v for k, v in SETTINGS.items() if k not in os.environ}
    os.environ.update(added)
    try:
        import pyarrow  # noqa: F401 - loads libarrow and numpy, which read the settings now
    finally:
        for key in added:
            del os.environ[key]
    gc.freeze()
