"""Fitting a long-lived process (a Spark Python worker) to run merge after merge.

Measured on these 2-vCPU VMs (``benchmarks/compaction.py`` and experiments around it):

- One-off costs of a fresh worker land on its first merge unless paid up front: imports, Arrow's
  query engine starting on the first ``group_by``, and pyarrow importing pandas on the first
  parquet write (about 0.3 s). :func:`prime_merge` runs the whole path once on a tiny table.
- With Arrow's default pool (mimalloc in the pip wheels), two workers merging at once were
  slower than with :func:`retain_freed_memory`, which makes Arrow allocate from glibc's heap and
  keep what it frees between merges (8 merges in 2 processes: 1.8-2.2 s against 2.0-2.3 s; one
  process alike; peak RSS ~465 MB against ~490 MB). Cost: a worker holds its peak heap until it
  exits. glibc still re-faults some single buffers of tens of MB; many column-sized ones are kept.
- Memory freed by one merge and faulted in again by the next cost system time, and several times
  more per page with two workers faulting at once (in ``local[2]``, 0.13-0.41 s of system time per
  merge against 0.01-0.06 s in ``local[1]``). :data:`WORKER_ENV`, which must be in the worker's
  environment from its start, keeps it: later merges faulted 9,000-15,000 pages each without it,
  about 1,000 with it.
- PySpark's daemon runs ``gc.collect()`` after every task; with Arrow, polars and the core loaded
  that walk took tens of ms per task. :func:`freeze_long_lived_objects` moves what exists after
  the imports out of the collector's reach (objects are still freed by reference counting).

Only for processes that do nothing else: the CLI and Airflow workers keep the defaults.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_KEEP = 1 << 30  # bytes: trim and mmap thresholds, far above a column buffer's size

_state = {"memory": False, "primed": False}

# For the worker process's environment (a Spark job sets them through ``spark.executorEnv.*``):
# one glibc arena for every thread (per-thread arenas give their heaps back when they empty), and
# polars' jemalloc never purging the pages it freed (polars asks for 0.5 s; on import it puts its
# own settings in front of ours, and jemalloc lets the later ones win).
WORKER_ENV = {
    "MALLOC_ARENA_MAX": "1",
    "_RJEM_MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1",
}


def worker_env_in_effect() -> bool:
    """Whether this process started with :data:`WORKER_ENV` (allocators read it only at start)."""
    for name, value in WORKER_ENV.items():
        ours = value.split(",")
        if os.environ.get(name, "").split(",")[-len(ours) :] != ours:
            return False
    return True


def retain_freed_memory() -> bool:
    """Make Arrow allocate from glibc's heap and keep freed memory in the process.

    Idempotent. Returns whether the policy is in force; on a C library without ``mallopt`` (musl,
    macOS) nothing changes and it returns False.
    """
    if _state["memory"]:
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        log.debug("no mallopt in this C library: keeping Arrow's default memory pool")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    # One arena: threads started from now on (Arrow's and polars' pools) allocate from the main heap,
    # which the thresholds keep, instead of per-thread heaps that glibc unmaps when they empty.
    if not (
        mallopt(_M_MMAP_THRESHOLD, _KEEP) and mallopt(_M_TRIM_THRESHOLD, _KEEP) and mallopt(_M_ARENA_MAX, 1)
    ):
        log.debug("mallopt refused a setting: keeping Arrow's default memory pool")
        return False
    pa.set_memory_pool(pa.system_memory_pool())
    _state["memory"] = True
    return True


def prime_merge() -> float:
    """Write, update and compact a three-row MOR table in a temporary folder; return the seconds.

    Raises ``CompactionError`` if the compaction did not merge the three rows (a priming that
    silently did nothing would leave the one-off costs on the first real merge).
    """
    from airflow_lake_provider.lake.errors import CompactionError
    from airflow_lake_provider.lake.services.compaction.executor import run_compaction
    from airflow_lake_provider.lake.services.compaction.result import Outcome
    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import writer

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lake-warmup-") as folder:
        table = LakeTable.create(
            Path(folder) / "t",
            name="warmup",
            table_type="mor",
            record_key_fields=("id",),
            precombine_field="ts",
        )
        rows = pa.table({"id": ["a", "b", "c"], "ts": [1, 1, 1], "v": [1.0, 2.0, 3.0]})
        writer.write(table, rows, "insert")
        writer.write(table, pa.table({"id": ["b"], "ts": [2], "v": [5.0]}), "upsert")
        _, executed = run_compaction(table, force=True)
    if executed.outcome is not Outcome.COMPLETED or executed.records_written != 3:
        raise CompactionError(f"priming merge did not compact its table: {executed.to_json()}")
    return time.monotonic() - started


def freeze_long_lived_objects() -> None:
    """Collect once, then exempt every object alive now from later cyclic collections.

    Call after the imports and the priming merge.
    """
    gc.collect()
    gc.freeze()


def prepare_merge_worker(cpus: int) -> float:
    """Fit this process for merges (idempotent): Arrow capped to ``cpus`` threads, freed memory
    kept, and, on the first call, one priming merge and a frozen heap.

    Returns the seconds the priming took (0.0 when it had been done).
    """
    retain_freed_memory()  # first: it applies to threads started after it
    # Arrow's pool defaults to every core of the host; concurrent tasks would fight over them.
    pa.set_cpu_count(max(1, cpus))
    if _state["primed"]:
        return 0.0
    seconds = prime_merge()
    freeze_long_lived_objects()
    _state["primed"] = True
    return seconds
