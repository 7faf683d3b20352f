"""Test-wide set-up: environment for Airflow and Spark, Hypothesis profiles, shared fixtures.

The environment block at the top runs when pytest loads this file, before any test module (and so
before any ``import airflow``): Airflow reads ``AIRFLOW_HOME`` and its configuration once, at import.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "tests" / "data"  # test data lives in the repository (tests/data/README.md)
HUDI_TABLES = DATA_DIR / "hudi-tables"
HUDI_TABLES_1X = DATA_DIR / "hudi-tables-1x"  # table versions 8 and 9 (tests/data/hudi-tables-1x/README.md)

# --- Environment, before any Airflow import ---------------------------------------------------------
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="lake-airflow-home-"))
_VENV_BIN = sysconfig.get_path("scripts")  # the running interpreter's bin/ (the venv's, under make)

os.environ.update(
    {
        # A fresh home per session: its SQLite metadata DB, airflow.cfg and task logs.
        "AIRFLOW_HOME": str(_AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        # Not Airflow's unit-test mode: it loads airflow's own unit_tests.cfg (Airflow's test DAGs
        # folder, load_examples=True, ...), which is meant for Airflow's own test suite.
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        # local[2] must be JSON (or URI-encoded): an unencoded "local[2]" falls back to --master yarn.
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # spark-submit and the airflow CLI are looked up on PATH: use this venv's.
        "PATH": os.pathsep.join([_VENV_BIN, *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p)]),
    }
)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under mutmut (make mutation), run a mutant's tests fastest first: with -x the first failing test
    ends the run, so a killed mutant costs its fastest killer instead of whatever test came first.
    The durations are mutmut's own, from its first run (mutants/ is REPO_ROOT then)."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    import json

    stats = REPO_ROOT / "mutmut-stats.json"
    durations = json.loads(stats.read_text())["duration_by_test"] if stats.exists() else {}
    items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))


# --- Hypothesis profiles ----------------------------------------------------------------------------
# "ci": reproducible (derandomized, no example database) and with no per-example deadline, since a
# loaded 2-core CI machine makes timings noisy. "dev": random search with Hypothesis' defaults.
# HYPOTHESIS_PROFILE picks one explicitly; otherwise CI=true selects "ci".
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=50,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=100)
# "mutation" (make mutation): every mutant must meet the same examples, so a kill is reproducible.
settings.register_profile(
    "mutation",
    derandomize=True,
    deadline=None,
    max_examples=25,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
_IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _IN_CI else "dev"))


# --- Paths and data ---------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _fresh_default_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with a process clock that has handed out nothing.

    Tables opened without a clock share ``DEFAULT_CLOCK``, which never hands out a time at or before
    one it gave before (right for a process, which must keep its instants unique). Across tests it
    leaks: a test that put a 2099 instant on its own table would push every later test's instants
    past 2099. Only when the core is already imported (a fresh import has a fresh clock).
    """
    instant = sys.modules.get("airflow_lake_provider.lake.timeline.instant")
    if instant is not None:
        monkeypatch.setattr(instant.DEFAULT_CLOCK, "_last", None)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root (the folder holding pyproject.toml)."""
    return REPO_ROOT


@pytest.fixture
def hudi_table_zip(tmp_path: Path) -> Callable[[str], Path]:
    """Factory: ``hudi_table_zip("cow_v6_nonpartitioned")`` unzips that table and returns its dir
    (from ``hudi-tables/``, or ``hudi-tables-1x/`` for the v8/v9 tables).

    Each zip holds one top-level table directory, and COW/MOR zips reuse the same inner names, so
    every table goes into its own ``tmp_path/<name>/`` folder. ``__MACOSX/`` entries are skipped.
    """

    def extract(name: str) -> Path:
        archive = HUDI_TABLES / f"{name.removesuffix('.zip')}.zip"
        if not archive.is_file():
            archive = HUDI_TABLES_1X / archive.name
        if not archive.is_file():
            raise FileNotFoundError(f"no such test table: {archive}")
        dest = tmp_path / archive.stem
        dest.mkdir()
        with zipfile.ZipFile(archive) as zf:
            for member in zf.infolist():
                parts = Path(member.filename).parts
                if not parts or parts[0] == "__MACOSX":
                    continue
                if member.filename.startswith("/") or ".." in parts:
                    raise ValueError(f"unsafe path in {archive.name}: {member.filename}")
                zf.extract(member, dest)
        tops = [p for p in dest.iterdir() if p.is_dir()]
        if len(tops) != 1:
            raise ValueError(f"{archive.name} should hold one top-level directory, found {tops}")
        return tops[0]

    return extract


# --- Spark ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One local[2] SparkSession for the whole test process (the JVM start takes 10-20 s).

    Hive support with an embedded Derby metastore; warehouse and Derby home live under tmp.
    """
    from pyspark.sql import SparkSession

    base = tmp_path_factory.mktemp("spark")
    derby_home = base / "derby"
    derby_home.mkdir()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("airflow-lake-provider-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.warehouse.dir", str(base / "warehouse"))
        .config("spark.local.dir", str(base / "local"))
        # Hive's default metastore URL names a relative "metastore_db": Derby puts it (and
        # derby.log) under derby.system.home instead of the working directory.
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={derby_home}")
        .enableHiveSupport()
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after
    # pytest has closed the streams its handlers write to ("--- Logging error ---").
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        yield session
    finally:
        from py4j.protocol import Py4JNetworkError

        try:
            session.stop()
        except (Py4JNetworkError, ConnectionRefusedError):
            # The JVM closed the connection before answering "stop" (seen once at the end of a
            # session on Airflow 3.3.2): it is gone, which is all that stop() is for.
            pass


# --- Airflow ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Create the SQLite metadata DB in this session's AIRFLOW_HOME (about 5-7 s); returns its path.

    ``dag.test()`` needs the tables but does not create them. ``airflow.utils.db.initdb()`` builds
    them from the ORM models on an empty DB (``resetdb()`` would drop and re-create them).
    """
    from airflow.utils.db import initdb

    initdb()
    return _AIRFLOW_HOME / "airflow.db"


# --- S3: a real S3 HTTP API on 127.0.0.1 (moto's server) ------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of one moto S3 server for the whole session (started on first use)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # its per-request log lines
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty bucket, with the AWS variables of this process pointing at the server."""
    import uuid

    from s3_helpers import s3_client, s3_environ

    for name, value in s3_environ(s3_endpoint).items():
        monkeypatch.setenv(name, value)
    bucket = f"lake-{uuid.uuid4().hex[:16]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture
def refusing_s3_endpoint() -> Iterator[str]:
    """An S3 endpoint that answers every request 403 InvalidAccessKeyId (wrong credentials)."""
    import http.server
    import threading

    from s3_helpers import RefusingS3Handler

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RefusingS3Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
