"""How a ``lake`` command loads pyarrow: its allocator set up for a short process.

Arrow's allocator (mimalloc) backs its memory with transparent huge pages: every 2 MiB page a
process touches first is zeroed whole by the kernel. A ``lake read`` touches most of its memory
once (decoded row groups, the log, the output's pages), and that zeroing was a fifth of its CPU
time (``benchmarks/read_slice.py``); with 4 KiB pages the same work costs about 0.2 s less. A
long-lived process (an Airflow worker, a Spark Python worker) is left as it is: only the CLI calls
this, before anything loads pyarrow.
"""

from __future__ import annotations

import os
import sys

# mimalloc reads its options from the environment once, when libarrow loads.
THP_OPTION = "MIMALLOC_ALLOW_THP"


def load_arrow() -> None:
    """Import pyarrow with mimalloc's huge pages off, unless pyarrow is loaded already or the user
    chose (``MIMALLOC_ALLOW_THP`` set). The environment is restored after the import: the commands'
    child processes (spark-submit) inherit it unchanged."""
    if "pyarrow" in sys.modules or THP_OPTION in os.environ:
        return
    os.environ[THP_OPTION] = "0"
    try:
        import pyarrow  # noqa: F401 - loads libarrow, whose allocator reads the option now
    finally:
        del os.environ[THP_OPTION]
