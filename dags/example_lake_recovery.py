"""Example: recover a table after a writer died half way, then write and compact (copy and adapt).
Runs green as shipped: the first run creates its table (``/tmp/lake-examples/recovery`` unless the
``table_path`` param says otherwise).

1. ``seed`` creates the merge-on-read table with 10 rows if missing, and stages the batch ``write``
   will write.
2. ``external_write`` stands for a writer outside Airflow (a Spark job, a script) that is killed in
   the middle of a write: a child process starts an instant, writes a data file and is killed
   (SIGKILL) right after. The task fails on purpose; the instant stays pending and its file is
   invisible to readers.
3. ``rollback_failed_writes`` (``RollbackFailedWritesOperator``, runs whatever ``external_write``
   did) rolls back every failed write the table's policy allows (EAGER: every pending write).
4. ``write`` (``LakeWriteOperator``) upserts the staged batch; a retry of it would first roll back
   what its failed attempt left.
5. ``schedule_compaction`` >> ``compact``: one delta commit since the last compaction is enough here,
   so each run ends with its file groups compacted.

The DAG run succeeds although ``external_write`` fails: its run state comes from the last tasks.
Parsing this file imports no table code and needs no connection.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_lake_provider.operators.compaction import RunCompactionOperator, ScheduleCompactionOperator
from airflow_lake_provider.operators.rollback import RollbackFailedWritesOperator
from airflow_lake_provider.operators.write import LakeWriteOperator

EXAMPLES_ROOT = os.environ.get("LAKE_EXAMPLES_ROOT", "/tmp/lake-examples").rstrip("/")
EXAMPLES_CONN_ID = os.environ.get("LAKE_EXAMPLES_CONN_ID", "")
STAGING_ROOT = os.environ.get("LAKE_EXAMPLES_STAGING", "/tmp/lake-examples/staging")


def rows(ids: range, ts: int, tag: str) -> dict[str, list[Any]]:
    """Columns of a batch: key ``id``, ordering field ``ts``, partition ``p``, value ``v``."""
    return {
        "id": [f"id-{i:02d}" for i in ids],
        "ts": [ts] * len(ids),
        "p": ["even" if i % 2 == 0 else "odd" for i in ids],
        "v": [f"{tag}-{i}" for i in ids],
    }


SEED = rows(range(10), ts=1, tag="seed")
LOST = rows(range(5), ts=2, tag="lost")  # the killed writer's batch: never visible
UPSERT = rows(range(5, 15), ts=2, tag="new")

# Runs in a child process: a write that is killed (SIGKILL) once its first data file is durable,
# through the core's crash hook, so the example fails at the same step on every run.
KILLED_WRITER = """
import os, signal, sys
import pyarrow.parquet as pq
from airflow_lake_provider.lake import LakeTable, open_storage, write
from airflow_lake_provider.lake.storage.crash import CrashInjector


class KillAtFirstDataFile(CrashInjector):
    def step(self, kind, rel):
        super().step(kind, rel)
        if not rel.startswith(".hoodie"):
            print(f"killed after {kind} {rel}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


table = LakeTable.open(KillAtFirstDataFile().wrap(open_storage(sys.argv[1], environ=os.environ)))
write(table, pq.read_table(sys.argv[2]), "upsert")
"""

with DAG(
    dag_id="example_lake_recovery",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["example", "lake", "rollback", "compaction"],
    doc_md=__doc__,
    params={
        "table_path": Param(
            f"{EXAMPLES_ROOT}/recovery", type="string", description="Base path of the table."
        ),
        "staging_dir": Param(
            STAGING_ROOT, type="string", description="Local folder for the staged input batches."
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
    def seed(table_path: str, staging_dir: str, lake_conn_id: str, run_id: str | None = None) -> dict:
        """Create and fill the table if missing; stage the two batches; return their paths."""
        import re
        from pathlib import Path

        import pyarrow as pa
        import pyarrow.parquet as pq

        from airflow_lake_provider.hooks.lake import LakeHook
        from airflow_lake_provider.lake import LakeTable, open_storage, write
        from airflow_lake_provider.lake.errors import TableNotFoundError

        def arrow(columns: dict[str, list[Any]]) -> pa.Table:
            return pa.table({**columns, "ts": pa.array(columns["ts"], pa.int64())})

        hook = LakeHook(lake_conn_id=lake_conn_id)
        try:
            hook.open_table(table_path)
        except Exception as exc:  # LakeConfigError wraps TableNotFoundError
            if not isinstance(exc.__cause__, TableNotFoundError):
                raise
            path = hook.resolve_table_path(table_path)
            table = LakeTable.create(
                open_storage(path, environ={**os.environ, **hook.storage_env()}),
                name="recovery",
                table_type="mor",
                record_key_fields=("id",),
                precombine_field="ts",
                partition_fields=("p",),
            )
            print(f"created {path}: {write(table, arrow(SEED), 'insert').inserted} rows")
        folder = Path(staging_dir) / re.sub(r"[^A-Za-z0-9_.-]", "_", run_id or "manual")
        folder.mkdir(parents=True, exist_ok=True)
        staged = {"lost": str(folder / "lost.parquet"), "upsert": str(folder / "upsert.parquet")}
        pq.write_table(arrow(LOST), staged["lost"])
        pq.write_table(arrow(UPSERT), staged["upsert"])
        return staged

    @task(retries=0)
    def external_write(table_path: str, lake_conn_id: str, staged: dict) -> None:
        """A writer killed after starting an instant: fails, leaving the instant pending."""
        import subprocess
        import sys

        from airflow_lake_provider.hooks.lake import LakeHook

        hook = LakeHook(lake_conn_id=lake_conn_id)
        path = hook.resolve_table_path(table_path)
        done = subprocess.run(
            [sys.executable, "-c", KILLED_WRITER, path, staged["lost"]],
            env={**os.environ, **hook.storage_env()},
            capture_output=True,
            text=True,
            check=False,
        )
        print(done.stdout.strip())
        pending = [i.timestamp for i in hook.open_table(table_path).timeline().pending]
        raise RuntimeError(
            f"the external writer died (exit {done.returncode}); pending instants left: {pending}"
        )

    staged = seed("{{ params.table_path }}", "{{ params.staging_dir }}", "{{ params.lake_conn_id or '' }}")
    died = external_write("{{ params.table_path }}", "{{ params.lake_conn_id or '' }}", staged)
    rollback_failed_writes = RollbackFailedWritesOperator(
        task_id="rollback_failed_writes",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        trigger_rule="all_done",  # runs whether the external writer failed or not
    )
    write = LakeWriteOperator(
        task_id="write",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        input_path="{{ ti.xcom_pull(task_ids='seed')['upsert'] }}",
        operation="upsert",
        retries=2,
        retry_delay=pendulum.duration(seconds=10),
    )
    schedule_compaction = ScheduleCompactionOperator(
        task_id="schedule_compaction",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        options={"hoodie.compact.inline.max.delta.commits": "1"},
    )
    compact = RunCompactionOperator(
        task_id="compact",
        table_path="{{ params.table_path }}",
        lake_conn_id="{{ params.lake_conn_id or '' }}",
        instant_task_id="schedule_compaction",
        spark_conn_id="spark_default",
        retries=1,
    )

    died >> rollback_failed_writes >> write >> schedule_compaction >> compact
