"""merge-small-files of plain parquet directories (no ``.hoodie/``): the in-progress -> pending ->
finished protocol, checked through pyarrow.dataset (default ``ignore_prefixes``: hidden files are
skipped) on a local disk and on S3 (moto), at every crash point; and partition commit of such
directories (triggers, policies, late data, the CLI)."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from crash_support import crashing, steps_of
from s3_helpers import S3_KEYS

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import (
    PartitionCommitConfigError,
    PartitionCommitError,
    UnsafePathError,
)
from airflow_lake_provider.lake.services.partition_commit.executor import commit_plain_partitions
from airflow_lake_provider.lake.services.partition_commit.plain import (
    MERGE_DIR,
    PlainMergePlan,
    merge_plain_partition,
)
from airflow_lake_provider.lake.storage import LocalStorage, SimulatedCrash, Storage
from airflow_lake_provider.lake.storage.s3 import S3Storage
from airflow_lake_provider.lake.table.table import LakeTable

P = "dt=2024-01-05"
OTHER = "dt=2024-01-06"
UTC = dt.timezone.utc


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "events")
    bucket = request.getfixturevalue("s3_bucket")
    return S3Storage(f"s3://{bucket}/lake/events")


def _batch(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": [f"n{i}" for i in range(start, start + n)],
            "v": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        }
    )


def _put_parquet(storage: Storage, rel: str, table: pa.Table) -> None:
    """A file as another engine writes it (not through our merge code)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    storage.write(rel, sink.getvalue().to_pybytes())


def _fill(storage: Storage, files: int = 6, rows: int = 200) -> None:
    for k in range(files):
        _put_parquet(storage, f"{P}/part-{k:05d}-spark.snappy.parquet", _batch(k * rows, rows))
    _put_parquet(storage, f"{OTHER}/part-00000.parquet", _batch(10_000, 5))
    storage.write(f"{P}/_SUCCESS", b"")  # hidden names are not data and never merged
    storage.write(f"{P}/.part-00000-spark.snappy.parquet.crc", b"crc")


def _dataset(storage: Storage) -> ds.Dataset:
    if isinstance(storage, S3Storage):
        from pyarrow import fs

        s3 = fs.S3FileSystem(
            access_key=S3_KEYS["AWS_ACCESS_KEY_ID"],
            secret_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1",
            endpoint_override=os.environ["AWS_ENDPOINT_URL"],
            scheme="http",
        )
        return ds.dataset(
            f"{storage.bucket}/{storage.prefix}", filesystem=s3, format="parquet", partitioning="hive"
        )
    return ds.dataset(storage.root, format="parquet", partitioning="hive")


def _rows(storage: Storage) -> Counter:
    """Every row a reader that skips hidden files sees, with how often it sees it."""
    table = _dataset(storage).to_table()
    return Counter(zip(*(table.column(c).to_pylist() for c in ("dt", "id", "name", "v")), strict=True))


def _names(storage: Storage, partition: str = P) -> list[str]:
    return sorted(n for n, _ in storage.list(partition))


def _visible(storage: Storage, partition: str = P) -> dict[str, int]:
    return {n: s for n, s in storage.list(partition) if not n.startswith((".", "_"))}


def test_merge_leaves_ceil_total_over_target_files_and_the_same_rows(storage: Storage) -> None:
    _fill(storage)
    before = _rows(storage)
    assert sum(before.values()) == 1205 and set(before.values()) == {1}
    inputs = _visible(storage)
    total = sum(inputs.values())
    target = total // 3 + 1  # -> 3 output files
    result = merge_plain_partition(storage, P, target)
    assert result.replaced == tuple(sorted(inputs)) and result.rows == 1200 and result.bytes_in == total
    assert len(result.written) == math.ceil(total / target) == 3
    assert sorted(_visible(storage)) == sorted(result.written)
    # Nothing else changed: hidden files of others stay, no in-progress file or record is left.
    assert _names(storage) == sorted([*result.written, "_SUCCESS", ".part-00000-spark.snappy.parquet.crc"])
    assert storage.list(MERGE_DIR) == []
    assert _rows(storage) == before  # exact: every row once, values unchanged
    assert [pq.ParquetFile(storage.open_input(f"{P}/{n}")).metadata.num_rows for n in result.written] == [
        400,
        400,
        400,
    ]
    # Rows keep the inputs' order (file names, then rows), across the outputs.
    merged = pa.concat_tables(pq.read_table(storage.open_input(f"{P}/{n}")) for n in result.written)
    assert merged.column("id").to_pylist() == list(range(1200))
    assert merge_plain_partition(storage, P, target).merge_id is None  # nothing small enough left


def test_files_at_or_over_the_target_are_left_alone_and_no_merge_keeps_the_count(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage, files=3, rows=20)
    _put_parquet(storage, f"{P}/part-big.parquet", _batch(100_000, 20_000))
    sizes = _visible(storage)
    target = sizes["part-big.parquet"]  # at the target: not small
    result = merge_plain_partition(storage, P, target)
    assert "part-big.parquet" not in result.replaced and len(result.replaced) == 3
    assert (
        sorted(_visible(storage)) == sorted([*result.written, "part-big.parquet"])
        and len(result.written) == 1
    )
    # Two files that would merge into two: nothing to gain, nothing rewritten.
    _put_parquet(storage, f"{OTHER}/part-00001.parquet", _batch(20_000, 5))
    pair = _visible(storage, OTHER)
    assert merge_plain_partition(storage, OTHER, min(pair.values()) + 1).merge_id is None
    assert _visible(storage, OTHER) == pair


def _pending_record_window(storage: Storage, target: int) -> tuple[int, int, list[str]]:
    """Steps of one merge; the step that writes its record; the first step that publishes."""
    probe = crashing(storage)
    merge_plain_partition(probe, P, target, merge_id="0" * 32)
    steps = steps_of(probe)
    record = next(i for i, s in enumerate(steps, 1) if s.startswith("create .lake-partition-commit/merges/"))
    first_copy = next(i for i, s in enumerate(steps, 1) if s.startswith("copy "))
    return record, first_copy, steps


@pytest.mark.parametrize("where", ["local", "s3"])
def test_every_crash_point_recovers_with_no_row_lost_or_doubled(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    def fresh(k: int) -> Storage:
        if where == "local":
            s: Storage = LocalStorage(tmp_path / f"run{k}")
        else:
            s = S3Storage(f"s3://{request.getfixturevalue('s3_bucket')}/run{k}")
        _fill(s, files=4, rows=50)
        return s

    probe_storage = fresh(0)
    expected = _rows(probe_storage)
    total = sum(_visible(probe_storage).values())
    target = total // 2 + 1  # -> 2 outputs
    record, first_copy, steps = _pending_record_window(probe_storage, target)
    # 2 hidden outputs, the record, 2 x (publish, hide-name removal), 4 inputs, the record removed
    assert len(steps) == 12 and record == 3 and first_copy == 4, steps
    assert _rows(probe_storage) == expected
    for k in range(1, len(steps) + 1):
        s = fresh(k)
        with pytest.raises(SimulatedCrash):
            merge_plain_partition(crashing(s, k), P, target, merge_id=f"{k:032x}")
        seen = _rows(s)
        assert all(seen[row] >= 1 for row in expected), f"crash after step {k}: a row was lost"
        if k < first_copy or k >= len(steps) - 1:
            # Before publishing readers see only the inputs; once the inputs are gone only the outputs.
            assert seen == expected, f"crash after step {k}: {steps[k - 1]}"
        again = merge_plain_partition(s, P, target)  # the next run
        assert _rows(s) == expected, f"crash after step {k}: {steps[k - 1]}"
        names = _names(s)
        assert not [n for n in names if n.endswith(".inprogress")] and s.list(MERGE_DIR) == []
        assert len(_visible(s)) == 2, (k, names)
        # A crash once the record exists is rolled forward; before it the merge runs anew.
        assert again.recovered == ((f"{k:032x}",) if record <= k < len(steps) else ())


def test_a_pending_merge_is_rolled_forward_by_a_commit_of_another_partition(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage, files=4, rows=50)
    expected = _rows(storage)
    target = sum(_visible(storage).values()) // 2 + 1
    with pytest.raises(SimulatedCrash):  # pending, one output published
        merge_plain_partition(crashing(storage, 5), P, target)
    assert sum(_rows(storage).values()) > sum(expected.values())  # the window: doubles until recovery
    look = commit_plain_partitions(storage, [OTHER], {}, dry_run=True)  # a sensor's look changes no data
    assert look.outcome.value == "PLANNED" and len(storage.list(MERGE_DIR)) == 1
    result = commit_plain_partitions(storage, [OTHER], {"sink.partition-commit.policy.kind": "success-file"})
    assert result.committed == (OTHER,)
    assert _rows(storage) == expected and len(_visible(storage)) == 2


# -- refusals: nothing changed ----------------------------------------------------------------------
def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def test_a_folder_with_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage)
    storage.write(f"{P}/notes.csv", b"a,b\n1,2\n")
    before = _snapshot(tmp_path / "events")
    with pytest.raises(PartitionCommitError, match=r"events/dt=2024-01-05/notes.csv is not a parquet file"):
        merge_plain_partition(storage, P, 10**9)
    assert _snapshot(tmp_path / "events") == before


def test_files_of_different_schemas_are_refused(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage, files=2)
    _put_parquet(storage, f"{P}/part-9.parquet", pa.table({"id": pa.array([1], pa.int32())}))
    before = _snapshot(tmp_path / "events")
    with pytest.raises(PartitionCommitError, match=r"part-9.parquet has another schema"):
        merge_plain_partition(storage, P, 10**9)
    assert _snapshot(tmp_path / "events") == before


def _hudi(path: Path) -> LakeTable:
    return LakeTable.create(
        path,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="v",
        partition_fields=("p",),
    )


def test_a_hudi_table_or_a_folder_inside_one_is_refused(tmp_path: Path) -> None:
    table = _hudi(tmp_path / "t")
    storage = LocalStorage(table.base_path)
    _put_parquet(storage, "x/a.parquet", _batch(0, 3))
    _put_parquet(storage, "x/b.parquet", _batch(3, 3))
    with pytest.raises(
        PartitionCommitError, match=r"is a Hudi table: its merge-small-files is a replacecommit"
    ):
        merge_plain_partition(storage, "x", 10**9)
    inside = LocalStorage(table.base_path / "x")
    with pytest.raises(PartitionCommitError, match=r"lies inside the Hudi table"):
        merge_plain_partition(inside, "", 10**9)
    lake = LocalStorage(tmp_path)  # a plain folder holding the table: the table is not a partition
    with pytest.raises(PartitionCommitError, match=r"t is a Hudi table inside"):
        merge_plain_partition(lake, "t/x", 10**9)
    assert sorted(os.listdir(table.base_path / "x")) == ["a.parquet", "b.parquet"]


def test_a_record_naming_files_outside_its_partition_deletes_nothing(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage, files=2)
    record = PlainMergePlan("a" * 32, P, (("../outside.parquet", 1),), ("part-merged-x.parquet",), 10)
    storage.write(record.record, record.to_json())
    before = _snapshot(tmp_path / "events")
    with pytest.raises(
        PartitionCommitError, match=r"merge record names files it cannot own; nothing changed"
    ):
        merge_plain_partition(storage, P, 10**9)
    assert _snapshot(tmp_path / "events") == before
    with pytest.raises(PartitionCommitError, match=r"is not a partition folder"):
        merge_plain_partition(storage, "../elsewhere", 10**9)
    with pytest.raises(UnsafePathError):
        from airflow_lake_provider.lake.services.partition_commit.plain import _delete_in_partition

        _delete_in_partition(storage, P, "../x")


# -- partition commit of a plain directory ------------------------------------------------------------
def _age(storage: LocalStorage, partition: str, when: dt.datetime) -> None:
    for name, _ in storage.list(partition):
        os.utime(Path(storage.root) / partition / name, (when.timestamp(), when.timestamp()))


def test_process_time_commit_with_success_file_merge_and_custom(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage)
    written = dt.datetime(2024, 1, 5, 3, 10, tzinfo=UTC)
    _age(storage, P, written)
    expected = _rows(storage)
    calls = []
    opts = {
        "sink.partition-commit.policy.kind": "merge-small-files,success-file,custom",
        "sink.partition-commit.delay": "1 h",
        "compaction.file-size": "1mb",
    }
    early = commit_plain_partitions(
        storage, [P], opts, custom_policy=calls.append, now=written + dt.timedelta(minutes=59)
    )
    assert early.committed == () and "first write 2024-01-05T03:10:00+00:00" in early.to_dict()["waiting"][P]
    assert len(_visible(storage)) == 6
    done = commit_plain_partitions(
        storage, [P], opts, custom_policy=calls.append, now=written + dt.timedelta(hours=1)
    )
    assert done.committed == (P,) and len(calls) == 1
    merged = _visible(storage)
    assert len(merged) == 1 and calls[0].committed_instants == tuple(merged)
    assert calls[0].partition_values == {"dt": "2024-01-05"} and calls[0].partition_uri == storage.uri(P)
    assert storage.read(f"{P}/_SUCCESS") == b"" and _rows(storage) == expected
    again = commit_plain_partitions(storage, [P], opts, custom_policy=calls.append)
    assert (
        again.outcome.value == "NO_WORK" and again.to_dict()["already_committed"] == [P] and len(calls) == 1
    )


def test_late_files_are_reported_and_recommitted_a_delay_after_they_arrived(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage, files=2)
    _age(storage, P, dt.datetime(2024, 1, 5, 3, 0, tzinfo=UTC))
    opts = {"sink.partition-commit.delay": "1 h", "lake.partition-commit.late-data.recommit": "true"}
    assert commit_plain_partitions(storage, [P], opts).committed == (P,)
    _put_parquet(storage, f"{P}/part-late.parquet", _batch(5000, 3))
    arrived = dt.datetime.fromtimestamp(storage.modified_ms(f"{P}/part-late.parquet") / 1000, UTC)
    waiting = commit_plain_partitions(storage, [P], opts, now=arrived + dt.timedelta(minutes=30))
    assert waiting.committed == () and waiting.to_dict()["late_data"] == {P: ["part-late.parquet"]}
    assert "late data waits: first late write" in waiting.to_dict()["waiting"][P]
    due = commit_plain_partitions(storage, [P], opts, now=arrived + dt.timedelta(hours=1))
    assert due.committed == (P,)


def test_partition_time_needs_the_callers_watermark(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage, files=2)
    opts = {
        "sink.partition-commit.trigger": "partition-time",
        "partition.time-extractor.timestamp-pattern": "$dt",
        "sink.partition-commit.delay": "1 d",
    }
    none = commit_plain_partitions(storage, [P], opts)
    assert "no watermark yet" in none.to_dict()["waiting"][P]
    before = commit_plain_partitions(storage, [P], opts, watermark="2024-01-06T00:00:00Z")
    assert before.committed == ()  # strictly after partition time + delay
    after = commit_plain_partitions(storage, [P], opts, watermark="2024-01-06T00:00:00.001Z")
    assert after.committed == (P,)


def test_metastore_is_refused_for_a_plain_directory(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage, files=2)
    with pytest.raises(PartitionCommitConfigError, match=r"plain parquet directory .*policy \['metastore'\]"):
        commit_plain_partitions(storage, [P], {"sink.partition-commit.policy.kind": "metastore"})


def test_cli_commits_a_plain_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    storage = LocalStorage(tmp_path / "events")
    _fill(storage)
    expected = _rows(storage)
    path = str(tmp_path / "events")
    args = ["partition-commit", path, "--partition", P, "--policy", "success-file,merge-small-files"]
    assert main([*args, "--option", "compaction.file-size=1mb"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "COMMITTED" and out["committed"] == [P]
    assert len(_visible(storage)) == 1 and _rows(storage) == expected
    assert main([*args, "--option", "compaction.file-size=1mb"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "NO_WORK"
    assert main(["partition-commit", path, "--partition", P, "--policy", "metastore"]) == 1
    assert "needs a Hudi table" in capsys.readouterr().err
