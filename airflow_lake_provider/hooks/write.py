"""Write methods of ``LakeHook``: one input dataset into a table as one instant, exactly once per task.

Small inputs are written in the worker; inputs of more than ``spark_threshold`` rows (counted from
the parquet footers) by ``spark_jobs/write.py`` through ``SparkSubmitHook``. Either way the
instant's extra metadata names the DAG, task, run and try that started it, and a retry first rolls
back what an earlier try of the same task and run left pending, wherever that try ran. Whether a
Spark write succeeded is read from the timeline, never from ``spark-submit``'s exit code.

Module import stays light: the table core's pyarrow parts are imported inside the methods.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_lake_provider.hooks.errors import LakeConfigError, LakeSparkJobError, check_options, core_errors
from airflow_lake_provider.hooks.results import dropped_summary
from airflow_lake_provider.hooks.spark import SparkJobMixin
from airflow_lake_provider.lake.errors import LakeError

if TYPE_CHECKING:
    from airflow_lake_provider.lake.table.table import LakeTable

# Extra metadata keys of a write's instant naming the task attempt that started it.
META_DAG, META_TASK, META_RUN, META_TRY = (
    "lake.airflow.dag_id",
    "lake.airflow.task_id",
    "lake.airflow.run_id",
    "lake.airflow.try_number",
)
# Mapped tasks only: instances of one mapped task share DAG, task and run, and run side by side.
META_MAP_INDEX = "lake.airflow.map_index"
WRITE_OPERATIONS = ("insert", "upsert", "delete")
# Inputs with more rows than this are written by spark_jobs/write.py; smaller ones in the worker.
DEFAULT_WRITE_SPARK_THRESHOLD = 5_000_000


def earlier_attempts(table: Any, me: Mapping[str, str]) -> list[str]:
    """Pending writes whose inflight metadata names this DAG, task and run (any try)."""
    from airflow_lake_provider.lake.timeline.instant import Action

    timeline = table.timeline()
    found = []
    for instant in timeline.pending:
        if instant.action not in (Action.COMMIT, Action.DELTACOMMIT) or not instant.is_inflight:
            continue
        try:
            meta = timeline.inflight_commit_metadata(instant)  # JSON (v6) or Avro (v8/v9)
        except LakeError:
            continue  # not ours to judge: the failed-writes policy handles it
        extra = (meta.extra_metadata if meta is not None else None) or {}
        if all(extra.get(k) == v for k, v in me.items()):
            found.append(instant.timestamp)
    return found


# Names one Spark write in its instant's metadata, so the hook finds the commit the job made.
META_WRITE_ID = "lake.write.id"


def _completed_write(table: Any, meta: Mapping[str, str], after: str | None) -> Any:
    """The completed commit after ``after`` whose metadata holds ``meta`` (``None`` if none)."""
    timeline = table.timeline()
    for instant in reversed(timeline.completed_commits):
        if after is not None and instant.timestamp <= after:
            break
        extra = timeline.commit_metadata(instant).extra_metadata or {}
        if all(extra.get(k) == v for k, v in meta.items()):
            return instant
    return None


def _threshold(value: int | str) -> int:
    try:
        threshold = int(value)
    except (TypeError, ValueError):
        raise LakeConfigError(f"spark_threshold={value!r} is not an integer") from None
    if threshold < 0:
        raise LakeConfigError(f"spark_threshold={threshold} must be >= 0")
    return threshold


def _check_absolute(input_path: str) -> None:
    """Refuse a relative input path: it would be read from the worker's current folder, and a Spark
    write's executors have others."""
    given = str(input_path or "").strip()
    local = given[len("file://") :] if given.startswith("file://") else given
    if "://" not in local and not local.startswith("/"):
        raise LakeConfigError(f"input_path {input_path!r} is relative: give an absolute path or an s3:// URI")


class WriteHookMixin(SparkJobMixin):
    """``write`` of :class:`~airflow_lake_provider.hooks.lake.LakeHook` (mixed into it)."""

    def write(
        self,
        table_path: str,
        input_path: str,
        operation: str = "upsert",
        options: Mapping[str, Any] | None = None,
        *,
        attempt: Mapping[str, str] | None = None,
        spark_threshold: int | str = DEFAULT_WRITE_SPARK_THRESHOLD,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Write ``input_path`` (a parquet file or a folder of them) into the table as one instant.

        Returns ``{"instant", "rolled_back", "inserted", "updated", "deleted", "executor"}``.

        :param table_path: the table's base path (or relative to the connection's ``base_path``).
        :param input_path: a parquet file or a folder of parquet files, local or ``s3://`` (read with
            the lake connection's storage settings).
        :param operation: ``insert``, ``upsert`` or ``delete``.
        :param options: write options over the table's (``hoodie.cleaner.policy.failed.writes``, ...).
        :param attempt: the task attempt: ``lake.airflow.dag_id``, ``.task_id``, ``.run_id``,
            ``.try_number`` (and ``.map_index`` for a mapped task). Pending writes of the same DAG,
            task, run (and map index) are rolled back first.
        :param spark_threshold: the most input rows written in this process; more go to Spark.
        :param spark_conn_id: the Spark connection used for large inputs.
        :param spark_conf: extra ``--conf`` values for ``spark-submit``.
        :param spark_env: extra environment variables for ``spark-submit``.
        """
        from airflow_lake_provider.lake.table.metadata.policy import guard_mutation
        from airflow_lake_provider.lake.table.write import write
        from airflow_lake_provider.lake.table.write.input import find_input, input_rows, read_input
        from airflow_lake_provider.lake.table.write.writer import check_write

        if operation not in WRITE_OPERATIONS:
            raise LakeConfigError(f"operation={operation!r} is not one of {', '.join(WRITE_OPERATIONS)}")
        _check_absolute(input_path)
        threshold = _threshold(spark_threshold)
        attempt = {str(k): str(v) for k, v in (attempt or {}).items()}
        table = self.open_table(table_path)  # type: ignore[attr-defined]
        what = f"write of {input_path} into {table.uri}"
        opts = check_options(options, what)
        run_keys = {k: v for k, v in attempt.items() if k != META_TRY}
        with core_errors(what):
            # A missing input is refused before the guard (which may drop the MDT) changes anything.
            source = find_input(input_path, environ={**os.environ, **self.storage_env()})  # type: ignore[attr-defined]
            rows = input_rows(source)
            batch = read_input(source) if rows <= threshold else None
            if batch is not None:  # a batch the write refuses fails before the guard's MDT drop
                check_write(table, batch, operation, opts)
            # Here, not only in the core's write: the rollback below and a Spark write come first.
            guard_mutation(table, f"write ({operation})", opts, maintains=True)
            rolled_back = self._roll_back_earlier_attempts(table, run_keys, opts)
            here = batch is not None
            self.log.info(  # type: ignore[attr-defined]
                "write of %s into %s: %d input rows in %d files (%s spark_threshold %d): %s",
                *(input_path, table.uri, rows, len(source.files)),
                *("<=" if here else ">", threshold, "in the worker" if here else "on Spark"),
            )
            if batch is not None:
                result = write(table, batch, operation, options=opts, extra_metadata=attempt)
                counts = {"inserted": result.inserted, "updated": result.updated, "deleted": result.deleted}
                return {
                    "instant": result.instant,
                    "rolled_back": rolled_back,
                    **counts,
                    "executor": "local",
                    **dropped_summary(table),
                }
            written = self._write_on_spark(
                table, input_path, operation, opts, attempt, spark_conn_id, spark_conf, spark_env
            )
            return {**written, "rolled_back": rolled_back, "executor": "spark", **dropped_summary(table)}

    def _roll_back_earlier_attempts(
        self, table: LakeTable, run_keys: Mapping[str, str], opts: Mapping[str, str]
    ) -> list[str]:
        """Roll back the writes earlier attempts of this task left pending; the instants rolled back."""
        from airflow_lake_provider.lake.services.rollback import rollback

        rolled_back: list[str] = []
        for instant in earlier_attempts(table, run_keys) if run_keys else []:
            self.log.info(  # type: ignore[attr-defined]
                "rolling back %s, left pending by an earlier attempt of this task", instant
            )
            rolled_back += [r.target for r in rollback(table, instant, options=opts)]
        return rolled_back

    def _write_on_spark(
        self,
        table: Any,
        input_path: str,
        operation: str,
        options: Mapping[str, str],
        attempt: Mapping[str, str],
        conn_id: str,
        conf: Mapping[str, Any] | None,
        env: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        """Submit ``spark_jobs/write.py``, then find its commit on the timeline by the attempt's metadata."""
        args = ["--table", table.uri, "--input", input_path, "--operation", operation]
        for key, value in options.items():
            args += ["--option", f"{key}={value}"]
        meta = {**attempt, META_WRITE_ID: uuid.uuid4().hex}
        for key, value in meta.items():
            args += ["--meta", f"{key}={value}"]
        before = table.timeline().latest_time
        submission = self.submit_spark_job(
            "write.py", args, conn_id=conn_id, conf=conf, env_vars=env, name=f"lake-write-{table.config.name}"
        )
        done = _completed_write(table, meta, before)
        if done is None:
            raise LakeSparkJobError(
                f"write of {input_path} into {table.uri} did not commit on Spark"
                f"{': ' + submission.error if submission.error else ''}; a retry of the task rolls back "
                "what it left pending"
            )
        if not submission.ok:
            self.log.warning(  # type: ignore[attr-defined]
                "spark-submit reported a failure, but write %s is committed on the timeline: %s",
                done.timestamp,
                submission.error,
            )
        stats = table.timeline().commit_metadata(done).write_stats()
        return {
            "instant": done.timestamp,
            "inserted": sum(s.num_inserts for s in stats),
            "updated": sum(s.num_update_writes for s in stats),
            "deleted": sum(s.num_deletes for s in stats),
        }
