"""The compaction tests that do not depend on the table version run on version 6 and on 8 (Hudi 1.x:
timeline layout 2, a log file per deltacommit, slices by completion time, Avro plans and metadata)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[6, 8], ids=["v6", "v8"])
def table_version(request: pytest.FixtureRequest) -> int:
    return request.param
