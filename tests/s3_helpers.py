"""S3 test helpers: the variables and options that point our code and hudi-rs at moto's server."""

from __future__ import annotations

import contextlib
import http.server
import os
from collections.abc import Iterator

import boto3

S3_KEYS = {"AWS_ACCESS_KEY_ID": "lake-test-key", "AWS_SECRET_ACCESS_KEY": "lake-test-secret"}


def s3_environ(endpoint: str) -> dict[str, str]:
    """The standard AWS variables that point S3Storage (and hudi-rs, via storage_options) at moto."""
    return {**S3_KEYS, "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}


@contextlib.contextmanager
def s3_env(endpoint: str) -> Iterator[None]:
    """This process's AWS variables pointed at ``endpoint`` for the block, restored afterwards (for
    Hypothesis tests, which cannot use function-scoped fixtures such as monkeypatch)."""
    values = s3_environ(endpoint)
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def hudi_s3_options(endpoint: str) -> dict[str, str]:
    return {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_KEYS["AWS_SECRET_ACCESS_KEY"],
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }


def s3_objects(endpoint: str, bucket: str, prefix: str = "") -> dict[str, bytes]:
    """Every object under ``prefix`` (keys relative to it), read with boto3: not through our code."""
    client = s3_client(endpoint)
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            found[item["Key"][len(prefix) :]] = body
    return found


def drop_bucket(endpoint: str, bucket: str) -> None:
    """Delete a bucket and its objects: property tests make one per example, and moto keeps them all."""
    client = s3_client(endpoint)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    client.delete_bucket(Bucket=bucket)


def s3_client(endpoint: str):  # noqa: ANN201 (boto3 client types are generated)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
    )


class RefusingS3Handler(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that refuses every request's credentials, as AWS does for a wrong key."""

    def _refuse(self) -> None:
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code>'
            b"<Message>The AWS Access Key Id you provided does not exist in our records.</Message></Error>"
        )
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _refuse

    def log_message(self, *args: object) -> None:
        pass
