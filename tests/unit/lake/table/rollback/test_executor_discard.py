"""table/rollback/executor.py: a writer's own failed write discarded without a rollback instant
(files, markers, instant and heartbeat gone, one log line; a completed or unknown instant is left
alone), rollback naming itself when a table's metadata table refuses it, and a forced rollback
refused when a clean removed the slices it would fall back to."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from compaction_support import DUE, batch, crash_at, empty_mor, mor
from crash_support import crashing
from metadata_table_support import add_metadata_table

from airflow_lake_provider.lake.errors import RollbackError, TableConfigError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.metadata.policy import detect
from airflow_lake_provider.lake.table.rollback import executor
from airflow_lake_provider.lake.table.rollback.executor import discard_failed_write, rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action, State


def _files(table: LakeTable) -> list[str]:
    return sorted(str(p.relative_to(table.base_path)) for p in table.base_path.rglob("*") if p.is_file())


def _failed_write(tmp_path: Path) -> tuple[LakeTable, str, list[str]]:
    """A MOR table and a write of a new key in a new partition that crashed before its commit."""
    table = mor(tmp_path)
    before = _files(table)
    with pytest.raises(SimulatedCrash):
        write(table, batch(["z"], 1, "z"), "insert", fault=crash_at("commit"))
    (failed,) = table.timeline().pending
    return table, failed.timestamp, before


def test_a_failed_write_is_discarded_leaving_no_trace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table, failed, before = _failed_write(tmp_path)
    made = [f for f in _files(table) if f.startswith("z/") and f.endswith(".parquet")]
    assert len(made) == 1 and table.store.markers.read(failed)
    table.store.heartbeats.beat(failed, 1)  # as a writer under the LAZY failed-writes policy beats
    assert (table.base_path / table.store.heartbeats.path(failed)).exists()
    with caplog.at_level(logging.INFO, logger=executor.__name__):
        assert discard_failed_write(table, failed) is True
    assert [r.getMessage() for r in caplog.records if r.name == executor.__name__] == [
        f"discarded failed write {failed} of {table.uri}: 1 files deleted"
    ]
    assert table.timeline().get(failed) is None
    assert not (table.base_path / table.store.heartbeats.path(failed)).exists()
    # The partition's metadata file stays (as Hudi leaves it); nothing else of the write is left.
    assert _files(table) == sorted([*before, "z/.hoodie_partition_metadata"])


def test_a_completed_or_unknown_instant_is_not_discarded(tmp_path: Path) -> None:
    table = mor(tmp_path)
    before = _files(table)
    completed = table.timeline().completed_commits[-1].timestamp
    assert discard_failed_write(table, completed) is False
    assert discard_failed_write(table, "20990101000000000") is False
    assert _files(table) == before
    assert table.timeline().get(completed).is_completed


def test_a_table_with_a_metadata_table_refuses_rollback_by_name_unless_dropped(tmp_path: Path) -> None:
    table, failed, _ = _failed_write(tmp_path)
    add_metadata_table(table.base_path, partitions="files,column_stats")
    table = LakeTable.open(table.base_path, clock=table.clock)
    with pytest.raises(TableConfigError) as raised:
        rollback(table)
    assert str(raised.value).startswith(
        f"rollback refused: {table.uri} has Hudi's metadata table (partitions [files, column_stats], "
        "folder .hoodie/metadata/), which this engine keeps up to date by default, but cannot for this "
        "action: partitions [files, column_stats] (only [files] on table version 6); the action would "
        "leave it stale"
    )
    assert table.timeline().get(failed) is not None
    (done,) = rollback(table, options={"hoodie.metadata.enable": "false"})
    assert done.target == failed
    assert not detect(LakeTable.open(table.base_path)).present


def test_a_forced_rollback_whose_fallback_a_clean_removed_is_refused_in_process(tmp_path: Path) -> None:
    """The refusal of a forced rollback that would delete the only version left (the CLI's tests of
    it, in test_cli_rollback.py, are outside the mutation selection: that file starts processes)."""
    table = empty_mor(tmp_path)
    v1 = write(table, batch(["a"], 1, "x"), "insert").instant
    write(table, batch(["a"], 2, "x"), "upsert")
    schedule_compaction(table, DUE)
    v3 = execute_compaction(table).instant  # the compacted slice of v3 falls back to v1's
    run_clean(
        table,
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
    )
    with pytest.raises(RollbackError) as raised:
        rollback(table, v3, force=True)
    (file_id,) = {p.name.split("_")[0] for p in (table.base_path / "x").glob("*.parquet")}
    v2 = table.timeline().completed_commits[1].timestamp
    assert str(raised.value) == (
        f"{table.uri}: cannot roll back {v3}: a clean removed the file slice {v1} of file group {file_id} "
        "in partition x (1 slice in all) that the table would fall back to, so the rollback would "
        f"delete the only version left; a savepoint of {v2} made before the clean (lake savepoint "
        f"create {table.uri} --instant {v2}) would have kept it"
    )
    assert table.timeline().get(v3).is_completed


DROP = {"hoodie.metadata.enable": "false"}


def test_a_named_rollback_refused_is_refused_before_the_option_drops_the_metadata_table(
    tmp_path: Path,
) -> None:
    table = mor(tmp_path)
    add_metadata_table(table.base_path)
    table = LakeTable.open(table.base_path, clock=table.clock)
    latest = table.timeline().completed_commits[-1].timestamp
    props = (table.base_path / ".hoodie/hoodie.properties").read_text()
    with pytest.raises(RollbackError) as raised:
        rollback(table, latest, options=DROP)
    assert str(raised.value) == (
        f"{table.uri}: {latest} is a completed deltacommit; pass --force (force=True) to roll back "
        "the latest completed commit"
    )
    # The refusal came first: the metadata table is still there, the properties untouched.
    assert detect(LakeTable.open(table.base_path)).present
    assert (table.base_path / ".hoodie/hoodie.properties").read_text() == props
    # Forced, it passes the same check (the slices it falls back to are there): dropped, rolled back.
    (done,) = rollback(table, latest, force=True, options=DROP)
    assert (done.target, done.resumed) == (latest, False)
    assert not detect(LakeTable.open(table.base_path)).present


def test_a_forced_rollback_of_an_older_commit_is_refused_before_the_drop_on_version_8(tmp_path: Path) -> None:
    """On version 8 too, the refusal (not the latest completed commit; only a restore's plan takes
    them in any order) comes before the option drops the metadata table."""
    table = mor(tmp_path, table_version=8)
    add_metadata_table(table.base_path)
    table = LakeTable.open(table.base_path, clock=table.clock)
    first, *_, latest = (i.timestamp for i in table.timeline().completed_commits)
    with pytest.raises(RollbackError, match=rf"{first} is not the latest completed commit \({latest}\)"):
        rollback(table, first, force=True, options=DROP)
    assert detect(LakeTable.open(table.base_path)).present


def test_a_named_rollback_whose_stored_plan_is_pending_drops_the_metadata_table_and_finishes_it(
    tmp_path: Path,
) -> None:
    """A forced rollback stored but not finished: naming its target again (without force) finishes it,
    also when the option drops the metadata table first (the target is not checked again: it is
    completed until the stored plan is done)."""
    table = mor(tmp_path)
    latest = table.timeline().completed_commits[-1].timestamp
    with pytest.raises(SimulatedCrash):
        rollback(crashing(table, 1), latest, force=True)
    (stored,) = table.timeline().filter([Action.ROLLBACK], [State.REQUESTED, State.INFLIGHT])
    assert table.timeline().get(latest).is_completed
    add_metadata_table(table.base_path)
    table = LakeTable.open(table.base_path, clock=table.clock)
    assert [(r.target, r.resumed) for r in rollback(table, latest, options=DROP)] == [(latest, True)]
    assert table.timeline().get(latest) is None
    assert not detect(LakeTable.open(table.base_path)).present


def test_a_forced_rollback_is_not_refused_by_the_metadata_table_its_option_drops(hudi_table_zip) -> None:
    """The MDT's own commit after the latest deltacommit would refuse the forced rollback were the MDT
    kept (undoing it there needs an MDT rollback instant); hoodie.metadata.enable=false drops the MDT
    first, so it refuses nothing (the check before the drop asked it, and refused the rollback
    "under lake.metadata-table.maintain", which no option had asked for)."""
    path = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    latest = LakeTable.open(path).timeline().completed_commits[-1].timestamp
    (done,) = rollback(LakeTable.open(path), latest, force=True, options=DROP)
    assert (done.target, done.resumed) == (latest, False)
    assert LakeTable.open(path).timeline().get(latest) is None
    assert not (path / ".hoodie" / "metadata").exists()


def test_a_named_rollback_refused_for_its_fallback_or_as_a_compaction_keeps_the_metadata_table(
    tmp_path: Path,
) -> None:
    """The check before the option's drop is the whole check but the metadata table's: a forced
    rollback a clean removed the fallback of, and a pending compaction (finished, never rolled back),
    are refused with the metadata table still there."""
    table = empty_mor(tmp_path / "a")
    write(table, batch(["a"], 1, "x"), "insert")
    write(table, batch(["a"], 2, "x"), "upsert")
    schedule_compaction(table, DUE)
    v3 = execute_compaction(table).instant
    run_clean(
        table,
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
    )
    add_metadata_table(table.base_path)
    table = LakeTable.open(table.base_path, clock=table.clock)
    with pytest.raises(RollbackError, match=f"cannot roll back {v3}: a clean removed the file slice"):
        rollback(table, v3, force=True, options=DROP)
    assert detect(LakeTable.open(table.base_path)).present

    pending = mor(tmp_path / "b")
    c = schedule_compaction(pending, DUE).instant
    add_metadata_table(pending.base_path)
    pending = LakeTable.open(pending.base_path, clock=pending.clock)
    with pytest.raises(RollbackError, match=f"{c} is a pending compaction; it is finished, not rolled back"):
        rollback(pending, c, options=DROP)
    assert detect(LakeTable.open(pending.base_path)).present
