"""Parts produced by background threads and consumed in order, with a bounded number of parts
waiting: a snapshot streamed out holds a few parts, not the table, and a slice's base file is
decoded while its log is (Arrow and the Avro decoder release the GIL)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

S = TypeVar("S")
T = TypeVar("T")
_PUT_WAIT_SECONDS = 0.1
_END = object()


class _Feed:
    """One producer's parts, at most ``ahead`` waiting; its error, then the end, travel in order."""

    def __init__(self, stop: threading.Event, ahead: int) -> None:
        self._stop = stop
        self._queue: queue.Queue[object] = queue.Queue(maxsize=ahead)

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_PUT_WAIT_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce(self, parts: Callable[[], Iterator[object]]) -> None:
        if self._stop.is_set():
            return
        produced = parts()
        try:
            for part in produced:
                if not self._put(part):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(exc)
            return
        finally:
            close = getattr(produced, "close", None)
            if close is not None:  # a generator's open files close here, not when it is collected
                close()
        self._put(_END)

    def consume(self) -> Iterator[object]:
        while (item := self._queue.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item


def stream_slices(
    parts_of: Callable[[S], Iterator[T]],
    slices: Sequence[S],
    max_workers: int = 4,
    ahead: int = 2,
) -> Iterator[T]:
    """Every part of ``parts_of(s)`` for each slice ``s`` in order. Up to ``max_workers`` slices are
    read at once, each at most ``ahead`` parts ahead of the consumer. The first error of a slice is
    raised when the consumer reaches that slice; closing the iterator early stops the threads."""
    if max_workers <= 1 or len(slices) <= 1:
        for slice_ in slices:
            yield from parts_of(slice_)
        return
    stop = threading.Event()
    feeds = [_Feed(stop, ahead) for _ in slices]
    # Slices start in order (the pool's queue is FIFO), so the one being consumed always has a thread.
    with ThreadPoolExecutor(max_workers=min(max_workers, len(slices)), thread_name_prefix="slice") as pool:
        for feed, slice_ in zip(feeds, slices, strict=True):
            pool.submit(feed.produce, lambda s=slice_: parts_of(s))
        try:
            for feed in feeds:
                yield from feed.consume()  # type: ignore[misc]
        finally:
            stop.set()


@contextlib.contextmanager
def read_ahead(parts: Callable[[], Iterator[T]], ahead: int = 2) -> Iterator[Iterator[T]]:
    """``parts()``'s items, produced by a thread that starts on entry and stays at most ``ahead``
    items ahead of the consumer; its error is raised where the consumer reaches it. Leaving the
    block (early, or on an error) stops the thread and waits for it."""
    stop = threading.Event()
    feed = _Feed(stop, ahead)
    thread = threading.Thread(target=feed.produce, args=(parts,), name="read-ahead", daemon=True)
    thread.start()
    try:
        yield feed.consume()  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
