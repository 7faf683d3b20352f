"""The ``Storage`` interface: what every storage (local disk, S3) gives the table core.

A ``Storage`` is rooted at a table's base path; every path given to it is relative to that root,
``/``-separated (``""`` is the root itself, ``.hoodie/x.commit``, ``2024/01/f.parquet``). Kept apart
from the implementations so that ``storage.local`` (local disk, ``open_storage``) and ``storage.s3``
both build on it without importing each other in a circle.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from airflow_lake_provider.lake.errors import (
    LakeError,
    ObjectExistsError,
    StorageError,
    UnsafePathError,
)

HOODIE_DIR = ".hoodie"

# (name, size in bytes) of one file, as every listing returns it: plain tuples, since a large
# table lists 100,000s of files and the planners index them directly.
Listing = list[tuple[str, int]]


class Storage(ABC):
    """Files under one root (a table's base path); every ``rel`` argument is relative to it."""

    #: The root as users name it (absolute local path or URI), for messages and plans.
    root: str
    supports_append: bool = False
    #: How many small whole-file reads are worth running at once: 1 where a read is a local system
    #: call (threads only add work), more where each is a request whose wait can overlap (S3).
    concurrent_reads: int = 1

    def uri(self, rel: str = "") -> str:
        """The full location of ``rel``, for messages and Hudi plans (which hold absolute paths)."""
        return f"{self.root.rstrip('/')}/{rel}" if rel else self.root

    def child(self, rel: str) -> Storage:
        """A storage rooted at ``rel`` below this one (e.g. one table under a lake's root)."""
        raise NotImplementedError

    def local_folder(self) -> str | None:
        """The local folder this storage is rooted at, or ``None`` off the local file system."""
        return None

    # -- reads --------------------------------------------------------------------------------
    @abstractmethod
    def read(self, rel: str) -> bytes:
        """The whole file; ``ObjectNotFoundError`` if it does not exist."""

    @abstractmethod
    def read_range(self, rel: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end of the file)."""

    @abstractmethod
    def open_input(self, rel: str) -> Any:
        """A seekable binary file for readers that read parts of a file (parquet footers)."""

    @abstractmethod
    def size(self, rel: str) -> int:
        """Size in bytes; ``ObjectNotFoundError`` if the file does not exist."""

    @abstractmethod
    def exists(self, rel: str) -> bool: ...

    def is_link(self, rel: str) -> bool:
        """Whether ``rel`` is a symbolic link (object stores have none): a walk through it would
        reach files outside the table."""
        return False

    def modified_ms(self, rel: str) -> int:
        """Last modification time, epoch milliseconds (Hudi reads heartbeats by it)."""
        raise StorageError(f"{self.uri(rel)}: this storage does not report modification times")

    @abstractmethod
    def list(self, rel: str = "") -> Listing:
        """Files directly under folder ``rel`` with their sizes (empty if the folder does not exist)."""

    def list_names(self, rel: str = "") -> list[str]:
        """Names of the files directly under folder ``rel`` (cheaper than sizes on a local disk)."""
        return [name for name, _ in self.list(rel)]

    def list_known_sizes(self, rel: str = "") -> list[tuple[str, int | None]]:
        """Files directly under ``rel``, each with its size where the listing gives it for free and
        None where a size costs another call per file (a local disk): callers size what they use."""
        return list(self.list(rel))

    @abstractmethod
    def list_dir(self, rel: str = "") -> tuple[Listing, list[str]]:
        """Files (with sizes) and sub-folder names directly under ``rel`` (empty if missing)."""

    def walk(
        self, rel: str = "", descend: Callable[[str], bool] = lambda _: True
    ) -> Iterator[tuple[str, Listing]]:
        """(folder, its files) for ``rel`` and every sub-folder ``descend(sub_rel)`` accepts."""
        files, dirs = self.list_dir(rel)
        yield rel, files
        for name in sorted(dirs):
            sub = f"{rel}/{name}" if rel else name
            if descend(sub):
                yield from self.walk(sub, descend)

    # -- writes -------------------------------------------------------------------------------
    @abstractmethod
    def write(self, rel: str, data: bytes) -> None:
        """Write a whole file atomically (readers see the old file or the new one), replacing it."""

    @abstractmethod
    def create(self, rel: str, data: bytes) -> None:
        """Write a whole file atomically only if none exists; ``ObjectExistsError`` otherwise."""

    def create_in_order(self, files: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`create` each of ``files`` (path, content) in order, stopping at the first refused;
        all durable when it returns. Only for files of one step that nothing reads between them (a
        timeline instant's requested and inflight files): a crash before it returns may keep any
        of them, as a crash between single creates would keep a prefix."""
        for rel, data in files:
            self.create(rel, data)

    def check_path(self, rel: str, what: str | None = None) -> None:
        """Raise ``StorageError`` if no file can be created at ``rel`` (``what`` names it in the message)."""
        if "\x00" in rel:
            raise StorageError(f"{what or repr(self.uri(rel))}: a path cannot hold a NUL byte")

    def make_folder(self, rel: str) -> None:  # noqa: B027 (deliberately a no-op by default)
        """Create a folder and its parents (a no-op where folders are implied by the files in them)."""

    def touch(self, rel: str) -> None:
        """Create an empty file if none exists (markers, success files); an existing one is kept."""
        with contextlib.suppress(ObjectExistsError):
            self.create(rel, b"")

    def append(self, rel: str, data: bytes) -> tuple[int, int]:
        """Append to a file (created if missing); return (size before, size after)."""
        raise StorageError(f"{self.uri(rel)}: this storage cannot append to files")

    @abstractmethod
    def open_output(self, rel: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A binary file to stream a new file into; durable (and visible whole) when the block exits."""

    def copy(self, src: str, dst: str) -> None:
        """Make ``dst`` a copy of file ``src`` (replacing it), appearing whole at once; ``src`` stays.

        ``ObjectNotFoundError`` if ``src`` does not exist. Publishes a file written under a hidden
        name (plain-directory merges) without passing its bytes through this process where the
        storage can avoid it (a hard link on a local disk, a server-side copy on S3).
        """
        raise StorageError(f"{self.uri(src)}: this storage cannot copy files")

    def parent(self) -> Storage | None:
        """The storage rooted at the folder above this root (``None`` at the top: ``/``, a bucket)."""
        return None

    # -- deletes ------------------------------------------------------------------------------
    @abstractmethod
    def delete(self, rel: str) -> bool:
        """Delete one file; ``False`` if it was already gone."""

    @abstractmethod
    def delete_tree(self, rel: str) -> None:
        """Delete a folder and everything under it (nothing if it is gone); a file or link at ``rel``
        is deleted itself, never what a link points to."""

    #: Whether ``delete_many`` deletes many files per request (object stores) rather than one by one.
    supports_bulk_delete: bool = False

    def delete_many(self, rels: Sequence[str]) -> list[str]:
        """Delete files whose absence is all that matters (one already gone counts as deleted).

        Returns the paths that could not be deleted (each is logged by the caller).
        """
        failed = []
        for rel in rels:
            try:
                self.delete(rel)
            except (LakeError, OSError):
                failed.append(rel)
        return failed

    def check_deletable(self, rel: str) -> str:
        """The path guard of every deleting service: ``rel`` normalised, or ``UnsafePathError``.

        Refuses what lies outside the root (``..``, absolute paths elsewhere, links that lead
        out), the root itself, and anything under ``.hoodie/`` (only the timeline store deletes there).
        """
        if "\x00" in rel:
            raise UnsafePathError(f"refusing to delete {rel!r}: a path cannot hold a NUL byte")
        norm = self._inside(rel)
        if not norm or norm.split("/", 1)[0] == HOODIE_DIR:
            raise UnsafePathError(
                f"refusing to delete {rel!r}: it is the table root or under {HOODIE_DIR}/ of {self.root}"
            )
        return norm

    def delete_data_file(self, rel: str) -> bool:
        """Delete a data file after the path guard; ``False`` if it was already gone."""
        return self.delete(self.check_deletable(rel))

    def _inside(self, rel: str) -> str:
        """``rel`` (table-relative, or absolute under the root) normalised; refuses any that leaves it."""
        given = rel
        root = self.root.rstrip("/")
        rel = _plain_location(rel)
        if rel == root:
            return ""
        if rel.startswith(root + "/"):
            rel = rel[len(root) + 1 :]
        elif rel.startswith("/") or "://" in rel:
            rel = self._relative_to_root(rel)
        parts: list[str] = []
        for part in rel.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                raise UnsafePathError(f"refusing {given!r}: it is outside the table base path {self.root}")
            parts.append(part)
        return "/".join(parts)

    def _relative_to_root(self, absolute: str) -> str:
        """An absolute path that is not spelled under ``root``: refused (a local storage may know
        it is the same place by another name)."""
        raise UnsafePathError(f"refusing {absolute!r}: it is outside the table base path {self.root}")

    # -- coordination -------------------------------------------------------------------------
    @abstractmethod
    def lock(self, rel: str, what: str, wait_seconds: float = 0.0) -> contextlib.AbstractContextManager[None]:
        """Hold an exclusive lock named by file ``rel``; ``ServiceBusyError`` naming ``what`` if taken."""


def _plain_location(path: str) -> str:
    """Hudi's spellings of a location (``file:/p``, ``file:///p``, ``s3a://b/k``) as we spell them
    (``/p``, ``s3://b/k``), so plans written by Java compare with our roots."""
    if path[:5].lower() == "file:":
        parsed = urllib.parse.urlsplit(path)
        return urllib.parse.unquote(parsed.path) if parsed.netloc in ("", "localhost") else path
    scheme, sep, rest = path.partition("://")
    if sep and scheme.lower() in ("s3a", "s3n"):
        return f"s3://{rest}"
    return path
