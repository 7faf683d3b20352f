"""Partition commit: triggers (delays, time zones), time extraction, late data, policies,
idempotence and crash recovery, bad input, and the ``lake partition-commit`` CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake import cli
from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import (
    LakeError,
    PartitionCommitConfigError,
    PartitionCommitError,
    PartitionNotFoundError,
)
from airflow_lake_provider.lake.services.partition_commit.config import PartitionCommitConfig, parse_duration
from airflow_lake_provider.lake.services.partition_commit.executor import CommitContext, commit_partitions
from airflow_lake_provider.lake.services.partition_commit.extractor import make_extractor, partition_values
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import InstantClock

UTC = dt.timezone.utc
H03 = "year=2024/month=01/day=05/hour=03"
H04 = "year=2024/month=01/day=05/hour=04"
H05 = "year=2024/month=01/day=05/hour=05"
PATTERN = {"partition.time-extractor.timestamp-pattern": "$year-$month-$day $hour:00:00"}
PT = {"sink.partition-commit.trigger": "partition-time", **PATTERN}


class _Clock(InstantClock):
    """Instant times from a settable wall clock (first-write times are instant times)."""

    def __init__(self, start: dt.datetime) -> None:
        self.at = start
        super().__init__(lambda: self.at)


# The table-version-neutral tests run on version 6 and on version 8 (Hudi 1.x: layout-2 timeline,
# LSM history); the others say why they run on version 6 only.
VERSIONS = pytest.mark.parametrize("version", [6, 8])


def _table(
    path: Path, clock: _Clock | None = None, hive: bool = True, table_type: str = "cow", version: int = 6
) -> LakeTable:
    kwargs: dict[str, Any] = {"clock": clock} if clock else {}
    return LakeTable.create(
        path,
        name="events",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("year", "month", "day", "hour"),
        hive_style=hive,
        table_version=version,
        **kwargs,
    )


def _write(table: LakeTable, hour: str, ids: list[str], minute_of_event: int | None = None) -> str:
    n = len(ids)
    columns: dict[str, Any] = {
        "id": ids,
        "ts": pa.array([1] * n, pa.int64()),
        "year": ["2024"] * n,
        "month": ["01"] * n,
        "day": ["05"] * n,
        "hour": [hour] * n,
        "et": pa.array(
            [dt.datetime(2024, 1, 5, int(hour), minute_of_event or 0, tzinfo=UTC)] * n,
            pa.timestamp("ms", tz="UTC"),
        ),
    }
    return write(table, pa.table(columns), "upsert", event_time_field="et").instant


def _tree(path: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(dirpath, f)
            if not f.endswith(".lock"):
                out[os.path.relpath(p, path)] = Path(p).read_bytes()
    return out


def _hudi_rows(path: Path) -> list[tuple]:
    rows = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    cols = ("_hoodie_record_key", "_hoodie_partition_path", "ts")
    return sorted(zip(*(rows.column(c).to_pylist() for c in cols), strict=True))


# -- process-time ---------------------------------------------------------------------------------
@VERSIONS
def test_process_time_commits_once_first_write_plus_delay_is_reached(tmp_path: Path, version: int) -> None:
    clock = _Clock(dt.datetime(2024, 1, 5, 3, 10, tzinfo=UTC))
    table = _table(tmp_path / "t", clock, version=version)
    _write(table, "03", ["a"])
    clock.at = dt.datetime(2024, 1, 5, 3, 50, tzinfo=UTC)  # a later write does not move the first one
    _write(table, "03", ["b"])
    opts = {"sink.partition-commit.delay": "1 h"}
    before = commit_partitions(table, [H03], opts, now=dt.datetime(2024, 1, 5, 4, 9, 59, 999000, tzinfo=UTC))
    assert before.outcome.value == "NO_WORK" and before.committed == ()
    assert "first write 2024-01-05T03:10:00+00:00" in before.to_dict()["waiting"][H03]
    assert not (table.base_path / H03 / "_SUCCESS").exists()
    at = commit_partitions(table, [H03], opts, now=dt.datetime(2024, 1, 5, 4, 10, tzinfo=UTC))
    assert at.outcome.value == "COMMITTED" and at.committed == (H03,)
    assert (table.base_path / H03 / "_SUCCESS").read_bytes() == b""


@VERSIONS
def test_process_time_default_delay_zero_commits_at_once(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    result = commit_partitions(table, [H03])
    assert result.committed == (H03,) and result.to_dict()["trigger"] == "process-time"


# -- partition-time -------------------------------------------------------------------------------
@VERSIONS
def test_partition_time_needs_the_watermark_past_partition_time_plus_delay(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    opts = {**PT, "sink.partition-commit.delay": "1 h"}
    # Equal is not past: Flink commits when the watermark is after partition time + delay.
    equal = commit_partitions(table, [H03], opts, watermark="2024-01-05T04:00:00Z")
    assert equal.committed == () and H03 in equal.to_dict()["waiting"]
    after = commit_partitions(table, [H03], opts, watermark="2024-01-05T04:00:00.001Z")
    assert after.committed == (H03,)
    assert after.to_dict()["partitions"][H03]["partition_time"] == "2024-01-05T03:00:00"


@VERSIONS
def test_partition_time_watermark_time_zone_shifts_the_comparison(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    # 2024-01-04T19:30Z is 03:30 on the 5th in Shanghai (UTC+8): past hour 03 there, not in UTC.
    watermark = "2024-01-04T19:30:00Z"
    utc = commit_partitions(table, [H03], PT, watermark=watermark, dry_run=True)
    assert utc.to_dict()["waiting"][H03].startswith("watermark 2024-01-04T19:30:00+00:00 <=")
    shanghai = {**PT, "sink.partition-commit.watermark-time-zone": "Asia/Shanghai"}
    result = commit_partitions(table, [H03], shanghai, watermark=watermark)
    assert result.committed == (H03,)
    assert result.to_dict()["partitions"][H03]["reason"].startswith("watermark 2024-01-05T03:30:00+08:00 >")


@VERSIONS
def test_partition_time_watermark_from_recorded_event_times_minus_lateness(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"], minute_of_event=10)
    first = write(  # a commit records min and max event time of its batch
        table,
        pa.table(
            {
                "id": ["b", "c"],
                "ts": pa.array([1, 1], pa.int64()),
                "year": ["2024"] * 2,
                "month": ["01"] * 2,
                "day": ["05"] * 2,
                "hour": ["04"] * 2,
                "et": pa.array(
                    [dt.datetime(2024, 1, 5, 4, 5, tzinfo=UTC), dt.datetime(2024, 1, 5, 4, 30, tzinfo=UTC)],
                    pa.timestamp("ms", tz="UTC"),
                ),
            }
        ),
        "upsert",
        event_time_field="et",
    )
    assert first.metadata.extra_metadata["lake.minEventTime"] == str(
        int(dt.datetime(2024, 1, 5, 4, 5, tzinfo=UTC).timestamp() * 1000)
    )
    assert first.metadata.extra_metadata["lake.maxEventTime"] == str(
        int(dt.datetime(2024, 1, 5, 4, 30, tzinfo=UTC).timestamp() * 1000)
    )
    late = {**PT, "lake.partition-commit.watermark.allowed-lateness": "31 min"}
    from_events = commit_partitions(table, [H03], late)  # watermark 04:30 - 31 min = 03:59
    assert from_events.to_dict()["watermark"] == "2024-01-05T03:59:00+00:00"
    assert from_events.committed == (H03,)  # 03:59 > 03:00 + 0
    delayed = commit_partitions(table, [H04], {**late, "sink.partition-commit.delay": "1 h"})
    assert delayed.committed == () and H04 in delayed.to_dict()["waiting"]


@VERSIONS
def test_partition_time_without_any_watermark_waits(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    write(
        table,
        pa.table(
            {
                "id": ["a"],
                "ts": pa.array([1], pa.int64()),
                "year": ["2024"],
                "month": ["01"],
                "day": ["05"],
                "hour": ["03"],
            }
        ),
        "insert",
    )
    result = commit_partitions(table, [H03], PT)
    assert result.committed == () and "no watermark" in result.to_dict()["waiting"][H03]


# -- extraction -----------------------------------------------------------------------------------
def test_partition_values_hive_style_plain_and_single_field_paths() -> None:
    fields = ("year", "month", "day", "hour")
    assert partition_values(H03, fields) == (("year", "2024"), ("month", "01"), ("day", "05"), ("hour", "03"))
    assert partition_values("2024/01/05/03", fields) == (
        ("year", "2024"),
        ("month", "01"),
        ("day", "05"),
        ("hour", "03"),
    )
    assert partition_values("2024/01/05", ("dt",)) == (("dt", "2024/01/05"),)
    assert partition_values("dt=2024-01-05", ("dt",)) == (("dt", "2024-01-05"),)
    with pytest.raises(PartitionCommitError, match=r"'2024/01' has 2 folder level\(s\)"):
        partition_values("2024/01", fields)


@pytest.mark.parametrize(
    ("options", "values", "expected"),
    [
        (
            PATTERN,
            (("year", "2024"), ("month", "01"), ("day", "05"), ("hour", "03")),
            dt.datetime(2024, 1, 5, 3),
        ),
        (
            {"partition.time-extractor.timestamp-pattern": "$dt $hour:00:00"},
            (("dt", "2024-1-5"), ("hour", "7")),
            dt.datetime(2024, 1, 5, 7),
        ),
        ({}, (("dt", "2024-02-29"),), dt.datetime(2024, 2, 29)),  # no pattern: the first value
        (
            {
                "partition.time-extractor.timestamp-pattern": "$day",
                "partition.time-extractor.timestamp-formatter": "yyyyMMdd",
            },
            (("day", "20240105"),),
            dt.datetime(2024, 1, 5),
        ),
        (
            {
                "partition.time-extractor.kind": "custom",
                "partition.time-extractor.class": f"{__name__}.HourExtractor",
            },
            (("h", "2024010509"),),
            dt.datetime(2024, 1, 5, 9),
        ),
    ],
)
def test_time_extraction(options: dict[str, str], values: tuple, expected: dt.datetime) -> None:
    extract = make_extractor(PartitionCommitConfig.from_options(options))
    assert extract("p", values) == expected


class HourExtractor:
    def extract(self, keys: list[str], values: list[str]) -> dt.datetime:
        return dt.datetime.strptime(values[0], "%Y%m%d%H")


@VERSIONS
def test_unparsable_partition_time_names_partition_and_value(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", hive=False, version=version)
    write(
        table,
        pa.table(
            {
                "id": ["a"],
                "ts": pa.array([1], pa.int64()),
                "year": ["2024"],
                "month": ["13"],
                "day": ["05"],
                "hour": ["03"],
            }
        ),
        "insert",
    )
    with pytest.raises(PartitionCommitError, match=r"partition '2024/13/05/03': time '2024-13-05 03:00:00'"):
        commit_partitions(table, ["2024/13/05/03"], PT, watermark="2030-01-01T00:00:00Z")


def test_durations_in_flink_syntax() -> None:
    assert parse_duration("0 s") == dt.timedelta(0)
    assert parse_duration("30min") == dt.timedelta(minutes=30)
    assert parse_duration("1 h") == dt.timedelta(hours=1)
    assert parse_duration("1 d") == dt.timedelta(days=1)
    assert parse_duration("1500") == dt.timedelta(milliseconds=1500)
    with pytest.raises(PartitionCommitConfigError, match="'1 fortnight' is not a duration"):
        parse_duration("1 fortnight")


# -- policies -------------------------------------------------------------------------------------
@VERSIONS
def test_success_file_leaves_hudi_rs_and_our_rows_identical(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.lake.table.reader import read_snapshot

    table = _table(tmp_path / "t", table_type="mor", version=version)
    _write(table, "03", ["a", "b"])
    _write(table, "04", ["c"])
    _write(table, "03", ["a"])  # a log file in the MOR table too
    before_rs, before_ours = _hudi_rows(table.base_path), read_snapshot(table).num_rows
    result = commit_partitions(table, [H03, H04], {"sink.partition-commit.success-file.name": "_DONE"})
    assert result.committed == (H03, H04)
    assert (table.base_path / H03 / "_DONE").exists() and (table.base_path / H04 / "_DONE").exists()
    assert _hudi_rows(table.base_path) == before_rs and len(before_rs) == 3
    assert read_snapshot(table).num_rows == before_ours == 3


@VERSIONS
def test_custom_policy_gets_the_frozen_context_in_order(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    first = _write(table, "03", ["a"])
    second = _write(table, "03", ["b"])
    _write(table, "04", ["c"])
    seen: list[tuple[str, Any]] = []

    def policy(context: CommitContext) -> None:
        seen.append(("custom", context))
        assert (table.base_path / context.partition_path / "_SUCCESS").exists()  # success-file ran first

    commit_partitions(
        table,
        [H03],
        {**PT, "sink.partition-commit.policy.kind": "success-file,custom"},
        watermark="2024-01-05T05:00:00Z",
        custom_policy=policy,
    )
    assert len(seen) == 1
    context = seen[0][1]
    assert context.table_uri == str(table.base_path)
    assert context.partition_path == H03
    assert dict(context.partition_values) == {"year": "2024", "month": "01", "day": "05", "hour": "03"}
    assert context.partition_time == dt.datetime(2024, 1, 5, 3)
    assert context.committed_instants == (first, second)
    with pytest.raises(AttributeError):
        context.partition_path = "x"  # type: ignore[misc]


class RecordingPolicy:
    calls: list[str] = []

    def commit(self, context: CommitContext) -> None:
        RecordingPolicy.calls.append(context.partition_path)


@VERSIONS
def test_custom_policy_class_by_dotted_path(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    RecordingPolicy.calls = []
    opts = {
        "sink.partition-commit.policy.kind": "custom",
        "sink.partition-commit.policy.class": f"{__name__}.RecordingPolicy",
    }
    assert commit_partitions(table, [H03], opts).committed == (H03,)
    assert RecordingPolicy.calls == [H03]
    assert not (table.base_path / H03 / "_SUCCESS").exists()  # only the policies asked for


# -- idempotence, crashes, late data --------------------------------------------------------------
@VERSIONS
def test_rerun_repeats_no_policy(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    calls: list[str] = []
    opts = {"sink.partition-commit.policy.kind": "success-file,custom"}
    assert commit_partitions(
        table, [H03], opts, custom_policy=lambda c: calls.append(c.partition_path)
    ).committed == (H03,)
    tree = _tree(table.base_path)
    again = commit_partitions(table, [H03], opts, custom_policy=lambda c: calls.append(c.partition_path))
    assert again.outcome.value == "NO_WORK" and again.to_dict()["already_committed"] == [H03]
    assert calls == [H03] and _tree(table.base_path) == tree


@VERSIONS
def test_a_failed_policy_is_resumed_without_repeating_the_applied_ones(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    opts = {"sink.partition-commit.policy.kind": "custom,success-file"}
    calls: list[str] = []

    def broken(context: CommitContext) -> None:
        raise RuntimeError("metastore down")

    with pytest.raises(
        PartitionCommitError, match="policy custom failed for partition .*hour=03.*metastore down"
    ):
        commit_partitions(table, [H03], opts, custom_policy=broken)
    assert not (table.base_path / H03 / "_SUCCESS").exists()
    assert commit_partitions(
        table, [H03], opts, custom_policy=lambda c: calls.append("custom")
    ).committed == (H03,)
    assert calls == ["custom"] and (table.base_path / H03 / "_SUCCESS").exists()
    # Crash after the first policy: custom applied, the success file not yet.
    _write(table, "04", ["b"])
    order: list[str] = []

    def once_then_crash(context: CommitContext) -> None:
        order.append("custom")

    from airflow_lake_provider.lake.services.partition_commit import target

    real_save = target.save_state
    saves = {"n": 0}

    def crash_after_custom(store: Any, state: Any) -> None:
        real_save(store, state)
        saves["n"] += 1
        if state.applied == ("custom",):
            raise KeyboardInterrupt("killed")

    target.save_state = crash_after_custom  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            commit_partitions(table, [H04], opts, custom_policy=once_then_crash)
    finally:
        target.save_state = real_save  # type: ignore[assignment]
    assert not (table.base_path / H04 / "_SUCCESS").exists()
    resumed = commit_partitions(table, [H04], opts, custom_policy=once_then_crash)
    assert resumed.committed == (H04,) and order == ["custom"]
    assert (table.base_path / H04 / "_SUCCESS").exists()


@VERSIONS
def test_late_data_is_reported_and_recommitted_only_when_configured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    calls: list[CommitContext] = []
    opts = {"sink.partition-commit.policy.kind": "custom"}
    commit_partitions(table, [H03], opts, custom_policy=calls.append)
    late = _write(table, "03", ["z"])
    with caplog.at_level("WARNING"):
        reported = commit_partitions(table, [H03], opts, custom_policy=calls.append)
    assert reported.outcome.value == "NO_WORK" and reported.to_dict()["late_data"] == {H03: [late]}
    assert f"late data in committed partition {H03}" in caplog.text and len(calls) == 1
    recommit = {**opts, "lake.partition-commit.late-data.recommit": "true"}
    again = commit_partitions(table, [H03], recommit, custom_policy=calls.append)
    assert again.committed == (H03,) and len(calls) == 2 and calls[1].recommit is True
    assert late in calls[1].committed_instants
    assert commit_partitions(table, [H03], recommit, custom_policy=calls.append).committed == ()
    assert len(calls) == 2


@VERSIONS
def test_late_data_under_process_time_waits_the_delay_from_its_own_arrival(
    tmp_path: Path, version: int
) -> None:
    # Flink re-commits a partition whose data arrives after its commit once that data's arrival +
    # delay has passed; the partition's first write (long past) does not make it due at once.
    clock = _Clock(dt.datetime(2024, 1, 5, 3, 10, tzinfo=UTC))
    table = _table(tmp_path / "t", clock, version=version)
    _write(table, "03", ["a"])
    opts = {"sink.partition-commit.delay": "1 h", "lake.partition-commit.late-data.recommit": "true"}
    first = commit_partitions(table, [H03], opts, now=dt.datetime(2024, 1, 5, 4, 10, tzinfo=UTC))
    assert first.committed == (H03,)
    clock.at = dt.datetime(2024, 1, 5, 6, 0, tzinfo=UTC)
    late = _write(table, "03", ["z"])
    early = commit_partitions(table, [H03], opts, now=dt.datetime(2024, 1, 5, 6, 59, 59, tzinfo=UTC))
    assert early.committed == () and early.to_dict()["late_data"] == {H03: [late]}
    assert early.to_dict()["waiting"][H03] == (
        "late data waits: first late write 2024-01-05T06:00:00+00:00 + delay 1:00:00 is after now "
        "(2024-01-05T06:59:59+00:00)"
    )
    due = commit_partitions(table, [H03], opts, now=dt.datetime(2024, 1, 5, 7, 0, tzinfo=UTC))
    assert due.committed == (H03,)
    assert "first late write 2024-01-05T06:00:00+00:00" in due.to_dict()["partitions"][H03]["reason"]


@VERSIONS
def test_compaction_is_not_late_data(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

    table = _table(tmp_path / "t", table_type="mor", version=version)
    _write(table, "03", ["a"])
    _write(table, "03", ["a"])
    commit_partitions(table, [H03])
    scheduled = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
    assert scheduled.instant is not None
    execute_compaction(table, scheduled.instant)
    result = commit_partitions(table, [H03])
    assert result.to_dict()["late_data"] == {} and result.to_dict()["already_committed"] == [H03]


@VERSIONS
def test_write_index_is_rebuilt_when_missing_or_corrupt(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    commit_partitions(table, [H03], dry_run=True)
    index = table.base_path / ".hoodie/.aux/lake-partition-index.json"
    assert json.loads(index.read_bytes())["partitions"] == {
        H03: [table.timeline().completed_commits[0].timestamp]
    }
    index.write_bytes(b"{not json")
    _write(table, "04", ["b"])
    assert commit_partitions(table, [H03, H04]).committed == (H03, H04)


# -- bad input ------------------------------------------------------------------------------------
@VERSIONS
@pytest.mark.parametrize(
    ("partitions", "options", "error", "message"),
    [
        (
            [H03],
            {"sink.partition-commit.policy.kind": "success-file,teleport"},
            PartitionCommitConfigError,
            "unknown policy 'teleport'",
        ),
        (
            [H03],
            {**PT, "partition.time-extractor.timestamp-pattern": "$yr-$month-$day"},
            PartitionCommitConfigError,
            r"unknown ones \['yr'\]",
        ),
        (
            [H03],
            {"sink.partition-commit.trigger": "event-time"},
            PartitionCommitConfigError,
            "'event-time' is not process-time or partition-time",
        ),
        (
            [H03],
            {"sink.partition-commit.delay": "soon"},
            PartitionCommitConfigError,
            "'soon' is not a duration",
        ),
        (
            [H03],
            {"sink.partition-commit.watermark-time-zone": "Mars/Olympus"},
            PartitionCommitConfigError,
            "'Mars/Olympus' is not a known time zone",
        ),
        (
            [H03],
            {"sink.partition-commit.policy.kind": "custom"},
            PartitionCommitConfigError,
            "needs sink.partition-commit.policy.class",
        ),
        (
            [H03],
            {"sink.partition-commit.policy.kind": "metastore"},
            PartitionCommitConfigError,
            "metastore' needs Spark SQL",
        ),
        (
            [H03, "year=2024/month=01/day=05/hour=09"],
            {},
            PartitionNotFoundError,
            r"\['year=2024/month=01/day=05/hour=09'\] have no completed write",
        ),
        (["../elsewhere"], {}, PartitionCommitError, "is not a partition path"),
    ],
)
def test_bad_input_raises_one_clear_error_and_changes_nothing(
    tmp_path: Path,
    partitions: list[str],
    options: dict[str, str],
    error: type[LakeError],
    message: str,
    version: int,
) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    tree = _tree(table.base_path)
    with pytest.raises(error, match=message) as info:
        commit_partitions(table, partitions, options, watermark="2030-01-01T00:00:00Z")
    assert "\n" not in str(info.value)
    assert _tree(table.base_path) == tree


# -- CLI ------------------------------------------------------------------------------------------
@VERSIONS
def test_cli_partition_commit_prints_json_then_no_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    _write(table, "04", ["b"])
    args = ["partition-commit", str(table.base_path), "--partition", H03, "--partition", H04]
    timing = ["--trigger", "partition-time", "--delay", "1 h", "--watermark", "2024-01-05T04:45:00Z"]
    table.store.update_properties({**table.config.properties, **PATTERN})
    assert main([*args, "--policy", "success-file", *timing]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "COMMITTED" and out["committed"] == [H03]
    assert out["waiting"] == {
        H04: "watermark 2024-01-05T04:45:00+00:00 <= partition time 2024-01-05 04:00:00 (UTC) + delay 1:00:00"
    }
    assert main([*args, *timing]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["outcome"] == "NO_WORK" and again["already_committed"] == [H03]


@VERSIONS
def test_cli_partition_commit_errors_exit_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    tree = _tree(table.base_path)
    for extra, message in [
        (["--policy", "success-file,bogus"], "unknown policy 'bogus'"),
        (["--partition", "hour=99"], "have no completed write"),
        (["--watermark", "yesterday"], "watermark 'yesterday' is not an ISO 8601 time"),
        (["--delay", "later"], "'later' is not a duration"),
    ]:
        assert main(["partition-commit", str(table.base_path), "--partition", H03, *extra]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("lake: error: ") and message in lines[0]
    assert _tree(table.base_path) == tree


@VERSIONS
def test_write_index_waits_for_an_earlier_write_that_completes_late(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.lake.services.partition_commit.state import load_index
    from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
    from airflow_lake_provider.lake.timeline.instant import Action

    table = _table(tmp_path / "t", version=version)
    # Concurrent writers: no writer rolls back the other's pending instant (Hudi's LAZY/NEVER).
    table.store.update_properties({**table.config.properties, "hoodie.cleaner.policy.failed.writes": "NEVER"})
    table = LakeTable.open(table.base_path, clock=table.clock)
    _write(table, "03", ["a"])
    slow = table.clock.next(after=table.timeline().latest_time)  # a write that starts first...
    inflight = table.store.transition_to_inflight(table.store.create_requested(slow, Action.COMMIT))
    fast = _write(table, "04", ["b"])  # ...and one that starts later and completes before it
    commit_partitions(table, [H04], dry_run=True)
    index = load_index(table.timeline())
    assert index is not None and index.through is not None and index.through < slow < fast
    assert fast in index.seen_after
    stat = WriteStat(file_id="f", partition_path=H03, path=f"{H03}/f.parquet", num_writes=1)
    metadata = CommitMetadata("UPSERT", {H03: (stat,)}).to_bytes(avro=table.layout.has_completion_times)
    table.store.transition_to_completed(inflight, metadata)
    result = commit_partitions(table, [H03], dry_run=True)
    assert result.to_dict()["partitions"][H03]["writes"] == 2  # the late-completing write is indexed
    index = load_index(table.timeline())
    assert index is not None and index.through == fast and index.seen_after == frozenset()


# -- the write index after rollback, restore and archival; daylight saving; out-of-range input -----
@VERSIONS
def test_a_rolled_back_write_leaves_the_index(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.lake.table.rollback.executor import rollback

    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    only_in_04 = _write(table, "04", ["b"])
    assert commit_partitions(table, [H04], dry_run=True).to_dict()["partitions"][H04]["decision"] == "DUE"
    rollback(table, only_in_04, force=True)
    with pytest.raises(PartitionNotFoundError, match="hour=04"):
        commit_partitions(table, [H04])
    assert not (table.base_path / H04 / "_SUCCESS").exists()
    assert commit_partitions(table, [H03]).committed == (H03,)


@VERSIONS
def test_the_index_is_rebuilt_from_the_archived_timeline(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.lake.table.archival.executor import run_archival

    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    for n in range(8):
        _write(table, "04", [f"b{n}"])
    archived = run_archival(table, {"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "5"})
    assert archived.archived and archived.archived[0] < archived.keep_from
    result = commit_partitions(table, [H03])  # its only write is archived; no index existed yet
    assert result.committed == (H03,)
    assert (table.base_path / H03 / "_SUCCESS").read_bytes() == b""


def _poke(table: LakeTable, partitions: list[str]) -> dict[str, Any]:
    """What the sensor's poke does: plan, keep the write index fresh, commit nothing."""
    return commit_partitions(table, partitions, dry_run=True, require_existing=False).to_dict()


@VERSIONS
def test_a_partition_written_only_by_a_write_archived_between_two_pokes_becomes_committable(
    tmp_path: Path, version: int
) -> None:
    # All defaults: every write archives at its end once more than 30 commits are active (down to
    # 20), so 32 writes between two pokes move the one write of hour 03 to the archived timeline.
    table = _table(tmp_path / "t", version=version)
    _write(table, "04", ["b"])
    assert _poke(table, [H03])["missing"] == [H03]  # not written yet: the sensor waits
    only = _write(table, "03", ["a"])
    for n in range(30):
        _write(table, "04", [f"b{n}"])
    assert only not in [i.timestamp for i in table.timeline().instants]  # archived
    poke = _poke(table, [H03])
    assert (poke["missing"], poke["partitions"][H03]["decision"]) == ([], "DUE")
    assert (poke["partitions"][H03]["first_write"], poke["partitions"][H03]["writes"]) == (only, 1)
    result = commit_partitions(table, [H03])
    assert result.committed == (H03,) and (table.base_path / H03 / "_SUCCESS").read_bytes() == b""
    assert _hudi_rows(table.base_path)[:1] == [("id:a", H03, 1)]  # the archived write reads


@VERSIONS
def test_late_data_archived_before_the_next_poke_is_noticed_and_recommitted(
    tmp_path: Path, version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    first = _write(table, "03", ["a"])
    calls: list[CommitContext] = []
    opts = {"sink.partition-commit.policy.kind": "custom"}
    assert commit_partitions(table, [H03], opts, custom_policy=calls.append).committed == (H03,)
    late = _write(table, "03", ["z"])
    for n in range(30):
        _write(table, "04", [f"b{n}"])
    assert late not in [i.timestamp for i in table.timeline().instants]  # archived
    reported = commit_partitions(table, [H03], opts, custom_policy=calls.append)
    assert (reported.outcome.value, reported.to_dict()["late_data"]) == ("NO_WORK", {H03: [late]})
    recommit = {**opts, "lake.partition-commit.late-data.recommit": "true"}
    again = commit_partitions(table, [H03], recommit, custom_policy=calls.append)
    assert again.committed == (H03,) and [c.committed_instants for c in calls] == [(first,), (first, late)]
    assert calls[1].recommit is True


@VERSIONS
def test_writes_archived_between_two_pokes_are_indexed_on_s3(s3_bucket: str, version: int) -> None:
    # hoodie.keep.* in the table's properties: every write archives above 4 commits, down to 2.
    created = _table(f"s3://{s3_bucket}/t", version=version)  # type: ignore[arg-type]
    keep = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "4"}
    created.store.update_properties({**created.config.properties, **keep})
    table = LakeTable.open(created.uri)
    first = _write(table, "04", ["b"])
    assert _poke(table, [H03])["missing"] == [H03]
    only = _write(table, "03", ["a"])
    for n in range(4):
        _write(table, "04", [f"b{n}"])
    assert only not in [i.timestamp for i in table.timeline().instants]  # archived
    poke = _poke(table, [H03, H04])
    assert poke["missing"] == [] and poke["partitions"][H03]["first_write"] == only
    assert (poke["partitions"][H04]["first_write"], poke["partitions"][H04]["writes"]) == (first, 5)
    assert commit_partitions(table, [H03]).committed == (H03,)
    late = _write(table, "03", ["z"])
    for n in range(4):
        _write(table, "04", [f"c{n}"])
    assert late not in [i.timestamp for i in table.timeline().instants]  # archived
    assert commit_partitions(table, [H03]).to_dict()["late_data"] == {H03: [late]}


@VERSIONS
def test_a_rollback_archived_before_the_next_poke_still_takes_its_write_out(
    tmp_path: Path, version: int
) -> None:
    from airflow_lake_provider.lake.table.rollback.executor import rollback
    from airflow_lake_provider.lake.timeline.instant import Action

    table = _table(tmp_path / "t", version=version)
    _write(table, "04", ["b"])
    only_in_05 = _write(table, "05", ["c"])
    assert _poke(table, [H05])["partitions"][H05]["decision"] == "DUE"
    rollback(table, only_in_05, force=True)
    (undone,) = [i.timestamp for i in table.timeline().filter([Action.ROLLBACK])]
    for n in range(30):
        _write(table, "04", [f"b{n}"])
    assert undone not in [i.timestamp for i in table.timeline().instants]  # archived
    assert _poke(table, [H05])["missing"] == [H05]
    with pytest.raises(PartitionNotFoundError, match="hour=05"):
        commit_partitions(table, [H05])


# Version 6 only: version 6's archive log (Java appends blocks to it; the LSM history has no such file).
def test_writes_an_archiver_appended_to_its_newest_archive_file_are_indexed(tmp_path: Path) -> None:
    """Java's archiver appends blocks to its newest archive file (ours writes a new file per run):
    each poke after an archival reads the bytes added since the last one, and nothing else."""
    from airflow_lake_provider.lake.services.partition_commit.state import load_index
    from airflow_lake_provider.lake.table.archival.archive_log import archive_entry
    from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
    from airflow_lake_provider.lake.table.archival.executor import run_archival
    from airflow_lake_provider.lake.table.archival.planner import plan_archival
    from airflow_lake_provider.lake.timeline.archived import encode_archive_block

    table = _table(tmp_path / "t")
    for n in range(8):
        _write(table, "04", [f"b{n}"])
    keep = {"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "5"}
    assert run_archival(table, keep).archive_file == ".commits_.archive.1_1-0-1"
    archive = ".hoodie/archived/.commits_.archive.1_1-0-1"
    assert _poke(table, [H03, H05])["missing"] == [H03, H05]

    def java_archival() -> list[str]:
        """Archive what is due as Java does: one block appended to the newest archive file."""
        timeline = table.timeline()
        plan = plan_archival(timeline, ArchivalConfig(3, 5), None)
        assert plan is not None
        entries = [archive_entry(timeline, i) for i in plan.instants]
        table.storage.append(archive, encode_archive_block(entries, plan.instants[0].timestamp))
        table.store.remove_archived([i.timestamp for i in plan.instants])
        return [i.timestamp for i in plan.instants]

    for hour, partition, seen in (("03", H03, [H05]), ("05", H05, [])):
        only = _write(table, hour, ["a"])
        for n in range(3):
            _write(table, "04", [f"{hour}-{n}"])
        assert only in java_archival()
        poke = _poke(table, [H03, H05])
        assert (poke["missing"], poke["partitions"][partition]["first_write"]) == (seen, only)
        index = load_index(table.timeline())
        assert index is not None and index.archive_read == (1, table.storage.size(archive))
    assert commit_partitions(table, [H03, H05]).committed == (H03, H05)


@VERSIONS
@pytest.mark.parametrize(
    ("day", "watermark", "due"),
    [
        # 2026-03-29 in Berlin (clocks go forward at 02:00): hour 01 is 01:00 CET = 00:00Z; + 2 h
        # elapsed is 02:00Z (adding wall-clock hours would give 03:00 CEST = 01:00Z, an hour early).
        ("29", "2026-03-29T01:30:00Z", False),
        ("29", "2026-03-29T02:00:01Z", True),
        # 2026-10-25 (clocks go back at 03:00): hour 01 is 01:00 CEST = 23:00Z the day before; + 2 h
        # elapsed is 01:00Z (wall-clock hours would give 03:00 CET = 02:00Z, an hour late).
        ("25", "2026-10-25T00:59:00Z", False),
        ("25", "2026-10-25T01:00:01Z", True),
    ],
)
def test_partition_time_compares_absolute_times_across_daylight_saving(
    tmp_path: Path, day: str, watermark: str, due: bool, version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    month = "03" if day == "29" else "10"
    write(
        table,
        pa.table(
            {
                "id": ["a"],
                "ts": pa.array([1], pa.int64()),
                "year": ["2026"],
                "month": [month],
                "day": [day],
                "hour": ["01"],
            }
        ),
        "upsert",
    )
    partition = f"year=2026/month={month}/day={day}/hour=01"
    options = {
        **PT,
        "sink.partition-commit.delay": "2 h",
        "sink.partition-commit.watermark-time-zone": "Europe/Berlin",
    }
    result = commit_partitions(table, [partition], options, watermark=watermark, dry_run=True)
    assert (result.to_dict()["partitions"][partition]["decision"] == "DUE") is due


@VERSIONS
@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--delay", "99999999999999 d", "is longer than any date range"),
        ("--delay", "3000000 d", "is longer than 365000 days"),
        ("--watermark", "-99999999999999999", "within years 1..9999"),
        ("--watermark", "0001-01-01T00:30:00+01:00", "within years 1..9999"),
        ("--watermark", "99999999999999999999", "within years 1..9999"),
    ],
)
def test_out_of_range_delays_and_watermarks_are_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str, version: int
) -> None:
    table = _table(tmp_path / "t", version=version)
    _write(table, "03", ["a"])
    args = ["partition-commit", str(table.base_path), "--partition", H03, "--trigger", "partition-time"]
    assert cli.main([*args, flag, value]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lake: error: ") and message in err[0]
    assert not (table.base_path / H03 / "_SUCCESS").exists()
