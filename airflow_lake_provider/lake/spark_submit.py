"""Running a ``spark_jobs`` script with ``spark-submit`` (a subprocess: the core never imports Spark)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_lake_provider.lake.errors import LakeError

log = logging.getLogger(__name__)
RESULT_PREFIX = "LAKE_RESULT "


class SparkJobError(LakeError):
    """``spark-submit`` could not run the job, or the job reported no result."""


def job_script(name: str) -> Path:
    """The path of ``spark_jobs/<name>`` in this installation."""
    import spark_jobs

    path = Path(spark_jobs.__file__).resolve().parent / name
    if not path.is_file():
        raise SparkJobError(f"no Spark job script {path}")
    return path


def spark_submit_binary() -> str:
    """``spark-submit`` of this interpreter's environment first (pip's pyspark ships it), else PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if not found:
        raise SparkJobError("spark-submit was not found beside the Python interpreter or on PATH")
    return found


def parse_result(output: str) -> dict[str, Any] | None:
    """The last result line a job printed, or ``None``."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            loaded = json.loads(line[len(RESULT_PREFIX) :])
            return loaded if isinstance(loaded, dict) else None
    return None


def submit(
    script: str,
    args: Sequence[str],
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``spark_jobs/<script>`` and return its JSON result; the job's log goes to our stderr."""
    command = [spark_submit_binary(), "--master", master]
    # Spark's INFO start-up chatter drowns the job's own progress lines.
    for key, value in {"spark.log.level": "WARN", **(conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    command += [str(job_script(script)), *args]
    run_env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    run_env["PATH"] = os.pathsep.join([bin_dir, run_env.get("PATH", "")])
    run_env.setdefault("PYSPARK_PYTHON", sys.executable)
    run_env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    run_env.update(env or {})
    log.info("running %s", " ".join(command))
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=None, text=True, env=run_env, check=False)
    result = parse_result(proc.stdout)
    if result is None:
        raise SparkJobError(f"spark job {script} exited with {proc.returncode} and printed no result")
    return result
