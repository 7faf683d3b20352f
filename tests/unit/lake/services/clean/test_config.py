"""Clean options with exact behaviour: ``hoodie.clean.max.commits``, ``hoodie.clean.allow.multiple``,
and the instant lock's timeout when another process is starting an instant.

Semantics: ``services-semantics.md`` 1.1 (finish pending cleans, then plan only if multiple cleans
are allowed or none is pending, and only after ``max.commits`` commits since the last clean).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import ServiceBusyError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import store as timeline_store
from airflow_lake_provider.lake.timeline.active import HOODIE_DIR

RETAIN_1 = {"hoodie.cleaner.commits.retained": "1"}


def _table(path: Path, commits: int) -> tuple[LakeTable, list[str]]:
    """COW, partitions a and b; every upsert rewrites both file groups (one new slice each)."""
    table = LakeTable.create(
        path,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    return table, [_upsert(table, ts) for ts in range(commits)]


def _upsert(table: LakeTable, ts: int) -> str:
    batch = pa.table({"id": ["k1", "k2"], "ts": pa.array([ts, ts], pa.int64()), "p": ["a", "b"]})
    return write(table, batch, "upsert").instant


def _data_files(base: Path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != HOODIE_DIR]
        out |= {os.path.relpath(os.path.join(root, f), base) for f in files if f.endswith(".parquet")}
    return out


def _written_at(files: set[str], *instants: str) -> set[str]:
    return {f for f in files if f.rsplit("_", 1)[1].removesuffix(".parquet") in instants}


def _cleans(base: Path) -> list[str]:
    return sorted(f for f in os.listdir(base / HOODIE_DIR) if ".clean" in f)


# -- hoodie.clean.max.commits ---------------------------------------------------------------------
@pytest.mark.parametrize("key", ["hoodie.clean.max.commits", "hoodie.clean.trigger.max.commits"])
def test_max_commits_waits_for_that_many_commits_since_the_last_clean(tmp_path: Path, key: str) -> None:
    table, (c1, c2, c3) = _table(tmp_path / "t", 3)
    first = run_clean(table, RETAIN_1)
    assert first.outcome is Outcome.CLEANED and first.deleted_files == 2  # c1's slices
    options = {**RETAIN_1, key: "2"}
    c4 = _upsert(table, 4)
    files, cleans = _data_files(table.base_path), _cleans(table.base_path)
    # One commit since the last clean, two needed: nothing planned although c2's slices could go.
    assert run_clean(table, RETAIN_1, dry_run=True).plan.file_count == 2  # type: ignore[union-attr]
    waiting = run_clean(table, options)
    assert waiting.outcome is Outcome.NO_WORK and waiting.instant is None
    assert waiting.reason == "fewer than 2 commits since the last clean"
    assert (_data_files(table.base_path), _cleans(table.base_path)) == (files, cleans)
    # The second commit since the last clean: due; c2's and c3's slices go (c5 and c4 kept).
    c5 = _upsert(table, 5)
    files = _data_files(table.base_path)
    due = run_clean(table, options)
    assert due.outcome is Outcome.CLEANED and due.deleted_files == 4
    assert files - _data_files(table.base_path) == _written_at(files, c2, c3)
    assert {c4, c5} == {f.rsplit("_", 1)[1].removesuffix(".parquet") for f in _data_files(table.base_path)}


def test_max_commits_zero_plans_even_right_after_a_clean(tmp_path: Path) -> None:
    table, _ = _table(tmp_path / "t", 3)
    assert run_clean(table, RETAIN_1).outcome is Outcome.CLEANED
    # The default (1) stops at the trigger; 0 goes on to plan, which finds nothing left to delete.
    assert run_clean(table, RETAIN_1).reason == "fewer than 1 commits since the last clean"
    zero = run_clean(table, {**RETAIN_1, "hoodie.clean.max.commits": "0"})
    assert (zero.outcome, zero.reason) == (Outcome.NO_WORK, "nothing to delete")
    assert len(_cleans(table.base_path)) == 3  # still the one clean's three files


# -- hoodie.clean.allow.multiple ------------------------------------------------------------------
def test_allow_multiple_false_plans_nothing_while_a_clean_is_pending(tmp_path: Path) -> None:
    # Retaining 1 of c1..c3 keeps c3 and c2 (the last slice before it): c1's slices go.
    table, (c1, _c2, _c3) = _table(tmp_path / "t", 3)
    files = _data_files(table.base_path)
    pending = run_clean(table, RETAIN_1, mode="schedule")
    assert pending.outcome is Outcome.SCHEDULED
    t = pending.instant
    single = {**RETAIN_1, "hoodie.clean.allow.multiple": "false"}
    refused = run_clean(table, single, mode="schedule")
    assert (refused.outcome, refused.instant) == (Outcome.NO_WORK, None)
    assert refused.reason == "a clean is pending and hoodie.clean.allow.multiple=false"
    assert _cleans(table.base_path) == [f"{t}.clean.requested"]
    assert _data_files(table.base_path) == files
    # schedule_and_execute finishes the pending clean first; then none is pending and, with no new
    # commit since it, nothing more is planned.
    done = run_clean(table, single)
    assert (done.outcome, done.instant, done.finished_pending, done.deleted_files) == (
        Outcome.CLEANED,
        t,
        (t,),
        2,
    )
    assert done.reason == "fewer than 1 commits since the last clean"
    assert files - _data_files(table.base_path) == _written_at(files, c1)


def test_allow_multiple_true_plans_a_second_clean_beside_a_pending_one(tmp_path: Path) -> None:
    table, (c1, _c2, _c3) = _table(tmp_path / "t", 3)
    files = _data_files(table.base_path)
    first = run_clean(table, RETAIN_1, mode="schedule")
    # Hudi's default: a new plan is made although one is pending; it names the same files (the
    # pending plan deleted nothing yet).
    second = run_clean(table, RETAIN_1, mode="schedule")
    assert first.outcome is second.outcome is Outcome.SCHEDULED and second.instant > first.instant
    assert second.plan is not None and first.plan is not None
    assert second.plan.files_per_partition == first.plan.files_per_partition
    assert _cleans(table.base_path) == sorted(f"{i}.clean.requested" for i in (first.instant, second.instant))
    # Executing finishes both, oldest first; the second finds its files already gone and counts
    # them as deleted (a file already gone is not a failure).
    done = run_clean(table, RETAIN_1, mode="execute")
    assert done.finished_pending == (first.instant, second.instant)
    assert (done.instant, done.deleted_files, done.failed_files) == (second.instant, 2, 0)
    assert files - _data_files(table.base_path) == _written_at(files, c1)


# -- the instant lock -----------------------------------------------------------------------------
def test_clean_waits_for_the_instant_lock_then_gives_up_changing_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting an instant (``create_requested``) takes the table's instant lock, waiting up to
    ``INSTANT_LOCK_WAIT_SECONDS`` (30 s) for another process starting one. A clean that cannot get it
    fails with ``ServiceBusyError`` before writing its plan: nothing is planned on disk or deleted."""
    table, _ = _table(tmp_path / "t", 3)
    files = _data_files(table.base_path)
    monkeypatch.setattr(timeline_store, "INSTANT_LOCK_WAIT_SECONDS", 0.3)
    holder = LakeTable.open(table.base_path)  # another open of the lock file: flock excludes it
    started = time.monotonic()
    with (
        holder.store.exclusive("instant"),
        pytest.raises(ServiceBusyError, match=r"another instant is running on this table \(waited 0.3 s\)"),
    ):
        run_clean(table, RETAIN_1)
    assert 0.3 <= time.monotonic() - started < 5
    assert _cleans(table.base_path) == [] and _data_files(table.base_path) == files
    # The clean lock was released on the way out: the next clean runs.
    assert run_clean(table, RETAIN_1).outcome is Outcome.CLEANED


def test_clean_gets_the_instant_lock_once_the_holder_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, (c1, _c2, _c3) = _table(tmp_path / "t", 3)
    files = _data_files(table.base_path)
    monkeypatch.setattr(timeline_store, "INSTANT_LOCK_WAIT_SECONDS", 10.0)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with LakeTable.open(table.base_path).store.exclusive("instant"):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    done = run_clean(table, RETAIN_1)
    waited = time.monotonic() - started
    thread.join()
    assert done.outcome is Outcome.CLEANED and done.deleted_files == 2
    assert waited >= 0.4  # it waited for the holder instead of failing at once
    assert files - _data_files(table.base_path) == _written_at(files, c1)
