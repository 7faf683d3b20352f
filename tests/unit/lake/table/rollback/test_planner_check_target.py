"""check_target (pure): which instant a rollback may take, and the exact refusal for each other case.

The timelines are built in memory (no files are read), so each case shows one rule alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.rollback.planner import (
    check_target,
    failed_writes,
    latest_completed_commit,
)
from airflow_lake_provider.lake.timeline import layout_v2
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout

T1, T2, T3, T4, T5 = (f"2025010100000000{n}" for n in range(1, 6))


def _timeline(tmp_path: Path, *instants: Instant, compactions: frozenset[str] = frozenset()) -> Timeline:
    return Timeline(LocalStorage(tmp_path), tuple(instants), compactions)


def _refused(message: str) -> pytest.RaisesContext[RollbackError]:
    return pytest.raises(RollbackError, match=f"^{re.escape(message)}$")


def done(t: str, action: Action = Action.DELTACOMMIT) -> Instant:
    return Instant(t, State.COMPLETED, action)


def test_missing_instant_and_actions_that_are_not_writes_are_refused(tmp_path: Path) -> None:
    compacting = Instant(T3, State.REQUESTED, Action.COMPACTION)
    timeline = _timeline(tmp_path, done(T1), done(T2, Action.CLEAN), compacting)
    where = str(tmp_path)
    with _refused(f"{where}: there is no instant {T5} on the timeline"):
        check_target(timeline, T5)
    with _refused(f"{where}: {T2} is a clean; only writes are rolled back"):
        check_target(timeline, T2, force=True)
    # A pending compaction is finished, not rolled back, unless the caller (restore) asks for it.
    compaction = (
        f"{where}: {T3} is a pending compaction; it is finished, not rolled back "
        f"(lake compact {where} --mode execute --instant {T3})"
    )
    with _refused(compaction):
        check_target(timeline, T3)
    with _refused(compaction):
        check_target(timeline, T3, force=True)
    assert check_target(timeline, T3, compaction=True) == compacting
    # compaction=True lets a pending compaction through, nothing else.
    with _refused(f"{where}: {T2} is a clean; only writes are rolled back"):
        check_target(timeline, T2, compaction=True)
    # A pending rollback is finished (by any rollback); a completed one is no write either.
    rolling = _timeline(tmp_path, done(T1, Action.ROLLBACK), Instant(T2, State.INFLIGHT, Action.ROLLBACK))
    with _refused(
        f"{where}: {T2} is a pending rollback; it is finished, not rolled back (lake rollback {where})"
    ):
        check_target(rolling, T2, force=True)
    with _refused(f"{where}: {T1} is a rollback; only writes are rolled back"):
        check_target(rolling, T1, force=True)


def test_pending_write_is_taken_completed_one_only_forced_latest(tmp_path: Path) -> None:
    pending = Instant(T3, State.INFLIGHT, Action.COMMIT)
    timeline = _timeline(tmp_path, done(T1, Action.COMMIT), done(T2, Action.REPLACECOMMIT), pending)
    where = str(tmp_path)
    assert check_target(timeline, T3) == pending
    assert check_target(timeline, T3, compaction=True) == pending
    with _refused(
        f"{where}: {T2} is a completed replacecommit; pass --force (force=True) "
        "to roll back the latest completed commit"
    ):
        check_target(timeline, T2)
    with _refused(
        f"{where}: {T1} is not the latest completed commit ({T2}); only that one may be rolled back"
    ):
        check_target(timeline, T1, force=True)
    # The pending T3 is newer than T2 and may depend on it.
    with _refused(
        f"{where}: pending instant(s) {T3} started after the replacecommit {T2} and may depend on it; "
        f"roll them back first (lake rollback {where})"
    ):
        check_target(timeline, T2, force=True)
    assert failed_writes(timeline) == [pending]


def test_forced_rollback_ignores_older_pending_and_non_write_instants(tmp_path: Path) -> None:
    older = Instant(T1, State.REQUESTED, Action.DELTACOMMIT)
    timeline = _timeline(
        tmp_path,
        older,
        done(T2),
        Instant(T3, State.REQUESTED, Action.CLEAN),
        Instant(T4, State.INFLIGHT, Action.ROLLBACK),
    )
    assert check_target(timeline, T2, force=True) == done(T2)
    assert failed_writes(timeline) == [older]


def test_savepointed_commit_and_later_compactions_are_refused(tmp_path: Path) -> None:
    where = str(tmp_path)
    savepointed = _timeline(tmp_path, done(T1), done(T2), done(T2, Action.SAVEPOINT))
    with _refused(f"{where}: {T2} is savepointed; delete the savepoint first"):
        check_target(savepointed, T2, force=True)
    # A savepoint of another commit does not protect this one.
    other = _timeline(tmp_path, done(T1), done(T1, Action.SAVEPOINT), done(T2))
    assert check_target(other, T2, force=True) == done(T2)

    # Only pending compactions after it: they are finished first, and a compaction is named so.
    compacted = _timeline(
        tmp_path,
        done(T1),
        done(T2, Action.COMMIT),
        Instant(T3, State.REQUESTED, Action.COMPACTION),
        Instant(T4, State.INFLIGHT, Action.COMPACTION),
        compactions=frozenset({T2, T3, T4}),
    )
    with _refused(
        f"{where}: pending instant(s) {T3}, {T4} started after the compaction {T2} and may depend on it; "
        f"finish them first (lake compact {where} --mode execute)"
    ):
        check_target(compacted, T2, force=True)
    # A compaction and a write pending after it: the write must be rolled back.
    mixed = _timeline(
        tmp_path,
        done(T2),
        Instant(T3, State.REQUESTED, Action.COMPACTION),
        Instant(T4, State.REQUESTED, Action.DELTACOMMIT),
    )
    with _refused(
        f"{where}: pending instant(s) {T3}, {T4} started after the deltacommit {T2} and may depend on it; "
        f"roll them back first (lake rollback {where})"
    ):
        check_target(mixed, T2, force=True)


def test_a_pending_clustering_is_taken_a_completed_one_is_not_a_write(tmp_path: Path) -> None:
    # (versions 8/9) a restore rolls back a clustering left pending; an instant of the clustering
    # action that reads as completed is refused like any action that is not a write.
    pending = Instant(T2, State.INFLIGHT, Action.CLUSTERING)
    timeline = _timeline(tmp_path, done(T1), pending, Instant(T3, State.COMPLETED, Action.CLUSTERING))
    assert check_target(timeline, T2) == pending
    assert check_target(timeline, T2, compaction=True) == pending
    with _refused(f"{tmp_path}: {T3} is a clustering; only writes are rolled back"):
        check_target(timeline, T3, force=True)


def _layout_2(tmp_path: Path, *instants: Instant) -> Timeline:
    return Timeline(LocalStorage(tmp_path), tuple(instants), frozenset(), TimelineLayout(layout_v2.VERSION))


def test_the_latest_completed_commit_of_layout_2_is_the_last_to_complete(tmp_path: Path) -> None:
    # T1 completed after T2 (a compaction requested before a deltacommit completes after it): T1 is
    # the latest a forced rollback may take, not T2.
    first = Instant(T1, State.COMPLETED, Action.COMMIT, completion_time=T4)
    second = Instant(T2, State.COMPLETED, Action.DELTACOMMIT, completion_time=T3)
    timeline = _layout_2(tmp_path, first, second)
    assert latest_completed_commit(timeline) is first
    assert check_target(timeline, T1, force=True) == first
    with _refused(
        f"{tmp_path}: {T2} is not the latest completed commit ({T1}); only that one may be rolled back"
    ):
        check_target(timeline, T2, force=True)
    # Equal completion times: the later request wins. A commit without a completion time counts
    # as completed before every commit with one.
    tied = _layout_2(
        tmp_path,
        Instant(T1, State.COMPLETED, Action.COMMIT),
        Instant(T2, State.COMPLETED, Action.DELTACOMMIT, completion_time=T5),
        Instant(T3, State.COMPLETED, Action.DELTACOMMIT, completion_time=T5),
    )
    assert latest_completed_commit(tied) == done(T3)
    unknown = _layout_2(
        tmp_path,
        Instant(T1, State.COMPLETED, Action.COMMIT),
        Instant(T2, State.COMPLETED, Action.DELTACOMMIT, completion_time=T3),
    )
    assert latest_completed_commit(unknown) == done(T2)
    # Layout 1 has no completion times: the last by request time.
    assert latest_completed_commit(_timeline(tmp_path, done(T1), done(T2))) == done(T2)
    assert latest_completed_commit(_timeline(tmp_path, Instant(T1, State.REQUESTED, Action.COMMIT))) is None
