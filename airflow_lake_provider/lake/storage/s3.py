"""``S3Storage``: a table under ``s3://bucket/prefix`` behind the ``Storage`` interface, on obstore.

Imported only when a location is ``s3://`` (``open_storage``), so the core stays light elsewhere.

How each primitive maps onto S3:

- create-once: a conditional put (``If-None-Match: *``); S3 answers 412 to the loser of a race.
- listing: sizes come from the listing itself (no HEAD per object); ``walk`` lists each accepted
  top-level folder with one recursive listing instead of one delimiter request per folder.
- folders are implied by keys: a "folder" exists when some key starts with ``folder/``.
- no append: every write of a log file is a new object (the writer writes a new log version).
- lock: an object created conditionally holding its owner and expiry, refreshed while held, taken
  over (conditionally, on its ETag) only once expired, so a crashed holder cannot keep it forever.

Credentials and endpoint come from the standard variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``); they are handed to obstore and never put in a message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import socket
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import IO, Any

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import S3Store

from airflow_lake_provider.lake.errors import (
    InvalidLocationError,
    ObjectExistsError,
    ObjectNotFoundError,
    ServiceBusyError,
    StorageAccessError,
    StorageError,
    StorageUnavailableError,
)
from airflow_lake_provider.lake.storage.base import Listing, Storage
from airflow_lake_provider.lake.storage.ranged import RangedReader

log = logging.getLogger(__name__)

KEY_LIMIT = 1024  # bytes of UTF-8 in one S3 key
LOCK_TTL_SECONDS = 60.0
# Streams up to this size stay in memory before the put; larger ones spill to a temp file.
SPOOL_BYTES = 64 * 1024 * 1024


def store_config_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """obstore's S3 settings from the standard AWS variables (only the ones that are set)."""
    env = os.environ if environ is None else environ
    names = {
        "access_key_id": "AWS_ACCESS_KEY_ID",
        "secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
        "endpoint": "AWS_ENDPOINT_URL",
    }
    config = {key: env[var] for key, var in names.items() if env.get(var)}
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        config["region"] = region
    return config


def _allow_http(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("AWS_ALLOW_HTTP", "").strip().lower() in ("1", "true", "yes")


_CREDENTIALS_IN_URL = re.compile(r"//[^/@\s]+@")
_ACCESS_CODES = (
    "<Code>InvalidAccessKeyId</Code>",
    "<Code>SignatureDoesNotMatch</Code>",
    "<Code>AccessDenied</Code>",
    "403 Forbidden",
)


class S3Storage(Storage):
    """Objects under ``s3://bucket/prefix``; table-relative paths are keys below the prefix."""

    supports_append = False
    concurrent_reads = 8  # each read is a GET: their waits overlap

    def __init__(
        self,
        uri: str,
        *,
        store: Any = None,
        environ: Mapping[str, str] | None = None,
        lock_ttl_seconds: float = LOCK_TTL_SECONDS,
    ) -> None:
        parsed = urllib.parse.urlsplit(uri)
        if parsed.scheme.lower() != "s3" or not parsed.netloc:
            raise InvalidLocationError(f"{uri}: not an s3://bucket/prefix location")
        self.bucket = parsed.netloc
        if any(p in (".", "..") for p in parsed.path.split("/")):
            # Not folders on S3 but literal key parts, which the S3 client refuses at the first
            # request (a ValueError, not a storage error): refuse the location itself, named.
            raise InvalidLocationError(f"{uri}: an S3 key has no . or .. folders: name the key as it is")
        self.prefix = "/".join(p for p in parsed.path.split("/") if p)
        self.root = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self.lock_ttl_seconds = lock_ttl_seconds
        if store is None:
            client: dict[str, Any] = {
                "connect_timeout": timedelta(seconds=5),
                # Bounds one request (a stalled endpoint fails, and is retried, within minutes,
                # not hours); large enough for a base file's single put on a slow link.
                "timeout": timedelta(seconds=120),
            }
            config = store_config_from_env(environ)
            if _allow_http(environ):
                client["allow_http"] = True
            elif config.get("endpoint", "").strip().lower().startswith("http://"):
                # obstore would fail each request with a bare "HTTP error: builder error".
                endpoint = _CREDENTIALS_IN_URL.sub("//***@", config["endpoint"])
                raise InvalidLocationError(
                    f"{self.root}: the endpoint {endpoint} (AWS_ENDPOINT_URL) is plain http: set "
                    "AWS_ALLOW_HTTP=true (a lake connection: its extra allow_http) to allow it, or "
                    "use an https:// endpoint"
                )
            store = S3Store(
                self.bucket,
                config=config,
                client_options=client,
                # obstore retries for minutes by default; a dead endpoint should fail in seconds.
                retry_config={"max_retries": 3, "retry_timeout": timedelta(seconds=20)},
            )
        self.store = store

    def child(self, rel: str) -> S3Storage:
        sub = self._inside(rel)
        return S3Storage(self.uri(sub), store=self.store, lock_ttl_seconds=self.lock_ttl_seconds)

    def _key(self, rel: str) -> str:
        rel = rel.strip("/")
        if self.prefix:
            return f"{self.prefix}/{rel}" if rel else self.prefix
        return rel

    def _folder_prefix(self, rel: str) -> str:
        key = self._key(rel)
        return f"{key}/" if key else ""

    # -- errors -------------------------------------------------------------------------------
    def _error(self, exc: BaseException, rel: str, doing: str) -> StorageError:
        """A ``StorageError`` naming the URI for an obstore error (whose text may be long XML)."""
        uri = self.uri(rel)
        # The text holds the request URL (keys, and any user:password@ of the endpoint): match only
        # S3's XML error codes and status lines, never names, and redact credentials in URLs.
        text = _CREDENTIALS_IN_URL.sub("//***@", str(exc))
        if "<Code>NoSuchBucket</Code>" in text:
            return InvalidLocationError(f"{uri}: bucket {self.bucket!r} does not exist")
        if isinstance(exc, PermissionDeniedError | UnauthenticatedError) or any(
            code in text for code in _ACCESS_CODES
        ):
            return StorageAccessError(
                f"{uri}: access denied while trying to {doing}; check the credentials "
                "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or the lake connection)"
            )
        if isinstance(exc, NotFoundError | FileNotFoundError):
            return ObjectNotFoundError(f"{uri} does not exist")
        if isinstance(exc, AlreadyExistsError | PreconditionError):
            return ObjectExistsError(f"{uri} already exists; not overwriting it")
        first = text.split("\n", 1)[0][:300]
        if "error sending request" in text or "connect" in text.lower() or "timed out" in text:
            return StorageUnavailableError(f"{uri}: cannot reach the S3 endpoint to {doing}: {first}")
        return StorageError(f"{uri}: cannot {doing}: {first}")

    @contextlib.contextmanager
    def _mapped(self, rel: str, doing: str) -> Iterator[None]:
        try:
            yield
        except BaseError as exc:
            raise self._error(exc, rel, doing) from None
        except FileNotFoundError as exc:  # obstore's NotFoundError is FileNotFoundError itself
            raise self._error(exc, rel, doing) from None

    # -- reads --------------------------------------------------------------------------------
    def read(self, rel: str) -> bytes:
        with self._mapped(rel, "read"):
            return bytes(obstore.get(self.store, self._key(rel)).bytes())

    def read_range(self, rel: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        with self._mapped(rel, "read"):
            try:
                return bytes(obstore.get_range(self.store, self._key(rel), start=start, length=length))
            except BaseError as exc:
                if " 416 " not in str(exc):
                    raise
        self.size(rel)  # 416: the range starts at or past the end (or the file is gone)
        return b""

    def open_input(self, rel: str) -> RangedReader:
        return RangedReader(self, rel, self.size(rel))

    def size(self, rel: str) -> int:
        with self._mapped(rel, "read"):
            return int(obstore.head(self.store, self._key(rel))["size"])

    def modified_ms(self, rel: str) -> int:
        with self._mapped(rel, "read"):
            return int(obstore.head(self.store, self._key(rel))["last_modified"].timestamp() * 1000)

    def exists(self, rel: str) -> bool:
        key = self._key(rel)
        if key:
            with self._mapped(rel, "check"):
                try:
                    obstore.head(self.store, key)
                    return True
                except FileNotFoundError:
                    pass
        with self._mapped(rel, "list"):
            for chunk in obstore.list(self.store, self._folder_prefix(rel), chunk_size=1):
                if chunk:
                    return True
                break
        return False

    def list(self, rel: str = "") -> Listing:
        return self.list_dir(rel)[0]

    def list_dir(self, rel: str = "") -> tuple[Listing, list[str]]:
        prefix = self._folder_prefix(rel)
        with self._mapped(rel, "list"):
            result = obstore.list_with_delimiter(self.store, prefix or None)
        files = [
            (meta["path"][len(prefix) :], int(meta["size"]))
            for meta in result["objects"]
            if not meta["path"].endswith("/") and meta["path"] != prefix.rstrip("/")
        ]
        dirs = [p[len(prefix) :].rstrip("/") for p in result["common_prefixes"]]
        return files, [d for d in dirs if d]

    def walk(
        self, rel: str = "", descend: Callable[[str], bool] = lambda _: True
    ) -> Iterator[tuple[str, Listing]]:
        # One delimiter listing of rel, then one recursive listing per accepted sub-folder: a
        # folder the caller skips (.hoodie/ with its history) is never listed at all.
        files, dirs = self.list_dir(rel)
        yield rel, files
        for name in sorted(dirs):
            sub = f"{rel}/{name}" if rel else name
            if descend(sub):
                yield from self._walk_listed(sub, descend)

    def _walk_listed(self, rel: str, descend: Callable[[str], bool]) -> Iterator[tuple[str, Listing]]:
        prefix = self._folder_prefix(rel)
        folders: dict[str, Listing] = {"": []}
        children: dict[str, set[str]] = {"": set()}
        with self._mapped(rel, "list"):
            for chunk in obstore.list(self.store, prefix, chunk_size=1000):
                for meta in chunk:
                    sub = meta["path"][len(prefix) :]
                    folder, _, name = sub.rpartition("/")
                    parts = folder.split("/") if folder else []
                    for depth in range(len(parts)):  # every folder on the way is a child of its parent
                        parent, here = "/".join(parts[:depth]), "/".join(parts[: depth + 1])
                        children.setdefault(parent, set()).add(parts[depth])
                        children.setdefault(here, set())
                        folders.setdefault(here, [])
                    if name:  # a key ending in "/" is a folder marker, not a file
                        folders[folder].append((name, int(meta["size"])))

        def visit(sub: str) -> Iterator[tuple[str, Listing]]:
            yield (f"{rel}/{sub}" if sub else rel), folders[sub]
            for name in sorted(children[sub]):
                nxt = f"{sub}/{name}" if sub else name
                if descend(f"{rel}/{nxt}"):
                    yield from visit(nxt)

        yield from visit("")

    # -- writes -------------------------------------------------------------------------------
    def write(self, rel: str, data: bytes) -> None:
        with self._mapped(rel, "write"):
            obstore.put(self.store, self._key(rel), data, mode="overwrite")

    def create(self, rel: str, data: bytes) -> None:
        with self._mapped(rel, "create"):
            obstore.put(self.store, self._key(rel), data, mode="create")

    def check_path(self, rel: str, what: str | None = None) -> None:
        super().check_path(rel, what)
        size = len(self._key(rel).encode("utf-8", "surrogateescape"))
        if size > KEY_LIMIT:
            raise StorageError(
                f"{what or repr(self.uri(rel))}: an S3 key of {size} bytes, where at most {KEY_LIMIT} fit"
            )

    def touch(self, rel: str) -> None:
        with contextlib.suppress(ObjectExistsError):
            self.create(rel, b"")

    @contextlib.contextmanager
    def open_output(self, rel: str) -> Iterator[IO[bytes]]:
        # Nothing is visible until the block exits: one put (multipart above 5 MB), all or nothing.
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as buffer:
            yield buffer  # type: ignore[misc]
            buffer.seek(0)
            with self._mapped(rel, "write"):
                obstore.put(self.store, self._key(rel), buffer, mode="overwrite")

    def copy(self, src: str, dst: str) -> None:
        # A server-side CopyObject: the bytes never pass through this process; dst appears whole.
        with self._mapped(src, "copy"):
            obstore.copy(self.store, self._key(src), self._key(dst), overwrite=True)

    def parent(self) -> S3Storage | None:
        if not self.prefix:
            return None
        above = self.prefix.rsplit("/", 1)[0] if "/" in self.prefix else ""
        uri = f"s3://{self.bucket}/{above}" if above else f"s3://{self.bucket}"
        return S3Storage(uri, store=self.store, lock_ttl_seconds=self.lock_ttl_seconds)

    # -- deletes ------------------------------------------------------------------------------
    def delete(self, rel: str) -> bool:
        # S3 answers a DELETE of a missing key with success: a HEAD first tells "already gone".
        key = self._key(rel)
        with self._mapped(rel, "delete"):
            try:
                obstore.head(self.store, key)
            except FileNotFoundError:
                return False
            obstore.delete(self.store, key)
        return True

    supports_bulk_delete = True

    def delete_many(self, rels: Sequence[str]) -> list[str]:
        # DeleteObjects: 1,000 keys a request, no HEAD (a missing key is a success, as the clean wants).
        failed: list[str] = []
        for start in range(0, len(rels), 1000):
            chunk = list(rels[start : start + 1000])
            try:
                obstore.delete(self.store, [self._key(rel) for rel in chunk])
            except (BaseError, FileNotFoundError) as exc:
                log.warning(
                    "bulk delete under %s failed (%s); deleting one by one", self.root, type(exc).__name__
                )
                for rel in chunk:
                    try:
                        with self._mapped(rel, "delete"):
                            obstore.delete(self.store, self._key(rel))
                    except StorageError:
                        failed.append(rel)
        return failed

    def delete_tree(self, rel: str) -> None:
        sub = self._inside(rel)
        if not sub and not self.prefix:
            raise StorageError(f"{self.root}: refusing to delete a whole bucket")
        prefix = self._folder_prefix(sub)
        with self._mapped(sub, "delete"):
            keys = [m["path"] for chunk in obstore.list(self.store, prefix, chunk_size=1000) for m in chunk]
            if sub:  # an object named like the folder is deleted too (exists() sees it)
                keys.append(self._key(sub))
            for start in range(0, len(keys), 1000):  # DeleteObjects takes 1,000 keys a request
                obstore.delete(self.store, keys[start : start + 1000])

    # -- coordination -------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, rel: str, what: str, wait_seconds: float = 0.0) -> Iterator[None]:
        key = self._key(rel)
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + wait_seconds
        ttl = self.lock_ttl_seconds
        while True:
            etag = self._try_lock(rel, key, owner, what, ttl)
            if isinstance(etag, str):
                break
            if time.monotonic() >= deadline:
                waited = f" (waited {wait_seconds:g} s)" if wait_seconds else ""
                raise ServiceBusyError(f"{self.root}: {what}{waited}; {etag[0]}")
            time.sleep(min(0.2, ttl / 4))
        refresher = _LockRefresher(self, rel, key, owner, what, etag)
        refresher.start()
        try:
            yield
        finally:
            refresher.stop()
            self._release(rel, key, owner)

    def _lock_body(self, owner: str, what: str, ttl: float) -> bytes:
        return json.dumps({"owner": owner, "what": what, "ttl": ttl, "expires": time.time() + ttl}).encode()

    def _try_lock(self, rel: str, key: str, owner: str, what: str, ttl: float) -> str | tuple[str]:
        """Our ETag once the lock is ours; else ``(who holds it,)``."""
        with self._mapped(rel, "lock"):
            try:
                return obstore.put(self.store, key, self._lock_body(owner, what, ttl), mode="create")["e_tag"]
            except (AlreadyExistsError, PreconditionError):
                pass
            try:
                held = obstore.get(self.store, key)
            except FileNotFoundError:
                return ("the lock was just released",)
            meta = held.meta
            written = meta["last_modified"].timestamp()  # the store's clock, not the holder's
            try:
                holder = json.loads(bytes(held.bytes()))
                # A live holder rewrites it every third of its TTL: the holder's own expiry (its
                # clock) counts only up to a TTL after the store last saw it written, so a holder
                # whose clock runs ahead (or an expiry of "inf") cannot keep it for longer.
                held_ttl = float(holder.get("ttl", ttl))
                bound = written + (held_ttl if math.isfinite(held_ttl) and held_ttl > 0 else ttl)
                expires = float(holder["expires"])
                expires = min(expires, bound) if not math.isnan(expires) else written
                name = str(holder.get("owner", "?"))
            except (ValueError, KeyError, TypeError, AttributeError):  # unreadable: a TTL after its write
                expires = written + ttl
                name = "an unreadable lock object"
            if time.time() < expires:
                left = expires - time.time()
                return (f"lock {self.uri(rel)} held by {name} for {left:.0f} s more",)
            try:  # expired: take it over, unless someone else did (or the holder refreshed) first
                body = self._lock_body(owner, what, ttl)
                result = obstore.put(self.store, key, body, mode={"e_tag": meta["e_tag"]})
            except (PreconditionError, AlreadyExistsError, FileNotFoundError):
                return (f"lock {self.uri(rel)} changed hands",)
            log.warning("took over expired lock %s from %s", self.uri(rel), name)
            return result["e_tag"]

    def _release(self, rel: str, key: str, owner: str) -> None:
        # Read, then delete if still ours: obstore's delete takes no If-Match, so a takeover landing
        # between the two (only possible after our lock expired unrefreshed) would lose its lock.
        try:
            held = obstore.get(self.store, key)
            if json.loads(bytes(held.bytes())).get("owner") == owner:
                obstore.delete(self.store, key)
            else:
                log.warning("lock %s was taken over while held; not releasing it", self.uri(rel))
        except (BaseError, FileNotFoundError, ValueError) as exc:  # released work is done: only report
            log.warning("could not release lock %s: %s", self.uri(rel), self._error(exc, rel, "unlock"))


class _LockRefresher(threading.Thread):
    """Pushes a held lock's expiry forward every third of its TTL (a conditional put on our ETag)."""

    def __init__(self, storage: S3Storage, rel: str, key: str, owner: str, what: str, etag: str) -> None:
        super().__init__(name=f"lake-lock-refresh:{key}", daemon=True)
        self.storage, self.rel, self.key, self.owner, self.what, self.etag = (
            storage,
            rel,
            key,
            owner,
            what,
            etag,
        )
        self._stop_event = threading.Event()

    def run(self) -> None:
        ttl = self.storage.lock_ttl_seconds
        while not self._stop_event.wait(ttl / 3):
            body = self.storage._lock_body(self.owner, self.what, ttl)
            try:
                self.etag = obstore.put(self.storage.store, self.key, body, mode={"e_tag": self.etag})[
                    "e_tag"
                ]
            except (PreconditionError, FileNotFoundError):
                log.warning("lock %s was taken over while held", self.storage.uri(self.rel))
                return
            except BaseError as exc:  # a blip: try again at the next tick, before the TTL runs out
                log.warning(
                    "could not refresh lock %s: %s", self.storage.uri(self.rel), exc.__class__.__name__
                )

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
