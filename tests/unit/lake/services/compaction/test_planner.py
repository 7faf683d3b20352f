"""Compaction planning without I/O: config, trigger strategies, selection strategies, the Avro plan."""

from __future__ import annotations

import datetime as dt
import io
import logging
from pathlib import Path

import fastavro
import pytest

from airflow_lake_provider.lake.errors import CompactionConfigError
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.file_group.model import BaseFile, FileGroup, FileSlice, LogFile
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.table_config import TableConfig, TableType
from airflow_lake_provider.lake.services.compaction.config import (
    DEFAULT_STRATEGY,
    CompactionConfig,
    TriggerStrategy,
)
from airflow_lake_provider.lake.services.compaction.plan import (
    TOTAL_IO_MB,
    TOTAL_IO_READ_MB,
    TOTAL_IO_WRITE_MB,
    TOTAL_LOG_FILES,
    TOTAL_LOG_FILES_SIZE,
    CompactionPlan,
)
from airflow_lake_provider.lake.services.compaction.planner import (
    pending_clustering_groups,
    plan_compaction,
    should_compact,
    trigger_state,
)
from airflow_lake_provider.lake.services.compaction.strategy import (
    BoundedPartitionAwareStrategy,
    CompositeStrategy,
    DayBasedStrategy,
    LogFileCountStrategy,
    LogFileSizeStrategy,
    PartitionRegexStrategy,
    UnboundedStrategy,
    partition_date,
    strategy_for,
)
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.store import TimelineStore

MB = 1024 * 1024
B = "20240101000000000"
NOW = dt.datetime(2024, 1, 5, 12, 0, tzinfo=dt.timezone.utc)


# -- config -------------------------------------------------------------------------------------------
def test_config_defaults_are_hudis() -> None:
    c = CompactionConfig.from_options({})
    assert (c.trigger, c.max_delta_commits, c.max_delta_seconds) == (TriggerStrategy.NUM_COMMITS, 5, 3600)
    assert c.strategy == DEFAULT_STRATEGY
    assert (c.log_size_threshold, c.log_num_threshold, c.target_io_mb, c.day_partitions) == (
        0,
        0,
        512000.0,
        10,
    )
    assert c.partition_regex is None


def test_config_reads_hudi_keys_and_later_layers_win() -> None:
    c = CompactionConfig.from_options(
        {"hoodie.compact.inline.max.delta.commits": "9"},
        {
            "hoodie.compact.inline.trigger.strategy": "num_or_time",
            "hoodie.compact.inline.max.delta.commits": "2",
            "hoodie.compact.inline.max.delta.seconds": "60",
            "hoodie.compaction.strategy": "UnBoundedCompactionStrategy",
            "hoodie.compaction.logfile.size.threshold": "100",
            "hoodie.compaction.logfile.num.threshold": "3",
            "hoodie.compaction.target.io": "1.5",
            "hoodie.compaction.daybased.target.partitions": "4",
            "hoodie.compaction.partition.path.regex": "2024/.*",
        },
    )
    assert c == CompactionConfig(
        TriggerStrategy.NUM_OR_TIME, 2, 60, "UnBoundedCompactionStrategy", 100, 3, 1.5, 4, "2024/.*"
    )


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("hoodie.compact.inline.trigger.strategy", "SOMETIMES", "SOMETIMES"),
        ("hoodie.compact.inline.max.delta.commits", "five", "five"),
        ("hoodie.compact.inline.max.delta.seconds", "-1", "-1"),
        ("hoodie.compaction.target.io", "lots", "lots"),
        ("hoodie.compaction.strategy", "com.example.MagicCompactionStrategy", "MagicCompactionStrategy"),
        ("hoodie.compaction.partition.path.regex", "(", "("),
    ],
)
def test_config_rejects_bad_values_naming_them(key: str, value: str, needle: str) -> None:
    with pytest.raises(CompactionConfigError, match=key.replace(".", r"\.")) as info:
        CompactionConfig.from_options({key: value})
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (
            "org.apache.hudi.table.action.compact.strategy.LogFileSizeBasedCompactionStrategy",
            LogFileSizeStrategy,
        ),
        ("LogFileSizeBasedCompactionStrategy", LogFileSizeStrategy),
        ("log_file_size", LogFileSizeStrategy),
        (
            "org.apache.hudi.table.action.compact.strategy.LogFileNumBasedCompactionStrategy",
            LogFileCountStrategy,
        ),
        ("log_file_count", LogFileCountStrategy),
        ("DayBasedCompactionStrategy", DayBasedStrategy),
        (
            "org.apache.hudi.table.action.compact.strategy.BoundedPartitionAwareCompactionStrategy",
            BoundedPartitionAwareStrategy,
        ),
        ("unbounded", UnboundedStrategy),
        ("PartitionRegexBasedCompactionStrategy", PartitionRegexStrategy),
        ("DayBasedCompactionStrategy,BoundedIOCompactionStrategy", CompositeStrategy),
    ],
)
def test_strategy_names_resolve(name: str, kind: type) -> None:
    assert isinstance(strategy_for(CompactionConfig(strategy=name), NOW), kind)


def test_partition_dates() -> None:
    assert partition_date("2024/01/31") == dt.date(2024, 1, 31)
    assert partition_date("dt=2024-02-01") == dt.date(2024, 2, 1)
    assert partition_date("year=2024/month=03/day=04") == dt.date(2024, 3, 4)
    with pytest.raises(CompactionConfigError, match="'san_francisco'"):
        partition_date("san_francisco")


# -- triggers -----------------------------------------------------------------------------------------
def _t(minute: int, second: int = 0) -> str:
    return f"2024010510{minute:02d}{second:02d}000"


def _timeline(*instants: tuple[str, Action, State]) -> Timeline:
    items = tuple(sorted(Instant(t, s, a) for t, a, s in instants))
    compactions = frozenset(t for t, a, _ in instants if a is Action.COMPACTION)
    return Timeline(Path("/nonexistent"), items, compactions)


D, C, P = Action.DELTACOMMIT, Action.COMMIT, Action.COMPACTION
DONE, INFL, REQ = State.COMPLETED, State.INFLIGHT, State.REQUESTED
# Two delta commits, a completed compaction at 10:02, three completed delta commits, a pending
# compaction requested at 10:04 (after the first two of those), and an inflight delta commit.
HISTORY = _timeline(
    (_t(0), D, DONE),
    (_t(1), D, DONE),
    (_t(2), C, DONE),
    (_t(3), D, DONE),
    (_t(3, 30), D, DONE),
    (_t(4), P, REQ),
    (_t(5), D, DONE),
    (_t(6), D, INFL),
)


def _cfg(trigger: str, commits: int = 5, seconds: int = 3600) -> CompactionConfig:
    return CompactionConfig.from_options(
        {
            "hoodie.compact.inline.trigger.strategy": trigger,
            "hoodie.compact.inline.max.delta.commits": commits,
            "hoodie.compact.inline.max.delta.seconds": seconds,
        }
    )


def test_num_commits_counts_completed_delta_commits_since_last_completed_compaction() -> None:
    now = dt.datetime(2024, 1, 5, 10, 10, tzinfo=dt.timezone.utc)
    assert (
        trigger_state(HISTORY, _cfg("NUM_COMMITS"), now).delta_commits == 3
    )  # the inflight one is not counted
    assert should_compact(HISTORY, _cfg("NUM_COMMITS", 3), now)
    assert not should_compact(HISTORY, _cfg("NUM_COMMITS", 4), now)


def test_num_commits_without_any_compaction_counts_from_the_start() -> None:
    tl = _timeline((_t(0), D, DONE), (_t(1), D, DONE))
    assert should_compact(tl, _cfg("NUM_COMMITS", 2), NOW)
    assert not should_compact(tl, _cfg("NUM_COMMITS", 3), NOW)
    assert not should_compact(_timeline(), _cfg("NUM_COMMITS", 1), NOW)


def test_num_commits_after_last_request_counts_after_the_pending_plan() -> None:
    now = dt.datetime(2024, 1, 5, 10, 10, tzinfo=dt.timezone.utc)
    assert trigger_state(HISTORY, _cfg("NUM_COMMITS_AFTER_LAST_REQUEST"), now).delta_commits == 1
    assert should_compact(HISTORY, _cfg("NUM_COMMITS_AFTER_LAST_REQUEST", 1), now)
    assert not should_compact(HISTORY, _cfg("NUM_COMMITS_AFTER_LAST_REQUEST", 2), now)


def test_time_elapsed_runs_from_the_last_completed_compaction() -> None:
    compacted_at = dt.datetime(2024, 1, 5, 10, 2, tzinfo=dt.timezone.utc)
    cfg = _cfg("TIME_ELAPSED", seconds=600)
    assert not should_compact(HISTORY, cfg, compacted_at + dt.timedelta(seconds=599))
    assert should_compact(HISTORY, cfg, compacted_at + dt.timedelta(seconds=600))


def test_time_elapsed_without_compaction_runs_from_the_first_delta_commit() -> None:
    tl = _timeline((_t(0), D, DONE), (_t(5), D, DONE))
    first = dt.datetime(2024, 1, 5, 10, 0, tzinfo=dt.timezone.utc)
    assert not should_compact(tl, _cfg("TIME_ELAPSED", seconds=3600), first + dt.timedelta(seconds=3599))
    assert should_compact(tl, _cfg("TIME_ELAPSED", seconds=3600), first + dt.timedelta(seconds=3600))
    assert not should_compact(_timeline(), _cfg("TIME_ELAPSED", seconds=0), first)


@pytest.mark.parametrize(
    ("trigger", "commits", "seconds", "due"),
    [
        ("NUM_AND_TIME", 3, 600, True),
        ("NUM_AND_TIME", 4, 600, False),
        ("NUM_AND_TIME", 3, 601, False),
        ("NUM_OR_TIME", 4, 600, True),
        ("NUM_OR_TIME", 3, 601, True),
        ("NUM_OR_TIME", 4, 601, False),
    ],
)
def test_num_and_time_combinations(trigger: str, commits: int, seconds: int, due: bool) -> None:
    now = dt.datetime(2024, 1, 5, 10, 12, tzinfo=dt.timezone.utc)  # 600 s after the 10:02 compaction
    assert should_compact(HISTORY, _cfg(trigger, commits, seconds), now) is due


def test_after_last_request_anchors_on_completed_pending_or_nothing() -> None:
    cfg = _cfg("NUM_COMMITS_AFTER_LAST_REQUEST", 1)
    # No pending plan: counted from the last completed compaction (10:02), so 10:03 and 10:05 count.
    done_only = _timeline((_t(0), D, DONE), (_t(2), C, DONE), (_t(3), D, DONE), (_t(5), D, DONE))
    assert trigger_state(done_only, cfg, NOW).delta_commits == 2
    # A pending plan and no completed compaction: counted from the plan.
    pending_only = _timeline((_t(0), D, DONE), (_t(2), P, REQ), (_t(3), D, DONE))
    assert trigger_state(pending_only, cfg, NOW).delta_commits == 1
    # No compaction at all: every completed delta commit counts.
    assert trigger_state(_timeline((_t(0), D, DONE), (_t(3), D, DONE)), cfg, NOW).delta_commits == 2
    assert trigger_state(_timeline(), cfg, NOW).delta_commits == 0


def test_only_completed_delta_commits_count_and_only_a_completed_commit_is_a_compaction() -> None:
    # A completed clean and rollback are no delta commits; an inflight commit (no compaction's
    # result yet) does not move the anchor.
    tl = _timeline(
        (_t(0), D, DONE),
        (_t(2), C, DONE),
        (_t(3), D, DONE),
        (_t(4), Action.CLEAN, DONE),
        (_t(5), C, INFL),
        (_t(6), D, DONE),
        (_t(7), Action.ROLLBACK, DONE),
    )
    now = dt.datetime(2024, 1, 5, 10, 12, tzinfo=dt.timezone.utc)
    state = trigger_state(tl, _cfg("NUM_COMMITS"), now)
    assert (state.delta_commits, state.elapsed_seconds) == (2, 600.0)


def test_trigger_reason_names_counts_anchor_and_elapsed_time() -> None:
    now = dt.datetime(2024, 1, 5, 10, 12, tzinfo=dt.timezone.utc)
    assert trigger_state(HISTORY, _cfg("NUM_OR_TIME", 4, 601), now).reason == (
        f"NUM_OR_TIME: 3 delta commit(s) since {_t(2)} (need 4), 600s elapsed since {_t(2)} (need 601s)"
    )
    assert trigger_state(_timeline(), _cfg("NUM_COMMITS", 2), now).reason == (
        "NUM_COMMITS: 0 delta commit(s) since the start (need 2), n/a elapsed since - (need 3600s)"
    )


# -- selection ----------------------------------------------------------------------------------------
def _config() -> TableConfig:
    props = TableConfig.new_properties(
        name="t",
        table_type=TableType.MERGE_ON_READ,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("day",),
    )
    return TableConfig.from_properties(props)


def _group(partition: str, fid: str, base_mb: float | None, log_sizes: list[int]) -> FileGroup:
    base = (
        BaseFile(partition, BaseFileName(fid, "1-0-0", B), int(base_mb * MB)) if base_mb is not None else None
    )
    logs = tuple(
        LogFile(partition, LogFileName(fid, B, v, "1-0-0"), size) for v, size in enumerate(log_sizes, 1)
    )
    return FileGroup(partition, fid, (FileSlice(partition, fid, B, base, logs),))


def _view(groups: list[FileGroup], timeline: Timeline | None = None, **extra: dict) -> FileSystemView:
    return FileSystemView(
        config=_config(),
        timeline=timeline or _timeline((B, D, DONE)),
        groups={(g.partition, g.file_id): g for g in groups},
        partitions=tuple(sorted({g.partition for g in groups})),
        **extra,
    )


STRATEGY = "hoodie.compaction.strategy"
# Five days of partitions; sizes chosen so every strategy picks a different set.
GROUPS = [
    _group("2024/01/01", "a1", 1, [1 * MB]),  # IO 1+1+1 = 3 MB, 1 log of 1 MB
    _group("2024/01/02", "b1", 2, [3 * MB, 1 * MB]),  # IO 2+4+2 = 8 MB, 2 logs, 4 MB
    _group("2024/01/03", "c1", 1, []),  # no logs: never a candidate
    _group("2024/01/03", "c2", None, [2 * MB, 1, 1]),  # log-only slice: IO 2 MB (+2 bytes), 3 logs
    _group("2024/01/04", "d1", 4, [512 * 1024]),  # IO 4+0.5+4 = 8.5 MB, 1 log of 0.5 MB
    _group("2024/01/05", "e1", 1, [5 * MB]),  # IO 1+5+1 = 7 MB, 1 log of 5 MB
]


def _selected(
    strategy: str, view: FileSystemView | None = None, now: dt.datetime = NOW, **options: object
) -> list:
    opts = {"hoodie.compaction.strategy": strategy}
    opts.update({f"hoodie.compaction.{k.replace('_', '.')}": v for k, v in options.items()})
    plan = plan_compaction(
        (view or _view(GROUPS)).timeline, view or _view(GROUPS), CompactionConfig.from_options(opts), now=now
    )
    return [op.file_id for op in plan.operations] if plan else []


def test_log_file_size_strategy_orders_by_log_size_and_applies_threshold_and_io_bound() -> None:
    assert _selected(DEFAULT_STRATEGY) == ["e1", "b1", "c2", "a1", "d1"]
    assert _selected("LogFileSizeBasedCompactionStrategy", logfile_size_threshold=str(2 * MB)) == [
        "e1",
        "b1",
        "c2",
    ]
    # 7 + 8 = 15 MB fits in 17; adding c2 (2 MB and 2 bytes) would not.
    assert _selected("LogFileSizeBasedCompactionStrategy", target_io="17") == ["e1", "b1"]


def test_log_file_count_strategy_orders_by_count_and_applies_threshold_and_io_bound() -> None:
    assert _selected("LogFileNumBasedCompactionStrategy") == ["c2", "b1", "a1", "d1", "e1"]
    assert _selected("LogFileNumBasedCompactionStrategy", logfile_num_threshold="2") == ["c2", "b1"]
    assert _selected("LogFileNumBasedCompactionStrategy", target_io="10.1") == ["c2", "b1"]


def test_bounded_io_strategy_keeps_natural_order_and_cuts_at_the_bound() -> None:
    assert _selected("BoundedIOCompactionStrategy", target_io="13.1") == ["a1", "b1", "c2"]
    assert _selected("BoundedIOCompactionStrategy", target_io="2") == []


def test_day_based_strategy_takes_the_newest_partitions() -> None:
    assert _selected("DayBasedCompactionStrategy", daybased_target_partitions="3") == ["e1", "d1", "c2"]
    assert _selected(
        "DayBasedAndBoundedIOCompactionStrategy", daybased_target_partitions="3", target_io="16"
    ) == ["e1", "d1"]


def test_partition_aware_strategies_split_at_n_days_before_today() -> None:
    # today 2024-01-05, 2 days: partitions from 2024-01-03 on are "recent".
    assert _selected("BoundedPartitionAwareCompactionStrategy", daybased_target_partitions="2") == [
        "e1",
        "d1",
        "c2",
    ]
    assert _selected("UnBoundedPartitionAwareCompactionStrategy", daybased_target_partitions="2") == [
        "a1",
        "b1",
    ]


def test_unbounded_strategy_takes_every_slice_with_logs() -> None:
    assert _selected("UnBoundedCompactionStrategy", target_io="0") == ["a1", "b1", "c2", "d1", "e1"]


def test_partition_regex_strategy_matches_whole_partition_paths() -> None:
    opts = {
        "hoodie.compaction.strategy": "PartitionRegexBasedCompactionStrategy",
        "hoodie.compaction.partition.path.regex": "2024/01/0[24]",
    }
    view = _view(GROUPS)
    plan = plan_compaction(view.timeline, view, CompactionConfig.from_options(opts), now=NOW)
    assert plan is not None and [op.file_id for op in plan.operations] == ["b1", "d1"]


def test_a_plan_names_the_partitions_it_leaves_out_as_hudi_1x_records_them() -> None:
    """Hudi 1.x's incremental scheduling plans next the partitions a plan left out (its
    ``missingSchedulePartitions``): those the strategy's partition filter dropped, and those of the
    candidates it did not select; the partitions of selected or log-less groups are not."""

    def missing(**opts: str) -> tuple[str, ...]:
        view = _view(GROUPS)
        plan = plan_compaction(view.timeline, view, CompactionConfig.from_options(opts), now=NOW)
        assert plan is not None
        return plan.missing_partitions

    regex = "PartitionRegexBasedCompactionStrategy"
    assert missing(**{STRATEGY: regex, "hoodie.compaction.partition.path.regex": "2024/01/0[24]"}) == (
        "2024/01/01",
        "2024/01/03",
        "2024/01/05",
    )
    bounded = {STRATEGY: "BoundedIOCompactionStrategy", "hoodie.compaction.target.io": "13.1"}
    assert missing(**bounded) == ("2024/01/04", "2024/01/05")
    assert missing(**{STRATEGY: "UnBoundedCompactionStrategy", "hoodie.compaction.target.io": "0"}) == ()


def test_composite_strategy_applies_parts_in_order() -> None:
    assert _selected(
        "DayBasedCompactionStrategy,LogFileNumBasedCompactionStrategy", daybased_target_partitions="3"
    ) == ["c2", "e1", "d1"]


def test_groups_in_pending_compaction_or_replaced_are_never_planned() -> None:
    view = _view(
        GROUPS,
        pending_compaction={("2024/01/05", "e1"): "20240102000000000"},
        replaced={("2024/01/01", "a1"): "20240102000000000"},
    )
    assert _selected("unbounded", view) == ["b1", "c2", "d1"]


def test_groups_in_pending_clustering_are_never_planned(tmp_path: Path) -> None:
    (tmp_path / ".hoodie").mkdir()
    store = TimelineStore(tmp_path)
    (tmp_path / ".hoodie" / f"{B}.deltacommit").write_text("{}")
    slice_info = {
        "dataFilePath": "x.parquet",
        "deltaFilePaths": [],
        "fileId": "b1",
        "partitionPath": "2024/01/02",
        "bootstrapFilePath": None,
        "version": 1,
    }
    plan = {
        "inputGroups": [{"slices": [slice_info], "metrics": {}, "numOutputFileGroups": 1, "version": 1}],
        "strategy": None,
        "extraMetadata": None,
        "version": 1,
        "preserveHoodieMetadata": None,
    }
    body = timeline_avro.write_avro(
        timeline_avro.REQUESTED_REPLACE_METADATA,
        {"operationType": "CLUSTER", "clusteringPlan": plan, "extraMetadata": None, "version": 1},
    )
    store.create_requested("20240102000000000", Action.REPLACECOMMIT, body)
    view = _view(GROUPS, timeline=Timeline.load(tmp_path))
    assert _selected("unbounded", view) == ["a1", "c2", "d1", "e1"]


def test_nothing_to_plan_gives_none() -> None:
    view = _view([_group("2024/01/03", "c1", 1, [])])
    assert plan_compaction(view.timeline, view, CompactionConfig()) is None


# -- the plan -----------------------------------------------------------------------------------------
def test_plan_is_a_hoodie_compaction_plan_readable_by_plain_fastavro() -> None:
    view = _view(GROUPS)
    plan = plan_compaction(
        view.timeline, view, CompactionConfig.from_options({"hoodie.compaction.strategy": "unbounded"})
    )
    assert plan is not None
    data = timeline_avro.write_avro(timeline_avro.COMPACTION_PLAN, plan.to_avro())
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.writer_schema["name"] == "org.apache.hudi.avro.model.HoodieCompactionPlan"
    (record,) = list(reader)
    assert record["version"] == 2
    first = record["operations"][0]
    assert (
        first["fileId"] == "a1" and first["partitionPath"] == "2024/01/01" and first["baseInstantTime"] == B
    )
    assert first["dataFilePath"] == f"a1_1-0-0_{B}.parquet"  # relative to the partition, like Java
    assert first["deltaFilePaths"] == [f".a1_{B}.log.1_1-0-0"]
    assert first["metrics"] == {
        TOTAL_LOG_FILES: 1.0,
        TOTAL_LOG_FILES_SIZE: float(MB),
        TOTAL_IO_READ_MB: 2.0,
        TOTAL_IO_WRITE_MB: 1.0,
        TOTAL_IO_MB: 3.0,
    }
    log_only = record["operations"][2]
    assert log_only["fileId"] == "c2" and log_only["dataFilePath"] is None
    assert CompactionPlan.from_avro(record) == plan


def test_version_1_plans_with_full_paths_are_read_as_names() -> None:
    record = {
        "operations": [
            {
                "baseInstantTime": B,
                "deltaFilePaths": [f"/t/p/.f_{B}.log.1_0-1-0"],
                "dataFilePath": f"/t/p/f_0-1-0_{B}.parquet",
                "fileId": "f",
                "partitionPath": "p",
                "metrics": None,
                "bootstrapFilePath": None,
            }
        ],
        "extraMetadata": None,
        "version": 1,
    }
    (op,) = CompactionPlan.from_avro(record).operations
    assert op.data_file_name == f"f_0-1-0_{B}.parquet" and op.delta_file_names == (f".f_{B}.log.1_0-1-0",)


def test_planning_logs_candidates_and_selected_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="airflow_lake_provider.lake.services.compaction.planner")
    view = _view(GROUPS)
    config = CompactionConfig.from_options(
        {
            "hoodie.compaction.strategy": "LogFileNumBasedCompactionStrategy",
            "hoodie.compaction.logfile.num.threshold": "2",
        }
    )
    plan = plan_compaction(view.timeline, view, config)
    assert plan is not None and [op.file_id for op in plan.operations] == ["c2", "b1"]
    planner_log = "airflow_lake_provider.lake.services.compaction.planner"
    assert [r.getMessage() for r in caplog.records if r.name == planner_log] == [
        f"compaction planning: 5 candidates, 2 selected by {config.strategy}"
    ]


def _clustering_requested(groups: list[tuple[str | None, str | None]]) -> bytes:
    slices = [
        {
            "dataFilePath": "x.parquet",
            "deltaFilePaths": [],
            "fileId": fid,
            "partitionPath": partition,
            "bootstrapFilePath": None,
            "version": 1,
        }
        for partition, fid in groups
    ]
    plan = {
        "inputGroups": [{"slices": slices, "metrics": {}, "numOutputFileGroups": 1, "version": 1}],
        "strategy": None,
        "extraMetadata": None,
        "version": 1,
        "preserveHoodieMetadata": None,
    }
    return timeline_avro.write_avro(
        timeline_avro.REQUESTED_REPLACE_METADATA,
        {"operationType": "CLUSTER", "clusteringPlan": plan, "extraMetadata": None, "version": 1},
    )


def test_pending_clustering_groups_read_requested_plans_of_requested_and_inflight_replaces(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / ".hoodie").mkdir()
    store = TimelineStore(tmp_path)
    # Requested only; inflight (its plan is in the requested file); completed (no longer pending).
    store.create_requested("20240102000000000", Action.REPLACECOMMIT, _clustering_requested([("p1", "a")]))
    inflight = store.create_requested(
        "20240103000000000", Action.REPLACECOMMIT, _clustering_requested([(None, "b"), ("p2", None)])
    )
    store.transition_to_inflight(inflight)
    done = store.create_requested(
        "20240104000000000", Action.REPLACECOMMIT, _clustering_requested([("p3", "c")])
    )
    store.transition_to_completed(store.transition_to_inflight(done), b"{}")
    # An insert_overwrite's empty requested file (the oldest: the plans after it are still read):
    # no plan, nothing excluded, nothing logged.
    store.create_requested("20240101000000000", Action.REPLACECOMMIT, b"")
    # A plan that holds no input groups at all.
    empty_plan = timeline_avro.write_avro(
        timeline_avro.REQUESTED_REPLACE_METADATA,
        {"operationType": "CLUSTER", "clusteringPlan": None, "extraMetadata": None, "version": 1},
    )
    store.create_requested("20240106000000000", Action.REPLACECOMMIT, empty_plan)
    # Only replacecommits cluster: another action's requested file is never read as a plan.
    store.create_requested("20240107000000000", Action.DELTACOMMIT, _clustering_requested([("p4", "d")]))
    caplog.set_level(logging.WARNING)
    assert pending_clustering_groups(Timeline.load(tmp_path)) == {("p1", "a"), ("", "b"), ("p2", "")}
    assert caplog.records == []


def test_pending_clustering_with_an_unreadable_plan_is_logged_and_one_without_requested_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / ".hoodie").mkdir()
    store = TimelineStore(tmp_path)
    store.create_requested("20240102000000000", Action.REPLACECOMMIT, b"not avro")
    store.create_requested("20240103000000000", Action.REPLACECOMMIT, _clustering_requested([("p", "a")]))
    # An inflight whose requested file is gone (the oldest, so the plans after it are still read).
    (tmp_path / ".hoodie" / "20240101000000000.replacecommit.inflight").write_bytes(b"")
    caplog.set_level(logging.WARNING)
    assert pending_clustering_groups(Timeline.load(tmp_path)) == {("p", "a")}
    path = tmp_path / ".hoodie" / "20240102000000000.replacecommit.requested"
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: unreadable requested replace metadata; its file groups are not excluded"
    ]


def test_a_v9_group_of_log_files_only_is_compacted_whole(tmp_path: Path) -> None:
    """A group without a base file (Flink, bucket index) is one slice in Java: its compaction merges
    every log; one slice per log compacted the newest log alone and the base file lost row 1."""
    from write_support import hudi_rows, log_only_group, our_rows

    from airflow_lake_provider.lake.services.compaction.executor import run_compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

    path = tmp_path / "t"
    table, instants, logs = log_only_group(path)
    scheduled = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
    plan = table.timeline().compaction_plan(scheduled.instant)
    assert [
        (op["baseInstantTime"], op["dataFilePath"], op["deltaFilePaths"]) for op in plan["operations"]
    ] == [(instants[0], None, logs)]
    run_compaction(type(table).open(path), instant=scheduled.instant)
    assert our_rows(path, "id", "ts", "v") == hudi_rows(path, "id", "ts", "v") == [(1, 4, "u1"), (2, 3, "u2")]
