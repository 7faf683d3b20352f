"""Tables with Hudi's metadata table under ``dag.test()`` and the hooks: on v8/v9 tables the hooks and
the example compaction DAG keep it up to date by default, and a lake connection whose extra sets
``lake.metadata-table.maintain=false`` refuses; on a v6 table the write hook keeps it by default; with a
stand-in that is no MDT of the table the clean, rollback and write operators of the example DAGs refuse
before writing anything (the tree byte-identical), and a lake connection whose extra sets
``hoodie.metadata.enable=false`` drops the metadata table as Hudi does, then cleans."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dag_helpers import load_example_dag, task_states, xcom_value
from metadata_table_support import add_metadata_table, tree_digest

from airflow_lake_provider.lake.format.properties import parse_properties

pytestmark = pytest.mark.airflow
COW = "cow_v6_simplekeygen_nonhivestyle"
# A lake connection whose extra asks for the refuse policy.
REFUSING = json.dumps({"conn_type": "lake", "extra": {"lake.metadata-table.maintain": "false"}})
REFUSED = "which this engine does not update under lake.metadata-table.maintain=false"


def _output(capfd: pytest.CaptureFixture[str]) -> str:
    """What the task logs printed so far (``dag.test()`` logs to the terminal)."""
    out, err = capfd.readouterr()
    return out + err


def test_clean_refuses_then_the_connection_extra_drops_the_metadata_table(
    repo_root: Path,
    airflow_db: Path,
    hudi_table_zip: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    path = hudi_table_zip(COW)
    add_metadata_table(path)
    dag = load_example_dag(repo_root, "example_lake_clean")
    before = tree_digest(path)
    dr = dag.test(run_conf={"table_path": str(path)})
    assert task_states(dag.dag_id, dr.run_id) == {"preview_clean": "success", "clean": "failed"}
    assert tree_digest(path) == before
    assert f"clean refused: {path} has Hudi's metadata table (partitions [files]" in _output(capfd)

    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_NO_MDT",
        json.dumps({"conn_type": "lake", "extra": {"hoodie.metadata.enable": "false"}}),
    )
    dr = dag.test(run_conf={"table_path": str(path), "lake_conn_id": "lake_no_mdt"}, logical_date=None)
    assert task_states(dag.dag_id, dr.run_id) == {"preview_clean": "success", "clean": "success"}
    result = xcom_value(dag.dag_id, dr.run_id, "clean")
    assert result["outcome"] == "NO_WORK"
    assert result["metadata_table_dropped"] == {
        "table": str(path),
        "partitions": ["files"],
        "inflight_partitions": [],
        "notice": f"dropped Hudi's metadata table of {path} (partitions [files], folder "
        ".hoodie/metadata/) as hoodie.metadata.enable=false asks; Spark/Flink writers of this table "
        "must run with hoodie.metadata.enable=false too, or their next commit rebuilds the metadata "
        "table from a full listing",
    }
    assert not (path / ".hoodie" / "metadata").exists()
    props = parse_properties((path / ".hoodie" / "hoodie.properties").read_text())
    assert (
        props["hoodie.table.metadata.partitions"],
        props["hoodie.table.metadata.partitions.inflight"],
    ) == ("", "")


def test_rollback_and_write_operators_refuse_and_change_nothing(
    repo_root: Path,
    airflow_db: Path,
    hudi_table_zip: Callable[[str], Path],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    path = hudi_table_zip(COW)
    add_metadata_table(path)
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1]}), source)
    dag = load_example_dag(repo_root, "example_lake_rollback")
    conf: dict[str, Any] = {"table_path": str(path), "input_path": str(source)}
    before = tree_digest(path)
    dr = dag.test(run_conf=conf)
    assert task_states(dag.dag_id, dr.run_id) == {
        "prepare": "success",  # an input was given: nothing to stage
        "rollback_failed_writes": "failed",
        "write": "upstream_failed",
    }
    assert tree_digest(path) == before
    # The write task on its own (its upstream marked done): refused too, at once (no retry).
    dr = dag.test(run_conf=conf, logical_date=None, mark_success_pattern="rollback_failed_writes")
    assert task_states(dag.dag_id, dr.run_id) == {
        "prepare": "success",
        "rollback_failed_writes": "success",
        "write": "failed",
    }
    assert tree_digest(path) == before
    assert f"write (upsert) refused: {path} has Hudi's metadata table" in _output(capfd)


def test_schedule_compaction_and_partition_commit_summaries_name_the_drop(
    hudi_table_zip: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the compaction-scheduling and partition-commit tasks push to XCom says the MDT was dropped
    (as the clean, compaction-execution and write summaries do), with the JVM writers' notice."""
    from airflow_lake_provider.hooks.lake import LakeHook
    from airflow_lake_provider.hooks.partition_commit import run_partition_commit

    mor = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_metadata_table(mor)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_NO_MDT",
        json.dumps({"conn_type": "lake", "extra": {"hoodie.metadata.enable": "false"}}),
    )
    scheduled = LakeHook(lake_conn_id="lake_no_mdt").schedule_compaction(
        str(mor), {"hoodie.compact.inline.max.delta.commits": "1"}
    )
    assert scheduled["outcome"] == "SCHEDULED"
    assert scheduled["metadata_table_dropped"]["table"] == str(mor)
    assert scheduled["metadata_table_dropped"]["notice"].startswith(
        f"dropped Hudi's metadata table of {mor} (partitions [files], folder .hoodie/metadata/)"
    )
    assert not (mor / ".hoodie" / "metadata").exists()

    cow = hudi_table_zip(COW)
    add_metadata_table(cow)
    committed = run_partition_commit(
        str(cow),
        ["10"],
        {"hoodie.metadata.enable": "false", "sink.partition-commit.policy.kind": "merge-small-files"},
    )
    assert committed["outcome"] == "COMMITTED", committed
    assert committed["metadata_table_dropped"]["partitions"] == ["files"]
    assert not (cow / ".hoodie" / "metadata").exists()


def test_the_write_hook_keeps_the_metadata_table_by_default_and_a_connection_can_refuse(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write hook keeps a v9 table's MDT (files, column_stats, partition_stats) up to date by
    default, hudi-rs lists through it; ``lake.metadata-table.maintain=false`` in the lake
    connection's extra refuses, nothing changed."""
    from mdt_tables import keep_files_partition_only

    from airflow_lake_provider.hooks.lake import LakeHook
    from airflow_lake_provider.lake.table.reader import read_snapshot
    from airflow_lake_provider.lake.table.table import LakeTable
    from tests.unit.lake.table.metadata.test_commit import (
        INDEXES,
        _batch,
        assert_consistent,
        assert_index_consistent,
    )

    path = keep_files_partition_only(hudi_table_zip("cow_v9_txns_simple_meta"), INDEXES)
    source = tmp_path / "in.parquet"
    pq.write_table(_batch(read_snapshot(LakeTable.open(path)), "txn_id", "txn_ts", [0], ["hook-1"]), source)
    before = tree_digest(path)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_REFUSE", REFUSING)
    with pytest.raises(Exception, match=REFUSED):
        LakeHook(lake_conn_id="lake_refuse").write(str(path), str(source), "insert")
    assert tree_digest(path) == before
    result = LakeHook().write(str(path), str(source), "insert")  # the default connection: kept
    assert result["inserted"] == 1
    assert "hook-1" in assert_consistent(path).column("txn_id").to_pylist()
    assert_index_consistent(path)


def _v6_with_mdt_and_a_row_of_it(hudi_table_zip: Callable[[str], Path], tmp_path: Path) -> tuple[Path, Path]:
    """A Hudi-written v6 COW table given an MDT, and a parquet file holding one of its rows."""
    from mdt_v6_tables import add_v6_metadata_table

    from airflow_lake_provider.lake.table.reader import read_snapshot
    from airflow_lake_provider.lake.table.table import LakeTable

    path = hudi_table_zip(COW)
    add_v6_metadata_table(path)
    rows = read_snapshot(LakeTable.open(path))
    batch = rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie_")]).slice(0, 1)
    source = tmp_path / "in.parquet"
    pq.write_table(batch, source)
    return path, source


def test_the_write_hook_keeps_a_v6_metadata_table_by_default(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 6 is kept by default (its ``files`` partition, as Hudi 0.14/0.15 keep it): the default
    connection's write adds the MDT's deltacommit at the data instant's time and its ``files``
    partition equals a listing; a connection whose extra sets ``lake.metadata-table.maintain=false``
    refuses (nothing changed, no retry: a config error)."""

    from airflow_lake_provider.hooks.lake import LakeHook
    from airflow_lake_provider.lake.storage import open_storage
    from airflow_lake_provider.lake.table.metadata.listing import check_files_partition

    path, source = _v6_with_mdt_and_a_row_of_it(hudi_table_zip, tmp_path)
    before = tree_digest(path)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_REFUSE",
        json.dumps({"conn_type": "lake", "extra": {"lake.metadata-table.maintain": "false"}}),
    )
    with pytest.raises(Exception, match=REFUSED) as raised:
        LakeHook(lake_conn_id="lake_refuse").write(str(path), str(source), "upsert")
    from airflow.sdk.exceptions import AirflowFailException

    assert isinstance(raised.value, AirflowFailException)  # a config error: not retried
    assert tree_digest(path) == before
    result = LakeHook().write(str(path), str(source), "upsert")
    assert result["updated"] == 1
    instant = result["instant"]
    assert (path / ".hoodie" / "metadata" / ".hoodie" / f"{instant}.deltacommit").is_file()
    assert check_files_partition(open_storage(path)).consistent


def test_the_clean_hook_keeps_the_metadata_table_by_default_and_a_connection_can_refuse(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clean hook by default: the MDT gets the clean's deltacommit; hudi-rs, listing through it,
    reads the rows it read before. A connection whose extra says ``lake.metadata-table.maintain=false``
    refuses first, nothing changed."""
    from mdt_tables import keep_files_partition_only

    from airflow_lake_provider.hooks.lake import LakeHook
    from airflow_lake_provider.lake.table.reader import read_snapshot
    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write.writer import write
    from tests.unit.lake.table.metadata.test_commit import (
        INDEXES,
        _batch,
        _rows,
        assert_consistent,
        assert_index_consistent,
    )

    path = keep_files_partition_only(hudi_table_zip("cow_v9_txns_simple_meta"), INDEXES)
    snapshot = read_snapshot(LakeTable.open(path))
    key = sorted(snapshot.column("txn_id").to_pylist())[0]
    at = snapshot.column("txn_id").to_pylist().index(key)
    write(LakeTable.open(path), _batch(snapshot, "txn_id", "txn_ts", [at], [key]), "upsert")
    before = _rows(assert_consistent(path))
    one_version = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    digest = tree_digest(path)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_REFUSE", REFUSING)
    with pytest.raises(Exception, match=REFUSED):
        LakeHook(lake_conn_id="lake_refuse").clean(str(path), one_version)
    assert tree_digest(path) == digest
    result = LakeHook().clean(str(path), one_version)  # the default connection: kept
    assert (result["outcome"], result["executor"]) == ("CLEANED", "local"), result
    assert result["deleted_files"] > 0
    mdt = path / ".hoodie/metadata/.hoodie/timeline"
    assert len(list(mdt.glob(f"{result['instant']}_*.deltacommit"))) == 1
    assert _rows(assert_consistent(path)) == before
    assert_index_consistent(path, partitions=False)


def test_the_compaction_dag_keeps_the_metadata_table_by_default(
    repo_root: Path,
    airflow_db: Path,
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """The example compaction DAG (schedule -> sensor -> compact in the worker) on a copy of a
    Spark-written v8 MOR table with an MDT (files, column_stats, partition_stats, record_index, a
    secondary index), with the default lake connection and no option: the compaction's MDT
    deltacommit completes before its commit, hudi-rs (listing through the MDT) reads the rows it
    read before, and ``lake metadata-table --check`` finds no difference."""
    from airflow_lake_provider.lake.cli import main
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.table import LakeTable
    from tests.unit.lake.table.metadata.test_commit import assert_consistent, hudi_rs
    from tests.unit.lake.table.metadata.test_services import _data_completion, _mdt_completion, _rows

    path = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    before = _rows(hudi_rs(path))
    due = {"hoodie.compact.inline.max.delta.commits": "1"}
    c = schedule_compaction(LakeTable.open(path), due, force=True).instant
    assert c is not None
    dag = load_example_dag(repo_root, "example_lake_compaction")
    dr = dag.test(run_conf={"table_path": str(path)})
    assert task_states(dag.dag_id, dr.run_id) == {
        "schedule": "success",
        "wait_for_plan": "success",
        "compact": "success",
    }
    result = xcom_value(dag.dag_id, dr.run_id, "compact")
    assert (result["outcome"], result["executor"], result["instant"]) == ("COMPLETED", "local", c), result
    assert _mdt_completion(path, c) < _data_completion(path, c, "commit")
    assert _rows(hudi_rs(path)) == before
    assert _rows(assert_consistent(path)) == before
    assert main(["metadata-table", str(path), "--check"]) == 0


@pytest.mark.spark
@pytest.mark.slow
def test_the_hooks_on_spark_pass_the_connections_opt_in_to_the_jobs(
    hudi_table_zip: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction and clean executed on Spark (thresholds 0: spark-submit, local[2]) through a lake
    connection whose extra opts in to ``lake.metadata-table.maintain``: the jobs open the table
    afresh, so the hooks pass the connection's policy on (``--option``); each job's driver writes
    one MDT deltacommit at its commit; hudi-rs reads the rows it read before; ``--check`` is clean."""
    from airflow_lake_provider.hooks.lake import LakeHook
    from airflow_lake_provider.lake.cli import main
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.table import LakeTable
    from tests.unit.lake.table.metadata.test_commit import MAINTAIN, assert_consistent, hudi_rs
    from tests.unit.lake.table.metadata.test_services import _data_completion, _mdt_completion, _rows

    path = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    before = _rows(hudi_rs(path))
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_MAINTAIN",
        json.dumps({"conn_type": "lake", "extra": {"lake.metadata-table.maintain": "true"}}),
    )
    c = schedule_compaction(LakeTable.open(path), MAINTAIN, force=True).instant
    assert c is not None
    hook = LakeHook(lake_conn_id="lake_maintain")
    done = hook.run_compaction(str(path), c, spark_threshold_mb=0)
    assert (done["outcome"], done["executor"]) == ("COMPLETED", "spark"), done
    cleaned = hook.clean(
        str(path),
        {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"},
        spark_threshold=0,
    )
    assert (cleaned["outcome"], cleaned["executor"]) == ("CLEANED", "spark"), cleaned
    assert cleaned["deleted_files"] > 0
    mdt = path / ".hoodie/metadata/.hoodie/timeline"
    for instant, action in ((c, "commit"), (cleaned["instant"], "clean")):
        assert len(list(mdt.glob(f"{instant}_*.deltacommit"))) == 1
        assert _mdt_completion(path, instant) < _data_completion(path, instant, action)
    assert _rows(hudi_rs(path)) == before
    assert _rows(assert_consistent(path)) == before
    assert main(["metadata-table", str(path), "--check"]) == 0


def test_a_write_of_a_missing_input_with_the_drop_option_keeps_the_metadata_table(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    """The write hook looks for its input before the guard drops the MDT: a missing input file is
    refused with the table untouched, even when ``hoodie.metadata.enable=false`` asks for the drop."""
    from airflow_lake_provider.hooks.lake import LakeHook

    path = hudi_table_zip("cow_v9_txns_simple_meta")
    before = tree_digest(path)
    with pytest.raises(Exception, match="in.parquet"):
        LakeHook().write(
            str(path), str(tmp_path / "in.parquet"), "insert", {"hoodie.metadata.enable": "false"}
        )
    assert tree_digest(path) == before
    assert (path / ".hoodie/metadata").is_dir()


def test_the_partition_commit_hook_keeps_the_metadata_table_on_merges_by_default(
    hudi_table_zip: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partition commit hook (what ``LakePartitionCommitOperator`` and the sensor run) with
    ``merge-small-files`` and the default connection: the merge's replacecommit gets its MDT
    deltacommit, hudi-rs (listing through the MDT) reads our rows, ``--check`` finds no difference;
    a connection whose extra says ``lake.metadata-table.maintain=false`` refuses, nothing changed."""
    from mdt_tables import keep_files_partition_only

    from airflow_lake_provider.hooks.partition_commit import run_partition_commit
    from airflow_lake_provider.lake.cli import main
    from tests.unit.lake.services.partition_commit.test_merge_metadata_table import _assert_kept, _small_files
    from tests.unit.lake.table.metadata.test_commit import INDEXES

    name = "mor_avro_v9_txns_simple_meta"
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    partition, rows = _small_files(path, name)
    options = {"sink.partition-commit.policy.kind": "merge-small-files", "compaction.file-size": "4mb"}
    digest = tree_digest(path)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_REFUSE", REFUSING)
    with pytest.raises(Exception, match=REFUSED):
        run_partition_commit(str(path), [partition], options, lake_conn_id="lake_refuse")
    assert tree_digest(path) == digest
    result = run_partition_commit(str(path), [partition], options)  # the default connection: kept
    assert (result["outcome"], result["committed"]) == ("COMMITTED", [partition]), result
    merges = sorted((path / ".hoodie/timeline").glob("*.replacecommit"))
    instant, _completion = merges[-1].name.split(".")[0].split("_")
    written = tuple(f"{partition}/{p.name}" for p in (path / partition).glob(f"*_{instant}.parquet"))
    assert len(written) == 1
    _assert_kept(path, instant, partition, written, rows)
    assert main(["metadata-table", str(path), "--check"]) == 0


def test_the_write_hook_refuses_a_bad_batch_before_the_drop_its_options_ask_for(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    """The hook drops the MDT ahead of the rollback of an earlier attempt, so it checks the batch
    first, as the core's write does: a refused write leaves the table, MDT included, as it was."""
    from airflow_lake_provider.hooks.errors import LakeConfigError
    from airflow_lake_provider.hooks.lake import LakeHook
    from airflow_lake_provider.lake.table.table import LakeTable

    path, source = _v6_with_mdt_and_a_row_of_it(hudi_table_zip, tmp_path)
    before = tree_digest(path)
    drop = {"hoodie.metadata.enable": "false", "hoodie.payload.event.time.field": "nope"}
    with pytest.raises(LakeConfigError) as refused:
        LakeHook().write(str(path), str(source), "upsert", options=drop)
    assert str(refused.value) == (
        f"write of {source} into {LakeTable.open(path).uri}: "
        "event time field 'nope' is not a column of the batch"
    )
    assert tree_digest(path) == before
