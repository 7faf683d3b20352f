"""Tables on S3 end to end: ours == hudi-rs (reading the same s3:// table) == the expected rows.

Every step runs against moto's S3 server on 127.0.0.1: the Python API (create, open, writes on COW
and MOR, compaction, clean, savepoints) and the ``lake`` CLI with s3:// tables, inputs and outputs.
Bad locations (missing bucket, wrong credentials) and a lost create race end in one LakeError naming
the URI, with nothing half-written.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from s3_helpers import hudi_s3_options, s3_client, s3_objects

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    InvalidLocationError,
    StorageError,
    StorageUnavailableError,
    TableConfigError,
    TableNotFoundError,
)
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.storage.s3 import S3Storage
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action
from airflow_lake_provider.lake.timeline.store import TimelineStore

DATA = ["id", "ts", "city", "v"]


def _batch(rows: list[tuple[int, int, str]]) -> pa.Table:
    """(id, ts, v) rows; the city follows from the id (odd: a, even: b)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "city": pa.array(["a" if r[0] % 2 else "b" for r in rows]),
            "v": pa.array([r[2] for r in rows]),
        }
    )


def _rows(table: pa.Table) -> list[tuple]:
    if table.num_rows == 0:
        return []
    return sorted(tuple(r[c] for c in DATA) for r in table.select(DATA).to_pylist())


def _hudi(uri: str, endpoint: str, as_of: str | None = None) -> pa.Table:
    table = HudiTableBuilder.from_base_uri(uri).with_storage_options(hudi_s3_options(endpoint)).build()
    batches = table.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else table.read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _full(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


class Model:
    """The rows a table must hold: id -> (id, ts, city, v), event-time ordered like the writer."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple] = {}

    def apply(self, batch: pa.Table, operation: str) -> None:
        for r in batch.to_pylist():
            old = self.rows.get(r["id"])
            if old is not None and r["ts"] < old[1]:
                continue
            if operation == "delete":
                self.rows.pop(r["id"], None)
            else:
                self.rows[r["id"]] = (r["id"], r["ts"], r["city"], r["v"])

    def expected(self) -> list[tuple]:
        return sorted(self.rows.values())


def _check(uri: str, endpoint: str, expected: list[tuple], as_of: str | None = None) -> None:
    ours = read_snapshot(LakeTable.open(uri), as_of=as_of)
    theirs = _hudi(uri, endpoint, as_of)
    assert _rows(ours) == expected
    assert _rows(theirs) == expected
    assert _full(ours) == _full(theirs)  # _hoodie_* columns too


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_python_api_on_s3_writes_compacts_cleans_and_savepoints(
    s3_bucket: str, s3_endpoint: str, kind: str
) -> None:
    uri = f"s3://{s3_bucket}/lake/orders"
    LakeTable.create(
        uri,
        name="orders",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
    )
    table = LakeTable.open(uri)
    assert isinstance(table.storage, S3Storage) and table.uri == uri
    model = Model()
    steps = [
        ("insert", _batch([(i, 10, f"v1-{i}") for i in range(1, 7)])),
        ("upsert", _batch([(1, 20, "u1"), (2, 5, "stale"), (3, 10, "u3"), (7, 1, "u7")])),
        ("delete", _batch([(5, 11, "x"), (6, 3, "x"), (99, 50, "x")])),
        ("upsert", _batch([(1, 30, "w1"), (4, 30, "w4")])),
    ]
    instants = []
    for operation, batch in steps:
        instants.append(write(table, batch, operation).instant)
        model.apply(batch, operation)
        _check(uri, s3_endpoint, model.expected())
    action = "commit" if kind == "cow" else "deltacommit"
    hoodie = s3_objects(s3_endpoint, s3_bucket, "lake/orders/.hoodie/")
    assert all(f"{t}.{action}" in hoodie for t in instants)
    after_upsert = Model()
    for operation, batch in steps[:2]:
        after_upsert.apply(batch, operation)

    if kind == "mor":  # compaction merges the logs into new base files; twice, so old slices exist
        for round_ in range(2):
            scheduled = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
            assert scheduled.instant is not None
            result = execute_compaction(table, scheduled.instant)
            assert result.outcome.value == "COMPLETED"
            _check(uri, s3_endpoint, model.expected())
            batch = _batch([(1, 40 + round_, f"c{round_}"), (2, 40 + round_, f"c{round_}")])
            write(table, batch, "upsert")
            model.apply(batch, "upsert")
            _check(uri, s3_endpoint, model.expected())

    point = create_savepoint(table, instants[1])
    assert f"{instants[1]}.savepoint" in s3_objects(s3_endpoint, s3_bucket, "lake/orders/.hoodie/")
    before = set(s3_objects(s3_endpoint, s3_bucket, "lake/orders/"))
    cleaned = run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    after = set(s3_objects(s3_endpoint, s3_bucket, "lake/orders/"))
    gone = before - after - {f for f in before if f.startswith(".hoodie/")}
    assert gone, "the clean deleted no old file versions"
    assert not gone & set(point.files)  # savepointed files stay
    assert cleaned.deleted_files == len(gone)
    _check(uri, s3_endpoint, model.expected())
    # The savepointed instant still reads, in both readers.
    _check(uri, s3_endpoint, after_upsert.expected(), as_of=instants[1])


def _put_parquet(uri: str, rows: list[tuple[int, int, str]]) -> None:
    folder, _, name = uri.rpartition("/")
    sink = pa.BufferOutputStream()
    pq.write_table(_batch(rows), sink)
    open_storage(folder).write(name, sink.getvalue().to_pybytes())


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_with_s3_tables_inputs_and_outputs(
    s3_bucket: str, s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"s3://{s3_bucket}/t"
    base = ["--name", "trips", "--record-key", "id", "--precombine", "ts", "--partition-fields", "city"]
    code, out, _ = _run(capsys, "init", uri, "--table-type", "mor", *base)
    assert code == 0 and out.strip() == f"created MERGE_ON_READ table trips at {uri}"
    model = Model()
    instants = []
    for i, (operation, rows) in enumerate(
        [
            ("insert", [(1, 1, "a"), (2, 1, "b"), (3, 1, "c")]),
            ("upsert", [(1, 2, "A"), (2, 2, "B")]),
            ("delete", [(3, 5, "-")]),
            ("upsert", [(2, 3, "BB"), (4, 1, "d")]),
        ]
    ):
        _put_parquet(f"s3://{s3_bucket}/in/b{i}.parquet", rows)
        code, out, err = _run(
            capsys, "write", uri, "--input", f"s3://{s3_bucket}/in/b{i}.parquet", "--operation", operation
        )
        assert code == 0, err
        instants.append(out.strip())
        model.apply(_batch(rows), operation)
        _check(uri, s3_endpoint, model.expected())

    code, out, _ = _run(capsys, "read", uri, "--output", f"s3://{s3_bucket}/out/snap.parquet")
    assert code == 0 and out.strip() == f"{len(model.rows)} rows -> s3://{s3_bucket}/out/snap.parquet"
    written = s3_objects(s3_endpoint, s3_bucket, "out/")["snap.parquet"]
    assert _rows(pq.read_table(pa.BufferReader(written))) == model.expected()

    code, out, _ = _run(capsys, "timeline", uri, "--json")
    assert [(r["time"], r["action"], r["state"]) for r in json.loads(out)] == [
        (t, "deltacommit", "COMPLETED") for t in instants
    ]

    option = "hoodie.compact.inline.max.delta.commits=1"
    code, out, _ = _run(capsys, "compact", uri, "--mode", "run", "--option", option)
    assert code == 0 and json.loads(out)["outcome"] == "COMPLETED"
    _check(uri, s3_endpoint, model.expected())

    code, out, _ = _run(capsys, "savepoint", "create", uri, "--instant", instants[1])
    assert code == 0 and out.startswith(f"savepoint {instants[1]}: ")
    code, out, _ = _run(capsys, "clean", uri, "--retained", "1")
    assert code == 0 and json.loads(out)["outcome"] in ("CLEANED", "NO_WORK")
    _check(uri, s3_endpoint, model.expected())
    code, out, _ = _run(capsys, "savepoint", "delete", uri, "--instant", instants[1])
    assert code == 0 and out.strip() == f"savepoint {instants[1]} deleted"
    _run(capsys, "write", uri, "--input", f"s3://{s3_bucket}/in/b3.parquet", "--operation", "upsert")
    code, out, _ = _run(capsys, "clean", uri, "--retained", "1")
    assert code == 0 and json.loads(out)["outcome"] == "CLEANED" and json.loads(out)["deleted_files"] > 0
    _check(uri, s3_endpoint, model.expected())


def test_cli_missing_bucket_and_missing_input_name_the_uri(
    s3_bucket: str, s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "timeline", "s3://no-such-bucket-zz/t")
    assert code == 1
    assert err.strip().startswith("lake: error: ") and "s3://no-such-bucket-zz/t" in err
    assert "bucket 'no-such-bucket-zz' does not exist" in err
    code, _, err = _run(
        capsys, "init", "s3://no-such-bucket-zz/t", "--table-type", "cow", "--name", "x",
        "--record-key", "id", "--precombine", "ts",
    )  # fmt: skip
    assert code == 1 and "bucket 'no-such-bucket-zz' does not exist" in err
    uri = f"s3://{s3_bucket}/t"
    _run(
        capsys, "init", uri, "--table-type", "cow", "--name", "x", "--record-key", "id", "--precombine", "ts"
    )
    before = s3_objects(s3_endpoint, s3_bucket)
    code, _, err = _run(
        capsys, "write", uri, "--input", f"s3://{s3_bucket}/in/nope.parquet", "--operation", "insert"
    )
    assert code == 1 and f"input file s3://{s3_bucket}/in/nope.parquet does not exist" in err
    code, _, err = _run(
        capsys, "write", uri, "--input", "s3://no-such-bucket-zz/b.parquet", "--operation", "insert"
    )
    assert code == 1 and "bucket 'no-such-bucket-zz' does not exist" in err
    assert s3_objects(s3_endpoint, s3_bucket) == before  # nothing written


def test_open_s3_location_without_a_table(s3_bucket: str) -> None:
    with pytest.raises(TableNotFoundError, match=f"s3://{s3_bucket}/nothing is not a Hudi table"):
        LakeTable.open(f"s3://{s3_bucket}/nothing")


def _inflight_store(uri: str) -> tuple[TimelineStore, object]:
    store = TimelineStore(uri)
    store.initialize({"hoodie.table.name": "t", "hoodie.table.version": "6"})
    return store, store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT))


T1 = "20250101000000001"


def test_two_completions_of_one_instant_on_s3_have_one_winner(s3_bucket: str, s3_endpoint: str) -> None:
    uri = f"s3://{s3_bucket}/t"
    _, inflight = _inflight_store(uri)
    errors: list[Exception] = []
    winners: list[int] = []
    start = threading.Barrier(4)

    def complete(i: int) -> None:
        start.wait()
        try:
            TimelineStore(uri).transition_to_completed(inflight, json.dumps({"writer": i}).encode())
            winners.append(i)
        except CommitConflictError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=complete, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(errors) == 3
    hoodie = s3_objects(s3_endpoint, s3_bucket, "t/.hoodie/")
    assert json.loads(hoodie[f"{T1}.deltacommit"]) == {"writer": winners[0]}


def test_a_lost_conditional_put_is_a_commit_conflict_naming_the_file(
    s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's object lands between our checks and our put: S3 answers 412, we overwrite nothing."""
    uri = f"s3://{s3_bucket}/t"
    store, inflight = _inflight_store(uri)
    real_create = S3Storage.create

    def racing_create(self: S3Storage, rel: str, data: bytes) -> None:
        if rel.endswith(f"{T1}.deltacommit"):
            s3_client(s3_endpoint).put_object(Bucket=s3_bucket, Key=f"t/{rel}", Body=b'{"other": 1}')
        real_create(self, rel, data)

    monkeypatch.setattr(S3Storage, "create", racing_create)
    with pytest.raises(
        CommitConflictError, match=f"^{uri}/.hoodie/{T1}.deltacommit already exists; not overwriting"
    ):
        store.transition_to_completed(inflight, b'{"ours": 1}')
    hoodie = s3_objects(s3_endpoint, s3_bucket, "t/.hoodie/")
    assert json.loads(hoodie[f"{T1}.deltacommit"]) == {"other": 1}


def test_cli_wrong_credentials_exit_1_naming_the_uri_and_never_the_secret(
    refusing_s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "AKIAWRONG",
        "AWS_SECRET_ACCESS_KEY": "wrong-secret-xyz",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": refusing_s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for argv in (
        ["timeline", "s3://bucket/t"],
        ["read", "s3://bucket/t", "--output", "s3://bucket/o.parquet"],
    ):
        code, out, err = _run(capsys, *argv)
        assert code == 1 and out == ""
        line = err.strip().splitlines()[-1]
        assert line.startswith("lake: error: ") and "s3://bucket/t" in line and "access denied" in line
        assert "wrong-secret-xyz" not in err


@pytest.mark.parametrize("method", ["read_range", "read"])
def test_a_store_outage_while_reading_files_is_not_reported_as_corruption(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Base files are read in ranges, MOR log files whole: both outages surface as the store's error."""
    uri = f"s3://{s3_bucket}/t"
    table = LakeTable.create(
        uri, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    write(table, _batch([(1, 1, "a")]), "insert")
    write(table, _batch([(1, 2, "b")]), "upsert")  # a log file
    table = LakeTable.open(uri)  # hoodie.properties read before the outage

    def down(self: S3Storage, rel: str, *args: object) -> bytes:
        if rel.startswith(".hoodie/"):
            return real(self, rel, *args)
        raise StorageUnavailableError(f"{self.uri(rel)}: cannot reach the S3 endpoint to read")

    real = getattr(S3Storage, method)
    monkeypatch.setattr(S3Storage, method, down)
    with pytest.raises(StorageUnavailableError, match=f"{uri}/.*: cannot reach the S3 endpoint"):
        read_snapshot(table)


def test_a_throttled_read_of_the_table_properties_is_the_stores_error_not_the_tables(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3's 503 SlowDown (once obstore stops retrying) is a plain StorageError: opening the table
    must say so, not call hoodie.properties unreadable (a config error, which Airflow never retries)."""
    uri = f"s3://{s3_bucket}/t"
    LakeTable.create(uri, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts")
    slow_down = StorageError(f"{uri}/.hoodie/hoodie.properties: cannot read (503 SlowDown)")

    def throttled(self: S3Storage, rel: str, *args: object) -> bytes:
        raise slow_down

    monkeypatch.setattr(S3Storage, "read", throttled)
    with pytest.raises(StorageError) as raised:
        LakeTable.open(uri)
    assert raised.value is slow_down


def test_a_missing_bucket_is_a_location_error_and_a_folder_for_properties_the_tables(
    s3_bucket: str, tmp_path: Path
) -> None:
    """Neither passes on a retry: a table in a bucket that does not exist is a bad location (as a
    malformed URI is), a local ``hoodie.properties`` that is a folder a broken table."""
    with pytest.raises(InvalidLocationError, match=r"bucket 'no-such-bucket-x' does not exist$"):
        LakeTable.open("s3://no-such-bucket-x/t")
    (tmp_path / "t" / ".hoodie" / "hoodie.properties").mkdir(parents=True)
    with pytest.raises(TableConfigError, match=r"hoodie.properties: cannot read \(.*"):
        LakeTable.open(tmp_path / "t")


def test_a_plain_http_endpoint_without_allow_http_names_the_variable(
    s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """obstore refuses http:// endpoints with a bare "HTTP error: builder error": say what to set."""
    uri = f"s3://{s3_bucket}/t"
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    code, out, err = _run(
        capsys, "init", uri, "--table-type", "cow", "--name", "x", "--record-key", "id", "--precombine", "ts"
    )
    assert (code, out) == (1, "")
    assert err == (
        f"lake: error: {uri}: the endpoint {s3_endpoint} (AWS_ENDPOINT_URL) is plain http: set "
        "AWS_ALLOW_HTTP=true (a lake connection: its extra allow_http) to allow it, or use an https:// "
        "endpoint\n"
    )
    assert s3_objects(s3_endpoint, s3_bucket) == {}
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")  # the same endpoint, allowed: works
    code, out, _ = _run(
        capsys, "init", uri, "--table-type", "cow", "--name", "x", "--record-key", "id", "--precombine", "ts"
    )
    assert (code, out) == (0, f"created COPY_ON_WRITE table x at {uri}\n")


def test_cli_read_refuses_an_output_inside_an_s3_table(
    s3_bucket: str, s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"s3://{s3_bucket}/t"
    init = ["init", uri, "--table-type", "cow", "--name", "x", "--record-key", "id", "--precombine", "ts"]
    assert _run(capsys, *init)[0] == 0
    before = s3_objects(s3_endpoint, s3_bucket)
    for output in (f"{uri}/.hoodie/hoodie.properties", f"s3://{s3_bucket}//t/p/x.parquet"):
        code, out, err = _run(capsys, "read", uri, "--output", output)
        inside = output.replace("//t", "/t")
        assert (code, out) == (1, "")
        assert err == f"lake: error: output {inside} is inside the table {uri}: write it outside the table\n"
    assert s3_objects(s3_endpoint, s3_bucket) == before
    code, out, _ = _run(capsys, "read", uri, "--output", f"s3://{s3_bucket}/t2/x.parquet")  # a sibling prefix
    assert (code, out) == (0, f"0 rows -> s3://{s3_bucket}/t2/x.parquet\n")


def test_cli_read_refuses_an_s3_output_with_dot_folders_in_one_line(
    s3_bucket: str, s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``.`` and ``..`` are literal key parts on S3, which the S3 client refuses with a ValueError:
    a traceback before, whether the output then lay inside the table's prefix or not."""
    uri = f"s3://{s3_bucket}/t"
    init = ["init", uri, "--table-type", "cow", "--name", "x", "--record-key", "id", "--precombine", "ts"]
    assert _run(capsys, *init)[0] == 0
    before = s3_objects(s3_endpoint, s3_bucket)
    for folder in (f"{uri}/.", f"{uri}/../t", f"s3://{s3_bucket}/o/.."):
        code, out, err = _run(capsys, "read", uri, "--output", f"{folder}/x.parquet")
        assert (code, out) == (1, "")
        assert err == f"lake: error: {folder}: an S3 key has no . or .. folders: name the key as it is\n"
    assert s3_objects(s3_endpoint, s3_bucket) == before
