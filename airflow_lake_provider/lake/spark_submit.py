"""Running a job script of ``airflow_lake_provider/spark_jobs/`` with ``spark-submit`` (a subprocess:
the core never imports Spark)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from airflow_lake_provider.lake.errors import LakeError

log = logging.getLogger(__name__)
RESULT_PREFIX = "LAKE_RESULT "

# The JVMs of our jobs only schedule tasks and relay small results; merges and listings run in the
# Python workers. With the default collector and both JIT tiers the JVM took up to a core while a
# compaction's tasks ran, slowing local[2] by ~25% on 2 vCPUs (benchmarks/compaction.py). The serial
# collector and the C1 compiler alone keep it out of the workers' way.
LIGHT_JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
DEFAULT_JOB_CONF = {
    "spark.log.level": "WARN",  # Spark's INFO start-up chatter drowns the job's own progress lines
    # JVM <-> Python worker over a Unix socket: a trivial task took 65-75 ms over loopback TCP,
    # 28-38 ms over a Unix socket (PySpark 4.3; a Spark without the setting ignores the key).
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.driver.extraJavaOptions": LIGHT_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": LIGHT_JVM_OPTIONS,
}


class SparkJobError(LakeError):
    """``spark-submit`` could not run the job, or the job reported no result."""


# The job scripts ship inside the provider package (``airflow_lake_provider/spark_jobs/``), found by
# path: the core does not import them (they import PySpark).
JOBS_DIR = Path(__file__).resolve().parent.parent / "spark_jobs"


def job_script(name: str) -> Path:
    """The path of ``airflow_lake_provider/spark_jobs/<name>`` in this installation."""
    path = JOBS_DIR / name
    if not path.is_file():
        raise SparkJobError(f"no Spark job script {path}")
    return path


_CORE_ZIP: Path | None = None


def core_zip() -> Path:
    """A zip of the table core and the job scripts, for ``--py-files`` (built once per process).

    Executors on a cluster import ``airflow_lake_provider.lake`` and ``.spark_jobs`` from it instead of
    needing this package installed: the core needs only pyarrow, fastavro, polars and obstore there.
    The Airflow layer is left out (executors never import it).
    """
    global _CORE_ZIP
    if _CORE_ZIP is not None and _CORE_ZIP.is_file():
        return _CORE_ZIP
    import tempfile
    import zipfile

    package = JOBS_DIR.parent
    target = Path(tempfile.mkdtemp(prefix="lake-py-files-")) / "lake-core.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(package / "__init__.py", "airflow_lake_provider/__init__.py")
        for path in sorted((package / "lake").rglob("*")):
            if path.suffix in (".py", ".avsc") and "__pycache__" not in path.parts:
                archive.write(path, f"airflow_lake_provider/{path.relative_to(package).as_posix()}")
        for path in sorted(JOBS_DIR.glob("*.py")):
            archive.write(path, f"airflow_lake_provider/spark_jobs/{path.name}")
    _CORE_ZIP = target
    return target


def spark_submit_binary() -> str:
    """``spark-submit`` of this interpreter's environment first (pip's pyspark ships it), else PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if not found:
        raise SparkJobError(
            "spark-submit was not found beside the Python interpreter or on PATH: "
            "pip install 'airflow-lake-provider[spark]' (pyspark ships it), or put the cluster's on PATH"
        )
    return found


def parse_result(output: str) -> dict[str, Any] | None:
    """The last result line a job printed, or ``None``."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            loaded = json.loads(line[len(RESULT_PREFIX) :])
            return loaded if isinstance(loaded, dict) else None
    return None


def job_conf(conf: Mapping[str, Any] | None = None) -> dict[str, str]:
    """``--conf`` values for one of our jobs: the caller's, over :data:`DEFAULT_JOB_CONF`.

    The driver logs with ``spark_jobs/log4j2.properties`` (warnings only: ``spark.log.level`` takes
    effect only once the SparkContext is up, after Spark's INFO start-up lines). A caller's
    ``spark.driver.extraJavaOptions`` replaces ours whole (JVM options do not merge).
    """
    defaults = dict(DEFAULT_JOB_CONF)
    log_config = job_script("log4j2.properties")
    defaults["spark.driver.extraJavaOptions"] += f" -Dlog4j2.configurationFile=file:{log_config}"
    return {**defaults, **{str(k): str(v) for k, v in (conf or {}).items()}}


def submit(
    script: str,
    args: Sequence[str],
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``spark_jobs/<script>`` and return its JSON result.

    The job's stderr is logged line by line at info level (logger ``...spark_submit.<script stem>``),
    and its last lines again at error level when the job fails.
    """
    command = [spark_submit_binary(), "--master", master]
    for key, value in job_conf(conf).items():
        command += ["--conf", f"{key}={value}"]
    command += [str(job_script(script)), *args]
    run_env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    run_env["PATH"] = os.pathsep.join([bin_dir, run_env.get("PATH", "")])
    run_env.setdefault("PYSPARK_PYTHON", sys.executable)
    run_env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    run_env.update(env or {})
    log.info("running %s", " ".join(command))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env)
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    relay = threading.Thread(target=_relay_stderr, args=(proc.stderr, script, tail), daemon=True)
    relay.start()
    stdout = proc.stdout.read() if proc.stdout else ""
    returncode = proc.wait()
    relay.join()
    result = parse_result(stdout)
    if result is None or returncode != 0 or result.get("outcome") == "FAILED":
        # Spark's log was relayed at info level; a failed job repeats its end where errors are read.
        log.error(
            "spark job %s failed (exit %d); the last %d lines of its log:\n%s",
            script,
            returncode,
            len(tail),
            "\n".join(tail),
        )
    if result is None:
        raise SparkJobError(f"spark job {script} exited with {returncode} and printed no result")
    return result


# How much of a failed job's log is repeated at error level (the Java trace of a failure ends there).
STDERR_TAIL_LINES = 60


def _relay_stderr(stream: IO[str] | None, script: str, tail: deque[str]) -> None:
    """Log each line of the job's stderr (Spark's and the driver's log) at info level as it comes.

    Not at error level: in Airflow a child's raw stderr lands in the task log as errors, even when
    the job succeeds. ``submit`` repeats the tail at error level when the job fails.
    """
    if stream is None:
        return
    job_log = logging.getLogger(f"{__name__}.{Path(script).stem}")
    for raw in stream:
        line = raw.rstrip("\n")
        tail.append(line)
        job_log.info("%s", line)
