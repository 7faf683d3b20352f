"""The clean's durable records, field by field: the completed metadata (file names only, whatever the
partition depth or none, the plan's last completed commit, the time taken) and the inflight file."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.services.clean import executor
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action

RETAIN_ONE = {"hoodie.cleaner.commits.retained": "1"}


# Every test here is table-version neutral: it runs on version 6 and on Hudi 1.x's version 8.
VERSIONS = pytest.mark.parametrize("version", [6, 8], ids=["v6", "v8"])


def _table(tmp_path: Path, partition_fields: tuple[str, ...], version: int = 6) -> LakeTable:
    return LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=partition_fields,
        table_version=version,
    )


def _upsert(table: LakeTable, ts: int, rows: list[dict[str, str]]) -> str:
    columns = {name: [r[name] for r in rows] for name in rows[0]}
    batch = pa.table({**columns, "ts": pa.array([ts] * len(rows), pa.int64())})
    return write(table, batch, "upsert").instant


def _data_files(table: LakeTable) -> list[str]:
    return sorted(
        str(p.relative_to(table.base_path))
        for p in table.base_path.rglob("*.parquet")
        if ".hoodie" not in p.relative_to(table.base_path).parts
    )


def _clean_metadata(table: LakeTable) -> dict:
    timeline = table.timeline()
    return timeline_avro.read_avro(timeline.read_bytes(timeline.last_completed(Action.CLEAN)), "clean")


def _fail_one(table: LakeTable, path: str) -> None:
    """After planning, ``path`` becomes a directory of the same name: deleting it as a file fails."""
    (table.base_path / path).unlink()
    (table.base_path / path).mkdir()


@VERSIONS
@pytest.mark.parametrize(
    ("fields", "rows", "partitions"),
    [
        # Two partition levels: "a/b/<file>" must still record only "<file>".
        (("p", "q"), [{"id": "k1", "p": "a", "q": "b"}, {"id": "k2", "p": "a", "q": "c"}], ["a/b", "a/c"]),
        # No partition: the file sits at the base path, a name without any "/".
        ((), [{"id": "k1"}, {"id": "k2"}], [""]),
    ],
)
def test_clean_metadata_names_files_only_at_any_partition_depth(
    tmp_path: Path, fields: tuple[str, ...], rows: list[dict[str, str]], partitions: list[str], version: int
) -> None:
    table = _table(tmp_path, fields, version)
    c0 = _upsert(table, 0, rows)
    _upsert(table, 1, rows)
    c2 = _upsert(table, 2, rows)
    old = [f for f in _data_files(table) if f.endswith(f"_{c0}.parquet")]
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    assert scheduled.plan.file_count == len(old) == len(partitions)  # one file group per partition
    failed = old[-1]
    _fail_one(table, failed)  # the last file's delete fails, the others succeed
    result = run_clean(table, RETAIN_ONE, mode="execute")
    assert (result.outcome, result.deleted_files, result.failed_files) == (Outcome.CLEANED, len(old) - 1, 1)
    meta = _clean_metadata(table)
    expected = {}
    for part, path in zip(partitions, old, strict=True):
        name = path.rsplit("/", 1)[-1]
        assert path == (f"{part}/{name}" if part else name)  # no "/" at all when unpartitioned
        expected[part] = {
            "partitionPath": part,
            "policy": "KEEP_LATEST_COMMITS",
            "deletePathPatterns": [name],
            "successDeleteFiles": [] if path == failed else [name],
            "failedDeleteFiles": [name] if path == failed else [],
            "isPartitionDeleted": False,
        }
    assert meta["partitionMetadata"] == expected
    # The last completed commit when the plan was made, as Hudi records it.
    assert meta["lastCompletedCommitTimestamp"] == c2
    assert meta["bootstrapPartitionMetadata"] is None


@VERSIONS
def test_time_taken_is_the_milliseconds_since_the_start(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, ("p",), version)
    for ts in range(3):
        _upsert(table, ts, [{"id": "k", "p": "x"}])
    plan = run_clean(table, RETAIN_ONE, dry_run=True).plan
    started = time.monotonic() - 1000.0  # a clean that started 1,000 s ago
    meta = executor.clean_metadata(plan, "20990101000000000", {}, started)
    assert 1_000_000 <= meta["timeTakenInMillis"] < 1_000_500


@VERSIONS
def test_the_inflight_clean_holds_the_plan_it_executes(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path, ("p",), version)
    for ts in range(3):
        _upsert(table, ts, [{"id": "k", "p": "x"}])
    done = run_clean(table, RETAIN_ONE)
    hoodie = table.base_path / table.layout.folder  # .hoodie/, or .hoodie/timeline/ in layout 2
    requested = (hoodie / f"{done.instant}.clean.requested").read_bytes()
    assert requested  # the Avro cleaner plan
    # Hudi moves the plan into the inflight file too; a reader of an interrupted clean finds it there.
    assert (hoodie / f"{done.instant}.clean.inflight").read_bytes() == requested


def _log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == executor.log.name]


@VERSIONS
@pytest.mark.parametrize("count", [9, 10])
def test_a_short_list_of_files_kept_for_savepoints_is_logged_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, count: int, version: int
) -> None:
    table = _table(tmp_path, ("p",), version)
    rows = [{"id": f"k{i}", "p": f"p{i:02d}"} for i in range(count)]
    c0 = _upsert(table, 0, rows)
    _upsert(table, 1, rows)
    _upsert(table, 2, rows)
    scheduled = run_clean(table, RETAIN_ONE, mode="schedule")
    point = create_savepoint(table, c0)
    caplog.set_level(logging.INFO, logger=executor.log.name)
    caplog.clear()
    done = run_clean(table, RETAIN_ONE, mode="execute")
    kept = tuple(sorted(point.files))
    assert len(kept) == count and done.kept_for_savepoints == kept
    assert _log(caplog)[0] == (
        f"clean {scheduled.instant} of {table.uri}: keeping {count} planned files that savepoints need: "
        + ", ".join(kept)
    )
