"""The storage contract tests run against both storages: a local temp folder and S3 (moto)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_lake_provider.lake.storage import LocalStorage, Storage
from airflow_lake_provider.lake.storage.s3 import S3Storage


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "t")
    bucket = request.getfixturevalue("s3_bucket")
    return S3Storage(f"s3://{bucket}/tables/t")
