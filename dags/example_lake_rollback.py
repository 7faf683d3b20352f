"""Example: recover a Hudi table from failed writes, then write (copy and adapt).

Trigger it with the table and a parquet file, e.g. ``{"table_path": "/data/lake/trips",
"input_path": "/data/in/trips.parquet"}``:

1. ``rollback_failed_writes`` rolls back every failed write the table's failed-writes policy allows
   (``lake rollback``); nothing to roll back is a success (outcome ``NO_WORK``).
2. ``write`` writes the input (a parquet file or a folder) as one instant: in the worker, or with
   ``spark_jobs/write.py`` on Spark (connection ``spark_default``) for inputs of more than
   ``spark_threshold`` rows. Its commit metadata names this DAG, task and run; a retry first rolls
   back what its failed attempt left pending (wherever it ran), then writes again.

Parsing this file needs no connection and imports no table code.
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow.sdk import DAG, Param

from airflow_lake_provider.operators.rollback import LakeWriteOperator, RollbackFailedWritesOperator

with DAG(
    dag_id="example_lake_rollback",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "lake", "rollback"],
    doc_md=__doc__,
    params={
        "table_path": Param("/tmp/lake/example_table", type="string", description="Base path of the table."),
        "input_path": Param(
            "/tmp/lake/input.parquet", type="string", description="A parquet file, or a folder of them."
        ),
        "spark_threshold": Param(
            5_000_000, type="integer", description="Inputs with more rows are written on Spark."
        ),
    },
) as dag:
    rollback_failed_writes = RollbackFailedWritesOperator(
        task_id="rollback_failed_writes", table_path="{{ params.table_path }}"
    )
    write = LakeWriteOperator(
        task_id="write",
        table_path="{{ params.table_path }}",
        input_path="{{ params.input_path }}",
        operation="upsert",
        spark_threshold="{{ params.spark_threshold }}",
        retries=2,
        retry_delay=dt.timedelta(seconds=30),
    )

    rollback_failed_writes >> write
