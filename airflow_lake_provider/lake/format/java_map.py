"""The iteration order of a ``java.util.HashMap<String, V>``: what decides the order Java writes a
map's entries in (an Avro map, e.g. the metadata table's file listings).

A HashMap iterates bucket by bucket (the key's ``String.hashCode`` spread as ``h ^ (h >>> 16)``,
masked by the table size), and within a bucket in insertion order (a resize splits buckets keeping
that order; a removal does not shrink the table). The table size follows Java 8+'s rules: 16 on the
first insertion into ``new HashMap<>()``, ``tableSizeFor(n)`` for ``new HashMap<>(n)``, presized by
``putAll`` into an empty map, doubled once the size passes 0.75 of it (``put`` checks after
inserting, ``merge`` before). Buckets turned into trees (8 or more keys in one bucket) are not
modelled: their order is insertion order here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Generic, TypeVar

V = TypeVar("V")
_MAX_CAPACITY = 1 << 30


@lru_cache(maxsize=1 << 16)
def string_hash(key: str) -> int:
    """Java's ``String.hashCode`` as an unsigned 32-bit value (cached: a metadata table's merges
    hash the same file names over and over)."""
    data = key.encode("utf-16-be", errors="surrogatepass")
    h = 0
    for unit in struct.unpack(f">{len(data) // 2}H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h


def table_size_for(cap: int) -> int:
    """``HashMap.tableSizeFor``: the power of two at or above ``cap`` (at least 1)."""
    n = 1
    while n < cap and n < _MAX_CAPACITY:
        n <<= 1
    return n


class JavaHashMap(Generic[V]):
    """Insertion-ordered entries plus the table size a Java HashMap would have after the same calls."""

    def __init__(self, initial_capacity: int | None = None) -> None:
        self._entries: dict[str, tuple[int, V]] = {}
        self._seq = 0
        self._capacity = 0  # no table yet
        self._threshold = table_size_for(initial_capacity) if initial_capacity is not None else 0

    @classmethod
    def read(cls, entries: Iterable[tuple[str, V]], size: int) -> JavaHashMap[V]:
        """A map as Avro's reader builds one: ``new HashMap<>(size)``, then a put per entry."""
        out: JavaHashMap[V] = cls(size)
        for key, value in entries:
            out.put(key, value)
        return out

    def _resize(self) -> None:
        if self._capacity == 0:
            self._capacity = self._threshold if self._threshold > 0 else 16
        else:
            self._capacity = min(self._capacity * 2, _MAX_CAPACITY)
        self._threshold = int(self._capacity * 0.75)

    def _insert(self, key: str, value: V) -> None:
        self._entries[key] = (self._seq, value)
        self._seq += 1

    def put(self, key: str, value: V) -> None:
        if self._capacity == 0:
            self._resize()
        if key in self._entries:
            self._entries[key] = (self._entries[key][0], value)
            return
        self._insert(key, value)
        if len(self._entries) > self._threshold:
            self._resize()

    def put_all(self, entries: list[tuple[str, V]]) -> None:
        if not entries:
            return
        if self._capacity == 0:
            wanted = int(len(entries) / 0.75 + 1.0)
            if wanted > self._threshold:
                self._threshold = table_size_for(wanted)
        elif len(entries) > self._threshold:
            self._resize()
        for key, value in entries:
            self.put(key, value)

    def merge(self, key: str, value: V, remap: Callable[[V, V], V | None]) -> None:
        """``HashMap.merge``: absent, insert ``value``; present, ``remap(old, value)`` (None removes)."""
        if self._capacity == 0 or len(self._entries) > self._threshold:
            self._resize()
        if key not in self._entries:
            self._insert(key, value)
            return
        seq, old = self._entries[key]
        new = remap(old, value)
        if new is None:
            del self._entries[key]
        else:
            self._entries[key] = (seq, new)

    def items(self) -> list[tuple[str, V]]:
        """The entries in the map's iteration order."""
        mask = max(self._capacity, 1) - 1

        def bucket(key: str) -> int:
            h = string_hash(key)
            return (h ^ (h >> 16)) & mask

        ordered = sorted(self._entries.items(), key=lambda kv: (bucket(kv[0]), kv[1][0]))
        return [(key, value) for key, (_, value) in ordered]
