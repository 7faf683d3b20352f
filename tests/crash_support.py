"""Crash injection in tests: the code under test gets a table (or storage) over a ``CrashingStorage``.

``crashing(table, k)`` is ``table`` (its files, config and clock) seen through a storage that raises
``SimulatedCrash`` right after its k-th durable step; ``crashing(table)`` only counts the steps
(``steps_of``). ``crashing_hook_tables`` gives every table an Airflow hook opens such a storage, for
operators, which build their hooks themselves. Nothing is switched on for the whole process.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import overload

import pytest

from airflow_lake_provider.lake.storage import CrashingStorage, CrashInjector, Storage
from airflow_lake_provider.lake.table.table import LakeTable


@overload
def crashing(
    target: LakeTable, after: int | None = None, *, injector: CrashInjector | None = None
) -> LakeTable: ...
@overload
def crashing(
    target: Storage, after: int | None = None, *, injector: CrashInjector | None = None
) -> Storage: ...
def crashing(
    target: LakeTable | Storage, after: int | None = None, *, injector: CrashInjector | None = None
) -> LakeTable | Storage:
    """``target`` (a table: its files, config and clock) through a storage that crashes right after
    durable step ``after`` (``None``: counts only); what shares an ``injector`` shares one count."""
    injector = injector if injector is not None else CrashInjector(after)
    if isinstance(target, Storage):
        return injector.wrap(target)
    clone = LakeTable(injector.wrap(target.storage), target.config, target.clock)
    clone.option_defaults = target.option_defaults
    clone.footer_summaries = target.footer_summaries
    return clone


def steps_of(target: LakeTable | Storage) -> list[str]:
    """The durable steps counted so far through a table or storage from :func:`crashing`."""
    storage = target if isinstance(target, Storage) else target.storage
    assert isinstance(storage, CrashingStorage), f"{storage.root} was not opened through crashing()"
    return storage.steps


@contextlib.contextmanager
def crashing_hook_tables(monkeypatch: pytest.MonkeyPatch, after: int | None) -> Iterator[CrashInjector]:
    """For the block, every table a ``LakeHook`` opens counts its durable steps in one injector that
    crashes right after step ``after``."""
    from airflow_lake_provider.hooks.lake import LakeHook

    injector = CrashInjector(after)
    open_table = LakeHook.open_table

    def open_crashing(self: LakeHook, table_path: str) -> LakeTable:
        return crashing(open_table(self, table_path), injector=injector)

    with monkeypatch.context() as patch:
        patch.setattr(LakeHook, "open_table", open_crashing)
        yield injector


def unraisable_after(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the interpreter reports as unraisable from now on (an exception in a ``__del__``, e.g. a
    parquet writer left open after a failure, closing itself into a closed file when collected)."""
    found: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: found.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    return found
