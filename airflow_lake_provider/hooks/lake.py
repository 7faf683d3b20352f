"""``LakeHook``: the Airflow side of the table services (connection, local runs, Spark submission).

The hook plans in the worker with the pure-Python table core (no JVM). Small services run in the
worker too; large ones are scheduled in the worker and executed by a ``spark_jobs`` script submitted
through the Spark provider's ``SparkSubmitHook``. Whether a Spark run succeeded is read from the
table's timeline, never from ``spark-submit``'s exit code: the timeline is the table's only truth,
and a job can commit and still exit non-zero (or the reverse).

Importing this module loads no table-core code (pyarrow, polars, fastavro): operators, sensors and
DAG files import it at parse time; the core is imported when a method runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_lake_provider.hooks.compaction import CompactionHookMixin
from airflow_lake_provider.hooks.errors import (
    LakeConfigError,
    LakeHookError,
    LakeServiceBusyError,
    LakeSparkJobError,
    as_bool,
    check_options,
    core_errors,
    opening_errors,
)
from airflow_lake_provider.hooks.results import dropped_summary
from airflow_lake_provider.hooks.spark import SparkSubmission, spark_job_env
from airflow_lake_provider.hooks.write import WriteHookMixin
from airflow_lake_provider.lake.config.option import NamedLayer
from airflow_lake_provider.lake.config.registry import METADATA_ENABLE, METADATA_MAINTAIN

if TYPE_CHECKING:
    from airflow_lake_provider.lake.services.clean.result import CleanResult
    from airflow_lake_provider.lake.storage import Storage
    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.timeline.active import Timeline
    from airflow_lake_provider.lake.timeline.instant import Instant

if TYPE_CHECKING:
    from airflow_lake_provider.lake.services.clean.plan import CleanPlan

CLEAN_MODES = ("schedule", "execute", "schedule_and_execute")
# Plans deleting more files than this run on Spark; smaller ones are deleted by the worker itself.
DEFAULT_SPARK_THRESHOLD = 10_000
# The only connection extras the hook reads (never the whole extra dict).
EXTRA_BASE_PATH = "base_path"
# Hudi's writer option, read from the extra too: false drops a table's metadata table before an action.
EXTRA_METADATA_ENABLE = METADATA_ENABLE.key
EXTRA_METADATA_KEYS = (EXTRA_METADATA_ENABLE, METADATA_MAINTAIN.key)
# S3 settings in the connection's extra, and the standard variable each one becomes. The key pair
# is the connection's login and password; without one, the worker's own credentials (its
# environment, web identity, container or instance role) are used.
S3_EXTRAS = {
    "endpoint": "AWS_ENDPOINT_URL",
    "region": "AWS_REGION",
    "allow_http": "AWS_ALLOW_HTTP",
    "session_token": "AWS_SESSION_TOKEN",  # temporary credentials (STS) with the key pair
}


def _as_threshold(value: int | str) -> int:
    try:
        threshold = int(value)
    except (TypeError, ValueError):
        raise LakeConfigError(f"spark_threshold={value!r} is not an integer") from None
    if threshold < 0:
        raise LakeConfigError(f"spark_threshold={threshold} must be >= 0")
    return threshold


def _extra(conn: Any, key: str) -> Any:
    """One extra of a ``lake`` connection: plain, or with the form's ``extra__lake__`` prefix."""
    extra = conn.extra_dejson
    value = extra.get(key)
    return extra.get(f"extra__lake__{key}") if value is None or value == "" else value


def _completed_clean(timeline: Timeline, timestamp: str) -> Instant | None:
    from airflow_lake_provider.lake.timeline.instant import Action, State

    done = [i for i in timeline.filter([Action.CLEAN], [State.COMPLETED]) if i.timestamp == timestamp]
    return done[0] if done else None


def _resolve_uri(base: str, path: str, given: str) -> str:
    """``path`` under a URI ``base`` (``s3://bucket/lake``): relative ones joined, absolute ones inside."""
    root = base.rstrip("/")
    if "://" not in path:
        if path.startswith("/"):
            raise LakeConfigError(f"table path {given!r} lies outside the connection's base_path {base!r}")
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise LakeConfigError(f"table path {given!r} lies outside the connection's base_path {base!r}")
        return "/".join([root, *parts])
    target = path.rstrip("/")
    if ".." in target.split("/") or (target != root and not target.startswith(root + "/")):
        raise LakeConfigError(f"table path {given!r} lies outside the connection's base_path {base!r}")
    return target


class LakeHook(CompactionHookMixin, WriteHookMixin, BaseHook):
    """Runs table services on Hudi tables; the ``lake`` connection is optional.

    With a connection, its extra ``base_path`` is the root of the lake (a folder or ``s3://bucket/prefix``):
    relative table paths are resolved under it and absolute ones must lie inside it. Without one,
    table paths are used as given. For ``s3://`` tables the connection's login and password are the
    AWS key pair (with the extra ``session_token`` for temporary credentials) and its extras
    ``endpoint``, ``region`` and ``allow_http`` the rest; they reach the core as settings and Spark
    jobs as environment variables, never a command line, log or XCom. Without a key pair the
    worker's own credentials apply: its ``AWS_*`` variables, a web identity token, a container or
    an instance role (no keys at all).
    The connection form (labels, extra fields) is declared in ``provider_info.py``.

    :param lake_conn_id: Airflow connection id of type ``lake``, or ``None`` for no connection.
    """

    conn_name_attr = "lake_conn_id"
    default_conn_name = "lake_default"
    conn_type = "lake"
    hook_name = "Lake (Apache Hudi)"

    def __init__(self, lake_conn_id: str | None = None) -> None:
        super().__init__()
        self.lake_conn_id = lake_conn_id
        self._base_path: str | None = None
        self._base_path_loaded = False
        self._spark_hook: Any = None

    def get_conn(self) -> Any:
        """The Airflow connection, or ``None`` when the hook runs without one."""
        if not self.lake_conn_id:  # None, or "" from a DAG param left empty
            return None
        try:
            return self.get_connection(self.lake_conn_id)
        except AirflowNotFoundException:
            # A typo in lake_conn_id is configuration: Airflow's own exception would be retried.
            conn_id = str(self.lake_conn_id)
            raise LakeConfigError(
                f"lake connection {conn_id!r} is not defined: create it (type lake, e.g. "
                f'AIRFLOW_CONN_{conn_id.upper()}=\'{{"conn_type": "lake", "extra": '
                f'{{"base_path": "s3://bucket/lake"}}}}\'), or leave lake_conn_id empty'
            ) from None

    def storage_env(self) -> dict[str, str]:
        """The connection's S3 settings as the standard ``AWS_*`` variables (empty without any).

        Holds the secret key: pass it only to the core or a child process' environment.
        """
        conn = self.get_conn()
        if conn is None:
            return {}
        env = {}
        if conn.login:
            env["AWS_ACCESS_KEY_ID"] = str(conn.login)
        if conn.password:
            env["AWS_SECRET_ACCESS_KEY"] = str(conn.password)
        for key, name in S3_EXTRAS.items():
            value = _extra(conn, key)
            if value is None or value == "":
                continue
            if key == "allow_http":
                value = "true" if as_bool(value, "allow_http") else "false"
            env[name] = str(value)
        return env

    def test_connection(self) -> tuple[bool, str]:
        """``airflow connections test`` and the UI's Test button: list the connection's ``base_path``.

        ``(True, what was listed)`` when the folder or the bucket prefix can be listed (an empty one
        too); ``(False, why)`` otherwise: no ``base_path``, a missing folder, a refused credential, an
        unreachable endpoint, a missing ``[s3]`` extra.
        """
        base = None
        try:
            base = self.base_path
            if base is None:
                return False, (
                    f"lake connection {self.lake_conn_id!r} has no base_path to list: set its extra "
                    "base_path to an absolute folder or s3://bucket/prefix"
                )
            storage = self.open_location(base)
            if "://" not in storage.uri() and not storage.exists(""):
                return False, f"base_path {base} does not exist"
            parent = storage.parent()
            if "://" not in storage.uri() and parent is not None:
                name = storage.uri().rsplit("/", 1)[-1]
                if any(f == name for f, _ in parent.list_dir()[0]):
                    return False, f"base_path {base} is a file, not a folder"
            files, folders = storage.list_dir("")
        except Exception as exc:  # every failure is the test's answer; the secret is never in it
            return False, f"cannot list base_path {base}: {exc}"
        return True, f"listed base_path {base}: {len(folders)} folders, {len(files)} files"

    # -- tables --------------------------------------------------------------------------------
    @property
    def base_path(self) -> str | None:
        """The connection's ``base_path`` extra (read once), or ``None``."""
        if not self._base_path_loaded:
            conn = self.get_conn()
            value = _extra(conn, EXTRA_BASE_PATH) if conn is not None else None
            self._base_path = str(value) if value else None
            self._base_path_loaded = True
        return self._base_path

    def resolve_table_path(self, table_path: str) -> str:
        """The absolute table path: relative paths go under ``base_path``, which also bounds absolute ones.

        :param table_path: the table's base path, absolute or relative to the connection's ``base_path``.
        """
        if not table_path or not str(table_path).strip():
            raise LakeConfigError("table_path is empty")
        path = _file_uri_as_path(str(table_path).strip())
        base = _file_uri_as_path(self.base_path) if self.base_path is not None else None
        if base is None:
            if "://" not in path and not path.startswith("/"):
                # It would land in the worker's current folder (a Spark executor's is another).
                raise LakeConfigError(
                    f"table path {table_path!r} is relative and no lake connection with a base_path "
                    "is given: use an absolute path or an s3:// URI, or a connection whose base_path "
                    "it is relative to"
                )
            return path
        if "://" not in base and not base.startswith("/"):
            raise LakeConfigError(
                f"the lake connection's base_path {base!r} is relative: make it an absolute folder "
                "or an s3:// URI"
            )
        if "://" in base or "://" in path:
            return _resolve_uri(base, path, table_path)
        root = PurePosixPath(os.path.normpath(base))
        target = PurePosixPath(os.path.normpath(root / path))
        if target != root and root not in target.parents:
            raise LakeConfigError(
                f"table path {table_path!r} lies outside the connection's base_path {base!r}"
            )
        return str(target)

    def open_location(self, table_path: str) -> Storage:
        """The storage at ``table_path`` (a Hudi table or a plain parquet directory), with the
        connection's settings over the process' own (given to the storage, not ``os.environ``)."""
        from airflow_lake_provider.lake.storage import open_storage

        with opening_errors():
            path = self.resolve_table_path(table_path)
            return open_storage(path, environ={**os.environ, **self.storage_env()})

    def open_table(self, table_path: str) -> LakeTable:
        """Open the table at ``table_path`` (resolved with :meth:`resolve_table_path`)."""
        from airflow_lake_provider.lake.storage import open_storage
        from airflow_lake_provider.lake.table.table import LakeTable

        with opening_errors():
            path = self.resolve_table_path(table_path)
            # The connection's settings over the process' own; given to the storage, not os.environ.
            table = LakeTable.open(open_storage(path, environ={**os.environ, **self.storage_env()}))
        table.option_defaults = self.connection_options()
        return table

    def connection_options(self) -> dict[str, str]:
        """Table options the connection's extra sets for every action (the metadata-table policy:
        ``hoodie.metadata.enable``, ``lake.metadata-table.maintain``); refusals name the connection."""
        conn = self.get_conn()
        out = {}
        for key in EXTRA_METADATA_KEYS:
            value = _extra(conn, key) if conn is not None else None
            if value is not None and value != "":
                out[key] = str(value).strip().lower()
        return NamedLayer(out, f"the extra of lake connection {self.lake_conn_id!r}")

    # -- clean ---------------------------------------------------------------------------------
    def clean(
        self,
        table_path: str,
        options: Mapping[str, Any] | None = None,
        *,
        mode: str = "schedule_and_execute",
        dry_run: bool | str = False,
        spark_threshold: int | str = DEFAULT_SPARK_THRESHOLD,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Clean a table and return the JSON summary of :meth:`CleanResult.to_dict` plus ``executor``.

        The plan is computed here, without a JVM. Nothing to clean returns outcome ``NO_WORK``.
        A plan of at most ``spark_threshold`` files runs in this process; a larger one is scheduled
        here (``<t>.clean.requested``) and executed by ``spark_jobs/clean.py`` through
        ``SparkSubmitHook``, then judged from the timeline (``<t>.clean`` must exist).

        :param table_path: the table's base path.
        :param options: cleaner options (``hoodie.clean*``/``hoodie.cleaner*`` keys) over the table's own.
        :param mode: ``schedule``, ``execute`` or ``schedule_and_execute``.
        :param dry_run: compute and report the plan, write and delete nothing.
        :param spark_threshold: the largest plan (in files) executed in this process.
        :param spark_conn_id: the Spark connection used for large plans.
        :param spark_conf: extra ``--conf`` values for ``spark-submit``.
        :param spark_env: extra environment variables for ``spark-submit``.
        """
        from airflow_lake_provider.lake.services.clean.executor import clean_config, pending_cleans, run_clean
        from airflow_lake_provider.lake.services.clean.result import CleanResult, Outcome
        from airflow_lake_provider.lake.table.metadata.policy import guard_mutation

        if mode not in CLEAN_MODES:
            raise LakeConfigError(f"mode={mode!r} is not one of {', '.join(CLEAN_MODES)}")
        dry_run = as_bool(dry_run, "dry_run")
        threshold = _as_threshold(spark_threshold)
        table = self.open_table(table_path)
        opts = check_options(options, f"clean of {table.uri}")
        with core_errors(f"clean of {table.uri}"):
            clean_config(table, opts)  # fail on bad options before anything is written
            if not dry_run:  # refused (or the MDT dropped) even when nothing turns out to be due
                # Kept under the maintain policy: both executors complete the clean in run_clean.
                guard_mutation(table, "clean", opts, maintains=True, moves_keys=False)
            # A preview that picks the executor: a real run follows and logs the scan (once).
            preview = run_clean(table, opts, dry_run=True, log_scan=dry_run)
            if mode == "execute" and not pending_cleans(table.timeline()):
                preview = CleanResult(Outcome.NO_WORK, reason="no pending clean to execute")
            if dry_run or preview.outcome is Outcome.NO_WORK:
                return self._summary(table, preview, "none")
            planned = preview.plan.file_count if preview.plan else 0
            if mode == "schedule" or planned <= threshold:
                self.log.info(
                    "clean of %s: %d files planned (<= %d): running in the worker",
                    table.uri,
                    planned,
                    threshold,
                )
                return self._summary(table, run_clean(table, opts, mode=mode), "local")
            self.log.info(
                "clean of %s: %d files planned (> %d): executing on Spark",
                table.uri,
                planned,
                threshold,
            )
            return self._clean_on_spark(table, opts, mode, spark_conn_id, spark_conf, spark_env)

    def _clean_on_spark(
        self,
        table: LakeTable,
        options: Mapping[str, Any],
        mode: str,
        conn_id: str,
        conf: Mapping[str, Any] | None,
        env: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        """Finish pending cleans on Spark, then (``schedule_and_execute``) plan here and execute there.

        Pending cleans go first, as in a local run: a retry after a killed job finishes the same
        instant from its stored plan instead of planning a second clean over the same files.
        """
        from airflow_lake_provider.lake.services.clean.executor import pending_cleans, run_clean
        from airflow_lake_provider.lake.services.clean.result import CleanResult, Outcome

        self.check_spark_setup(conn_id, env)  # before a plan is written: a bad set-up fails at once
        pending = tuple(i.timestamp for i in pending_cleans(table.timeline()))
        run = (table, options, conn_id, conf, env)
        finished = self._execute_cleans_on_spark(*run, pending) if pending else None
        if mode == "schedule_and_execute":
            scheduled = run_clean(table, options, mode="schedule")
            if scheduled.outcome is Outcome.SCHEDULED and scheduled.instant:
                done = self._execute_cleans_on_spark(*run, (scheduled.instant,), scheduled.plan)
                return self._summary(table, replace(done, finished_pending=pending), "spark")
            if finished is None:
                return self._summary(table, scheduled, "none")
        if finished is None:
            return self._summary(
                table, CleanResult(Outcome.NO_WORK, reason="no pending clean to execute"), "none"
            )
        return self._summary(table, replace(finished, finished_pending=pending), "spark")

    def _execute_cleans_on_spark(
        self,
        table: LakeTable,
        options: Mapping[str, Any],
        conn_id: str,
        conf: Mapping[str, Any] | None,
        env: Mapping[str, str] | None,
        targets: tuple[str, ...],
        plan: CleanPlan | None = None,
    ) -> CleanResult:
        """Execute the pending cleans ``targets`` with ``spark_jobs/clean.py --mode execute`` and judge
        from the timeline: every target must be completed. The result is the last target's."""
        from airflow_lake_provider.lake.services.clean.executor import stored_plan
        from airflow_lake_provider.lake.services.clean.result import CleanResult, Outcome
        from airflow_lake_provider.lake.timeline.instant import Action, Instant, State

        args = ["--table", table.uri, "--mode", "execute"]
        # The connection's defaults too (its metadata-table policy): the job opens the table afresh.
        for key, value in {**table.option_defaults, **options}.items():
            args += ["--option", f"{key}={value}"]
        if len(targets) == 1:
            args += ["--instant", targets[0]]
        submission = self.submit_spark_job(
            "clean.py", args, conn_id=conn_id, conf=conf, env_vars=env, name=f"lake-clean-{table.config.name}"
        )
        timeline = table.timeline()
        completed = {t: _completed_clean(timeline, t) for t in targets}
        missing = [t for t, done in completed.items() if done is None]
        if missing:
            raise LakeSparkJobError(
                f"clean {', '.join(missing)} of {table.uri} did not complete on Spark"
                f"{': ' + submission.error if submission.error else ''}; the next clean finishes it"
            )
        if not submission.ok:
            self.log.warning(
                "spark-submit reported a failure, but the timeline shows clean %s completed: %s",
                ", ".join(targets),
                submission.error,
            )
        last = targets[-1]
        metadata = timeline.avro_record(completed[last])  # type: ignore[arg-type]  # not None: checked above
        failed = sum(
            len(p.get("failedDeleteFiles") or []) for p in (metadata.get("partitionMetadata") or {}).values()
        )
        if plan is None:
            plan = stored_plan(table, timeline, Instant(last, State.REQUESTED, Action.CLEAN))
        return CleanResult(
            Outcome.CLEANED,
            last,
            plan,
            int(metadata.get("totalFilesDeleted") or 0),
            failed,
            duration_seconds=int(metadata.get("timeTakenInMillis") or 0) / 1000,
        )

    def archive(self, table_path: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Archive the table's timeline (Hudi's ``hoodie.keep.*`` rules); ``NO_WORK`` when not due.

        :param table_path: the table's base path (or relative to the connection's ``base_path``).
        :param options: archival options (``hoodie.keep.*``...) and ``hoodie.metadata.enable`` over the
            table's own (options of other services are ignored; unknown ``hoodie.`` keys refused).
        """
        from airflow_lake_provider.lake.config import of_family
        from airflow_lake_provider.lake.table.archival.executor import run_archival

        table = self.open_table(table_path)
        opts = check_options(options, f"archival of {table.uri}")
        with core_errors(f"archival of {table.uri}"):
            result = run_archival(table, of_family(opts, "archival", "metadata-table"))
        return {**result.to_dict(), "table_path": table.uri}

    def check_archival(self, table_path: str, options: Mapping[str, Any] | None = None) -> None:
        """Refuse (:class:`LakeConfigError`) the archival settings :meth:`archive` would refuse, the
        table's own and ``options``, without archiving: a clean that archives after it checks them
        first, so a bad ``hoodie.keep.*`` fails the task before the clean deletes anything."""
        from airflow_lake_provider.lake.config import of_family
        from airflow_lake_provider.lake.table.archival.config import ArchivalConfig

        table = self.open_table(table_path)
        given = {k: str(v) for k, v in (options or {}).items() if isinstance(k, str) and v is not None}
        with core_errors(f"archival of {table.uri}"):  # unknown keys: the clean's check names them
            ArchivalConfig.from_options(table.config.properties, of_family(given, "archival"))

    @staticmethod
    def _summary(table: LakeTable, result: CleanResult, executor: str) -> dict[str, Any]:
        return {**result.to_dict(), "table_path": table.uri, "executor": executor, **dropped_summary(table)}


__all__ = [
    "CLEAN_MODES",
    "DEFAULT_SPARK_THRESHOLD",
    "LakeConfigError",
    "LakeHook",
    "LakeHookError",
    "LakeServiceBusyError",
    "LakeSparkJobError",
    "SparkSubmission",
    "spark_job_env",
]


def _file_uri_as_path(text: str) -> str:
    """A ``file:`` URI as the local path it names (read as ``open_storage`` reads it); other text as is."""
    if text[:5].lower() != "file:":
        return text
    from airflow_lake_provider.lake.storage import open_storage

    with opening_errors():
        return open_storage(text).uri()
