"""Shared plumbing of the Spark entry scripts: session, logging and the one-line JSON result."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from airflow_lake_provider.lake.spark_submit import RESULT_PREFIX


def build_spark_session(app_name: str, task_threads_env: tuple[str, ...] = ()) -> Any:
    """The session ``spark-submit`` configured (master, conf); progress bars off for batch use.

    ``task_threads_env`` names environment variables that cap a library's thread pool in the Python
    workers; each is set to ``spark.task.cpus`` unless the submitter set it.
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf()
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    for name in task_threads_env:
        key = f"spark.executorEnv.{name}"
        if not conf.contains(key):
            builder = builder.config(key, conf.get("spark.task.cpus", "1"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def emit_result(result: dict[str, Any]) -> None:
    """Print the job's result as one JSON line (the hook reads the last line with this prefix)."""
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)
