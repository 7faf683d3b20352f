"""The partition commit planner's watermark from the table's recorded event times."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_lake_provider.lake.errors import PartitionCommitConfigError
from airflow_lake_provider.lake.services.partition_commit.config import PartitionCommitConfig
from airflow_lake_provider.lake.services.partition_commit.planner import table_watermark
from airflow_lake_provider.lake.services.partition_commit.state import WriteIndex

LATENESS = "lake.partition-commit.watermark.allowed-lateness"


def test_the_watermark_is_the_newest_event_time_minus_the_lateness() -> None:
    config = PartitionCommitConfig.from_options({LATENESS: "1 h"})
    newest = WriteIndex(max_event_time_ms=1_704_110_400_000)  # 2024-01-01T12:00Z
    assert table_watermark(newest, config) == dt.datetime(2024, 1, 1, 11, tzinfo=dt.timezone.utc)
    assert table_watermark(WriteIndex(), config) is None


@pytest.mark.parametrize(
    ("newest", "lateness"),
    [(1_704_067_200_000_000, "0 s"), (-62_135_596_800_000, "1 d"), (-62_135_596_800_001, "0 s")],
    ids=["microseconds-recorded", "lateness-past-year-1", "before-year-1"],
)
def test_a_watermark_out_of_the_calendar_is_a_config_error_naming_its_parts(
    newest: int, lateness: str
) -> None:
    """A recorded maximum an older writer let through (or a lateness past year 1) once escaped as a
    raw OverflowError/ValueError: every later partition-time commit of the table failed so."""
    config = PartitionCommitConfig.from_options({LATENESS: lateness})
    with pytest.raises(PartitionCommitConfigError) as caught:
        table_watermark(WriteIndex(max_event_time_ms=newest), config)
    assert str(caught.value) == (
        f"the table's newest event time ({newest} epoch ms, recorded as lake.maxEventTime) minus "
        f"{LATENESS}={config.allowed_lateness} is not a time between the years 1 and 9999: pass the "
        "watermark explicitly"
    )
