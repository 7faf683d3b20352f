"""file_group/data_files.py: a base file written part by part that fails midway is given up whole:
its parquet writer closed at once (not later by the garbage collector, into a closed file) and the
output discarded."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from crash_support import unraisable_after

from airflow_lake_provider.lake.file_group.data_files import store_base_parts
from airflow_lake_provider.lake.format.bloom_filter import DEFAULT_SETTINGS
from airflow_lake_provider.lake.storage import open_storage

SCHEMA = pa.schema([("_hoodie_record_key", pa.string()), ("v", pa.int64())])


def _failing_parts() -> Iterator[tuple[pa.Table, bool]]:
    yield pa.table({"_hoodie_record_key": ["a", "b"], "v": [1, 2]}, schema=SCHEMA), False
    raise RuntimeError("the merge failed")


@pytest.mark.parametrize("cores", [1, 2])  # written on the caller's thread, or on a writer thread
def test_a_write_that_fails_midway_closes_its_writer_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    monkeypatch.setattr(pa, "cpu_count", lambda: cores)
    storage = open_storage(tmp_path)
    unraisable = unraisable_after(monkeypatch)
    with pytest.raises(RuntimeError, match="the merge failed"):
        store_base_parts(storage, "p/f.parquet", SCHEMA, _failing_parts(), DEFAULT_SETTINGS)
    gc.collect()  # the writer, unreachable now, closed before: nothing to report
    assert unraisable == []
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
