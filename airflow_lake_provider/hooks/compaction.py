"""Compaction methods of ``LakeHook``: schedule in the worker, execute there or on Spark, judge from
the timeline.

Importing this module loads no table-core code (pyarrow, polars, fastavro): the core is imported
when a method runs, so DAG files and the triggerer stay light.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_lake_provider.hooks.errors import (
    LakeConfigError,
    LakeHookError,
    LakeSparkJobError,
    as_bool,
    check_options,
    core_errors,
)
from airflow_lake_provider.hooks.results import dropped_summary
from airflow_lake_provider.hooks.spark import SparkJobMixin

if TYPE_CHECKING:
    from airflow_lake_provider.hooks.spark import SparkSubmission
    from airflow_lake_provider.lake.services.compaction.plan import CompactionPlan
    from airflow_lake_provider.lake.services.compaction.result import ScheduleResult
    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.timeline.active import Timeline

# Plans reading more than this (MB of base and log files) run on Spark; smaller ones are merged in the
# worker: a Spark start (spark-submit, JVM, Python workers) costs 10-17 s, a small merge well under 1 s.
DEFAULT_COMPACTION_SPARK_THRESHOLD_MB = 256.0


def as_threshold_mb(value: float | str) -> float:
    """A threshold in MB that may arrive as a rendered template string."""
    try:
        threshold = float(value)
    except (TypeError, ValueError):
        raise LakeConfigError(f"spark_threshold_mb={value!r} is not a number") from None
    if not threshold >= 0:  # also refuses NaN
        raise LakeConfigError(f"spark_threshold_mb={threshold} must be >= 0")
    return threshold


def earliest_requested_compaction(table: LakeTable) -> str | None:
    """The instant of the earliest compaction plan waiting to run (ours or an external writer's)."""
    return requested_compaction_in(table.timeline())


def requested_compaction_in(timeline: Timeline) -> str | None:
    """The earliest requested (not yet inflight) compaction on ``timeline``, or ``None``."""
    from airflow_lake_provider.lake.timeline.instant import Action, State

    pending = timeline.filter([Action.COMPACTION], [State.REQUESTED])
    return pending[0].timestamp if pending else None


def next_compaction(timeline: Timeline) -> str | None:
    """What an execution without an instant runs: a crashed (inflight) compaction, else the earliest."""
    pending = timeline.pending_compactions()
    inflight = [i for i in pending if i.is_inflight]
    return (inflight or pending)[0].timestamp if pending else None


def schedule_summary(result: ScheduleResult) -> dict[str, Any]:
    """``ScheduleResult.to_json()`` plus the totals and, per partition, file groups and IO in MB."""
    partitions: dict[str, dict[str, Any]] = {}
    for op in result.plan.operations if result.plan is not None else ():
        entry = partitions.setdefault(op.partition, {"file_groups": 0, "log_files": 0, "io_mb": 0.0})
        entry["file_groups"] += 1
        entry["log_files"] += op.log_file_count
        entry["io_mb"] += op.io_mb
    for entry in partitions.values():
        entry["io_mb"] = round(entry["io_mb"], 3)
    return {
        **result.to_json(),
        "operations": len(result.plan.operations) if result.plan is not None else 0,
        "total_io_mb": round(result.plan.total_io_mb, 3) if result.plan is not None else 0.0,
        "partitions": dict(sorted(partitions.items())),
    }


def _options(options: Mapping[str, Any] | None, what: str) -> dict[str, str]:
    """Options as strings, checked like the core checks them (bad ones fail the task at once)."""
    from airflow_lake_provider.lake.services.compaction.config import CompactionConfig

    opts = check_options(options, what)
    with core_errors(what):
        CompactionConfig.from_options(opts)
    return opts


def compaction_metrics(timeline: Timeline, instant: str) -> dict[str, Any] | None:
    """Metrics of a completed compaction read from its commit, or ``None`` if it is not completed."""
    found = timeline.get(instant)
    if found is None or not found.is_completed or not timeline.is_compaction(found):
        return None
    stats = timeline.commit_metadata(found).write_stats()
    return {
        "operations": len(stats),
        "records_written": sum(s.num_writes for s in stats),
        "log_records_merged": sum(s.total_log_records for s in stats),
        "records_updated": sum(s.num_update_writes for s in stats),
        "bytes_written": sum(s.total_write_bytes for s in stats),
        "files": sorted(s.path for s in stats),
    }


class CompactionHookMixin(SparkJobMixin):
    """Compaction service of :class:`~airflow_lake_provider.hooks.lake.LakeHook` (mixed into it)."""

    def schedule_compaction(
        self, table_path: str, options: Mapping[str, Any] | None = None, dry_run: bool | str = False
    ) -> dict[str, Any]:
        """Evaluate trigger and strategy and write ``<c>.compaction.requested``; a JSON-ready summary.

        The summary has the outcome, instant, reason, the plan (file groups), ``operations``,
        ``total_io_mb`` and ``partitions`` (per partition: file groups, log files, IO in MB).
        Outcome ``NO_WORK`` (with a reason) when nothing is due or no file group is selected.

        :param table_path: the table's base path (or relative to the connection's ``base_path``).
        :param options: ``hoodie.compact*``/``hoodie.compaction*`` options over the table's own.
        :param dry_run: compute and report the plan, write nothing.
        """
        from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

        table = self.open_table(table_path)  # type: ignore[attr-defined]
        what = f"compaction scheduling of {table.uri}"
        opts = check_options(options, what)
        with core_errors(what):
            result = schedule_compaction(table, opts, dry_run=as_bool(dry_run, "dry_run"))
        return {**schedule_summary(result), "table_path": table.uri, **dropped_summary(table)}

    def find_requested_compaction(self, table_path: str) -> str | None:
        """The earliest requested compaction plan's instant (ours or an external writer's), or ``None``.

        :param table_path: the table's base path (or relative to the connection's ``base_path``).
        """
        return earliest_requested_compaction(self.open_table(table_path))  # type: ignore[attr-defined]

    def run_compaction(
        self,
        table_path: str,
        instant: str | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        spark_threshold_mb: float | str = DEFAULT_COMPACTION_SPARK_THRESHOLD_MB,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Execute a compaction: small plans in this process, larger ones with ``spark_jobs/compact.py``.

        Without ``instant``, a crashed (inflight) compaction is recovered first, else the earliest
        requested plan runs; none pending is outcome ``NO_WORK``. A plan reading at most
        ``spark_threshold_mb`` MB (its ``total_io_mb``) is merged here, without a JVM; a larger one
        is submitted through ``SparkSubmitHook`` (the Spark set-up is checked first: a missing or
        invalid connection fails with :class:`LakeConfigError`, no retry). Either way the run first
        removes a crashed attempt's partial output. Success is read from the timeline (``<c>.commit``
        of the compaction exists), never from the exit code; if the instant is still pending
        afterwards this raises :class:`LakeSparkJobError`, and a retry of the task recovers it.
        The summary's ``executor`` is ``local`` or ``spark``.

        :param table_path: the table's base path (or relative to the connection's ``base_path``).
        :param instant: the compaction to execute, or ``None`` for the next pending one.
        :param options: compaction options, validated and passed to the job (``--option``).
        :param spark_threshold_mb: the largest plan (MB read) merged in this process.
        :param spark_conn_id: the Spark connection (master, deploy mode).
        :param spark_conf: extra ``--conf`` values for ``spark-submit``.
        :param spark_env: extra environment variables for ``spark-submit``.
        """
        from airflow_lake_provider.lake.errors import LakeError
        from airflow_lake_provider.lake.services.compaction.operation import load_plan
        from airflow_lake_provider.lake.table.metadata.policy import guard_mutation
        from airflow_lake_provider.lake.timeline.instant import Action

        threshold = as_threshold_mb(spark_threshold_mb)
        table: LakeTable = self.open_table(table_path)  # type: ignore[attr-defined]
        opts = _options(options, f"compaction of {table.uri}")
        try:
            timeline = table.timeline()
        except LakeError as exc:
            raise LakeHookError(f"compaction of {table.uri}: cannot read the timeline: {exc}") from exc
        target = instant or next_compaction(timeline)
        summary: dict[str, Any] = {"table_path": table.uri, "instant": target}
        if target is None:
            return {**summary, "outcome": "NO_WORK", "reason": "no requested or inflight compaction"}
        found = timeline.get(target)
        if found is None or not (found.action is Action.COMPACTION or timeline.is_compaction(found)):
            # A wrong instant (a typo, a delta commit) cannot succeed on a retry: fail the task now.
            raise LakeConfigError(f"{table.uri} has no compaction at instant {target}")
        done = compaction_metrics(timeline, target)
        if done is not None:
            return {**summary, "outcome": "ALREADY_COMPLETED", "executor": "none", **done}
        try:
            plan = load_plan(timeline, target)
        except LakeError as exc:
            raise LakeHookError(f"compaction {target} of {table.uri}: cannot read its plan: {exc}") from exc
        # Before a Spark job would refuse after starting; under maintain the commit keeps the MDT.
        with core_errors(f"compaction {target} of {table.uri}"):
            guard_mutation(table, "compaction execute", opts, maintains=True, moves_keys=False)
        io_mb = round(plan.total_io_mb, 3)
        started = time.monotonic()
        executor = self._execute_plan(
            table, target, plan, threshold, opts, spark_conn_id, spark_conf, spark_env
        )
        done = compaction_metrics(table.timeline(), target)
        if done is None:  # the Spark branch raised already; kept for the local one's safety
            raise LakeSparkJobError(
                f"compaction {target} of {table.uri} did not complete; a retry recovers it"
            )
        return {
            **summary,
            "outcome": "COMPLETED",
            "executor": executor,
            "total_io_mb": io_mb,
            "duration_seconds": round(time.monotonic() - started, 3),
            **done,
            **dropped_summary(table),
        }

    def _execute_plan(
        self,
        table: LakeTable,
        target: str,
        plan: CompactionPlan,
        threshold: float,
        opts: dict[str, str],
        spark_conn_id: str,
        spark_conf: Mapping[str, Any] | None,
        spark_env: Mapping[str, str] | None,
    ) -> str:
        """Merge the plan here when it reads at most ``threshold`` MB, else on Spark; which one ran."""
        io_mb = round(plan.total_io_mb, 3)
        if io_mb <= threshold:
            self.log.info(  # type: ignore[attr-defined]
                "compaction %s of %s: %d file groups, %s MB to read (<= spark_threshold_mb %s): "
                "merging in the worker",
                target,
                table.uri,
                len(plan.operations),
                io_mb,
                threshold,
            )
            self._compact_locally(table, target, opts)
            return "local"
        else:
            self.log.info(  # type: ignore[attr-defined]
                "compaction %s of %s: %d file groups, %s MB to read (> spark_threshold_mb %s): "
                "executing on Spark",
                target,
                table.uri,
                len(plan.operations),
                io_mb,
                threshold,
            )
            self._compact_on_spark(table, target, opts, spark_conn_id, spark_conf, spark_env)
            return "spark"

    def _compact_locally(self, table: LakeTable, target: str, opts: Mapping[str, str]) -> None:
        """Merge every file group of the plan in this process (the core's executor, under its lock);
        ``opts`` and the connection's defaults decide the metadata-table policy of its commit."""
        from airflow_lake_provider.lake.services.compaction.executor import execute_compaction

        with core_errors(f"compaction {target} of {table.uri}", "; it stays pending and a retry recovers it"):
            execute_compaction(table, target, options=opts)

    def _compact_on_spark(
        self,
        table: LakeTable,
        target: str,
        opts: Mapping[str, str],
        spark_conn_id: str,
        spark_conf: Mapping[str, Any] | None,
        spark_env: Mapping[str, str] | None,
    ) -> None:
        """Submit ``spark_jobs/compact.py`` for ``target``; raise unless the timeline shows it completed."""
        args = ["--table", table.uri, "--instant", target]
        # The connection's defaults too (its metadata-table policy): the job opens the table afresh.
        for key, value in {**table.option_defaults, **opts}.items():
            args += ["--option", f"{key}={value}"]
        submission: SparkSubmission = self.submit_spark_job(
            "compact.py",
            args,
            conn_id=spark_conn_id,
            conf=spark_conf,
            env_vars=spark_env,
            name=f"lake-compact-{table.config.name}",
        )
        if compaction_metrics(table.timeline(), target) is None:
            raise LakeSparkJobError(
                f"compaction {target} of {table.uri} did not complete on Spark"
                f"{': ' + submission.error if submission.error else ''}; it stays pending and a retry "
                "recovers it"
            )
        if not submission.ok:
            self.log.warning(  # type: ignore[attr-defined]
                "spark-submit reported a failure, but compaction %s is completed on the timeline: %s",
                target,
                submission.error,
            )
