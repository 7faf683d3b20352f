"""Table changes as Airflow Asset events: a DAG compacts and cleans a table under ``dag.test()``, and
another DAG scheduled on the table's Asset is queued, with each event's extra in the metadata DB. A run
that changed nothing (``NO_WORK``) records no event and queues nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dag_helpers import sync_dags_folder, task_states, xcom_value

from airflow_lake_provider.assets import table_asset, table_asset_uri, with_table_outlet
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

pytestmark = pytest.mark.airflow

PRODUCER, CONSUMER = "lake_asset_producer", "lake_asset_consumer"


def test_asset_uris_of_table_locations() -> None:
    assert table_asset_uri("/data/lake/../lake/trips/") == "file:///data/lake/trips"
    assert table_asset_uri("file:///data/trips") == "file:///data/trips"
    assert table_asset_uri("S3://bucket/lake/trips/") == "s3://bucket/lake/trips"
    assert table_asset_uri("trips") is None  # relative to the connection's base_path: known at run time
    assert table_asset_uri("{{ params.table_path }}") is None
    assert table_asset("s3://bucket/lake/trips").uri == "s3://bucket/lake/trips"
    with pytest.raises(ValueError, match="absolute path or an s3:// URI"):
        table_asset("trips")
    mine = table_asset("/data/trips")
    assert with_table_outlet("/data/trips", [mine]) == [mine]  # not added twice
    assert [a.uri for a in with_table_outlet("/data/trips", None)] == ["file:///data/trips"]
    assert with_table_outlet("{{ params.t }}", None) == []


def test_asset_uris_keep_a_path_s_fragment_and_query_characters() -> None:
    """Airflow's Asset drops a URI's ``#fragment`` (and a ``?`` starts a query): a table at
    ``/data/a#b`` got the Asset of ``/data/a``, another table, and its event lost the extra. Those
    characters (and ``%``) are percent-encoded; two different paths never share an Asset."""
    paths = ["/data/a#b", "/data/a", "/data/a?b", "/data/a%23b", "s3://bucket/a#b", "/data/my trips"]
    uris = [table_asset_uri(p) for p in paths]
    assert uris == [
        "file:///data/a%23b",
        "file:///data/a",
        "file:///data/a%3Fb",
        "file:///data/a%2523b",
        "s3://bucket/a%23b",
        "file:///data/my trips",
    ]
    for path, uri in zip(paths, uris, strict=True):
        assert [a.uri for a in with_table_outlet(path, None)] == [uri]  # Airflow keeps it as given


def _table(path: Path) -> tuple[LakeTable, str]:
    table = LakeTable.create(
        path,
        name="trips",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    ids = [f"k{i}" for i in range(8)]
    write(
        table,
        pa.table({"id": ids, "ts": pa.array([0] * 8, pa.int64()), "p": ["a", "b"] * 4, "v": [0] * 8}),
        "insert",
    )
    write(
        table,
        pa.table({"id": ids[:4], "ts": pa.array([1] * 4, pa.int64()), "p": ["a", "b"] * 2, "v": [1] * 4}),
        "upsert",
    )
    c = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"}).instant
    assert c is not None
    return table, c


def _events(uri: str, run_id: str) -> list[tuple[str, Any]]:
    """(task, extra) of the Asset events the run ``run_id`` recorded on the Asset ``uri``."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        asset = session.query(AssetModel).filter(AssetModel.uri == uri).one()
        events = (
            session.query(AssetEvent)
            .filter(AssetEvent.asset_id == asset.id, AssetEvent.source_run_id == run_id)
            .order_by(AssetEvent.id)
            .all()
        )
        return [(e.source_task_id, e.extra) for e in events]


def _queued(uri: str) -> list[str]:
    """The DAGs queued to run by events on the Asset ``uri``."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        asset = session.query(AssetModel).filter(AssetModel.uri == uri).one()
        queued = session.query(AssetDagRunQueue).filter(AssetDagRunQueue.asset_id == asset.id).all()
        return [q.target_dag_id for q in queued]


def _unqueue(uri: str) -> None:
    """Empty the Asset's queue, as the scheduler does when it starts the queued DAG runs."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        asset = session.query(AssetModel).filter(AssetModel.uri == uri).one()
        session.query(AssetDagRunQueue).filter(AssetDagRunQueue.asset_id == asset.id).delete()


def test_a_dag_scheduled_on_a_table_asset_is_queued_by_compaction_and_clean(
    airflow_db: Path, tmp_path: Path
) -> None:
    table, c = _table(tmp_path / "trips")
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "lake_assets.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG, task

            from airflow_lake_provider.assets import table_asset
            from airflow_lake_provider.operators.clean import ScheduleCleanOperator
            from airflow_lake_provider.operators.compaction import RunCompactionOperator
            from airflow_lake_provider.operators.rollback import RollbackFailedWritesOperator

            TABLE = {str(table.uri)!r}
            START = pendulum.datetime(2024, 1, 1, tz="UTC")

            with DAG("{PRODUCER}", schedule=None, start_date=START, catchup=False) as producer:
                rollback = RollbackFailedWritesOperator(task_id="rollback", table_path=TABLE)
                compact = RunCompactionOperator(task_id="compact", table_path=TABLE)
                clean = ScheduleCleanOperator(
                    task_id="clean", table_path=TABLE, options={{
                        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                        "hoodie.cleaner.fileversions.retained": "1",
                    }},
                )
                rollback >> compact >> clean

            with DAG(
                "{CONSUMER}",
                schedule=[table_asset(TABLE)],
                start_date=START,
                catchup=False,
                is_paused_upon_creation=False,
            ) as consumer:

                @task
                def read_new_files():
                    return "ok"

                read_new_files()
            """
        )
    )
    bag = sync_dags_folder(folder)
    producer = bag.dags[PRODUCER]
    uri = f"file://{table.uri}"
    assert [o.uri for o in producer.get_task("compact").outlets] == [uri]

    dr = producer.test()
    assert dr.state == "success", task_states(PRODUCER, dr.run_id)
    compacted = xcom_value(PRODUCER, dr.run_id, "compact")
    cleaned = xcom_value(PRODUCER, dr.run_id, "clean")
    assert compacted["outcome"] == "COMPLETED" and compacted["executor"] == "local"
    assert cleaned["outcome"] == "CLEANED" and cleaned["deleted_files"] == 4  # 2 slices: base + log each
    # The rollback found no failed write (NO_WORK): no event from it.
    assert xcom_value(PRODUCER, dr.run_id, "rollback")["outcome"] == "NO_WORK"
    assert _events(uri, dr.run_id) == [
        (
            "compact",
            {
                "table": table.uri,
                "instant": c,
                "outcome": "COMPLETED",
                "executor": "local",
                "operations": 2,
            },
        ),
        (
            "clean",
            {"table": table.uri, "instant": cleaned["instant"], "outcome": "CLEANED", "deleted_files": 4},
        ),
    ]
    assert _queued(uri) == [CONSUMER]

    # Again: nothing to roll back, compact or clean. No event, so the consumer is not queued again.
    _unqueue(uri)
    again = producer.test()
    assert again.state == "success", task_states(PRODUCER, again.run_id)
    assert [xcom_value(PRODUCER, again.run_id, t)["outcome"] for t in ("rollback", "compact", "clean")] == [
        "NO_WORK"
    ] * 3
    assert _events(uri, again.run_id) == []
    assert _queued(uri) == []
    # The DAG's own tasks keep their outlets: only the run that changed nothing dropped them.
    assert [o.uri for o in producer.get_task("clean").outlets] == [uri]


def test_partition_commits_emit_an_event_only_when_they_commit(airflow_db: Path, tmp_path: Path) -> None:
    """The sensor and the operator commit a partition each: two events. Run again, both partitions
    are already committed (``NO_WORK``): no event, nothing queued."""
    table = LakeTable.create(
        tmp_path / "events",
        name="events",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        hive_style=True,
    )
    write(table, pa.table({"id": ["x", "y"], "ts": pa.array([1, 1], pa.int64()), "p": ["a", "b"]}), "insert")
    folder = tmp_path / "dags"
    folder.mkdir()
    dag_id, consumer_id = "lake_commit_producer", "lake_commit_consumer"
    (folder / "lake_commits.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG, task

            from airflow_lake_provider.assets import table_asset
            from airflow_lake_provider.operators.partition_commit import PartitionCommitOperator
            from airflow_lake_provider.sensors.partition_commit import PartitionCommitSensor

            TABLE = {str(table.uri)!r}
            START = pendulum.datetime(2024, 1, 1, tz="UTC")

            with DAG("{dag_id}", schedule=None, start_date=START, catchup=False) as producer:
                sensed = PartitionCommitSensor(
                    task_id="sensor", table_path=TABLE, partitions="p=a", policies="success-file",
                    poke_interval=1, timeout=60,
                )
                forced = PartitionCommitOperator(
                    task_id="operator", table_path=TABLE, partitions="p=b", policies="success-file"
                )
                sensed >> forced

            with DAG(
                "{consumer_id}",
                schedule=[table_asset(TABLE)],
                start_date=START,
                catchup=False,
                is_paused_upon_creation=False,
            ) as consumer:

                @task
                def read_partitions():
                    return "ok"

                read_partitions()
            """
        )
    )
    producer = sync_dags_folder(folder).dags[dag_id]
    uri = f"file://{table.uri}"

    dr = producer.test()
    assert dr.state == "success", task_states(dag_id, dr.run_id)
    assert _events(uri, dr.run_id) == [
        ("sensor", {"table": table.uri, "instant": None, "outcome": "COMMITTED", "partitions": ["p=a"]}),
        ("operator", {"table": table.uri, "instant": None, "outcome": "COMMITTED", "partitions": ["p=b"]}),
    ]
    assert _queued(uri) == [consumer_id]

    _unqueue(uri)
    again = producer.test()
    assert again.state == "success", task_states(dag_id, again.run_id)
    for task_id, part in (("sensor", "p=a"), ("operator", "p=b")):
        result = xcom_value(dag_id, again.run_id, task_id)
        assert (result["outcome"], result["committed"], result["already_committed"]) == (
            "NO_WORK",
            [],
            [part],
        )
    assert _events(uri, again.run_id) == []
    assert _queued(uri) == []
