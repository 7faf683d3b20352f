"""``stream_slices``: parts of slices read by parallel threads come out in slice order, a slice's
error surfaces at that slice, and closing the stream early stops the threads. ``read_ahead``: one
iterator produced on a thread that starts at once, stays a bounded number of items ahead, hands its
error over in order, closes what it produced from, and stops when the block is left."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.table.stream import read_ahead, stream_slices


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


def test_read_ahead_starts_at_once_and_stays_a_bounded_number_ahead() -> None:
    produced: list[int] = []
    started = threading.Event()

    def items() -> Iterator[int]:
        started.set()
        for n in range(100):
            produced.append(n)
            yield n

    with read_ahead(items, ahead=2) as stream:
        assert started.wait(5)  # producing before the consumer asks
        time.sleep(0.2)
        # two waiting in the queue, one made and waiting to be put
        assert produced == [0, 1, 2]
        assert list(stream) == list(range(100))


def test_read_ahead_hands_over_the_error_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("row group 3 is broken")

    seen = []
    with pytest.raises(ValueError, match="row group 3 is broken"), read_ahead(items) as stream:
        for n in stream:
            seen.append(n)
    assert seen == [1, 2]


def test_leaving_read_ahead_early_stops_its_thread_and_closes_the_source() -> None:
    closed = threading.Event()

    def endless() -> Iterator[int]:
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()  # e.g. the base file's handle

    before = threading.active_count()
    with read_ahead(endless, ahead=2) as stream:
        assert next(stream) == 0
    assert closed.is_set()  # closed by the producer as it stopped, not left to the garbage collector
    assert threading.active_count() == before
