"""Example: clean a Hudi table with ``ScheduleCleanOperator`` (copy and adapt).

Trigger it with the table to clean, e.g. ``{"table_path": "/data/lake/trips"}`` (default: the table
``example_lake_mor_pipeline`` creates):

1. ``preview_clean`` is a dry run: it logs the plan (partition | files | bytes) and writes nothing.
2. ``clean`` plans again and deletes the old file slices. Plans of up to ``spark_threshold`` files
   run in the worker; larger ones are executed by ``spark-submit`` through the ``spark_default``
   connection. Nothing to clean is a success (outcome ``NO_WORK``).

Each task's summary is its XCom return value; ``clean`` also pushes the clean instant under the key
``clean_instant``. Parsing this file needs no connection.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_lake_provider.operators.clean import ScheduleCleanOperator

# The table example_lake_mor_pipeline creates, unless told otherwise.
EXAMPLES_ROOT = os.environ.get("LAKE_EXAMPLES_ROOT", "/tmp/lake-examples").rstrip("/")

# Keep the last 10 commits readable (Hudi's default), clean after every commit.
CLEAN_OPTIONS = {
    "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",
    "hoodie.cleaner.commits.retained": "10",
}

with DAG(
    dag_id="example_lake_clean",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "lake", "clean"],
    doc_md=__doc__,
    # Rendered params keep their types (spark_threshold stays an int).
    render_template_as_native_obj=True,
    params={
        "table_path": Param(
            f"{EXAMPLES_ROOT}/trips",
            type="string",
            description="Base path of the table (default: example_lake_mor_pipeline's).",
        ),
        # Optional: null, not "", since the UI refuses to trigger with an empty required string.
        "lake_conn_id": Param(
            None, type=["null", "string"], description="The lake connection (S3 key pair, endpoint), or none."
        ),
        "spark_threshold": Param(
            10_000, type="integer", minimum=0, description="Plans with more files than this run on Spark."
        ),
    },
) as dag:
    preview_clean = ScheduleCleanOperator(
        task_id="preview_clean",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        options=CLEAN_OPTIONS,
        dry_run=True,
    )
    clean = ScheduleCleanOperator(
        task_id="clean",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        options=CLEAN_OPTIONS,
        mode="schedule_and_execute",
        spark_threshold="{{ params.spark_threshold }}",
        spark_conn_id="spark_default",
    )

    preview_clean >> clean
