"""``make example``: the merge-on-read pipeline DAG end to end on embedded defaults.

Runs ``dags/example_lake_mor_pipeline.py`` with Airflow's ``dag.test()`` (a SQLite metadata DB in a
fresh ``AIRFLOW_HOME``, Spark in local mode, the table on local disk under ``example-data/``), prints
each task as it finishes, then what every service did: the writes' instants, the compaction plan
and its file groups, the files the clean deleted, the rows (checked with hudi-rs when installed)
and the timeline. Airflow's own log of the run goes to ``example-data/pipeline.log``.

``.venv/bin/python examples/pipeline.py [--root DIR]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DAG_ID = "example_lake_mor_pipeline"


def _environment(root: Path) -> None:
    """Airflow and Spark settings; must run before anything imports airflow."""
    venv_bin = sysconfig.get_path("scripts")
    os.environ.update(
        {
            "AIRFLOW_HOME": str(root / "airflow-home"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
            # The example DAGs put their tables and staged batches here (their params' defaults).
            "LAKE_EXAMPLES_ROOT": str(root / "lake"),
            "LAKE_EXAMPLES_STAGING": str(root / "staging"),
        }
    )


class _Progress:
    """An Airflow listener: one line per finished task, to the terminal (not the run's log)."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.started: dict[str, float] = {}
        self.t0 = time.monotonic()

    def _line(self, task_id: str, state: str) -> None:
        elapsed = time.monotonic() - self.t0
        took = (
            "" if state == "running" else f" ({time.monotonic() - self.started.get(task_id, self.t0):.1f} s)"
        )
        self.out.write(f"  [{elapsed:5.1f} s] {task_id:<20} {state}{took}\n")
        self.out.flush()

    def register(self) -> None:
        from airflow.listeners import hookimpl
        from airflow.sdk.listener import get_listener_manager

        progress = self

        class Listener:
            @hookimpl
            def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
                progress.started[task_instance.task_id] = time.monotonic()
                progress._line(task_instance.task_id, "running")

            @hookimpl
            def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
                progress._line(task_instance.task_id, "success")

            @hookimpl
            def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
                progress._line(task_instance.task_id, "FAILED")

        get_listener_manager().add_listener(Listener())


def _run(root: Path) -> tuple[Any, Path]:
    """Run the DAG with Airflow's output in ``pipeline.log``; returns the DAG run and the log."""
    from airflow.utils.db import initdb

    sys.path.insert(0, str(REPO / "dags"))
    import example_lake_mor_pipeline as pipeline

    log = root / "pipeline.log"
    terminal = os.fdopen(os.dup(1), "w")
    _Progress(terminal).register()
    saved = os.dup(1), os.dup(2)
    with open(log, "w") as sink:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            terminal.write("  creating the metadata DB and parsing the DAG ...\n")
            terminal.flush()
            initdb()
            dag_run = pipeline.dag.test()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    return dag_run, log


def _xcom(run_id: str, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(
            XComModel.get_many(run_id=run_id, key="return_value", task_ids=task_id, dag_ids=DAG_ID)
        ).first()
        return None if row is None else row.value


def _report(run_id: str, table_path: str) -> int:
    """What each service did; returns the number of rows read back."""
    from airflow_lake_provider.lake import LakeTable, read_snapshot

    for name in ("insert", "update", "delete"):
        w = _xcom(run_id, f"{name}_trips")
        print(
            f"write {w['instant']} ({name}): {w['inserted']} inserted, {w['updated']} updated, "
            f"{w['deleted']} deleted"
        )
    plan = _xcom(run_id, "schedule_compaction")
    print(
        f"compaction scheduled {plan['instant']}: {plan['operations']} file groups, "
        f"{plan['total_io_mb']} MB to read ({plan.get('reason') or 'due'})"
    )
    for partition, entry in plan["partitions"].items():
        print(f"  {partition}: {entry['file_groups']} file group(s), {entry['log_files']} log file(s)")
    done = _xcom(run_id, "compact")
    print(
        f"compaction {done['instant']} {done['outcome']}: {done.get('operations')} file groups merged, "
        f"{done.get('log_records_merged')} log records into {done.get('records_written')} rows, "
        f"{done.get('bytes_written')} bytes"
    )
    clean = _xcom(run_id, "clean")
    print(
        f"clean {clean['instant']} {clean['outcome']} ({clean['policy']}): {clean['deleted_files']} files "
        f"deleted, {clean['bytes_planned']} bytes"
    )
    for partition, entry in clean["partitions"].items():
        print(f"  {partition}: {entry['files']} files, {entry['bytes']} bytes")

    table = LakeTable.open(table_path)
    rows = read_snapshot(table)
    print(f"\nsnapshot of {table.base_path}: {rows.num_rows} trips")
    try:
        import pyarrow as pa
        from hudi import HudiTableBuilder

        theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
        same = sorted(theirs.column("uuid").to_pylist()) == sorted(rows.column("uuid").to_pylist())
        print(f"hudi-rs reads {theirs.num_rows} trips: {'the same keys' if same else 'DIFFERENT keys'}")
    except ImportError:
        pass
    print("timeline:")
    for instant in table.timeline().instants:
        print(f"  {instant.timestamp}  {instant.action.value:<12} {instant.state.name}")
    return rows.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--root", default="example-data", help="folder for everything (recreated)")
    args = parser.parse_args()
    root = Path(args.root).resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _environment(root)
    print(f"running DAG {DAG_ID} with dag.test() (SQLite, Spark local[2], table under {root / 'lake'})")
    started = time.monotonic()
    dag_run, log = _run(root)
    print(f"DAG run {dag_run.run_id}: {dag_run.state} in {time.monotonic() - started:.0f} s (log: {log})\n")
    if dag_run.state != "success":
        raise SystemExit(f"the DAG run failed: see {log}")
    rows = _report(dag_run.run_id, str(root / "lake" / "trips"))
    if rows != 40:
        raise SystemExit(f"expected 40 trips, read {rows}")


if __name__ == "__main__":
    main()
