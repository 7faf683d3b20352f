"""Compaction of a merge-on-read table: schedule a plan, wait for it, execute it on Spark.

- ``schedule``: evaluates the trigger (5 delta commits since the last compaction by default) and
  the selection strategy, and writes ``<c>.compaction.requested``; nothing due is a success (NO_WORK).
- ``wait_for_plan``: returns the plan's instant, ours or one an external writer (Spark or Flink Hudi
  with inline scheduling) requested. When ``schedule`` found nothing due and no plan is requested it
  is skipped at once (``schedule_task_id``), and ``compact`` with it: the run ends in seconds.
- ``compact``: runs the plan with ``spark_jobs/compact.py`` on the ``spark_default`` connection.
  A failed run leaves the plan inflight; the retry cleans up and finishes it.

Trigger the DAG with ``{"table_path": "/path/to/table"}`` (default: the table ``example_lake_mor_pipeline``
creates).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_lake_provider.operators.compaction import RunCompactionOperator, ScheduleCompactionOperator
from airflow_lake_provider.sensors.compaction import CompactionPlanSensor

# The table example_lake_mor_pipeline creates, unless told otherwise.
EXAMPLES_ROOT = os.environ.get("LAKE_EXAMPLES_ROOT", "/tmp/lake-examples").rstrip("/")

COMPACTION_OPTIONS = {
    "hoodie.compact.inline.trigger.strategy": "NUM_COMMITS",
    "hoodie.compact.inline.max.delta.commits": "5",
    # Hudi's class names and the short names (here: log_file_size) are both accepted.
    "hoodie.compaction.strategy": "LogFileSizeBasedCompactionStrategy",
}

with DAG(
    dag_id="example_lake_compaction",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "lake", "compaction"],
    doc_md=__doc__,
    default_args={"retries": 1},
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
        "spark_threshold_mb": Param(
            256,
            type="number",
            minimum=0,
            description="Plans reading at most this many MB merge in the worker; larger ones on Spark.",
        ),
    },
) as dag:
    schedule = ScheduleCompactionOperator(
        task_id="schedule",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        options=COMPACTION_OPTIONS,
    )
    wait_for_plan = CompactionPlanSensor(
        task_id="wait_for_plan",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        schedule_task_id="schedule",
        deferrable=True,
        poke_interval=30,
        timeout=30 * 60,
        soft_fail=True,
    )
    compact = RunCompactionOperator(
        task_id="compact",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        instant="{{ ti.xcom_pull(task_ids='wait_for_plan') }}",
        spark_conn_id="spark_default",
        spark_threshold_mb="{{ params.spark_threshold_mb }}",
    )

    schedule >> wait_for_plan >> compact
