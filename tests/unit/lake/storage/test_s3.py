"""S3Storage beyond the shared contract: races across processes, lock expiry, request counts, errors.

Everything runs against moto's S3 server on 127.0.0.1 (the ``s3_bucket`` fixture); a second tiny
HTTP server stands in for an endpoint that refuses the credentials.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3_helpers import S3_KEYS, s3_objects

from airflow_lake_provider.lake.errors import (
    LakeError,
    ObjectExistsError,
    ObjectNotFoundError,
    ServiceBusyError,
    StorageAccessError,
    StorageError,
    StorageUnavailableError,
)
from airflow_lake_provider.lake.storage import s3 as storage_s3
from airflow_lake_provider.lake.storage.s3 import S3Storage

LOCK = ".hoodie/.aux/.lake-clean.lock"


@pytest.fixture
def s3(s3_bucket: str) -> S3Storage:
    return S3Storage(f"s3://{s3_bucket}/t")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many requests of each kind S3Storage makes (every obstore call it makes is counted)."""
    counted: Counter[str] = Counter()
    for name in ("get", "get_range", "head", "put", "list", "list_with_delimiter", "delete"):
        real = getattr(storage_s3.obstore, name)

        def wrapper(*args: object, _real=real, _name=name, **kwargs: object) -> object:  # noqa: ANN001
            counted[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(storage_s3.obstore, name, wrapper)
    return counted


def _create_in_process(uri: str, i: int, start: float, out: multiprocessing.Queue) -> None:
    time.sleep(max(0.0, start - time.time()))
    try:
        S3Storage(uri).create(".hoodie/1.commit", str(i).encode())
        out.put(("won", i))
    except ObjectExistsError:
        out.put(("lost", i))


def test_create_once_across_processes_has_one_winner(s3: S3Storage, s3_endpoint: str) -> None:
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: nothing shared but the server
    out = ctx.Queue()
    start = time.time() + 3.0
    procs = [ctx.Process(target=_create_in_process, args=(s3.root, i, start, out)) for i in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    winners = [i for outcome, i in results if outcome == "won"]
    assert len(winners) == 1 and len(results) == 4
    assert s3_objects(s3_endpoint, s3.bucket, "t/") == {".hoodie/1.commit": str(winners[0]).encode()}


def test_parquet_reads_through_open_input_fetch_ranges_not_the_file(
    s3: S3Storage, calls: Counter[str]
) -> None:
    table = pa.table({f"c{i}": pa.array(range(200_000)) for i in range(4)})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    s3.write("p/f.parquet", sink.getvalue())
    calls.clear()
    fetched = 0
    real_range = s3.read_range

    def counting(rel: str, start: int, length: int) -> bytes:
        nonlocal fetched
        data = real_range(rel, start, length)
        fetched += len(data)
        return data

    s3.read_range = counting  # type: ignore[method-assign]
    with s3.open_input("p/f.parquet") as source:
        column = pq.ParquetFile(source).read(columns=["c2"])
    assert column.column("c2").to_pylist() == list(range(200_000))
    assert calls["get"] == 0 and calls["head"] == 1  # no whole download; one HEAD for the size
    assert 0 < fetched < len(sink.getvalue()) / 3  # one column of four, plus the footer


def test_walk_lists_each_top_level_folder_once_with_sizes(s3: S3Storage, calls: Counter[str]) -> None:
    for rel in ("a/1/x", "a/1/y/z", "a/2/w", "b/v", ".hoodie/1.commit", ".hoodie/archived/2.commit", "top"):
        s3.write(rel, rel.encode())
    calls.clear()
    walked = list(s3.walk("", descend=lambda rel: rel != ".hoodie"))
    assert walked == [
        ("", [("top", 3)]),
        ("a", []),
        ("a/1", [("x", 5)]),
        ("a/1/y", [("z", 7)]),
        ("a/2", [("w", 5)]),
        ("b", [("v", 3)]),
    ]
    # One delimiter listing of the root, one recursive listing per accepted folder; .hoodie never listed.
    assert calls == Counter({"list_with_delimiter": 1, "list": 2})
    assert list(s3.walk("a", descend=lambda rel: rel != "a/1/y")) == [
        ("a", []),
        ("a/1", [("x", 5)]),
        ("a/2", [("w", 5)]),
    ]


def test_lock_expires_and_is_taken_over_but_a_live_one_is_refreshed(s3_bucket: str) -> None:
    short = S3Storage(f"s3://{s3_bucket}/t", lock_ttl_seconds=1.5)
    # A crashed holder: its lock object stays, but expires.
    short.create(LOCK, json.dumps({"owner": "host:42:dead", "expires": time.time() + 1.0}).encode())
    with pytest.raises(
        ServiceBusyError, match=r"another clean; lock s3://.*lake-clean.lock held by host:42:dead"
    ):
        with short.lock(LOCK, "another clean"):
            pass
    with short.lock(LOCK, "another clean", wait_seconds=5):  # taken over once expired
        held = json.loads(short.read(LOCK))
        assert held["owner"] != "host:42:dead" and held["what"] == "another clean"
        time.sleep(2.5)  # longer than the TTL: the refresher keeps it ours
        with pytest.raises(ServiceBusyError, match=f"held by {held['owner']}"):
            with short.lock(LOCK, "another clean"):
                pass
        assert json.loads(short.read(LOCK))["expires"] > held["expires"]
    assert not short.exists(LOCK)  # released


@pytest.mark.parametrize("expires", ["an hour ahead", "inf", "nan"])
def test_a_lock_whose_holder_clock_runs_ahead_lasts_a_ttl_after_the_store_saw_it_written(
    s3_bucket: str, expires: str
) -> None:
    """The holder's expiry counts only up to a TTL after the object's last write, by the store's
    clock: a host whose clock runs an hour ahead (or a garbled expiry) holds it no longer."""
    short = S3Storage(f"s3://{s3_bucket}/t", lock_ttl_seconds=2.0)
    value = {"an hour ahead": time.time() + 3600, "inf": float("inf"), "nan": float("nan")}[expires]
    body = json.dumps({"owner": "fast-clock:1:x", "ttl": 2.0, "expires": value}).encode()
    short.create(LOCK, body)
    started = time.monotonic()
    if expires != "nan":  # (a NaN expiry is no time: expired at once, as an unreadable one would be)
        with pytest.raises(ServiceBusyError, match=r"held by fast-clock:1:x for [0-2] s more"):
            with short.lock(LOCK, "x"):
                pass
    with short.lock(LOCK, "x", wait_seconds=10):
        assert json.loads(short.read(LOCK))["owner"] != "fast-clock:1:x"
    assert time.monotonic() - started < 6


def test_lock_waits_for_a_release(s3: S3Storage) -> None:
    order: list[str] = []

    def holder() -> None:
        with s3.lock(LOCK, "x"):
            order.append("held")
            time.sleep(0.6)
        order.append("released")

    t = threading.Thread(target=holder)
    t.start()
    while not order:
        time.sleep(0.01)
    with s3.lock(LOCK, "x", wait_seconds=10):
        order.append("second")
    t.join()
    assert order == ["held", "released", "second"]


def test_unreadable_lock_object_expires_a_ttl_after_it_was_written(s3_bucket: str) -> None:
    short = S3Storage(f"s3://{s3_bucket}/t", lock_ttl_seconds=5.0)
    short.create(LOCK, b"garbage")
    with pytest.raises(ServiceBusyError, match="unreadable lock object"):
        with short.lock(LOCK, "x"):
            pass
    with short.lock(LOCK, "x", wait_seconds=15):
        pass


def test_key_limit_and_whole_bucket_guard(s3_bucket: str) -> None:
    s3 = S3Storage(f"s3://{s3_bucket}/t")
    s3.check_path("p/" + "k" * (1024 - len("t/p/")))
    with pytest.raises(StorageError, match="an S3 key of 1025 bytes, where at most 1024 fit"):
        s3.check_path("p/" + "k" * (1025 - len("t/p/")))
    with pytest.raises(StorageError, match="refusing to delete a whole bucket"):
        S3Storage(f"s3://{s3_bucket}").delete_tree("")


def test_missing_bucket_is_named(s3_endpoint: str, s3_bucket: str) -> None:
    gone = S3Storage("s3://no-such-bucket-here/t")
    for call in (
        lambda: gone.read("x"),
        lambda: gone.list(""),
        lambda: gone.write("x", b"1"),
        lambda: gone.exists(""),
    ):
        with pytest.raises(
            StorageError, match="s3://no-such-bucket-here/t.*: bucket 'no-such-bucket-here' does not exist"
        ):
            call()


def test_wrong_credentials_are_named_and_never_shown(
    refusing_s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG",
        "AWS_SECRET_ACCESS_KEY": "very-secret-value-123",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": refusing_s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s3 = S3Storage("s3://bucket/t")
    for call in (
        lambda: s3.read(".hoodie/hoodie.properties"),
        lambda: s3.list(""),
        lambda: s3.create("x", b"1"),
    ):
        with pytest.raises(
            StorageAccessError, match=r"s3://bucket/t.*: access denied .*check the credentials"
        ) as info:
            call()
        assert isinstance(info.value, LakeError)
        assert "very-secret-value-123" not in str(info.value) and "AKIAWRONG" not in str(info.value)
    assert "very-secret-value-123" not in caplog.text


def test_unreachable_endpoint_fails_fast_with_a_storage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    for name, value in S3_KEYS.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    with pytest.raises(
        StorageUnavailableError, match="s3://bucket/t/x: cannot reach the S3 endpoint to read"
    ):
        S3Storage("s3://bucket/t").read("x")
    assert time.monotonic() - started < 30


def test_importing_the_core_storage_does_not_load_obstore() -> None:
    import subprocess
    import sys

    code = "import sys, airflow_lake_provider.lake.storage as s; print('obstore' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"


def test_delete_many_deletes_a_thousand_keys_a_request_without_heads(
    s3: S3Storage, s3_endpoint: str, calls: Counter[str]
) -> None:
    rels = [f"p/{i:05d}.parquet" for i in range(1500)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda rel: s3.write(rel, b""), rels))
    s3.write("p/keep.parquet", b"k")
    # Listings past one page (1,000 keys) are whole, in every form.
    assert len(s3.list("p")) == len(s3.list_names("p")) == len(s3.list_dir("p")[0]) == 1501
    assert sum(len(files) for _, files in s3.walk("")) == 1501
    calls.clear()
    assert s3.delete_many([*rels, "p/never-there.parquet"]) == []
    assert calls == Counter({"delete": 2})
    assert s3_objects(s3_endpoint, s3.bucket, "t/") == {"p/keep.parquet": b"k"}


@pytest.mark.parametrize("name", ["AccessDenied/x", "NoSuchBucket/x", "a 403 b/x"])
def test_error_words_in_a_key_do_not_change_what_the_error_is(s3: S3Storage, name: str) -> None:
    with pytest.raises(ObjectNotFoundError, match="does not exist"):
        s3.read(name)


def test_an_unreachable_store_is_not_a_table_error_and_urls_lose_their_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_lake_provider.lake.table.table import LakeTable

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://user:UrlPassSecret55@127.0.0.1:9")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    for name, value in S3_KEYS.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(StorageUnavailableError) as info:
        LakeTable.open("s3://bucket/t")
    assert "UrlPassSecret55" not in str(info.value)
