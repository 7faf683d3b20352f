"""Crash injection for tests: a simulated process kill right after the k-th durable step.

Every storage reports each durable step it completes (write, create, append, copy, delete) to
``durable_step``; inside ``inject_crash(k)`` the k-th raises ``SimulatedCrash``, as if the process
died there. The storages hold no test state themselves: the one switch is here, off outside tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class SimulatedCrash(BaseException):  # noqa: N818 (a crash, not an error: nothing may catch it)
    """Raised by the crash-injection hook; a ``BaseException`` so no ``except Exception`` recovers
    from it in process, exactly as nothing runs after a process is killed."""


class CrashInjector:
    """Counts durable steps (write, create, delete, append) of every storage in this process and
    raises ``SimulatedCrash`` right after step ``after`` (``None``: count only). Tests only."""

    def __init__(self, after: int | None) -> None:
        self.after = after
        self.steps: list[str] = []

    def step(self, kind: str, rel: str) -> None:
        self.steps.append(f"{kind} {rel}")
        if self.after is not None and len(self.steps) == self.after:
            raise SimulatedCrash(f"crash after step {self.after}: {kind} {rel}")


_CRASH: CrashInjector | None = None


@contextlib.contextmanager
def inject_crash(after: int | None) -> Iterator[CrashInjector]:
    """Enable the crash hook for the block (off otherwise); ``after=None`` only counts the steps."""
    global _CRASH
    injector = CrashInjector(after)
    previous, _CRASH = _CRASH, injector
    try:
        yield injector
    finally:
        _CRASH = previous


def durable_step(kind: str, rel: str) -> None:
    """Called by every storage right after each durable step (write, create, append, copy, delete)."""
    if _CRASH is not None:
        _CRASH.step(kind, rel)
