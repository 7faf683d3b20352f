"""The rollback planner (pure) and the plan's Avro round trip, on exact inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_lake_provider.lake.errors import UnsafePathError
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.rollback.plan import RollbackPlan, RollbackRequest
from airflow_lake_provider.lake.table.rollback.planner import WrittenFile, plan
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State

T, B, OTHER = "20250101000000002", "20250101000000001", "20250101000000000"


def test_plan_deletes_own_files_marks_shared_logs_and_ignores_the_rest() -> None:
    written = [
        WrittenFile(f"p/f1_0-0-0_{T}.parquet", 10),  # a base file it wrote
        WrittenFile(f"p/f2_0-0-0_{OTHER}.parquet", 10),  # another instant's base file: never deleted
        WrittenFile(f"p/.f3_{B}.log.2_0-0-0", 20, frozenset({T})),  # a log version it created
        WrittenFile(f"p/.f4_{B}.log.1_0-0-0", 30, frozenset({B, T})),  # it appended to a shared log
        WrittenFile(f"p/.f5_{B}.log.1_0-0-0", 40, frozenset({B})),  # a marker, but no block of it
        WrittenFile("p/.hoodie_partition_metadata", 5),
    ]
    got = plan(Instant(T, State.INFLIGHT, Action.DELTACOMMIT), written)
    assert got == RollbackPlan(
        T,
        Action.DELTACOMMIT,
        (
            RollbackRequest("p", "f1", T, (f"p/f1_0-0-0_{T}.parquet",), ()),
            RollbackRequest("p", "f3", B, (f"p/.f3_{B}.log.2_0-0-0",), ()),
            RollbackRequest("p", "f4", B, (), ((f"p/.f4_{B}.log.1_0-0-0", 30),)),
        ),
    )
    # keep_logs (a rollback correcting a v6 metadata table): the log it created is marked too; a log
    # without any block of it (torn) is still deleted.
    torn = WrittenFile(f"p/.f6_{B}.log.3_0-0-0", 7, frozenset())
    kept = plan(Instant(T, State.COMPLETED, Action.DELTACOMMIT), [*written, torn], keep_logs=True)
    assert kept == RollbackPlan(
        T,
        Action.DELTACOMMIT,
        (
            RollbackRequest("p", "f1", T, (f"p/f1_0-0-0_{T}.parquet",), ()),
            RollbackRequest("p", "f3", B, (), ((f"p/.f3_{B}.log.2_0-0-0", 20),)),
            RollbackRequest("p", "f4", B, (), ((f"p/.f4_{B}.log.1_0-0-0", 30),)),
            RollbackRequest("p", "f6", B, (f"p/.f6_{B}.log.3_0-0-0",), ()),
        ),
    )


def test_plan_avro_round_trip_and_paths_outside_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    original = RollbackPlan(
        T,
        Action.COMMIT,
        (RollbackRequest("p", "f1", T, (f"p/f1_0-0-0_{T}.parquet",), (("p/.f4_x.log.1_0-0-0", 30),)),),
    )
    data = original.to_avro(storage)
    record = timeline_avro.read_avro(data, "plan")
    assert record["RollbackRequests"][0]["filesToBeDeleted"] == [f"{tmp_path}/p/f1_0-0-0_{T}.parquet"]
    assert RollbackPlan.from_record(record, "plan", storage) == original
    record["RollbackRequests"][0]["filesToBeDeleted"] = ["/etc/passwd"]
    with pytest.raises(UnsafePathError, match="/etc/passwd"):
        RollbackPlan.from_record(record, "plan", storage)
    record["RollbackRequests"][0]["filesToBeDeleted"] = [".hoodie/hoodie.properties"]
    with pytest.raises(UnsafePathError, match=r"under \.hoodie/"):
        RollbackPlan.from_record(record, "plan", storage)


def test_plan_nested_partitions_and_another_instants_file_listed_first() -> None:
    # f0 (another instant's base file) sorts first: it is skipped, and the files after it still count.
    # Requests are ordered by partition, then file id (a0 in y=2026 comes after f1 and f2 in y=2025).
    written = [
        WrittenFile(f"y=2026/a0_0-0-0_{T}.parquet", 10),
        WrittenFile(f"y=2025/m=01/f0_0-0-0_{OTHER}.parquet", 10),
        WrittenFile(f"y=2025/m=01/f1_0-0-0_{T}.parquet", 10),
        WrittenFile(f"y=2025/m=01/.f2_{B}.log.1_0-0-0", 20, frozenset({B, T})),
    ]
    got = plan(Instant(T, State.INFLIGHT, Action.DELTACOMMIT), written)
    assert got == RollbackPlan(
        T,
        Action.DELTACOMMIT,
        (
            RollbackRequest("y=2025/m=01", "f1", T, (f"y=2025/m=01/f1_0-0-0_{T}.parquet",), ()),
            RollbackRequest("y=2025/m=01", "f2", B, (), ((f"y=2025/m=01/.f2_{B}.log.1_0-0-0", 20),)),
            RollbackRequest("y=2026", "a0", T, (f"y=2026/a0_0-0-0_{T}.parquet",), ()),
        ),
    )


def test_plan_of_a_1x_table_deletes_the_logs_named_with_the_instant_and_marks_none() -> None:
    # Versions 8/9: a deltacommit writes its own log files, named with its instant; each request's
    # base instant is that instant; another instant's log is neither deleted nor marked, whatever
    # blocks it holds.
    written = [
        WrittenFile(f"p/.f1_{T}.log.1_0-0-0", 20, frozenset({T})),
        WrittenFile(f"p/.f1_{T}.log.2_0-0-0", 25, frozenset({T})),
        WrittenFile(f"p/.f2_{B}.log.1_0-0-0", 30, frozenset({B, T})),
        WrittenFile(f"q/f3_0-0-0_{T}.parquet", 10),
    ]
    got = plan(Instant(T, State.INFLIGHT, Action.DELTACOMMIT), written, logs_per_instant=True)
    assert got == RollbackPlan(
        T,
        Action.DELTACOMMIT,
        (
            RollbackRequest("p", "f1", T, (f"p/.f1_{T}.log.1_0-0-0", f"p/.f1_{T}.log.2_0-0-0"), ()),
            RollbackRequest("q", "f3", T, (f"q/f3_0-0-0_{T}.parquet",), ()),
        ),
    )


@pytest.mark.parametrize("slice_logs", [False, True])
def test_a_compactions_plan_deletes_the_logs_named_after_its_slices(slice_logs: bool) -> None:
    """Version 6: logs named after compaction ``T``'s slices hold later writes' blocks (rolled back
    before ``T`` may be) and rollback blocks. With ``slice_logs`` they go with ``T``'s base files,
    in the request of their file group; without it (any other target) such a log, holding none of
    ``T``'s blocks, is neither deleted nor marked."""
    written = [
        WrittenFile(f"p/.f1_{T}.log.1_0-0-0", 40, frozenset({"20250101000000003", "20250101000000004"})),
        WrittenFile(f"p/f1_0-0-0_{T}.parquet", 10),
    ]
    got = plan(Instant(T, State.COMPLETED, Action.COMMIT), written, slice_logs=slice_logs)
    base = f"p/f1_0-0-0_{T}.parquet"
    deleted = (f"p/.f1_{T}.log.1_0-0-0", base) if slice_logs else (base,)
    assert got == RollbackPlan(T, Action.COMMIT, (RollbackRequest("p", "f1", T, deleted, ()),))


def test_a_compactions_slice_without_its_base_file_still_names_the_compaction_as_its_base() -> None:
    """A compaction that crashed before writing its base file in a group: the group's request names
    ``T`` as its latest base instant (Hudi's ``latestBaseInstant``), from the slice's log alone."""
    written = [WrittenFile(f"p/.f1_{T}.log.1_0-0-0", 40, frozenset({"20250101000000003"}))]
    got = plan(Instant(T, State.COMPLETED, Action.COMMIT), written, slice_logs=True)
    assert got == RollbackPlan(
        T, Action.COMMIT, (RollbackRequest("p", "f1", T, (f"p/.f1_{T}.log.1_0-0-0",), ()),)
    )


def test_a_log_named_after_the_target_is_planned_by_its_blocks_unless_told_it_is_a_slice() -> None:
    """Version 6: a file group of logs only starts with a log named after the deltacommit that
    created it; rolling that deltacommit back marks the log when later writes appended to it (the
    default), it does not delete the whole slice as a compaction's rollback does."""
    later = "20250101000000009"
    written = [WrittenFile(f"p/.f1_{T}.log.1_0-0-0", 40, frozenset({T, later}))]
    got = plan(Instant(T, State.INFLIGHT, Action.DELTACOMMIT), written)
    assert got == RollbackPlan(
        T, Action.DELTACOMMIT, (RollbackRequest("p", "f1", T, (), ((f"p/.f1_{T}.log.1_0-0-0", 40),)),)
    )
