"""Every DAG in ``dags/`` imports without errors (and without any connection defined)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow


def test_example_dags_import_without_errors(repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    # Parsing must not need connections: drop the Spark one the test session defines.
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    bag = DagBag(dag_folder=str(repo_root / "dags"))
    assert bag.import_errors == {}
    assert {"example_lake_clean", "example_smoke"} <= set(bag.dag_ids)
    clean = bag.dags["example_lake_clean"]  # get_dag() would query the metadata DB
    assert [t.task_id for t in clean.topological_sort()] == ["preview_clean", "clean"]
    assert set(clean.params.keys()) >= {"table_path", "spark_threshold"}
