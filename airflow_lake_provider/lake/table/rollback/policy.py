"""Failed-writes policy and heartbeats, with Hudi's keys and defaults.

``EAGER`` (default): a writer rolls back every pending write before it starts (one writer at a time).
``LAZY``: running writes refresh ``.hoodie/.heartbeat/<instant>``; only writes whose heartbeat expired
(no beat for ``interval * tolerable misses``) are rolled back. ``NEVER``: nothing automatically.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from airflow_lake_provider.lake.config import registry as r
from airflow_lake_provider.lake.config.values import FailedWritesPolicy
from airflow_lake_provider.lake.errors import HeartbeatError
from airflow_lake_provider.lake.timeline.store import TimelineStore

POLICY_KEYS = r.FAILED_WRITES_POLICY.names
INTERVAL_KEY = r.HEARTBEAT_INTERVAL_MS.key
MISSES_KEY = r.HEARTBEAT_TOLERABLE_MISSES.key
DEFAULT_INTERVAL_MS = r.HEARTBEAT_INTERVAL_MS.default
DEFAULT_MISSES = r.HEARTBEAT_TOLERABLE_MISSES.default
__all__ = ["FailedWritesConfig", "FailedWritesPolicy", "heartbeat", "heartbeat_expired", "now_ms"]


@dataclass(frozen=True)
class FailedWritesConfig:
    policy: FailedWritesPolicy = FailedWritesPolicy.EAGER
    interval_ms: int = DEFAULT_INTERVAL_MS
    tolerable_misses: int = DEFAULT_MISSES

    @property
    def expiry_ms(self) -> int:
        return self.interval_ms * self.tolerable_misses

    @classmethod
    def from_options(cls, *sources: Mapping[str, object]) -> FailedWritesConfig:
        """Later sources override earlier ones (table properties, then the caller's options)."""
        return cls(
            r.FAILED_WRITES_POLICY.read(*sources),
            r.HEARTBEAT_INTERVAL_MS.read(*sources),
            r.HEARTBEAT_TOLERABLE_MISSES.read(*sources),
        )


def last_heartbeat_ms(store: TimelineStore, timestamp: str) -> int | None:
    """When the write at ``timestamp`` last beat (``None``: no heartbeat file).

    Our files hold the time in milliseconds; Hudi's are empty and dated by their modification time.
    """
    rel = store.heartbeats.path(timestamp)
    if not store.storage.exists(rel):
        return None
    text = store.storage.read(rel).strip()
    if not text:
        return store.storage.modified_ms(rel)
    if not text.isdigit():
        raise HeartbeatError(
            f"{store.storage.uri(rel)}: heartbeat file holds {text[:40].decode('utf-8', 'replace')!r}, "
            "not a time in milliseconds"
        )
    return int(text)


def heartbeat_expired(store: TimelineStore, timestamp: str, config: FailedWritesConfig, now_ms: int) -> bool:
    last = last_heartbeat_ms(store, timestamp)
    return last is None or now_ms - last > config.expiry_ms


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@contextlib.contextmanager
def heartbeat(store: TimelineStore, timestamp: str, config: FailedWritesConfig) -> Iterator[None]:
    """Beat for ``timestamp`` every interval while the block runs (LAZY only), then drop the file."""
    if config.policy is not FailedWritesPolicy.LAZY:
        yield
        return
    stop = threading.Event()
    store.heartbeats.beat(timestamp, now_ms())

    def loop() -> None:
        while not stop.wait(config.interval_ms / 1000):
            with contextlib.suppress(Exception):  # a missed beat is what the tolerance is for
                store.heartbeats.beat(timestamp, now_ms())

    beater = threading.Thread(target=loop, name=f"lake-heartbeat-{timestamp}", daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()
