"""``docker-compose.yaml`` and its ``Dockerfile``, checked without a Docker engine: the Compose
Specification's JSON schema (``tests/data/compose-spec.json``), then our own rules: every service
is health-checked or is a one-shot others wait for, every dependency has a condition, no secret is
written in the file (they come from ``.env``), images are pinned."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

AIRFLOW = {"airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
ONE_SHOTS = {"airflow-init", "bucket-init"}
SERVICES = AIRFLOW | ONE_SHOTS | {"postgres", "minio", "spark-master", "spark-worker"}
VARIABLE = re.compile(r"(?<!\$)\$\{([A-Z0-9_]+)(?::?[-?][^}]*)?\}")
# Environment names whose values are secrets: they may only be ${VARIABLE} references.
SECRET_NAME = re.compile(r"PASSWORD|SECRET|ACCESS_KEY|FERNET|TOKEN")


@pytest.fixture(scope="module")
def compose(repo_root: Path) -> dict[str, Any]:
    return yaml.safe_load((repo_root / "docker-compose.yaml").read_text())


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_file_is_valid_under_the_compose_specification(repo_root: Path, compose: dict[str, Any]) -> None:
    import jsonschema

    schema = json.loads((repo_root / "tests" / "data" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    assert set(compose["services"]) == SERVICES


def test_every_service_is_health_checked_or_a_one_shot_others_wait_for(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        if name in ONE_SHOTS:
            assert service.get("restart") == "no" and "healthcheck" not in service, name
        else:
            check = service.get("healthcheck") or {}
            assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
    waited_on = {
        dep: spec["condition"]
        for service in services.values()
        for dep, spec in (service.get("depends_on") or {}).items()
    }
    assert ONE_SHOTS <= set(waited_on)
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on without conditions"
        for dep, spec in depends.items():
            assert dep in services, f"{name} depends on unknown {dep}"
            expected = "service_completed_successfully" if dep in ONE_SHOTS else "service_healthy"
            assert spec.get("condition") == expected, f"{name} -> {dep}: {spec}"
    # The Airflow processes start only on a migrated DB, an existing bucket and a healthy PostgreSQL.
    for name in AIRFLOW:
        assert {"postgres", "airflow-init", "bucket-init"} <= set(services[name]["depends_on"]), name


def test_no_secret_is_written_in_the_file(repo_root: Path, compose: dict[str, Any]) -> None:
    text = (repo_root / "docker-compose.yaml").read_text()
    example = dict(
        line.split("=", 1)
        for line in (repo_root / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    used = set(VARIABLE.findall(text))
    assert used == set(example), "every ${VAR} of the file is in .env.example and nothing else"
    for value in example.values():
        assert value not in text
    for name, service in compose["services"].items():
        for key, value in _environment(service).items():
            if SECRET_NAME.search(key) and not key.endswith("_FILE"):  # a _FILE is a path
                assert VARIABLE.fullmatch(value), f"{name}: {key} is not a ${{VARIABLE}} from .env"
            elif key.startswith("AIRFLOW_CONN_"):
                conn = json.loads(value)
                for field in ("login", "password"):
                    assert field not in conn or VARIABLE.fullmatch(conn[field]), f"{name}: {key}.{field}"
            elif "://" in value and "@" in value:  # a URL with credentials: user:${PASSWORD}@host
                userinfo = value.split("://", 1)[1].split("@", 1)[0]
                assert ":" not in userinfo or VARIABLE.fullmatch(userinfo.split(":", 1)[1]), f"{name}: {key}"
    assert ".env" in (repo_root / ".gitignore").read_text().splitlines()
    assert not (repo_root / ".env").exists() or ".env" not in _tracked(repo_root)


def _tracked(repo_root: Path) -> set[str]:
    import subprocess

    done = subprocess.run(["git", "ls-files"], cwd=repo_root, capture_output=True, text=True, check=False)
    return set(done.stdout.splitlines())


def test_images_are_pinned_and_ours_is_built_from_the_dockerfile(
    repo_root: Path, compose: dict[str, Any]
) -> None:
    version = re.search(r'^version = "([^"]+)"', (repo_root / "pyproject.toml").read_text(), re.M)
    assert version is not None
    for name, service in compose["services"].items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest" and re.search(r"\d", tag), (
            f"{name}: {image} is not pinned"
        )
        if "build" in service:
            assert image == f"airflow-lake-provider:{version.group(1)}"
            assert service["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    dockerfile = (repo_root / "Dockerfile").read_text()
    base = re.search(r"^FROM (\S+)", dockerfile, re.M)
    assert base is not None and re.fullmatch(r"[\w./-]+:\d[\w.-]*", base.group(1)), base
    assert "-c constraints.txt '.[spark,s3]'" in dockerfile  # with its extras, pinned like make install


def test_airflow_gets_the_dags_folder_and_its_connections(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in AIRFLOW:
        service = services[name]
        assert "./dags:/opt/airflow/dags:ro" in service["volumes"], name
        env = _environment(service)
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://airflow:")
        spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert (spark["conn_type"], spark["host"], spark["port"]) == ("spark", "spark://spark-master", 7077)
        lake = json.loads(env["AIRFLOW_CONN_LAKE_DEFAULT"])
        assert lake["conn_type"] == "lake" and lake["extra"]["endpoint"] == "http://minio:9000"
        assert env["LAKE_EXAMPLES_ROOT"] == "s3://lake/examples" == lake["extra"]["base_path"]
    assert "8080:8080" in services["airflow-api-server"]["ports"][0]
    assert "store/lake" in " ".join(services["bucket-init"]["command"])


def test_the_spark_worker_runs_as_our_user_with_a_writable_work_dir(
    repo_root: Path, compose: dict[str, Any]
) -> None:
    """The image runs as the unprivileged user ``airflow`` and pyspark's SPARK_HOME lies in the
    root-owned site-packages: a worker without ``--work-dir`` exits at start ("Failed to create
    work directory" under SPARK_HOME/work)."""
    dockerfile = (repo_root / "Dockerfile").read_text()
    assert re.search(r"^USER airflow$", dockerfile, re.M)
    command = compose["services"]["spark-worker"]["command"]
    assert "--work-dir" in command
    work_dir = command[command.index("--work-dir") + 1]
    assert work_dir.startswith("/tmp/"), work_dir
    # The scheduler runs the Spark drivers: it starts once a worker has registered to run executors.
    assert compose["services"]["airflow-scheduler"]["depends_on"]["spark-worker"] == {
        "condition": "service_healthy"
    }


def test_java_home_is_the_same_on_amd64_and_arm64(repo_root: Path) -> None:
    """Debian's JDK folder names the architecture (java-17-openjdk-amd64 or -arm64): a hard-coded
    one breaks spark-submit on the other (Apple silicon), so the image links an arch-free name."""
    dockerfile = (repo_root / "Dockerfile").read_text()
    java_home = re.search(r"JAVA_HOME=(\S+)", dockerfile)
    assert java_home is not None
    assert not re.search(r"amd64|arm64|aarch64|x86_64", java_home.group(1)), java_home.group(1)
    assert "ln -s" in dockerfile and java_home.group(1) in dockerfile.split("ENV", 1)[0]


def test_links_use_the_published_url_and_tasks_the_internal_execution_api(compose: dict[str, Any]) -> None:
    """``[api] base_url`` is what a browser opens (task log links, redirects): the published port on
    localhost, not the service name only other containers resolve. Tasks reach the Execution API
    through ``execution_api_server_url``, set explicitly to the api-server service."""
    services = compose["services"]
    published = services["airflow-api-server"]["ports"][0]  # 127.0.0.1:HOST:CONTAINER
    _, host_port, container_port = published.split(":")
    for name in AIRFLOW | {"airflow-init"}:
        env = _environment(services[name])
        assert env["AIRFLOW__API__BASE_URL"] == f"http://localhost:{host_port}", name
        assert env["AIRFLOW__API__PORT"] == container_port
        assert (
            env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
            == f"http://airflow-api-server:{container_port}/execution/"
        ), name


def test_every_airflow_component_shares_the_secrets_and_the_database(compose: dict[str, Any]) -> None:
    """The JWT secret signs what the api-server, scheduler and triggerer exchange; the Fernet key
    decrypts connections: components with different values fail with 403s or InvalidToken."""
    shared = (
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
    )
    values = {
        name: tuple(_environment(compose["services"][name]).get(key) for key in shared)
        for name in AIRFLOW | {"airflow-init"}
    }
    assert len(set(values.values())) == 1 and None not in next(iter(values.values())), values


def test_job_healthchecks_ask_for_this_container_s_own_job(compose: dict[str, Any]) -> None:
    """``airflow jobs check --local`` matches the hostname the job recorded (Airflow's own
    hostname_callable); ``--hostname $HOSTNAME`` can differ from it (getfqdn in a compose network)."""
    jobs = {
        "airflow-scheduler": "SchedulerJob",
        "airflow-dag-processor": "DagProcessorJob",
        "airflow-triggerer": "TriggererJob",
    }
    for name, job in jobs.items():
        test = compose["services"][name]["healthcheck"]["test"]
        assert test == ["CMD", "airflow", "jobs", "check", "--job-type", job, "--local"], name


def test_healthchecks_call_tools_their_images_have(repo_root: Path, compose: dict[str, Any]) -> None:
    ours = set(re.findall(r"apt-get install[^\n]*", (repo_root / "Dockerfile").read_text())[0].split())
    for name, service in compose["services"].items():
        test = (service.get("healthcheck") or {}).get("test")
        if not test:
            continue
        tool = test[1].split()[0]
        if "build" in service:
            assert tool in ours | {"airflow"}, (name, tool)
        else:
            image = service["image"].split(":")[0]
            assert (image, tool) in {("postgres", "pg_isready"), ("minio/minio", "mc")}, (name, tool)


def test_the_build_context_leaves_out_the_venv_and_the_secrets(repo_root: Path) -> None:
    """Without a .dockerignore, ``docker compose build`` sends the repository's .venv (gigabytes),
    .git and .env (the secrets) to the engine."""
    ignored = {
        line.strip().rstrip("/")
        for line in (repo_root / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git", ".env", "mutants"} <= ignored
    dockerfile = (repo_root / "Dockerfile").read_text()
    for copied in re.findall(r"^COPY (.+) \S+$", dockerfile, re.M):
        for source in copied.split():
            assert source not in ignored and (repo_root / source).exists(), source


def test_spark_processes_advertise_names_the_other_containers_resolve(compose: dict[str, Any]) -> None:
    """Executors connect to the driver (in the scheduler) and the driver to executors (in the
    worker) by the host names they advertise: a container's default hostname is its id, which the
    compose network's DNS need not resolve. Each advertises its service name."""
    services = compose["services"]
    for name in ("airflow-scheduler", "spark-worker"):
        assert services[name].get("hostname") == name, name
    master, worker = services["spark-master"]["command"], services["spark-worker"]["command"]
    assert master[master.index("--host") + 1] == "spark-master"
    assert worker[worker.index("--host") + 1] == "spark-worker"
    assert worker[-1] == "spark://spark-master:7077"


def test_init_refuses_the_example_s_placeholder_fernet_key_before_migrating(compose: dict[str, Any]) -> None:
    """``change-me-fernet-key`` (from .env.example) is no Fernet key: Airflow would start and fail
    only when it first encrypts a connection or variable. The one-shot init checks it first."""
    script = " ".join(compose["services"]["airflow-init"]["command"])
    check = script.index('Fernet(os.environ["AIRFLOW__CORE__FERNET_KEY"]')
    assert check < script.index("airflow db migrate")
