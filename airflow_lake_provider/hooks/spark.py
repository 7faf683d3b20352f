"""Submitting ``spark_jobs`` scripts from a hook: the environment, and how ``spark-submit`` ended."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from airflow_lake_provider.hooks.errors import LakeConfigError

# What a working Spark connection looks like, for the messages of the configuration checks.
SPARK_CONN_EXAMPLE = 'AIRFLOW_CONN_SPARK_DEFAULT=\'{"conn_type": "spark", "host": "local[*]"}\''


@dataclass(frozen=True)
class SparkSubmission:
    """How ``spark-submit`` ended: ``ok`` is its exit status only, not the service's outcome."""

    command: tuple[str, ...]
    ok: bool
    error: str = ""


def spark_job_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for ``spark-submit`` so the driver and Python workers use this interpreter.

    The pip ``pyspark`` puts ``spark-submit`` beside the interpreter and looks for ``python3`` on
    ``PATH``; the job imports ``airflow_lake_provider`` (its scripts live in the package's
    ``spark_jobs/``), so the package's parent folder goes on ``PYTHONPATH``.
    """
    import airflow_lake_provider

    bin_dir = str(Path(sys.executable).parent)
    root = str(Path(airflow_lake_provider.__file__).resolve().parent.parent)
    python_path = [root, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    path = [bin_dir, *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir)]
    env = {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": os.pathsep.join(path),
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(python_path)),
    }
    env.update(extra or {})
    return env


def check_spark_setup(hook: Any, conn_id: str, env_vars: Mapping[str, str] | None = None) -> str:
    """Fail fast with :class:`LakeConfigError` on a Spark set-up no retry can fix; the binary's path.

    ``SparkSubmitHook`` quietly falls back to ``--master yarn`` when the connection is missing or names
    no master, and ``spark-submit`` then fails minutes later with a YARN configuration error. These
    checks run before anything is submitted (or any instant is written for a Spark run).

    :param hook: a hook with ``get_connection`` (the ``LakeHook``).
    :param conn_id: the Spark connection id.
    :param env_vars: environment variables ``spark-submit`` will get on top of this process' own.
    """
    from airflow_lake_provider.lake.errors import LakeError, missing_extra
    from airflow_lake_provider.lake.spark_submit import spark_submit_binary

    try:  # SparkSubmitHook comes with the [spark] extra; fail before anything is written without it
        import airflow.providers.apache.spark.hooks.spark_submit  # noqa: F401
    except ModuleNotFoundError as exc:
        needed_by = f"a Spark run (spark_conn_id={conn_id!r})"
        raise LakeConfigError(str(missing_extra("spark", needed_by, exc))) from exc
    if not conn_id or not str(conn_id).strip():
        raise LakeConfigError(f"spark_conn_id is empty: name a Spark connection, e.g. {SPARK_CONN_EXAMPLE}")
    try:
        conn = hook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise LakeConfigError(
            f"Spark connection {conn_id!r} is not defined (spark-submit would fall back to YARN): create it, "
            f"e.g. {SPARK_CONN_EXAMPLE}, or pass spark_conn_id"
        ) from None
    host = (conn.host or "").strip()
    if conn.conn_type == "spark" and not host:
        raise LakeConfigError(
            f"Spark connection {conn_id!r} names no master (empty host; spark-submit would fall back "
            "to YARN): set its host to local[*], spark://host:7077, yarn or k8s://..., e.g. "
            f"{SPARK_CONN_EXAMPLE}"
        )
    # The master as SparkSubmitHook builds it from the connection.
    if conn.conn_type == "spark" and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    if master.startswith("yarn"):
        env = {**os.environ, **(env_vars or {})}
        if not (env.get("HADOOP_CONF_DIR") or env.get("YARN_CONF_DIR")):
            raise LakeConfigError(
                f"Spark connection {conn_id!r} submits to YARN, but neither HADOOP_CONF_DIR nor "
                "YARN_CONF_DIR is set for the worker: set one to the cluster's configuration folder, "
                "or give the connection another master (local[*], spark://host:7077)"
            )
    try:
        binary = spark_submit_binary()
    except LakeError as exc:
        raise LakeConfigError(str(exc)) from exc
    if not os.access(binary, os.X_OK):
        raise LakeConfigError(f"spark-submit at {binary} is not executable: fix its permissions")
    return binary


class SparkJobMixin:
    """``submit_spark_job`` and ``on_kill`` for the hooks that run table services on Spark."""

    _spark_hook: Any = None

    def check_spark_setup(self, conn_id: str, env_vars: Mapping[str, str] | None = None) -> str:
        """See :func:`check_spark_setup`: raises :class:`LakeConfigError`, returns ``spark-submit``'s path."""
        return check_spark_setup(self, conn_id, env_vars)

    def submit_spark_job(
        self,
        script: str,
        args: Sequence[str],
        *,
        conn_id: str = "spark_default",
        conf: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> SparkSubmission:
        """Run ``spark_jobs/<script>`` with ``SparkSubmitHook`` and report how ``spark-submit`` ended.

        A non-zero exit does not raise: callers judge the outcome from the table's timeline.

        :param script: file name under ``spark_jobs/`` (e.g. ``clean.py``).
        :param args: the script's arguments.
        :param conn_id: the Spark connection (its master, deploy mode, queue).
        :param conf: ``--conf`` values over :func:`job_conf`'s defaults.
        :param env_vars: environment variables over :func:`spark_job_env`'s.
        :param name: the Spark application name.
        """
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from airflow_lake_provider.lake.spark_submit import core_zip, job_conf, job_script

        spark_binary = check_spark_setup(self, conn_id, env_vars)
        application = str(job_script(script))
        # S3 credentials travel in spark-submit's environment: the driver hands them to its executors
        # as spark.executorEnv.* set in-process (spark_jobs/_common.py), never on a command line.
        secrets = self.storage_env() if hasattr(self, "storage_env") else {}

        def build(py_files: str | None) -> SparkSubmitHook:
            return SparkSubmitHook(
                conf=job_conf(conf),
                conn_id=conn_id,
                name=name or f"lake-{Path(script).stem}",
                application_args=[str(a) for a in args],
                env_vars=spark_job_env({**secrets, **(env_vars or {})}),
                py_files=py_files,
                # The connection extra only allows bare names; the argument takes the venv's binary.
                spark_binary=spark_binary,
            )

        hook = build(None)
        if not str(hook._connection["master"]).startswith("local"):
            # Executors on a cluster get the core as a zip (--py-files), not from an installed package.
            hook = build(str(core_zip()))
        if secrets and (hook._is_yarn or hook._is_kubernetes):
            # SparkSubmitHook turns env_vars into --conf values for these masters: the secret would be
            # on the command line (and in `ps`). Use the cluster's own credentials (instance roles) there.
            raise LakeConfigError(
                f"connection {conn_id!r}: S3 credentials from the lake connection cannot be passed to a "
                "YARN or Kubernetes spark-submit without putting them on its command line"
            )
        self._spark_hook = hook
        command = (application, *map(str, args))
        try:
            hook.submit(application=application)
        except AirflowException as exc:
            return SparkSubmission(command, False, str(exc))
        finally:
            self._spark_hook = None
        return SparkSubmission(command, True)

    def on_kill(self) -> None:
        """Stop a running ``spark-submit`` (the task was killed)."""
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
