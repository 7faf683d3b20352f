"""``spark_jobs/write.py``: large writes as one instant, file groups written in Spark tasks.

In the session's local[2] SparkSession (COW and MOR: insert from a folder of parquet files, then an
upsert with updates, new keys and, separately, deletes), and once through ``spark-submit``. Every
table is read back with our reader and hudi-rs, row for row.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.format import bloom_filter as bf
from airflow_lake_provider.lake.spark_submit import submit
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.instant import State

pytestmark = pytest.mark.spark
N = 3_000


def _table(path: Path, kind: str, version: int = 6) -> LakeTable:
    return LakeTable.create(
        path,
        name="w",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
    )


def _batch(ids: range | list[int], ts: int, tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "p": pa.array([f"p{i % 3}" for i in ids]),
            "v": pa.array([f"{tag}{i}" for i in ids]),
        }
    )


def _ours(path: Path) -> dict[int, tuple[str, str]]:
    snap = read_snapshot(LakeTable.open(path)).select(["id", "p", "v"]).to_pylist()
    return {r["id"]: (r["p"], r["v"]) for r in snap}


def _hudi(path: Path) -> dict[int, tuple[str, str]]:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    rows = pa.Table.from_batches(batches).select(["id", "p", "v"]).to_pylist() if batches else []
    return {r["id"]: (r["p"], r["v"]) for r in rows}


def _run(spark, table: Path, source: Path, operation: str, *extra: str) -> dict:
    from airflow_lake_provider.spark_jobs.write import parse_args, run

    args = ["--table", str(table), "--input", str(source), "--operation", operation, *extra]
    return run(parse_args(args), spark)


@pytest.mark.parametrize("version", [6, 8])
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_job_writes_insert_upsert_delete_as_one_instant_each(
    spark, tmp_path: Path, kind: str, version: int
) -> None:
    """Also on table version 8 (Hudi 1.x): the file groups written on executors too."""
    path = tmp_path / "t"
    table = _table(path, kind, version)
    folder = tmp_path / "in1"
    folder.mkdir()
    # Three files plus what Spark writers leave beside them (skipped).
    for part, ids in enumerate((range(1000), range(1000, 2000), range(2000, N))):
        pq.write_table(_batch(ids, 1, "a"), folder / f"part-{part}.parquet")
    (folder / "_SUCCESS").write_bytes(b"")
    first = _run(spark, path, folder, "insert", "--max-rows-per-file", "400")
    assert first["outcome"] == "COMMITTED" and first["inserted"] == N and first["input_files"] == 3
    assert first["files"] == 3 * 3  # 1,000 rows per partition in files of at most 400
    expected = {i: (f"p{i % 3}", f"a{i}") for i in range(N)}
    assert _ours(path) == expected
    assert _hudi(path) == expected

    # Updates to every third key, 500 new keys, and one stale version (ts 0) that must lose.
    changes = pa.concat_tables([_batch(range(0, N, 3), 2, "b"), _batch(range(N, N + 500), 2, "n")])
    stale = _batch([1], 0, "stale")
    pq.write_table(pa.concat_tables([changes, stale]), tmp_path / "up.parquet")
    second = _run(spark, path, tmp_path / "up.parquet", "upsert")
    expected.update({i: (f"p{i % 3}", f"b{i}") for i in range(0, N, 3)})
    expected.update({i: (f"p{i % 3}", f"n{i}") for i in range(N, N + 500)})
    assert second["inserted"] == 500
    assert _ours(path) == expected
    assert _hudi(path) == expected

    gone = [5, 6, 7, 2999, N + 1, 10**9]  # the last key is not in the table: nothing to delete
    pq.write_table(_batch(gone, 3, "x"), tmp_path / "del.parquet")
    third = _run(spark, path, tmp_path / "del.parquet", "delete")
    assert third["deleted"] == 5
    for key in gone:
        expected.pop(key, None)
    assert _ours(path) == expected
    assert _hudi(path) == expected

    timeline = LakeTable.open(path).timeline()
    assert [i.timestamp for i in timeline.instants if i.state is State.COMPLETED] == [
        first["instant"],
        second["instant"],
        third["instant"],
    ]
    assert timeline.pending == []
    stats = timeline.commit_metadata(timeline.get(second["instant"])).write_stats()
    assert sum(s.num_inserts for s in stats) == 500
    assert not (path / ".hoodie" / ".temp" / second["instant"]).exists()  # markers gone after the commit
    assert table.config.is_mor == (kind == "mor")
    # Base files written in Spark tasks carry the bloom filter of their record keys.
    bases = sorted(path.rglob("*.parquet"))
    assert bases
    for base in bases:
        parquet = pq.ParquetFile(base)
        filt = bf.from_footer(parquet.metadata.metadata)
        assert (
            filt is not None
            and filt.might_contain(parquet.read(columns=["_hoodie_record_key"]).column(0)).all()
        )
    assert first["archived"] == second["archived"] == third["archived"] == []  # 3 commits: none due


def test_job_refuses_bad_input_before_any_instant(spark, tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table(path, "mor")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LakeError, match=r"holds no parquet files"):
        _run(spark, path, empty, "insert")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(LakeError, match=r"bad\.parquet is not a readable parquet file"):
        _run(spark, path, tmp_path / "bad.parquet", "insert")
    assert not LakeTable.open(path).timeline().instants


@pytest.mark.parametrize("version", [6, 8])
def test_task_failure_undoes_the_instant(spark, tmp_path: Path, version: int) -> None:
    """A Spark task failing after the instant is inflight: the instant is undone, nothing stays (not
    even a rollback instant)."""
    path = tmp_path / "t"
    _table(path, "cow", version)
    pq.write_table(_batch(range(10), 1, "a"), tmp_path / "a.parquet")
    _run(spark, path, tmp_path / "a.parquet", "insert")
    # The driver's key lookup reads only the record-key column; the executor rewriting the group
    # reads every column and refuses a file whose column does not fit the table schema.
    victim = next(f for f in (path / "p1").iterdir() if f.suffix == ".parquet")
    stored = pq.read_table(victim)
    index = stored.schema.get_field_index("v")
    pq.write_table(stored.set_column(index, "v", pa.array([[1]] * stored.num_rows)), victim)
    pq.write_table(_batch([1, 4], 2, "b"), tmp_path / "b.parquet")
    with pytest.raises(LakeError, match=r"a Spark task failed") as caught:
        _run(spark, path, tmp_path / "b.parquet", "upsert")
    assert any("was undone: nothing of it is left" in note for note in getattr(caught.value, "__notes__", []))
    timeline = LakeTable.open(path).timeline()
    assert timeline.pending == []
    assert [i.action.value for i in timeline.instants] == ["commit"]
    assert sorted(p.name for p in (path / ".hoodie" / ".temp").iterdir()) == []


@pytest.mark.slow
def test_spark_submit_upsert_mor(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table(path, "mor")
    pq.write_table(_batch(range(200), 1, "a"), tmp_path / "a.parquet")
    pq.write_table(_batch(range(100, 300), 2, "b"), tmp_path / "b.parquet")
    env = {
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
        )
    }
    conf = {"spark.ui.enabled": "false"}
    first = submit(
        "write.py",
        ["--table", str(path), "--input", str(tmp_path / "a.parquet"), "--operation", "insert"],
        conf=conf,
        env=env,
    )
    second = submit(
        "write.py",
        [
            "--table",
            str(path),
            "--input",
            str(tmp_path / "b.parquet"),
            "--operation",
            "upsert",
            "--meta",
            "k=v",
        ],
        conf=conf,
        env=env,
    )
    assert (first["inserted"], second["inserted"], second["updated"]) == (200, 100, 100)
    expected = {i: (f"p{i % 3}", f"a{i}" if i < 100 else f"b{i}") for i in range(300)}
    assert _ours(path) == expected
    assert _hudi(path) == expected
    timeline = LakeTable.open(path).timeline()
    assert timeline.commit_metadata(timeline.get(second["instant"])).extra_metadata["k"] == "v"
