"""Example: an hourly partitioned table whose partitions are committed Flink-style (copy and adapt).
Runs green as shipped: the first run creates its table (copy-on-write, hive-style
``year=/month=/day=/hour=`` partitions, under ``/tmp/lake-examples/events`` unless the ``table_path``
param says otherwise).

Each run covers the hour that ends at ``data_interval_end``. A manual run (the UI's Trigger button,
or the REST API with ``logical_date: null``, Airflow 3's default) has no data interval: it covers the
hour that ends when it was triggered (``dag_run.run_after``) instead.

1. ``write`` writes that hour's events into partition ``year=YYYY/month=MM/day=DD/hour=HH``; each
   commit records the min/max event time (``hoodie.payload.event.time.field``).
2. ``commit_hour`` (``PartitionCommitSensor``, deferrable) waits until the partition is committable:
   trigger ``partition-time``, the partition's time read with the pattern
   ``$year-$month-$day $hour:00:00``, committable once the watermark (here ``data_interval_end``, or
   ``dag_run.run_after`` on a manual run) is after partition time + delay. Then it applies both
   policies once: ``metastore`` (a Spark SQL job with an embedded Derby metastore defines the table
   and adds the partition) and ``success-file`` (an empty ``_SUCCESS`` file in the partition folder,
   which downstream readers wait for). A re-run commits nothing twice. On ``s3://`` (the
   docker-compose stack's ``LAKE_EXAMPLES_ROOT``) only ``success-file``: the ``metastore`` policy's
   Spark job has no S3 file system (pyspark ships no hadoop-aws) and is refused there.

Parsing this file imports no table code and needs no connection.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_lake_provider.sensors.partition_commit import PartitionCommitSensor

EXAMPLES_ROOT = os.environ.get("LAKE_EXAMPLES_ROOT", "/tmp/lake-examples").rstrip("/")
# The embedded Derby metastore of the metastore policy's Spark job (one JVM at a time: one run at a time).
METASTORE_DIR = os.environ.get("LAKE_EXAMPLES_METASTORE", "/tmp/lake-examples/metastore")

# The end of the hour a run covers: data_interval_end, absent from a manual run's context (no logical
# date), where the time it was triggered stands in. ``default`` is needed: an absent name is an error.
END = "(data_interval_end | default(dag_run.run_after))"
HOUR = "(" + END + " - macros.timedelta(hours=1))"
PARTITION = "{{ " + HOUR + ".strftime('year=%Y/month=%m/day=%d/hour=%H') }}"
# The metastore policy works on local tables only (its Spark job cannot resolve s3:// locations).
POLICIES = "success-file" if "://" in EXAMPLES_ROOT else "metastore,success-file"
COMMIT_OPTIONS = {
    "sink.partition-commit.trigger": "partition-time",
    "partition.time-extractor.timestamp-pattern": "$year-$month-$day $hour:00:00",
    "sink.partition-commit.delay": "0 s",
    "sink.partition-commit.policy.kind": POLICIES,
    "hoodie.datasource.hive_sync.database": "lake_examples",
}

with DAG(
    dag_id="example_lake_partition_commit",
    schedule="@hourly",
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["example", "lake", "partition-commit"],
    doc_md=__doc__,
    params={
        "table_path": Param(f"{EXAMPLES_ROOT}/events", type="string", description="Base path of the table."),
    },
) as dag:

    @task
    def write(
        table_path: str, data_interval_end: pendulum.DateTime | None = None, dag_run: Any = None
    ) -> str:
        """Write three events of the hour before ``data_interval_end`` (a manual run: before
        ``dag_run.run_after``); the table is made if missing."""
        import datetime as dt

        import pyarrow as pa

        from airflow_lake_provider.lake import LakeTable, write
        from airflow_lake_provider.lake.errors import TableNotFoundError

        try:
            table = LakeTable.open(table_path)
        except TableNotFoundError:
            table = LakeTable.create(
                table_path,
                name="events",
                table_type="cow",
                record_key_fields=("event_id",),
                precombine_field="ts",
                partition_fields=("year", "month", "day", "hour"),
                hive_style=True,
            )
        # The whole hour before the end (a manual run's end falls at any minute).
        end = dt.datetime.fromtimestamp((data_interval_end or dag_run.run_after).timestamp(), dt.timezone.utc)
        hour = end.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
        times = [hour + dt.timedelta(minutes=m) for m in (5, 25, 55)]
        batch = pa.table(
            {
                "event_id": [f"{hour:%Y%m%d%H}-{i}" for i in range(3)],
                "ts": pa.array([int(t.timestamp() * 1000) for t in times], pa.int64()),
                "event_time": pa.array(times, pa.timestamp("ms", tz="UTC")),
                "value": [1.0, 2.0, 3.0],
                "year": [f"{hour:%Y}"] * 3,
                "month": [f"{hour:%m}"] * 3,
                "day": [f"{hour:%d}"] * 3,
                "hour": [f"{hour:%H}"] * 3,
            }
        )
        return write(table, batch, "upsert", event_time_field="event_time").instant

    written = write("{{ params.table_path }}")
    commit_hour = PartitionCommitSensor(
        task_id="commit_hour",
        table_path="{{ params.table_path }}",
        partitions=PARTITION,
        options=COMMIT_OPTIONS,
        watermark="{{ " + END + " }}",
        metastore_dir=METASTORE_DIR,
        deferrable=True,
        poke_interval=30,
        timeout=6 * 3600,
    )

    written >> commit_hour
