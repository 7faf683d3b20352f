"""Example: a merge-on-read table's life in one DAG (copy and adapt). Runs green as shipped: the
first run creates its table (``/tmp/lake-examples/trips`` unless the ``table_path`` param says
otherwise); later runs write the same batches again and end with the same rows.

1. ``prepare`` creates the table if missing and stages three batches of trips as parquet files.
2. ``insert_trips``, ``update_trips``, ``delete_trips`` (``LakeWriteOperator``): one instant each; on
   merge-on-read the updates and deletes go to log files next to the base files.
3. ``schedule_compaction`` (``ScheduleCompactionOperator``): 3 delta commits since the last compaction
   make one due (param ``compaction_delta_commits``); writes the plan ``<c>.compaction.requested``,
   or succeeds with ``NO_WORK`` when none is due.
4. ``wait_for_plan`` (``CompactionPlanSensor``, deferrable): returns the requested plan's instant; with
   none yet, it waits in the triggerer until one is requested, ours or one an external writer
   (Spark or Flink Hudi scheduling inline) wrote.
5. ``compact`` (``RunCompactionOperator``): merges each planned file group's base and log files into
   a new base file (connection ``spark_default`` for the plans that go to Spark).
6. ``clean`` (``ScheduleCleanOperator``): keeps one file version per file group, so the slices the
   compaction replaced are deleted; then archives the timeline if it is long.
7. ``report``: the rows, what each service did and the timeline, in the task log and its XCom.

The table is ``trips`` (record key ``uuid``, ordering field ``ts``, partitioned by ``city``). Parsing
this file imports no table code and needs no connection.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_lake_provider.operators.clean import ScheduleCleanOperator
from airflow_lake_provider.operators.compaction import RunCompactionOperator, ScheduleCompactionOperator
from airflow_lake_provider.operators.write import LakeWriteOperator
from airflow_lake_provider.sensors.compaction import CompactionPlanSensor

# Where the examples keep their tables: a folder, or s3://bucket/prefix with LAKE_EXAMPLES_CONN_ID
# naming the lake connection that holds its credentials (the docker-compose stack sets both).
EXAMPLES_ROOT = os.environ.get("LAKE_EXAMPLES_ROOT", "/tmp/lake-examples").rstrip("/")
EXAMPLES_CONN_ID = os.environ.get("LAKE_EXAMPLES_CONN_ID", "")
STAGING_ROOT = os.environ.get("LAKE_EXAMPLES_STAGING", "/tmp/lake-examples/staging")

COMPACTION_OPTIONS = {
    "hoodie.compact.inline.trigger.strategy": "NUM_COMMITS",
    "hoodie.compact.inline.max.delta.commits": "{{ params.compaction_delta_commits }}",
    "hoodie.compaction.strategy": "LogFileSizeBasedCompactionStrategy",
}
CLEAN_OPTIONS = {
    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
    "hoodie.cleaner.fileversions.retained": "1",
}
CITIES = ("chennai", "san_francisco", "sao_paulo")


def trips(ids: range, ts: int, fare_offset: float = 0.0) -> dict[str, list[Any]]:
    """Columns of generated trips: the same ids always give the same rows."""
    return {
        "uuid": [f"trip-{i:03d}" for i in ids],
        "ts": [ts] * len(ids),
        "rider": [f"rider-{'ABCDEFGH'[i % 8]}" for i in ids],
        "fare": [round(10 + i * 0.5 + fare_offset, 2) for i in ids],
        "city": [CITIES[i % 3] for i in ids],
    }


# The three batches: 40 new trips, 10 of them re-priced plus 5 new ones, then 5 deleted.
UPDATED, ADDED = trips(range(20, 30), ts=2, fare_offset=100.0), trips(range(40, 45), ts=2)
BATCHES = {
    "insert": trips(range(40), ts=1),
    "update": {column: UPDATED[column] + ADDED[column] for column in UPDATED},
    "delete": trips(range(5), ts=3),
}

with DAG(
    dag_id="example_lake_mor_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["example", "lake", "compaction", "clean"],
    doc_md=__doc__,
    default_args={"retries": 1, "retry_delay": pendulum.duration(seconds=10)},
    params={
        "table_path": Param(f"{EXAMPLES_ROOT}/trips", type="string", description="Base path of the table."),
        "staging_dir": Param(
            STAGING_ROOT, type="string", description="Local folder for the staged input batches."
        ),
        "compaction_delta_commits": Param(
            3,
            type="integer",
            minimum=1,
            description="Delta commits since the last compaction that make one due.",
        ),
        # Optional: null, not "", since the UI refuses to trigger with an empty required string.
        "lake_conn_id": Param(
            EXAMPLES_CONN_ID or None,
            type=["null", "string"],
            description="The lake connection (S3 key pair, endpoint), or none.",
        ),
    },
) as dag:

    @task
    def prepare(table_path: str, staging_dir: str, lake_conn_id: str, run_id: str | None = None) -> dict:
        """Create the table if missing; stage the batches as parquet; return their paths."""
        import re
        from pathlib import Path

        import pyarrow as pa
        import pyarrow.parquet as pq

        from airflow_lake_provider.hooks.lake import LakeHook
        from airflow_lake_provider.lake import LakeTable, open_storage
        from airflow_lake_provider.lake.errors import TableNotFoundError

        hook = LakeHook(lake_conn_id=lake_conn_id)
        try:
            hook.open_table(table_path)
        except Exception as exc:  # LakeConfigError wraps TableNotFoundError
            if not isinstance(exc.__cause__, TableNotFoundError):
                raise
            path = hook.resolve_table_path(table_path)
            LakeTable.create(
                open_storage(path, environ={**os.environ, **hook.storage_env()}),
                name="trips",
                table_type="mor",
                record_key_fields=("uuid",),
                precombine_field="ts",
                partition_fields=("city",),
                hive_style=True,
            )
            print(f"created merge-on-read table 'trips' at {path}")
        folder = Path(staging_dir) / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "manual")
        folder.mkdir(parents=True, exist_ok=True)
        staged = {}
        for name, columns in BATCHES.items():
            batch = pa.table({**columns, "ts": pa.array(columns["ts"], pa.int64())})
            staged[name] = str(folder / f"{name}.parquet")
            pq.write_table(batch, staged[name])
        return staged

    staged = prepare("{{ params.table_path }}", "{{ params.staging_dir }}", "{{ params.lake_conn_id or '' }}")
    writes = [
        LakeWriteOperator(
            task_id=f"{name}_trips",
            table_path="{{ params.table_path }}",
            lake_conn_id="{{ params.lake_conn_id or '' }}",
            input_path="{{ ti.xcom_pull(task_ids='prepare')['" + name + "'] }}",
            operation=operation,
        )
        for name, operation in (("insert", "insert"), ("update", "upsert"), ("delete", "delete"))
    ]
    schedule_compaction = ScheduleCompactionOperator(
        task_id="schedule_compaction",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        options=COMPACTION_OPTIONS,
    )
    wait_for_plan = CompactionPlanSensor(
        task_id="wait_for_plan",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        deferrable=True,
        poke_interval=5,
        timeout=10 * 60,
    )
    compact = RunCompactionOperator(
        task_id="compact",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        instant="{{ ti.xcom_pull(task_ids='wait_for_plan') }}",
        spark_conn_id="spark_default",
    )
    clean = ScheduleCleanOperator(
        task_id="clean",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        options=CLEAN_OPTIONS,
    )

    @task
    def report(table_path: str, lake_conn_id: str, ti: Any = None) -> dict:
        """The table after the run: rows, what compaction and clean did, the timeline."""
        from airflow_lake_provider.hooks.lake import LakeHook
        from airflow_lake_provider.lake import read_snapshot

        table = LakeHook(lake_conn_id=lake_conn_id).open_table(table_path)
        compaction = ti.xcom_pull(task_ids="compact") or {}
        cleaned = ti.xcom_pull(task_ids="clean") or {}
        summary = {
            "table": table.uri,
            "rows": read_snapshot(table).num_rows,
            "compaction": {
                k: compaction.get(k) for k in ("instant", "outcome", "operations", "records_written")
            },
            "clean": {
                "instant": cleaned.get("instant"),
                "outcome": cleaned.get("outcome"),
                "files_deleted": cleaned.get("deleted_files"),
                "bytes_planned": cleaned.get("bytes_planned"),
            },
            "timeline": [f"{i.timestamp} {i.action.value} {i.state.name}" for i in table.timeline().instants],
        }
        print(f"{summary['table']}: {summary['rows']} rows")
        print(f"compaction: {summary['compaction']}")
        print(f"clean: {summary['clean']}")
        print("timeline:\n  " + "\n  ".join(summary["timeline"]))
        return summary

    staged >> writes[0] >> writes[1] >> writes[2] >> schedule_compaction >> wait_for_plan >> compact >> clean
    clean >> report("{{ params.table_path }}", "{{ params.lake_conn_id or '' }}")
