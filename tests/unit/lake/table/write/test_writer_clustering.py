"""Writes keep off file groups that a pending clustering will replace (Hudi's Spark writers refuse
such updates too): an update or delete there is refused before anything is written, a new key goes to a
new file group, and once the clustering is rolled back the same write goes through."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import PendingClusteringError
from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action, State
from tests.mdt_v6_tables import add_v6_metadata_table
from tests.tree_digest import tree_digest

CASES = pytest.mark.parametrize(("version", "table_type"), [(6, "cow"), (6, "mor"), (8, "cow"), (8, "mor")])


def _batch(ids: list[str], ts: int, v: int, p: str = "x") -> pa.Table:
    n = len(ids)
    return pa.table({"id": ids, "ts": pa.array([ts] * n, pa.int64()), "p": [p] * n, "v": [v] * n})


def _crashed_merge(path: Path, table_type: str, version: int) -> tuple[LakeTable, str, dict[str, str]]:
    """Three small file groups in ``x``, merged by a merge-small-files that crashed before its commit:
    the clustering stays pending. Returns the table, the clustering instant, key -> file group."""
    table = LakeTable.create(
        path,
        name="t",
        table_type=table_type,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
    )
    for i in range(3):
        write(table, _batch([f"k{i}a", f"k{i}b"], 1, 0), "insert")

    def crash(point: str) -> None:
        if point == "commit":
            raise KeyboardInterrupt(point)

    with pytest.raises(KeyboardInterrupt):
        merge_small_files(table, "x", 10**9, fault=crash)
    action = Action.CLUSTERING if version >= 8 else Action.REPLACECOMMIT
    (pending,) = table.timeline().filter([action], [State.REQUESTED, State.INFLIGHT])
    snap = read_snapshot(table)
    groups = dict(
        zip(
            snap.column("_hoodie_record_key").to_pylist(),
            [n.split("_")[0] for n in snap.column("_hoodie_file_name").to_pylist()],
            strict=True,
        )
    )
    assert len(set(groups.values())) == 3
    return table, pending.timestamp, groups


def _rows(table: pa.Table) -> list[tuple]:
    cols = ("_hoodie_record_key", "_hoodie_commit_time", "v")
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


def _hudi_rs(path: Path) -> list[tuple]:
    return _rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read()))


@CASES
@pytest.mark.parametrize("operation", ["upsert", "delete", "insert"])
def test_a_write_to_a_group_under_pending_clustering_is_refused_and_changes_nothing(
    tmp_path: Path, table_type: str, version: int, operation: str
) -> None:
    table, clustering, groups = _crashed_merge(tmp_path / "t", table_type, version)
    before = tree_digest(table.base_path)
    rows = read_snapshot(table)
    uri = table.uri
    message = (
        f"{uri}: write ({operation}) refused: it reaches file group(s) x/{groups['k1a']} that the "
        f"pending clustering {clustering} will replace (executing it would lose this write); nothing "
        f"was written. Roll the clustering back (`lake rollback {uri} --instant {clustering}`, "
        "e.g. a crashed merge-small-files) or let the engine that planned it execute it first"
    )
    # A new key in another partition rides along: the whole batch is refused.
    batch = pa.concat_tables([_batch(["k1a"], 2, 7), _batch(["new"], 2, 7, "y")])
    with pytest.raises(PendingClusteringError, match=f"^{re.escape(message)}$"):
        write(table, batch, operation)
    assert tree_digest(table.base_path) == before
    assert _rows(read_snapshot(table)) == _rows(rows) == _hudi_rs(table.base_path)


def test_the_refusal_comes_before_the_metadata_table_drop_the_write_asks_for(tmp_path: Path) -> None:
    """hoodie.metadata.enable=false drops the MDT for good: a write the pending clustering refuses is
    refused first, with the same error, and the MDT stays."""
    table, clustering, groups = _crashed_merge(tmp_path / "t", "cow", 6)
    add_v6_metadata_table(table.base_path)
    table = LakeTable.open(table.base_path)
    before = tree_digest(table.base_path)
    message = (
        f"{table.uri}: write (delete) refused: it reaches file group(s) x/{groups['k2b']} that the "
        f"pending clustering {clustering} will replace"
    )
    with pytest.raises(PendingClusteringError, match=f"^{re.escape(message)} "):
        write(table, _batch(["k2b"], 2, 7), "delete", options={"hoodie.metadata.enable": "false"})
    assert tree_digest(table.base_path) == before
    assert (table.base_path / ".hoodie" / "metadata" / "files").is_dir()


@CASES
def test_a_new_key_goes_to_a_new_group_and_after_rolling_back_the_clustering_the_upsert_lands(
    tmp_path: Path, table_type: str, version: int, capsys: pytest.CaptureFixture[str]
) -> None:
    table, clustering, groups = _crashed_merge(tmp_path / "t", table_type, version)
    x = table.base_path / "x"
    in_plan = sorted(f.name for f in x.iterdir() if f.name.split("_")[0].lstrip(".") in set(groups.values()))
    done = write(table, _batch(["new"], 2, 5), "upsert")
    # The new key got a file group of its own; the plan's groups are untouched.
    assert (
        sorted(f.name for f in x.iterdir() if f.name.split("_")[0].lstrip(".") in set(groups.values()))
        == in_plan
    )
    snap = read_snapshot(table)
    keys = snap.column("_hoodie_record_key").to_pylist()
    new_group = snap.column("_hoodie_file_name")[keys.index("new")].as_py().split("_")[0]
    assert new_group not in set(groups.values())
    with pytest.raises(PendingClusteringError):
        write(table, _batch(["k1a"], 2, 7), "upsert")
    assert main(["rollback", table.uri, "--instant", clustering]) == 0
    capsys.readouterr()
    upsert = write(table, _batch(["k1a"], 2, 7), "upsert")
    assert upsert.updated == 1
    expected = sorted(
        [(k, "", 0) for k in groups if k != "k1a"] + [("k1a", upsert.instant, 7), ("new", done.instant, 5)]
    )
    ours = [(k, "" if k not in ("k1a", "new") else t, v) for k, t, v in _rows(read_snapshot(table))]
    assert ours == expected
    assert _rows(read_snapshot(table)) == _hudi_rs(table.base_path)
    assert not table.timeline().filter(
        [Action.REPLACECOMMIT, Action.CLUSTERING], [State.REQUESTED, State.INFLIGHT]
    )


def test_only_the_groups_a_pending_clustering_plans_refuse_and_every_one_reached_is_named(
    tmp_path: Path,
) -> None:
    """A group the clustering does not plan (made after it, in the same partition) takes updates;
    a batch reaching two planned groups names both, sorted."""
    table, clustering, groups = _crashed_merge(tmp_path / "t", "cow", 6)
    write(table, _batch(["new"], 2, 5), "upsert")  # a new group of its own
    assert write(table, _batch(["new"], 3, 6), "upsert").updated == 1
    named = ", ".join(sorted(f"x/{groups[k]}" for k in ("k0a", "k2a")))
    with pytest.raises(
        PendingClusteringError, match=f"reaches file group\\(s\\) {re.escape(named)} that the pending"
    ):
        write(table, _batch(["k0a", "k2a"], 3, 6), "upsert")
    assert clustering in str(table.timeline().pending)


def test_a_group_of_a_non_partitioned_table_is_named_by_its_file_id_alone(tmp_path: Path) -> None:
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    for i in range(3):
        write(table, pa.table({"id": [f"k{i}"], "ts": pa.array([1], pa.int64())}), "insert")

    def crash(point: str) -> None:
        if point == "commit":
            raise KeyboardInterrupt(point)

    with pytest.raises(KeyboardInterrupt):
        merge_small_files(table, "", 10**9, fault=crash)
    rows = read_snapshot(table).select(["_hoodie_record_key", "_hoodie_file_name"]).to_pylist()
    (group,) = [r["_hoodie_file_name"].split("_")[0] for r in rows if r["_hoodie_record_key"] == "k0"]
    with pytest.raises(PendingClusteringError, match=f"reaches file group\\(s\\) {group} that the pending"):
        write(table, pa.table({"id": ["k0"], "ts": pa.array([2], pa.int64())}), "upsert")
