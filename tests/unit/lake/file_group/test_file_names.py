"""Base and log file names: file ids and write tokens checked, parsed and created alike."""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_lake_provider.lake.errors import (
    InvalidFileNameError,
)
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName, validate_file_id
from airflow_lake_provider.lake.timeline.instant import format_instant

T1 = format_instant(dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc))


@pytest.mark.parametrize("file_id", ["abc_def", "a_b-0", "_", "", "has space", "dot.id"])
def test_file_names_bad_file_id_raises_invalid_file_name(file_id: str) -> None:
    with pytest.raises(InvalidFileNameError):
        validate_file_id(file_id)
    with pytest.raises(InvalidFileNameError):
        BaseFileName.create(file_id, "1-1-0", T1)
    with pytest.raises(InvalidFileNameError):
        LogFileName.create(file_id, T1, 1, "1-1-0")


@pytest.mark.parametrize("token", ["1_1_0", "a-b-c", "1-1", ""])
def test_file_names_bad_write_token_raises(token: str) -> None:
    with pytest.raises(InvalidFileNameError):
        BaseFileName.create("fid-0", token, T1)
    with pytest.raises(InvalidFileNameError):
        LogFileName.create("fid-0", T1, 1, token)


def test_file_names_parse_and_create_round_trip() -> None:
    base = BaseFileName.create("5a226868-2934-4f84-a16f-55124630c68d-0", "0-13-23", T1)
    assert base.name == f"5a226868-2934-4f84-a16f-55124630c68d-0_0-13-23_{T1}.parquet"
    assert BaseFileName.parse(base.name) == base
    log = LogFileName.create("0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0", "20250126040823628", 2, "1-0-1")
    assert log.name == ".0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0_20250126040823628.log.2_1-0-1"
    assert LogFileName.parse(log.name) == log
    assert BaseFileName.parse(f"a_b_1-1-0_{T1}.parquet") is None  # a file id with "_" is not a base file
    assert LogFileName.parse(f".fid_{T1}.log.0_1-1-0") == LogFileName("fid", T1, 0, "1-1-0")
    with pytest.raises(InvalidFileNameError):
        LogFileName.create("fid", T1, 0, "1-1-0")
