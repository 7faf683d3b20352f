"""Shared plumbing of the Spark entry scripts: session, logging and the one-line JSON result."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.spark_submit import RESULT_PREFIX

# PySpark warns on import that it does not fully support pandas 3; our jobs use no pandas API, and the
# warning would be the first line of every task log. Installed before any pyspark import.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

# The variables S3Storage reads (credentials, endpoint): forwarded from the driver to the executors.
STORAGE_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
)


# Test-only: the path of a marker file. The first task to reach a kill point (after it wrote or deleted
# files, with the instant inflight) creates the marker and SIGKILLs the whole spark-submit (JVM, driver,
# Python workers), as a lost machine would; a later run finds the marker and goes on. This lets the
# Airflow retry tests kill a real job mid-way instead of simulating the failure in process.
KILL_ONCE_ENV = "LAKE_TEST_KILL_JOB_ONCE"


@dataclass(frozen=True)
class KillSwitch:
    """Driver side facts a task needs to kill its whole job: the marker, the driver's and JVM's pids."""

    marker: str
    driver_pid: int
    jvm_pid: int


def kill_switch() -> KillSwitch | None:
    """The test-only kill switch (``LAKE_TEST_KILL_JOB_ONCE``), read on the driver; ``None`` when unset.

    ``spark-submit`` execs the JVM, which starts this Python driver: the driver's parent is the JVM.
    """
    marker = os.environ.get(KILL_ONCE_ENV)
    return KillSwitch(marker, os.getpid(), os.getppid()) if marker else None


def _process_tree(root: int) -> list[int]:
    """``root`` and every process below it, parents first (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue  # exited meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        queue.extend(children.get(pid, ()))
    return tree


def kill_point(switch: KillSwitch | None) -> None:
    """Task side: the first task to get here with the switch set SIGKILLs the whole job (once)."""
    if switch is None:
        return
    try:
        os.close(os.open(switch.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # the job was killed once already: this is the retry
    me = os.getpid()
    os.kill(switch.driver_pid, signal.SIGKILL)
    for _ in range(2):  # twice: a process forked while the first pass ran is caught by the second
        for pid in _process_tree(switch.jvm_pid):
            if pid != me:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    os.kill(me, signal.SIGKILL)


def build_spark_session(
    app_name: str, task_threads_env: tuple[str, ...] = (), worker_env: Mapping[str, str] | None = None
) -> Any:
    """The session ``spark-submit`` configured (master, conf); progress bars off for batch use.

    ``task_threads_env`` names environment variables that cap a library's thread pool in the Python
    workers; each is set to ``spark.task.cpus`` unless the submitter set it. ``worker_env`` adds
    environment variables for the executors (and so their Python workers), again unless set.
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf()
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    defaults = {name: conf.get("spark.task.cpus", "1") for name in task_threads_env} | dict(worker_env or {})
    for name, value in defaults.items():
        key = f"spark.executorEnv.{name}"
        if not conf.contains(key):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def option_values(pairs: Sequence[str], error: Callable[[str], BaseException] = SystemExit) -> dict[str, str]:
    """``--option k=v`` pairs as a dict, an unknown ``hoodie.``/``lake.`` key refused (``ConfigError``)."""
    from airflow_lake_provider.lake.config import check_options

    options = key_values(pairs, error)
    check_options(options)
    return options


def key_values(pairs: Sequence[str], error: Callable[[str], BaseException] = SystemExit) -> dict[str, str]:
    """``--option k=v`` pairs as a dict; a pair without ``=`` or a key raises ``error``."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise error(f"--option {pair!r} is not k=v")
        options[key.strip()] = value.strip()
    return options


def setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connection INFO lines are not progress


def emit_result(result: dict[str, Any]) -> None:
    """Print the job's result as one JSON line (the hook reads the last line with this prefix)."""
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)


def run_job(
    app_name: str,
    argv: Sequence[str],
    parse_args: Callable[[Sequence[str]], argparse.Namespace],
    run: Callable[[argparse.Namespace, Any], dict[str, Any]],
    task_threads_env: tuple[str, ...] = (),
    worker_env: Mapping[str, str] | None = None,
) -> int:
    """The common ``main``: parse, start the session, run, print the result line; a ``LakeError``
    becomes outcome FAILED with exit status 1."""
    setup_logging()
    args = parse_args(argv)
    # S3 settings reach the driver in its environment (from the lake connection); its executors get
    # them as spark.executorEnv.* set here in-process, never on the spark-submit command line.
    storage_env = {name: os.environ[name] for name in STORAGE_ENV if os.environ.get(name)}
    spark = build_spark_session(app_name, task_threads_env, {**storage_env, **(worker_env or {})})
    try:
        emit_result(run(args, spark))
    except LakeError as exc:
        emit_result({"outcome": "FAILED", "error": str(exc)})
        return 1
    finally:
        spark.stop()
    return 0
