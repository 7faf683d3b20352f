"""spark_jobs.worker_process: priming, the retaining allocator and the frozen heap of a merge worker.

Each policy changes process-wide state, so those tests run in a child interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake import spark_submit
from airflow_lake_provider.lake.format.base_file import DICTIONARY_PAGE_LIMIT, write_base_file
from airflow_lake_provider.spark_jobs.worker_process import WORKER_ENV, prime_merge

ROOT = Path(__file__).resolve().parents[3]


def _child(code: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_prime_merge_runs_the_merge_path_and_leaves_nothing_behind() -> None:
    before = set(Path(tempfile.gettempdir()).glob("lake-warmup-*"))
    assert prime_merge() > 0
    assert set(Path(tempfile.gettempdir()).glob("lake-warmup-*")) == before


def test_retained_memory_is_reused_without_faulting_it_in_again() -> None:
    got = _child(
        """
import json, resource
import numpy as np, pyarrow as pa
from airflow_lake_provider.spark_jobs.worker_process import retain_freed_memory
def merge_like_pass():  # many column-sized buffers, alive together, then all freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffers = [pa.allocate_buffer(4 << 20) for _ in range(64)]
    for buf in buffers:
        np.frombuffer(buf, dtype=np.uint8)[::4096] = 1
    del buffers
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
on = retain_freed_memory()
passes = [merge_like_pass() for _ in range(2)]
print(json.dumps({"on": on, "again": retain_freed_memory(), "backend": pa.default_memory_pool().backend_name,
                  "passes": passes}))
"""
    )
    assert got["on"] is True and got["again"] is True and got["backend"] == "system"
    pages = (256 << 20) // 4096
    # The first pass faults the 256 MB in; the second finds it in the heap. (glibc left as it is
    # maps each of these buffers on its own and unmaps it when freed: ~all pages fault again.)
    assert got["passes"][0] > pages // 2
    assert got["passes"][1] < pages // 4


ARENAS = """
import ctypes, json, os, sys, tempfile, threading
from airflow_lake_provider.spark_jobs.worker_process import retain_freed_memory
if sys.argv[1] == "retain":
    retain_freed_memory()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
def arenas():
    path = tempfile.mktemp()
    out = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, out)
    libc.fclose(out)
    with open(path) as fh:
        text = fh.read()
    os.unlink(path)
    return text.count("<heap nr=")
before = arenas()
barrier = threading.Barrier(4)
def work():  # all four alive at once, each allocating from C (64 KB is past Python's small-object pool)
    barrier.wait()
    kept = [bytearray(64 << 10) for _ in range(20)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"added": arenas() - before}))
"""


def _arenas(mode: str) -> int:
    """glibc arenas (heaps) that four concurrent new threads added."""
    proc = subprocess.run(
        [sys.executable, "-c", ARENAS, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])["added"]


def test_retained_memory_puts_threads_started_later_on_existing_heaps() -> None:
    # glibc left as it is gives concurrent threads heaps of their own, which it unmaps when empty.
    assert _arenas("default") >= 2
    assert _arenas("retain") == 0


def test_worker_env_in_effect_needs_every_setting() -> None:
    # polars is imported first, as in a worker: it rewrites _RJEM_MALLOC_CONF on import
    code = "import polars\nfrom airflow_lake_provider.spark_jobs.worker_process import worker_env_in_effect\n"
    code += "print(worker_env_in_effect())"
    base = {k: v for k, v in os.environ.items() if k not in WORKER_ENV}

    def run(env: dict[str, str]) -> str:
        return subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    assert run({**base, **WORKER_ENV}) == "True"
    polars_first = {**base, **WORKER_ENV, "_RJEM_MALLOC_CONF": "dirty_decay_ms:500,muzzy_decay_ms:1000,"}
    polars_first["_RJEM_MALLOC_CONF"] += WORKER_ENV["_RJEM_MALLOC_CONF"]
    assert run(polars_first) == "True"
    assert run({**base, **WORKER_ENV, "_RJEM_MALLOC_CONF": "dirty_decay_ms:-1"}) == "False"
    assert run({**base, "MALLOC_ARENA_MAX": "1"}) == "False"
    assert run(base) == "False"


def test_prepare_merge_worker_primes_once_and_freezes_the_heap() -> None:
    got = _child(
        """
import gc, json, sys
import pyarrow as pa
from airflow_lake_provider.spark_jobs.worker_process import prepare_merge_worker
first = prepare_merge_worker(1)
frozen = gc.get_freeze_count()
second = prepare_merge_worker(3)
loaded = sorted(m for m in ("polars", "fastavro", "pyarrow.parquet") if m in sys.modules)
got = {"first": first, "second": second, "frozen": frozen, "cpus": pa.cpu_count(), "modules": loaded}
print(json.dumps(got))
"""
    )
    assert got["first"] > 0 and got["second"] == 0.0  # primed on the first call only
    assert got["frozen"] > 10_000  # the imported libraries' objects, out of the collector's way
    assert got["cpus"] == 3
    assert got["modules"] == ["fastavro", "polars", "pyarrow.parquet"]


def test_job_conf_defaults_and_caller_overrides() -> None:
    conf = spark_submit.job_conf(None)
    assert conf["spark.python.unix.domain.socket.enabled"] == "true"
    # The driver logs with our log4j2 file (warnings only) from its first line on.
    log_config = spark_submit.job_script("log4j2.properties")
    assert conf["spark.driver.extraJavaOptions"] == (
        f"{spark_submit.LIGHT_JVM_OPTIONS} -Dlog4j2.configurationFile=file:{log_config}"
    )
    assert conf["spark.executor.extraJavaOptions"] == spark_submit.LIGHT_JVM_OPTIONS
    assert conf["spark.log.level"] == "WARN"
    mine = spark_submit.job_conf({"spark.driver.extraJavaOptions": "-Dx=1", "spark.executor.cores": 2})
    assert mine["spark.driver.extraJavaOptions"] == "-Dx=1"  # replaced whole, not merged
    assert mine["spark.executor.cores"] == "2" and mine["spark.log.level"] == "WARN"


def test_base_file_dictionary_encodes_only_the_repetitive_columns(tmp_path: Path) -> None:
    n = 200_000
    rng = np.random.default_rng(7)
    rows = pa.table(
        {
            # unique, and random hex so snappy cannot shrink the dictionary page: 3.2 MB of values
            "_hoodie_record_key": [f"{i:06d}{v:010x}" for i, v in enumerate(rng.integers(0, 2**40, n))],
            "city": ["amsterdam", "berlin", "chennai", "denver"] * (n // 4),
        }
    )
    ours = tmp_path / "ours.parquet"
    write_base_file(ours, rows, bloom=None)  # the encodings, not the 431 KB bloom filter, compared
    arrow_default = tmp_path / "default.parquet"
    pq.write_table(rows, arrow_default, compression="snappy")

    def dictionary_page_bytes(path: Path, column: int) -> int:
        chunk = pq.ParquetFile(path).metadata.row_group(0).column(column)
        return chunk.data_page_offset - chunk.dictionary_page_offset if chunk.has_dictionary_page else 0

    # The unique column is written plain from the start (Arrow's default hashes it into a dictionary
    # of more than twice our page limit before giving up).
    assert dictionary_page_bytes(ours, 0) == 0
    assert dictionary_page_bytes(arrow_default, 0) > 2 * DICTIONARY_PAGE_LIMIT
    # A low-cardinality column keeps its dictionary, and every row reads back.
    assert 0 < dictionary_page_bytes(ours, 1) < 1024
    assert pq.ParquetFile(ours).metadata.row_group(0).column(1).total_uncompressed_size < n  # < 1 byte a row
    assert pq.read_table(ours).equals(rows)
    assert ours.stat().st_size < arrow_default.stat().st_size
