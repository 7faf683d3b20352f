"""``plan_archival`` on layout 2 (table versions 8 and 9): no commit is archived that completed
after a commit that stays active (Hudi 1.x's archiver goes by completion time), so a compaction a
later-requested write overtook stays beside that write."""

from __future__ import annotations

from pathlib import Path

from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
from airflow_lake_provider.lake.table.archival.planner import plan_archival
from airflow_lake_provider.lake.timeline import layout_v2
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout


def _done(t: int, completed: int, action: Action = Action.DELTACOMMIT) -> Instant:
    done = f"2026010100{completed:07d}"
    return Instant(f"2026010100{t:07d}", State.COMPLETED, action, completion_time=done)


def _timeline(tmp_path: Path, *instants: Instant) -> Timeline:
    compactions = frozenset(i.timestamp for i in instants if i.action is Action.COMMIT)
    return Timeline(LocalStorage(tmp_path), tuple(instants), compactions, TimelineLayout(layout_v2.VERSION))


CONFIG = ArchivalConfig(min_commits=2, max_commits=3, max_delta_commits=1)


def test_commits_completed_in_request_order_are_archived_down_to_the_commit_count(tmp_path: Path) -> None:
    timeline = _timeline(tmp_path, *(_done(t, t + 1) for t in (10, 20, 30, 40)))
    plan = plan_archival(timeline, CONFIG, None)
    assert plan is not None
    assert [i.timestamp for i in plan.instants] == ["20260101000000010", "20260101000000020"]
    assert plan.limited_by == "hoodie.keep.min.commits"


def test_a_compaction_a_later_requested_write_overtook_stays_with_that_write(tmp_path: Path) -> None:
    # 20 (a compaction) completed at 35, after 30 (requested later, completed at 31): the commit count
    # keeps 30, 40 and 50, so 20 stays too (without this, only 10 and 20 would go).
    timeline = _timeline(
        tmp_path, _done(10, 11), _done(20, 35, Action.COMMIT), _done(30, 31), _done(40, 41), _done(50, 51)
    )
    plan = plan_archival(timeline, ArchivalConfig(min_commits=3, max_commits=4, max_delta_commits=1), None)
    assert plan is not None
    assert [i.timestamp for i in plan.instants] == ["20260101000000010"]
    assert plan.keep_from == "20260101000000020"
    assert plan.limited_by == "commit 20260101000000020 completed after a commit that stays"


def test_the_cut_goes_down_again_when_what_it_keeps_was_overtaken_in_turn(tmp_path: Path) -> None:
    # The count keeps 40 and 50; 30 completed (45) after 40 did (41), so 30 stays; then 35 (done at
    # 32) stays, and 20 completed (36) after it: 20 stays too.
    timeline = _timeline(
        tmp_path, _done(10, 11), _done(20, 36), _done(30, 45), _done(35, 32), _done(40, 41), _done(50, 51)
    )
    plan = plan_archival(timeline, CONFIG, None)
    assert plan is not None
    assert [i.timestamp for i in plan.instants] == ["20260101000000010"]
