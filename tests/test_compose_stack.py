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
    assert "-c constraints.txt ." in dockerfile  # the package, pinned like `make install`


def test_airflow_gets_the_dags_folder_and_its_connections(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in AIRFLOW:
        service = services[name]
        assert "./dags:/opt/airflow/dags:ro" in service["volumes"], name
        env = _environment(service)
        assert env["AIRFLOW__API__BASE_URL"] == "http://airflow-api-server:8080"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://airflow:")
        spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert (spark["conn_type"], spark["host"], spark["port"]) == ("spark", "spark://spark-master", 7077)
        lake = json.loads(env["AIRFLOW_CONN_LAKE_DEFAULT"])
        assert lake["conn_type"] == "lake" and lake["extra"]["endpoint"] == "http://minio:9000"
        assert env["LAKE_EXAMPLES_ROOT"] == "s3://lake/examples" == lake["extra"]["base_path"]
    assert "8080:8080" in services["airflow-api-server"]["ports"][0]
    assert "store/lake" in " ".join(services["bucket-init"]["command"])
