"""Parts of several file slices produced by parallel threads and consumed in slice order, with a
bounded number of parts waiting per slice: a snapshot streamed out holds a few parts, not the table."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa

S = TypeVar("S")
_PUT_WAIT_SECONDS = 0.1
_END = object()


def stream_slices(
    parts_of: Callable[[S], Iterator[pa.Table]],
    slices: Sequence[S],
    max_workers: int = 4,
    ahead: int = 2,
) -> Iterator[pa.Table]:
    """Every part of ``parts_of(s)`` for each slice ``s`` in order. Up to ``max_workers`` slices are
    read at once (Arrow and the Avro decoder release the GIL), each at most ``ahead`` parts ahead
    of the consumer. The first error of a slice is raised when the consumer reaches that slice;
    closing the iterator early stops the threads."""
    if max_workers <= 1 or len(slices) <= 1:
        for slice_ in slices:
            yield from parts_of(slice_)
        return
    stop = threading.Event()
    queues: list[queue.Queue[object]] = [queue.Queue(maxsize=ahead) for _ in slices]

    def put(q: queue.Queue[object], item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=_PUT_WAIT_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce(index: int) -> None:
        q = queues[index]
        if stop.is_set():
            return
        try:
            for part in parts_of(slices[index]):
                if not put(q, part):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put(q, exc)
            return
        put(q, _END)

    # Slices start in order (the pool's queue is FIFO), so the one being consumed always has a thread.
    with ThreadPoolExecutor(max_workers=min(max_workers, len(slices)), thread_name_prefix="slice") as pool:
        for index in range(len(slices)):
            pool.submit(produce, index)
        try:
            for q in queues:
                while (item := q.get()) is not _END:
                    if isinstance(item, BaseException):
                        raise item
                    yield item  # type: ignore[misc]
        finally:
            stop.set()
