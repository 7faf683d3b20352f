"""What the property tests share: how many examples they run, and the statistics they print and check.

``examples(n)``: ``n`` in a normal run; 5,000 with ``LAKE_DEEP=1`` (``make test-deep``);
``LAKE_PROPERTY_EXAMPLES=N`` sets every property test to ``N`` (e.g. a quick look at a deep run).

``TALLIES``: per test module, counters the tests add to while they run; ``conftest.py`` prints them at
the end of the session, and each module's last test asserts that its histories did what they claim
(a property test whose generators never reach the interesting cases passes without testing anything).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder
from hypothesis import seed

from airflow_lake_provider.lake.timeline.instant import InstantClock

DEEP_EXAMPLES = 5000
T = TypeVar("T")


def examples(normal: int) -> int:
    """The example count of a property test whose normal count is ``normal``."""
    forced = os.environ.get("LAKE_PROPERTY_EXAMPLES")
    if forced:
        return int(forced)
    return DEEP_EXAMPLES if os.environ.get("LAKE_DEEP") else normal


def derandomized() -> bool:
    """Whether the tests whose statistics are asserted draw a fixed sequence of examples.

    Their ratios (e.g. >= 30% of cleans delete) hold for the fixed sequence of a normal run; with a
    random one, ~30 examples can fall under the bar by chance. A deep run (5,000) is random.
    """
    return not os.environ.get("LAKE_DEEP")


def fixed_seed(value: int) -> Callable[[T], T]:
    """``hypothesis.seed(value)`` for a test whose statistics are asserted, unless the run is random
    (``derandomized()`` false): its fixed sequence is then this seed's, not one derived from its
    source (which changes with every edit of the test)."""
    return seed(value) if derandomized() else (lambda test: test)


_LAST_DIR: dict[str, Path] = {}


def example_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh folder for one example; the previous example's folder of that name goes first.

    A deep run makes thousands of tables of several MB each, which would fill the disk (pytest keeps
    every folder of its last three runs). The last folder stays: when a test fails, that is the
    failing example Hypothesis replays at the end, left to look at.
    """
    previous = _LAST_DIR.pop(name, None)
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)
    _LAST_DIR[name] = path = factory.mktemp(name)
    return path


# name -> counter; a test adds e.g. tally("clean")["examples cow"] += 1
TALLIES: dict[str, Counter[str]] = {}
# Lines the modules' final tests worked out from their tallies (ratios), printed after the counters.
SUMMARY: list[str] = []


def tally(name: str) -> Counter[str]:
    return TALLIES.setdefault(name, Counter())


def ratio(counter: Counter[str], hits: str, total: str) -> str:
    n, d = counter[hits], counter[total]
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else f"{n}/0"


# Rows of the histories of integer ``id`` keys: id -> (ts, v), as the model of a history keeps them.
Model = dict[int, tuple[int, str]]


def millisecond_clock(start: dt.datetime) -> InstantClock:
    """A table clock that moves one millisecond per instant from ``start`` (no two instants tie)."""
    ticks = iter(range(10**7))
    return InstantClock(now=lambda: start + dt.timedelta(milliseconds=next(ticks)))


def model_rows(table: pa.Table) -> Model:
    """A read's rows as the model keeps them."""
    if table.num_rows == 0:
        return {}
    return {r["id"]: (r["ts"], r["v"]) for r in table.select(["id", "ts", "v"]).to_pylist()}


def hudi_model_rows(path: Path) -> Model:
    """hudi-rs's snapshot of the table at ``path``, as the model keeps rows."""
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return model_rows(pa.Table.from_batches(batches)) if batches else {}
