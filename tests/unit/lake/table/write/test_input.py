"""The input of a write job: one parquet file or a folder of them, local or on S3 (moto), read
through the storage layer; hidden files skipped; bad inputs refused with one error naming them."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3_helpers import S3_KEYS, s3_client

from airflow_lake_provider.lake.errors import SchemaError, WriteInputError
from airflow_lake_provider.lake.table.write.input import find_input, input_rows, read_input


def _part(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_local_file_and_folder(tmp_path: Path) -> None:
    pq.write_table(_part([1, 2]), tmp_path / "one.parquet")
    single = find_input(str(tmp_path / "one.parquet"))
    assert [rel for rel, _ in single.files] == ["one.parquet"] and input_rows(single) == 2
    folder = tmp_path / "in"
    (folder / "day=1").mkdir(parents=True)
    (folder / "_temporary").mkdir()
    pq.write_table(_part([1, 2]), folder / "a.parquet")
    pq.write_table(_part([3]), folder / "day=1" / "b.parquet")
    pq.write_table(_part([99]), folder / "_temporary" / "c.parquet")  # skipped, as Spark does
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / ".a.parquet.crc").write_bytes(b"crc")
    found = find_input(str(folder) + "/")
    assert [rel for rel, _ in found.files] == ["a.parquet", "day=1/b.parquet"]
    assert input_rows(found) == 3
    assert read_input(found).column("id").to_pylist() == [1, 2, 3]


def test_bad_inputs_are_named(tmp_path: Path) -> None:
    with pytest.raises(WriteInputError, match=r"missing does not exist or holds no parquet files"):
        find_input(str(tmp_path / "missing"))
    (tmp_path / "bad.parquet").write_bytes(b"nope")
    with pytest.raises(WriteInputError, match=r"bad\.parquet is not a readable parquet file"):
        input_rows(find_input(str(tmp_path / "bad.parquet")))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(_part([1]), mixed / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([2], pa.int32())}), mixed / "b.parquet")
    with pytest.raises(SchemaError, match=r"mixed/b\.parquet has schema .* unlike .*mixed/a\.parquet"):
        read_input(find_input(str(mixed)))


def test_s3_folder_with_given_settings(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings come as ``environ`` (the hook's connection), not from the process."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    client = s3_client(s3_endpoint)
    client.create_bucket(Bucket="inputs")
    client.put_object(Bucket="inputs", Key="batch/part-0.parquet", Body=_parquet_bytes(_part([1, 2])))
    client.put_object(Bucket="inputs", Key="batch/part-1.parquet", Body=_parquet_bytes(_part([3])))
    client.put_object(Bucket="inputs", Key="batch/_SUCCESS", Body=b"")
    environ = {
        **S3_KEYS,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    found = find_input("s3://inputs/batch", environ=environ)
    assert [rel for rel, _ in found.files] == ["part-0.parquet", "part-1.parquet"]
    assert input_rows(found) == 3
    assert sorted(read_input(found).column("id").to_pylist()) == [1, 2, 3]
    one = find_input("s3://inputs/batch/part-1.parquet", environ=environ)
    assert read_input(one).column("id").to_pylist() == [3]
