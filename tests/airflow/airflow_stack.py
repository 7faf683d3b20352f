"""A real Airflow on 127.0.0.1 for tests: a throwaway PostgreSQL cluster (SQLite where PostgreSQL
cannot run), ``airflow db migrate``, then Airflow's own processes (api-server, scheduler,
dag-processor, triggerer) with the repository's ``dags/`` and a Spark connection to local mode.

Every process is started in its own session and stopped by its PID (its process group); PostgreSQL
is stopped with ``pg_ctl`` on its data folder (the postmaster's PID file).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AIRFLOW_PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")
USER = "admin"


def _q(run_id: str) -> str:
    """A run id (``manual__2026-...+00:00``) as one path segment."""
    return urllib.parse.quote(run_id, safe="")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


class Postgres:
    """A PostgreSQL cluster under a temporary folder, listening on 127.0.0.1 only.

    PostgreSQL refuses to run as root: as root, its commands run as the ``postgres`` user (made by
    Debian's package) through ``runuser``.
    """

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="lake-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.started = False

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    def start(self) -> str:
        """Start the cluster and create the ``airflow`` database; returns the SQLAlchemy URL."""
        initdb, pg_ctl = _pg_tool("initdb"), _pg_tool("pg_ctl")
        if not initdb or not pg_ctl:
            raise RuntimeError("initdb/pg_ctl not found (apt-get install postgresql)")
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                raise RuntimeError("running as root without runuser")
            os.chmod(self.folder, 0o755)
            shutil.chown(self.folder, "postgres", "postgres")
        done = self._run(
            initdb, "-D", str(self.data), "-U", "airflow", "-A", "trust", "-E", "UTF8", "--no-sync"
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-500:]}")
        options = f"-h 127.0.0.1 -p {self.port} -k {self.folder} -F"  # -F: no fsync, a throwaway DB
        done = self._run(
            pg_ctl, "-D", str(self.data), "-l", str(self.folder / "server.log"), "-o", options, "-w", "start"
        )
        if done.returncode != 0:
            log = (self.folder / "server.log").read_text(errors="replace")[-1000:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")
        self.started = True
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=airflow dbname=postgres", autocommit=True
        ) as c:
            c.execute("CREATE DATABASE airflow")
        return f"postgresql+psycopg://airflow@127.0.0.1:{self.port}/airflow"

    def stop(self) -> None:
        if self.started:
            self._run(_pg_tool("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            self.started = False
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class AirflowStack:
    """A running Airflow: its URL, the admin's password, its home and the processes' logs."""

    home: Path
    url: str
    password: str
    database: str  # "postgresql" or "sqlite"
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # -- REST API (/api/v2), authenticated as the UI is: a JWT from the simple auth manager ---------
    def token(self) -> str:
        body = json.dumps({"username": USER, "password": self.password}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(json.loads(response.read())["access_token"])

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v2{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token or self.token()}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> None:
        """Wait until the DAG is listed, then unpause it (new DAGs start paused, as by default)."""
        token, deadline = self.token(), time.monotonic() + timeout
        while True:
            try:
                self.api("GET", f"/dags/{dag_id}", token=token)
                self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False}, token=token)
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise AssertionError(f"DAG {dag_id} not listed after {timeout} s\n{self.logs()}") from exc
            time.sleep(2)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti["state"] for ti in tis}

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 420) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.api("GET", f"/dags/{dag_id}/dagRuns/{_q(run_id)}")["state"]
            if state in ("success", "failed"):
                return str(state)
            time.sleep(3)
        raise AssertionError(
            f"run {run_id} of {dag_id} not finished after {timeout} s: "
            f"{self.task_states(dag_id, run_id)}\n{self.logs()}"
        )

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        path = f"/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances/{task_id}/xcomEntries/return_value"
        return self.api("GET", path)["value"]

    def logs(self, lines: int = 25) -> str:
        """The tail of each process' log, for failure messages."""
        out = []
        for name in AIRFLOW_PROCESSES:
            path = self.home / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name}.log (last {lines} lines)\n" + "\n".join(tail))
        return "\n".join(out)


def _environment(home: Path, repo: Path, sql_conn: str, port: int, lake_root: Path) -> dict[str, str]:
    venv_bin = sysconfig.get_path("scripts")
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_conn,
            # Airflow would derive an asyncpg URL for its async engine: psycopg does both.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": sql_conn.replace("sqlite://", "sqlite+aiosqlite://"),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(repo / "dags"),
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            # Tasks reach the Execution API through this URL: without it they hang in queued.
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": os.pathsep.join([venv_bin, env.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            # The example DAGs' tables (their params' defaults) go under the test's folder.
            "LAKE_EXAMPLES_ROOT": str(lake_root),
            "LAKE_EXAMPLES_STAGING": str(lake_root.parent / "staging"),
            "LAKE_EXAMPLES_METASTORE": str(lake_root.parent / "metastore"),
        }
    )
    return env


def _stop(process: subprocess.Popen[bytes], grace: float = 20) -> None:
    """SIGTERM to the process' group (its PID: it leads its own session), then SIGKILL."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@contextlib.contextmanager
def running_airflow(repo: Path, folder: Path) -> Iterator[AirflowStack]:
    """Start PostgreSQL (or SQLite) and Airflow's four processes; stop everything afterwards."""
    home = folder / "airflow-home"
    home.mkdir(parents=True)
    postgres = Postgres()
    try:
        try:
            sql_conn, database = postgres.start(), "postgresql"
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"PostgreSQL cannot run here ({exc}); falling back to SQLite", file=sys.stderr)
            sql_conn, database = f"sqlite:///{home / 'airflow.db'}", "sqlite"
        port = free_port()
        password = secrets.token_urlsafe(12)
        (home / "passwords.json").write_text(json.dumps({USER: password}))
        env = _environment(home, repo, sql_conn, port, folder / "lake")
        airflow = str(Path(sysconfig.get_path("scripts")) / "airflow")
        migrated = subprocess.run(
            [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        if migrated.returncode != 0:
            raise RuntimeError(
                f"airflow db migrate failed:\n{migrated.stdout[-2000:]}\n{migrated.stderr[-2000:]}"
            )
        stack = AirflowStack(
            home=home, url=f"http://127.0.0.1:{port}", password=password, database=database, env=env
        )
        try:
            for name in AIRFLOW_PROCESSES:
                with open(home / f"{name}.log", "wb") as log:
                    stack.processes[name] = subprocess.Popen(
                        [airflow, name],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
            _wait_healthy(stack)
            yield stack
        finally:
            for process in stack.processes.values():
                _stop(process)
    finally:
        postgres.stop()


def _wait_healthy(stack: AirflowStack, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = {n: p.returncode for n, p in stack.processes.items() if p.poll() is not None}
        if dead:
            raise RuntimeError(f"Airflow processes exited: {dead}\n{stack.logs()}")
        try:
            with urllib.request.urlopen(f"{stack.url}/api/v2/monitor/health", timeout=5) as response:
                health = json.loads(response.read())
            if all(
                health.get(part, {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
            ):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            pass
        time.sleep(2)
    raise RuntimeError(f"Airflow not healthy after {timeout} s\n{stack.logs()}")
