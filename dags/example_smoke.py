"""Smoke DAG: two TaskFlow tasks passing an XCom. ``tests/test_platform.py`` runs it with dag.test().

It lives in the DAGs folder because ``dag.test()`` runs only DAGs it can serialize from there.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

with DAG(
    dag_id="example_smoke",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smoke"],
    doc_md=__doc__,
) as dag:

    @task
    def produce() -> int:
        return 21

    @task
    def double(value: int) -> int:
        if value != 21:
            raise ValueError(f"expected 21 from produce, got {value!r}")
        return value * 2

    double(produce())
