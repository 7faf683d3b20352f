"""lake.worker_process: priming, the retaining allocator and the frozen heap of a merge worker.

Each policy changes process-wide state, so those tests run in a child interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake import spark_submit
from airflow_lake_provider.lake.base_file import DICTIONARY_PAGE_LIMIT, write_base_file
from airflow_lake_provider.lake.worker_process import prime_merge

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
from airflow_lake_provider.lake.worker_process import retain_freed_memory
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


def test_prepare_merge_worker_primes_once_and_freezes_the_heap() -> None:
    got = _child(
        """
import gc, json, sys
import pyarrow as pa
from airflow_lake_provider.lake.worker_process import prepare_merge_worker
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
    assert conf["spark.driver.extraJavaOptions"] == spark_submit.LIGHT_JVM_OPTIONS
    assert conf["spark.log.level"] == "WARN"
    mine = spark_submit.job_conf({"spark.driver.extraJavaOptions": "-Dx=1", "spark.executor.cores": 2})
    assert mine["spark.driver.extraJavaOptions"] == "-Dx=1"  # replaced whole, not merged
    assert mine["spark.executor.cores"] == "2" and mine["spark.log.level"] == "WARN"


def test_base_file_abandons_dictionaries_of_unique_columns_early(tmp_path: Path) -> None:
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
    write_base_file(ours, rows)
    arrow_default = tmp_path / "default.parquet"
    pq.write_table(rows, arrow_default, compression="snappy")

    def dictionary_page_bytes(path: Path, column: int) -> int:
        chunk = pq.ParquetFile(path).metadata.row_group(0).column(column)
        assert chunk.has_dictionary_page
        return chunk.data_page_offset - chunk.dictionary_page_offset

    assert dictionary_page_bytes(ours, 0) <= DICTIONARY_PAGE_LIMIT + 64 * 1024
    assert dictionary_page_bytes(arrow_default, 0) > 2 * DICTIONARY_PAGE_LIMIT
    # A low-cardinality column keeps its dictionary, and every row reads back.
    assert dictionary_page_bytes(ours, 1) < 1024
    assert pq.ParquetFile(ours).metadata.row_group(0).column(1).total_uncompressed_size < n  # < 1 byte a row
    assert pq.read_table(ours).equals(rows)
    assert ours.stat().st_size < arrow_default.stat().st_size
