"""Helpers of the DAG tests: load an example DAG, and read task states and XComs of a test run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any


def load_example_dag(repo_root: Path, dag_id: str) -> Any:
    """The DAG object of ``dags/<dag_id>.py`` (``dag.test()`` runs DAGs from the DAGs folder only)."""
    spec = importlib.util.spec_from_file_location(f"{dag_id}_under_test", repo_root / "dags" / f"{dag_id}.py")
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def sync_dags_folder(folder: Path) -> Any:
    """Write the DAGs of ``folder`` to the metadata DB as the DAG processor would (bundle
    ``dags-folder``), so ``dag.test()`` runs them; returns the ``DagBag``."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = BundleDagBag(dag_folder=str(folder), bundle_path=folder, bundle_name="dags-folder")
    assert bag.import_errors == {}
    sync_bag_to_db(bag, "dags-folder", None)
    return bag


def task_states(dag_id: str, run_id: str) -> dict[str, str]:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstance.task_id, TaskInstance.state).filter(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
        )
        return {task_id: str(state) for task_id, state in rows}


def xcom_value(dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(
            XComModel.get_many(run_id=run_id, key=key, task_ids=task_id, dag_ids=dag_id)
        ).first()
        assert row is not None, f"no XCom {key!r} from {task_id} in {run_id}"
        # The raw JSON value, as the Task SDK's xcom_pull sees it. XComModel.deserialize_value would
        # json.loads a top-level string again, turning an instant time "2026..." into an int.
        return row.value


def expected_pipeline_trips() -> list[tuple]:
    """(uuid, ts, fare, city) of ``example_lake_mor_pipeline``'s table after a run, sorted: 40 trips
    inserted (ts 1), 10 re-priced (+100, ts 2) and 5 added (ts 2), the first 5 deleted (ts 3)."""

    def trip(i: int, ts: int, fare_offset: float = 0.0) -> tuple:
        city = ("chennai", "san_francisco", "sao_paulo")[i % 3]
        return (f"trip-{i:03d}", ts, round(10 + i * 0.5 + fare_offset, 2), city)

    return sorted(
        [trip(i, 1) for i in (*range(5, 20), *range(30, 40))]
        + [trip(i, 2, 100.0) for i in range(20, 30)]
        + [trip(i, 2) for i in range(40, 45)]
    )


def new_trips_table(
    path: Path, rows: int = 40, per_file: int = 10, width: int = 2, table_version: int = 6
) -> tuple[Any, list[str]]:
    """A MOR table ``trips`` of ``table_version`` (key ``id``, precombine ``ts``, partition ``p``) with
    ``rows`` rows inserted at ts 0 in files of ``per_file`` rows, partitions a and b alternating.
    Returns the table and its keys (``k`` + the row number, ``width`` digits)."""
    import pyarrow as pa

    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import write

    table = LakeTable.create(
        path,
        name="trips",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=table_version,
    )
    ids = [f"k{i:0{width}d}" for i in range(rows)]
    batch = {
        "id": ids,
        "ts": pa.array([0] * rows, pa.int64()),
        "p": ["a", "b"] * (rows // 2),
        "v": list(range(rows)),
    }
    write(table, pa.table(batch), "insert", max_rows_per_file=per_file)
    return table, ids


def upsert_trips(table: Any, keys: list[str], ts: int = 1, value: int = -1, op: str = "upsert") -> None:
    """Upsert (or ``op``) ``keys`` of :func:`new_trips_table` with ``ts`` and ``v = value``, in their
    partitions."""
    import pyarrow as pa

    from airflow_lake_provider.lake.table.write import write

    batch = {
        "id": keys,
        "ts": pa.array([ts] * len(keys), pa.int64()),
        "p": ["a" if int(k[1:]) % 2 == 0 else "b" for k in keys],
        "v": [value] * len(keys),
    }
    write(table, pa.table(batch), op)
