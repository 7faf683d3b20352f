"""``stream_slices``: parts of slices read by parallel threads come out in slice order, a slice's
error surfaces at that slice, and closing the stream early stops the threads."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.table.stream import stream_slices


def _parts(slice_: int) -> Iterator[pa.Table]:
    rng = random.Random(slice_)
    for part in range(slice_ % 4):
        time.sleep(rng.random() / 200)  # slices finish out of order
        yield pa.table({"slice": [slice_], "part": [part]})


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_parts_come_in_slice_order(workers: int) -> None:
    got = [(t["slice"][0].as_py(), t["part"][0].as_py()) for t in stream_slices(_parts, range(11), workers)]
    assert got == [(s, p) for s in range(11) for p in range(s % 4)]


def test_an_error_surfaces_at_its_slice_after_the_parts_before_it() -> None:
    def parts(slice_: int) -> Iterator[pa.Table]:
        if slice_ == 3:
            raise ValueError("slice 3 is broken")
        yield from _parts(slice_)

    seen = []
    with pytest.raises(ValueError, match="slice 3 is broken"):
        for t in stream_slices(parts, range(8), 3):
            seen.append(t["slice"][0].as_py())
    assert seen == [1, 2, 2]


def test_closing_early_stops_every_thread() -> None:
    produced = []

    def endless(slice_: int) -> Iterator[pa.Table]:
        for part in range(10_000):
            produced.append(slice_)
            yield pa.table({"slice": [slice_], "part": [part]})

    before = threading.active_count()
    stream = stream_slices(endless, range(5), 3, ahead=2)
    assert next(stream)["part"][0].as_py() == 0
    stream.close()  # joins the pool: returns only once every producer stopped
    assert threading.active_count() == before
    count = len(produced)
    time.sleep(0.3)
    assert len(produced) == count < 50  # at most a few parts ahead per slice were ever made
