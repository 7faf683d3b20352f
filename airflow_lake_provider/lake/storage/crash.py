"""Crash injection for tests: a storage around another that dies right after its k-th durable step.

``CrashingStorage(inner, after=k)`` does what ``inner`` does and counts each durable step it completes
(write, create, append, copy, delete); right after the k-th it raises ``SimulatedCrash``, as if the
process died there. Tests hand it (or a table opened over it) to the code under test in place of the
plain storage; the storages themselves know nothing of crashes, and nothing is switched on for the
whole process. ``after=None`` only counts, to learn how many steps an action takes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from airflow_lake_provider.lake.storage.base import Listing, Storage


class SimulatedCrash(BaseException):  # noqa: N818 (a crash, not an error: nothing may catch it)
    """Raised by ``CrashingStorage``; a ``BaseException`` so no ``except Exception`` recovers from it
    in process, exactly as nothing runs after a process is killed."""


class CrashInjector:
    """The count of durable steps shared by the storages it wraps (a table's root, its children and
    parent): ``SimulatedCrash`` right after step ``after`` (``None``: count only)."""

    def __init__(self, after: int | None = None) -> None:
        self.after = after
        self.steps: list[str] = []

    def wrap(self, storage: Storage) -> CrashingStorage:
        """``storage`` with its durable steps counted here."""
        return CrashingStorage(storage, injector=self)

    def step(self, kind: str, rel: str) -> None:
        self.steps.append(f"{kind} {rel}")
        if self.after is not None and len(self.steps) == self.after:
            raise SimulatedCrash(f"crash after step {self.after}: {kind} {rel}")


class CrashingStorage(Storage):
    """``inner`` with each durable step counted, and a ``SimulatedCrash`` right after step ``after``.

    A step counts once it is done: a write, create or copy that succeeded, an append, a ``touch``
    (a marker made or kept), a stream closed whole (``open_output``), a file ``delete`` that found the
    file, a ``delete_tree`` that found something. An object store's bulk deletes (``delete_many``,
    ``delete_tree``) are one request each and count no step; a storage without them deletes, and
    counts, file by file.
    """

    def __init__(
        self, inner: Storage, after: int | None = None, *, injector: CrashInjector | None = None
    ) -> None:
        self.inner = inner
        self.injector = injector if injector is not None else CrashInjector(after)
        self.root = inner.root
        self.supports_append = inner.supports_append
        self.concurrent_reads = inner.concurrent_reads
        self.supports_bulk_delete = inner.supports_bulk_delete

    @property
    def steps(self) -> list[str]:
        """The durable steps counted so far (``"<kind> <rel>"``), across every storage sharing them."""
        return self.injector.steps

    def _step(self, kind: str, rel: str) -> None:
        self.injector.step(kind, rel)

    def uri(self, rel: str = "") -> str:
        return self.inner.uri(rel)

    def child(self, rel: str) -> Storage:
        return CrashingStorage(self.inner.child(rel), injector=self.injector)

    def parent(self) -> Storage | None:
        above = self.inner.parent()
        return None if above is None else CrashingStorage(above, injector=self.injector)

    def local_folder(self) -> str | None:
        return self.inner.local_folder()

    # -- reads: as the inner storage --------------------------------------------------------------
    def read(self, rel: str) -> bytes:
        return self.inner.read(rel)

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        return self.inner.read_range(rel, start, length)

    def open_input(self, rel: str) -> Any:
        return self.inner.open_input(rel)

    def size(self, rel: str) -> int:
        return self.inner.size(rel)

    def exists(self, rel: str) -> bool:
        return self.inner.exists(rel)

    def is_link(self, rel: str) -> bool:
        return self.inner.is_link(rel)

    def modified_ms(self, rel: str) -> int:
        return self.inner.modified_ms(rel)

    def list(self, rel: str = "") -> Listing:
        return self.inner.list(rel)

    def list_names(self, rel: str = "") -> list[str]:
        return self.inner.list_names(rel)

    def list_known_sizes(self, rel: str = "") -> list[tuple[str, int | None]]:
        return self.inner.list_known_sizes(rel)

    def list_dir(self, rel: str = "") -> tuple[Listing, list[str]]:
        return self.inner.list_dir(rel)

    def walk(
        self, rel: str = "", descend: Callable[[str], bool] = lambda _: True
    ) -> Iterator[tuple[str, Listing]]:
        return self.inner.walk(rel, descend)

    def check_path(self, rel: str, what: str | None = None) -> None:
        self.inner.check_path(rel, what)

    def check_deletable(self, rel: str) -> str:
        return self.inner.check_deletable(rel)

    def _inside(self, rel: str) -> str:
        return self.inner._inside(rel)

    # -- durable steps ----------------------------------------------------------------------------
    def write(self, rel: str, data: bytes) -> None:
        self.inner.write(rel, data)
        self._step("write", rel)

    def create(self, rel: str, data: bytes) -> None:
        self.inner.create(rel, data)
        self._step("create", rel)

    def make_folder(self, rel: str) -> None:
        self.inner.make_folder(rel)

    def touch(self, rel: str) -> None:
        self.inner.touch(rel)
        self._step("create", rel)

    def append(self, rel: str, data: bytes) -> tuple[int, int]:
        sizes = self.inner.append(rel, data)
        self._step("append", rel)
        return sizes

    @contextlib.contextmanager
    def open_output(self, rel: str) -> Iterator[IO[bytes]]:
        with self.inner.open_output(rel) as fh:
            yield fh
        self._step("create", rel)

    def copy(self, src: str, dst: str) -> None:
        self.inner.copy(src, dst)
        self._step("copy", dst)

    def delete(self, rel: str) -> bool:
        deleted = self.inner.delete(rel)
        if deleted:
            self._step("delete", rel)
        return deleted

    def delete_tree(self, rel: str) -> None:
        # One step where the storage deletes file by file and something was there; an object store's
        # bulk delete is one request and no step (as ``delete_many``).
        sub = self.inner._inside(rel)
        there = not self.supports_bulk_delete and (self.inner.exists(sub) or self.inner.is_link(sub))
        self.inner.delete_tree(rel)
        if there:
            self._step("delete", rel)

    def delete_many(self, rels: Sequence[str]) -> list[str]:
        if self.inner.supports_bulk_delete:
            return self.inner.delete_many(rels)
        return super().delete_many(rels)  # one by one, through ``delete``: each file a step

    def lock(self, rel: str, what: str, wait_seconds: float = 0.0) -> contextlib.AbstractContextManager[None]:
        return self.inner.lock(rel, what, wait_seconds)
