"""Example: recover a Hudi table from failed writes, then write (copy and adapt).

Runs green as shipped: the first run creates its table (merge-on-read, key ``id``, partition ``p``,
under ``/tmp/lake-examples/rollback``, or ``$LAKE_EXAMPLES_ROOT``, unless the ``table_path`` param
says otherwise) and writes a staged batch of 10 rows; later runs write the same rows again. On your
own table, trigger it with the table and a parquet file, e.g. ``{"table_path": "/data/lake/trips",
"input_path": "/data/in/trips.parquet"}``:

1. ``prepare`` creates the table if missing (only when ``input_path`` is not given) and returns the
   input to write: ``input_path``, or the example batch it stages as parquet.
2. ``rollback_failed_writes`` rolls back every failed write the table's failed-writes policy allows
   (``lake rollback``); nothing to roll back is a success (outcome ``NO_WORK``).
3. ``write`` writes the input (a parquet file or a folder) as one instant: in the worker, or with
   ``spark_jobs/write.py`` on Spark (connection ``spark_default``) for inputs of more than
   ``spark_threshold`` rows. Its commit metadata names this DAG, task and run; a retry first rolls
   back what its failed attempt left pending (wherever it ran), then writes again.

Parsing this file needs no connection and imports no table code.
"""

from __future__ import annotations

import datetime as dt
import os

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_lake_provider.operators.rollback import RollbackFailedWritesOperator
from airflow_lake_provider.operators.write import LakeWriteOperator

EXAMPLES_ROOT = os.environ.get("LAKE_EXAMPLES_ROOT", "/tmp/lake-examples").rstrip("/")
EXAMPLES_CONN_ID = os.environ.get("LAKE_EXAMPLES_CONN_ID", "")
STAGING_ROOT = os.environ.get("LAKE_EXAMPLES_STAGING", "/tmp/lake-examples/staging")

with DAG(
    dag_id="example_lake_rollback",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["example", "lake", "rollback"],
    doc_md=__doc__,
    params={
        "table_path": Param(
            f"{EXAMPLES_ROOT}/rollback", type="string", description="Base path of the table."
        ),
        # Optional: null, not "", since the UI refuses to trigger with an empty required string.
        "input_path": Param(
            None,
            type=["null", "string"],
            description="A parquet file, or a folder of them; none: the example's own batch.",
        ),
        "staging_dir": Param(
            STAGING_ROOT, type="string", description="Local folder for the staged example batch."
        ),
        "spark_threshold": Param(
            5_000_000, type="integer", description="Inputs with more rows are written on Spark."
        ),
        "lake_conn_id": Param(
            EXAMPLES_CONN_ID or None,
            type=["null", "string"],
            description="The lake connection (S3 key pair, endpoint), or none.",
        ),
    },
) as dag:

    @task
    def prepare(
        table_path: str, input_path: str, staging_dir: str, lake_conn_id: str, run_id: str | None = None
    ) -> str:
        """The input to write: ``input_path`` if given; else the example's batch, staged as parquet,
        with the table created if missing."""
        import re
        from pathlib import Path

        import pyarrow as pa
        import pyarrow.parquet as pq

        from airflow_lake_provider.hooks.lake import LakeHook
        from airflow_lake_provider.lake import LakeTable, open_storage
        from airflow_lake_provider.lake.errors import TableNotFoundError

        if input_path:
            return input_path
        hook = LakeHook(lake_conn_id=lake_conn_id)
        try:
            hook.open_table(table_path)
        except Exception as exc:  # LakeConfigError wraps TableNotFoundError
            if not isinstance(exc.__cause__, TableNotFoundError):
                raise
            path = hook.resolve_table_path(table_path)
            LakeTable.create(
                open_storage(path, environ={**os.environ, **hook.storage_env()}),
                name="rollback",
                table_type="mor",
                record_key_fields=("id",),
                precombine_field="ts",
                partition_fields=("p",),
            )
            print(f"created merge-on-read table 'rollback' at {path}")
        folder = Path(staging_dir) / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "manual")
        folder.mkdir(parents=True, exist_ok=True)
        staged = str(folder / "rows.parquet")
        ids = range(10)
        batch = {
            "id": [f"id-{i:02d}" for i in ids],
            "ts": pa.array([1] * len(ids), pa.int64()),
            "p": ["even" if i % 2 == 0 else "odd" for i in ids],
            "v": [f"row-{i}" for i in ids],
        }
        pq.write_table(pa.table(batch), staged)
        return staged

    staged = prepare(
        "{{ params.table_path }}",
        "{{ params.input_path or '' }}",
        "{{ params.staging_dir }}",
        "{{ params.lake_conn_id or '' }}",
    )
    rollback_failed_writes = RollbackFailedWritesOperator(
        task_id="rollback_failed_writes",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
    )
    write = LakeWriteOperator(
        task_id="write",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        input_path="{{ ti.xcom_pull(task_ids='prepare') }}",
        operation="upsert",
        spark_threshold="{{ params.spark_threshold }}",
        retries=2,
        retry_delay=dt.timedelta(seconds=30),
    )

    staged >> rollback_failed_writes >> write
