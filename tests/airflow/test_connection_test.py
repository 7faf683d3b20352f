"""``airflow connections test`` on a ``lake`` connection (it lists the base path), and the S3
credentials a connection may carry: a key pair with a session token, or no keys at all (the worker's
environment, or a role served by a credentials endpoint)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_helpers import S3_KEYS, s3_client

from airflow_lake_provider.hooks.errors import LakeConfigError
from airflow_lake_provider.hooks.lake import LakeHook

pytestmark = pytest.mark.airflow

AWS_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)
SECRET = S3_KEYS["AWS_SECRET_ACCESS_KEY"]
TOKEN = "lake-test-session-token"


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: object) -> LakeHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "lake", **fields}))
    return LakeHook(lake_conn_id=conn_id)


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS_VARS:
        monkeypatch.delenv(name, raising=False)


def _s3_extra(endpoint: str, base_path: str, **more: object) -> dict[str, object]:
    return {"base_path": base_path, "endpoint": endpoint, "region": "us-east-1", "allow_http": True, **more}


# -- local base paths ----------------------------------------------------------------------------
def test_a_local_base_path_is_listed_and_a_missing_one_or_none_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "trips").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    hook = _connection(monkeypatch, "lake_local", extra={"base_path": str(tmp_path)})
    assert hook.test_connection() == (True, f"listed base_path {tmp_path}: 1 folders, 1 files")

    missing = tmp_path / "nowhere"
    hook = _connection(monkeypatch, "lake_missing", extra={"base_path": str(missing)})
    assert hook.test_connection() == (False, f"base_path {missing} does not exist")

    hook = _connection(monkeypatch, "lake_bare")
    assert hook.test_connection() == (
        False,
        "lake connection 'lake_bare' has no base_path to list: set its extra base_path to an "
        "absolute folder or s3://bucket/prefix",
    )
    hook = _connection(monkeypatch, "lake_relative", extra={"base_path": "lake"})
    ok, message = hook.test_connection()
    assert not ok and message.startswith(
        "cannot list base_path lake: the lake connection's base_path 'lake' is relative"
    )


def test_a_file_uri_base_path_is_the_folder_it_names_and_a_file_is_no_base_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locations may be file: URIs everywhere (docs/cli.md); a base path must be a folder."""
    (tmp_path / "trips").mkdir()
    for i, uri in enumerate((f"file://{tmp_path}", f"file:{tmp_path}", f"file://localhost{tmp_path}/")):
        hook = _connection(monkeypatch, f"lake_uri{i}", extra={"base_path": uri})
        assert hook.test_connection() == (True, f"listed base_path {uri}: 1 folders, 0 files")
        assert hook.resolve_table_path("trips") == f"{tmp_path}/trips"
        assert hook.resolve_table_path(f"file://{tmp_path}/trips") == f"{tmp_path}/trips"
        with pytest.raises(LakeConfigError, match="lies outside the connection's base_path"):
            hook.resolve_table_path("/elsewhere")
    (tmp_path / "notes.txt").write_text("x")
    hook = _connection(monkeypatch, "lake_file", extra={"base_path": str(tmp_path / "notes.txt")})
    assert hook.test_connection() == (False, f"base_path {tmp_path / 'notes.txt'} is a file, not a folder")


def test_airflow_connections_test_succeeds_and_fails_with_the_reason(tmp_path: Path) -> None:
    """The real CLI (``[core] test_connection`` enabled), in a fresh process."""
    airflow = Path(sys.executable).parent / "airflow"
    env = {
        **os.environ,
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        "AIRFLOW_CONN_LAKE_HERE": json.dumps({"conn_type": "lake", "extra": {"base_path": str(tmp_path)}}),
        "AIRFLOW_CONN_LAKE_GONE": json.dumps(
            {"conn_type": "lake", "extra": {"base_path": str(tmp_path / "gone")}}
        ),
    }

    def cli(conn_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(airflow), "connections", "test", conn_id],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=180,
        )

    ok = cli("lake_here")
    assert ok.returncode == 0 and "Connection success!" in ok.stdout, ok.stdout + ok.stderr
    failed = cli("lake_gone")
    # Airflow 3.2.0's CLI exits 0 after a failed test; later releases exit 1.
    assert failed.returncode in (0, 1) and "Connection failed!" in failed.stdout, (
        failed.stdout + failed.stderr
    )
    assert "Connection success!" not in failed.stdout
    assert f"base_path {tmp_path / 'gone'} does not exist" in failed.stdout


# -- S3 ------------------------------------------------------------------------------------------
def test_an_s3_base_path_is_listed_with_the_connection_s_keys(
    s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, no_aws_env: None
) -> None:
    s3_client(s3_endpoint).put_object(Bucket=s3_bucket, Key="lake/trips/.hoodie/hoodie.properties", Body=b"")
    s3_client(s3_endpoint).put_object(Bucket=s3_bucket, Key="lake/readme", Body=b"hi")
    hook = _connection(
        monkeypatch,
        "lake_s3",
        login=S3_KEYS["AWS_ACCESS_KEY_ID"],
        password=SECRET,
        extra=_s3_extra(s3_endpoint, f"s3://{s3_bucket}/lake"),
    )
    assert hook.test_connection() == (True, f"listed base_path s3://{s3_bucket}/lake: 1 folders, 1 files")
    hook = _connection(
        monkeypatch,
        "lake_no_bucket",
        login=S3_KEYS["AWS_ACCESS_KEY_ID"],
        password=SECRET,
        extra=_s3_extra(s3_endpoint, "s3://no-such-bucket-here/lake"),
    )
    ok, message = hook.test_connection()
    assert not ok and message.startswith("cannot list base_path s3://no-such-bucket-here/lake: ")


def test_refused_credentials_fail_the_test_without_the_secret(
    refusing_s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, no_aws_env: None
) -> None:
    hook = _connection(
        monkeypatch,
        "lake_refused",
        login="AKIAWRONG",
        password=SECRET,
        extra=_s3_extra(refusing_s3_endpoint, "s3://bucket/lake", session_token=TOKEN),
    )
    ok, message = hook.test_connection()
    assert not ok and message.startswith("cannot list base_path s3://bucket/lake: ")
    assert SECRET not in message and TOKEN not in message


def test_a_session_token_goes_with_the_key_pair(
    s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, no_aws_env: None
) -> None:
    hook = _connection(
        monkeypatch,
        "lake_sts",
        login=S3_KEYS["AWS_ACCESS_KEY_ID"],
        password=SECRET,
        extra=_s3_extra(s3_endpoint, f"s3://{s3_bucket}", session_token=TOKEN),
    )
    assert hook.storage_env()["AWS_SESSION_TOKEN"] == TOKEN
    storage = hook.open_location(f"s3://{s3_bucket}")
    assert storage.store.config["session_token"] == TOKEN  # type: ignore[attr-defined]  # S3Storage
    assert hook.test_connection() == (True, f"listed base_path s3://{s3_bucket}: 0 folders, 0 files")
    # The form offers the field, masked.
    from airflow_lake_provider.provider_info import LAKE_CONNECTION_TYPE

    assert LAKE_CONNECTION_TYPE["conn-fields"]["session_token"]["schema"]["format"] == "password"


def test_no_keys_in_the_connection_uses_the_worker_s_environment(
    s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The s3_bucket fixture put moto's key pair in this process' environment; the connection has none."""
    hook = _connection(monkeypatch, "lake_env", extra=_s3_extra(s3_endpoint, f"s3://{s3_bucket}"))
    assert "AWS_ACCESS_KEY_ID" not in hook.storage_env()
    assert hook.test_connection() == (True, f"listed base_path s3://{s3_bucket}: 0 folders, 0 files")


@pytest.fixture
def credentials_endpoint() -> Iterator[tuple[str, list[str]]]:
    """A container credentials endpoint (as EKS Pod Identity serves a pod's role): temporary
    credentials for moto, and the (path, authorization token) of each request."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(f"{self.path} {self.headers.get('Authorization')}")
            body = json.dumps(
                {
                    "AccessKeyId": S3_KEYS["AWS_ACCESS_KEY_ID"],
                    "SecretAccessKey": SECRET,
                    "Token": TOKEN,
                    "Expiration": "2099-01-01T00:00:00Z",
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v2/credentials/lake", asked
    server.shutdown()
    server.server_close()


def test_no_keys_anywhere_uses_the_role_the_container_endpoint_serves(
    s3_endpoint: str,
    s3_bucket: str,
    credentials_endpoint: tuple[str, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    no_aws_env: None,
    tmp_path: Path,
) -> None:
    """EKS Pod Identity's variables in the worker, no key pair anywhere: the credentials come from
    the endpoint (asked with the pod's token), and moto accepts them."""
    uri, asked = credentials_endpoint
    (tmp_path / "pod-token").write_text("pod-identity-token")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri)
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(tmp_path / "pod-token"))
    s3_client(s3_endpoint).put_object(Bucket=s3_bucket, Key="t/x", Body=b"1")
    hook = _connection(monkeypatch, "lake_role", extra=_s3_extra(s3_endpoint, f"s3://{s3_bucket}"))
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(hook.storage_env())
    assert hook.test_connection() == (True, f"listed base_path s3://{s3_bucket}: 1 folders, 0 files")
    assert asked and set(asked) == {"/v2/credentials/lake pod-identity-token"}
