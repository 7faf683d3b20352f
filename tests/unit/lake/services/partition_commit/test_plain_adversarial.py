"""Adversarial inputs to the plain-directory merge and commit (no ``.hoodie/``): records and states
someone edited or corrupted, links that lead out of the directory, partition names readers skip or
that differ only in spaces, and bases nested in each other. Each is refused with one ``LakeError``
naming the offending value, and nothing in the directory changes."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import LakeError, PartitionCommitError, UnsafePathError
from airflow_lake_provider.lake.services.partition_commit.executor import commit_plain_partitions
from airflow_lake_provider.lake.services.partition_commit.plain import (
    MERGE_DIR,
    STATE_DIR,
    merge_plain_partition,
)
from airflow_lake_provider.lake.services.partition_commit.state import state_file_name
from airflow_lake_provider.lake.storage import LocalStorage

P = "dt=2024-01-05"
MID = "a" * 32


def _put(root: Path, rel: str, start: int, n: int) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(range(start, start + n), pa.int64())}), path)


def _rows(root: Path) -> Counter:
    return Counter(ds.dataset(root, format="parquet").to_table().column("id").to_pylist())


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


def _record(root: Path, body: object) -> None:
    path = root / MERGE_DIR / f"{MID}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))


@pytest.mark.parametrize(
    ("inputs", "outputs"),
    [
        # An input that is also an output: publishing it, then deleting the inputs, deleted every row.
        ([[f"part-merged-{MID}-00000.parquet", 1], ["b.parquet", 1]], [f"part-merged-{MID}-00000.parquet"]),
        # Outputs that are not this merge's own names: any visible file would pass as "published".
        ([["b.parquet", 1]], ["a.parquet"]),
        ([["b.parquet", 1]], [f"part-merged-{'b' * 32}-00000.parquet"]),
        ([["b.parquet", 1], ["b.parquet", 1]], [f"part-merged-{MID}-00000.parquet"]),
    ],
)
def test_a_record_whose_outputs_are_not_its_own_deletes_nothing(
    tmp_path: Path, inputs: list, outputs: list
) -> None:
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 10)
    _put(root, f"{P}/b.parquet", 10, 10)
    for name in outputs:  # the record's "outputs" exist as visible files
        if not (root / P / name).exists():
            _put(root, f"{P}/{name}", 100, 1)
    _record(
        root,
        {
            "version": 1,
            "mergeId": MID,
            "partition": P,
            "inputs": inputs,
            "outputs": outputs,
            "targetBytes": 9,
        },
    )
    before = _snapshot(root)
    with pytest.raises(PartitionCommitError, match=rf"merges/{MID}.json: merge record names files"):
        merge_plain_partition(LocalStorage(root), P, 10**9)
    assert _snapshot(root) == before


@pytest.mark.parametrize(
    "body",
    [
        {"mergeId": MID, "partition": P, "inputs": [["a.parquet", 1e999]], "targetBytes": 1},
        {"mergeId": MID, "partition": [P], "inputs": [], "targetBytes": 1},
        {"mergeId": MID, "partition": P, "inputs": "ab", "targetBytes": 1},
        {"mergeId": MID, "partition": P, "inputs": [[1, 1]], "targetBytes": 1},
        {"mergeId": MID, "partition": P, "inputs": [], "targetBytes": True},
    ],
)
def test_a_record_of_the_wrong_shape_is_one_error(tmp_path: Path, body: dict) -> None:
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 10)
    _put(root, f"{P}/b.parquet", 10, 10)
    _record(root, {"version": 1, "outputs": [f"part-merged-{MID}-00000.parquet"], **body})
    before = _snapshot(root)
    with pytest.raises(
        PartitionCommitError, match=rf"merges/{MID}.json: (unreadable merge record|merge record names)"
    ):
        merge_plain_partition(LocalStorage(root), P, 10**9)
    assert _snapshot(root) == before


def test_an_input_linked_from_outside_the_directory_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    # It was merged, published, and then refused when deleted: every row of it doubled for good,
    # and every later run stopped at its record.
    root, outside = tmp_path / "events", tmp_path / "elsewhere"
    _put(root, f"{P}/a.parquet", 0, 10)
    _put(outside, "x.parquet", 10, 10)
    (root / P / "b.parquet").symlink_to(outside / "x.parquet")
    before, before_outside = _snapshot(root), _snapshot(outside)
    with pytest.raises(
        UnsafePathError, match=r"b.parquet.*resolves to .*elsewhere/x.parquet.*nothing changed"
    ):
        merge_plain_partition(LocalStorage(root), P, 10**9)
    assert _snapshot(root) == before and _snapshot(outside) == before_outside
    assert sorted(os.listdir(root / P)) == ["a.parquet", "b.parquet"]
    assert _rows(root) == Counter(range(20))


def test_a_partition_folder_linked_from_outside_is_refused_and_nothing_is_written_there(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "events", tmp_path / "elsewhere"
    _put(outside, "a.parquet", 0, 10)
    _put(outside, "b.parquet", 10, 10)
    root.mkdir()
    (root / P).symlink_to(outside, target_is_directory=True)
    before = _snapshot(outside)
    with pytest.raises(UnsafePathError, match=rf"{P}.*resolves to .*elsewhere.*nothing changed"):
        merge_plain_partition(LocalStorage(root), P, 10**9)
    assert _snapshot(outside) == before
    assert sorted(os.listdir(outside)) == ["a.parquet", "b.parquet"]


@pytest.mark.parametrize(
    "policies", ["success-file", "custom", "merge-small-files", "success-file,merge-small-files"]
)
def test_a_partition_folder_linked_from_outside_is_refused_for_every_policy_before_any_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policies: str
) -> None:
    # Only merge-small-files refused such a folder, and only after the commit state was written:
    # success-file wrote _SUCCESS through the link into the other folder, custom ran on it.
    root, outside = tmp_path / "events", tmp_path / "elsewhere"
    _put(outside, "a.parquet", 0, 10)
    _put(outside, "b.parquet", 10, 10)
    _put(root, "dt=2024-01-04/c.parquet", 20, 10)
    (root / P).symlink_to(outside, target_is_directory=True)
    before, before_outside = _snapshot(root), _snapshot(outside)
    calls: list[str] = []
    expected = (
        f"partition folder {P!r} of {root} leads out of it (it resolves to {outside}, outside {root}): "
        "partition commit only writes inside the directory; nothing changed"
    )
    with pytest.raises(UnsafePathError) as refused:
        commit_plain_partitions(
            LocalStorage(root),
            ["dt=2024-01-04", P],
            {"sink.partition-commit.policy.kind": policies},
            custom_policy=lambda context: calls.append(context.partition_path),
        )
    assert str(refused.value) == expected
    assert calls == []
    assert _snapshot(root) == before and _snapshot(outside) == before_outside
    assert sorted(os.listdir(root)) == ["dt=2024-01-04", P]  # no state, no lock
    assert sorted(os.listdir(outside)) == ["a.parquet", "b.parquet"]
    if policies != "custom":  # the CLI: one error line (a custom policy needs a class there)
        assert main(["partition-commit", str(root), "--partition", P, "--policy", policies]) == 1
        assert capsys.readouterr() == ("", f"lake: error: {expected}\n")
        assert sorted(os.listdir(outside)) == ["a.parquet", "b.parquet"]


SUCCESS_KEY = "sink.partition-commit.success-file.name"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        # Each was truncated to an empty file (exit 0): rows lost, and readers failed on it.
        (
            "a.parquet",
            f"{SUCCESS_KEY}='a.parquet' is the name of a data file (.parquet, .orc, .hfile, .avro): "
            "choose another, e.g. _SUCCESS",
        ),
        (
            "000000_0",  # Hive names its data files so: no suffix, but visible, so data
            f"{SUCCESS_KEY}='000000_0': in a plain parquet directory every file whose name does not start "
            "with '_' or '.' is data; name the success file with a leading '_' (e.g. _SUCCESS)",
        ),
        (
            "_common_metadata",  # Spark's summary file: hidden, but not an empty success file
            "{root}/dt=2024-01-05/_common_metadata is a data file (parquet): "
            f"{SUCCESS_KEY}='_common_metadata' would overwrite it; nothing was committed",
        ),
    ],
)
def test_a_success_file_name_that_is_a_file_of_the_directory_is_refused(
    tmp_path: Path, name: str, message: str
) -> None:
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 10)
    _put(root, f"{P}/000000_0", 10, 10)
    pq.write_metadata(pa.schema([("id", pa.int64())]), root / P / "_common_metadata")
    before = _snapshot(root)
    with pytest.raises(LakeError) as refused:
        commit_plain_partitions(LocalStorage(root), [P], {SUCCESS_KEY: name})
    assert str(refused.value) == message.format(root=root)
    assert _snapshot(root) == before
    assert _rows(root) == Counter(range(20))


def test_a_success_file_with_content_is_overwritten_as_flink_does(tmp_path: Path) -> None:
    # An S3A committer's _SUCCESS is a JSON manifest: not data, so the commit writes it afresh.
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 10)
    (root / P / "_SUCCESS").write_text('{"name": "org.apache.hadoop.fs.s3a.commit.files.SuccessData"}')
    assert commit_plain_partitions(LocalStorage(root), [P]).committed == (P,)
    assert (root / P / "_SUCCESS").read_bytes() == b""


def test_a_partition_whose_name_ends_in_a_space_is_that_folder_not_its_trimmed_neighbour(
    tmp_path: Path,
) -> None:
    # Hive and Spark keep spaces in partition values ("city=Paris "): trimming the name merged
    # the neighbour "city=Paris" when "city=Paris " was asked.
    root = tmp_path / "events"
    for folder, start in (("city=Paris ", 0), ("city=Paris", 100)):
        _put(root, f"{folder}/a.parquet", start, 10)
        _put(root, f"{folder}/b.parquet", start + 10, 10)
    result = merge_plain_partition(LocalStorage(root), "city=Paris ", 10**9)
    assert result.partition == "city=Paris " and result.replaced == ("a.parquet", "b.parquet")
    assert sorted(os.listdir(root / "city=Paris")) == ["a.parquet", "b.parquet"]
    assert sorted(os.listdir(root / "city=Paris ")) == list(result.written)
    with pytest.raises(PartitionCommitError, match=r"partition\(s\) \['city=Rome '\] hold no visible file"):
        commit_plain_partitions(LocalStorage(root), ["city=Rome "])


def test_the_hudi_path_keeps_spaces_in_partition_names_too() -> None:
    from airflow_lake_provider.lake.services.partition_commit.executor import _check_partition_name

    assert _check_partition_name("city=Paris ") == "city=Paris "
    assert _check_partition_name("/dt=1/") == "dt=1"


@pytest.mark.parametrize("partition", ["_temporary/0", ".staging", "dt=1/_tmp", "dt=1/.x"])
def test_a_partition_readers_skip_is_refused(tmp_path: Path, partition: str) -> None:
    # Spark's _temporary/ holds a running job's files: merging them breaks its commit, and readers
    # never see a hidden folder's rows anyway.
    root = tmp_path / "events"
    _put(root, f"{partition}/a.parquet", 0, 10)
    _put(root, f"{partition}/b.parquet", 10, 10)
    before = _snapshot(root)
    with pytest.raises(PartitionCommitError, match=rf"partition '{partition}' .*hidden"):
        merge_plain_partition(LocalStorage(root), partition, 10**9)
    with pytest.raises(PartitionCommitError, match=rf"partition '{partition}' .*hidden"):
        commit_plain_partitions(LocalStorage(root), [partition])
    assert _snapshot(root) == before


def test_directories_nested_in_each_other_are_refused(tmp_path: Path) -> None:
    # /events with partition dt=... and /events/dt=... as a directory of its own have two locks and
    # two record folders: run together, each took the other's in-progress files for orphans, and
    # rows could be merged twice. The first one used owns the tree.
    root = tmp_path / "events"
    for k in range(4):
        _put(root, f"{P}/f{k}.parquet", k * 10, 10)
        _put(root, f"dt=2024-01-06/f{k}.parquet", 100 + k * 10, 10)
    outer = LocalStorage(root)
    commit_plain_partitions(outer, [P])  # the outer directory keeps state now
    before = _snapshot(root)
    inner = LocalStorage(root / "dt=2024-01-06")
    with pytest.raises(
        PartitionCommitError, match=r"dt=2024-01-06 lies inside .*events, where partition commit"
    ):
        merge_plain_partition(inner, "", 10**9)
    with pytest.raises(
        PartitionCommitError, match=r"dt=2024-01-06 lies inside .*events, where partition commit"
    ):
        commit_plain_partitions(inner, [""])
    assert _snapshot(root) == before

    other = tmp_path / "other"
    for k in range(4):
        _put(other, f"{P}/f{k}.parquet", k * 10, 10)
    merge_plain_partition(LocalStorage(other / P), "", 10**9)  # the partition used as a directory
    before = _snapshot(other)
    with pytest.raises(PartitionCommitError, match=rf"other/{P} keeps the partition commit state of its own"):
        merge_plain_partition(LocalStorage(other), P, 10**9)
    assert _snapshot(other) == before
    assert _rows(other) == Counter(range(40))


@pytest.mark.parametrize("target", [0, -1])
def test_a_target_size_that_is_not_positive_changes_nothing(tmp_path: Path, target: int) -> None:
    # It was refused only after pending merges were rolled forward and orphans discarded.
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 10)
    _put(root, f"{P}/b.parquet", 10, 10)
    _put(root, f"{P}/.part-merged-{'c' * 32}-00000.parquet.inprogress", 0, 10)  # an orphan
    before = _snapshot(root)
    with pytest.raises(PartitionCommitError, match=rf"target size {target} must be positive"):
        merge_plain_partition(LocalStorage(root), P, target)
    assert _snapshot(root) == before


@pytest.mark.parametrize(
    "body",
    [
        b'{"partition":"P","status":"COMMITTED","applied":[],"covered":[],"commits":1e999}',
        b'{"partition":"P","status":"COMMITTED","applied":"success-file","covered":[],"commits":1}',
        b'{"partition":"P","status":"COMMITTED","applied":[],"covered":"part-0.parquet","commits":1}',
        b'{"partition":"P","status":"COMMITTED","applied":[],"covered":[1],"commits":1}',
        b'{"partition":"P","status":"COMMITTED","applied":[],"covered":[],"commits":1.5}',
        b'{"partition":"P","status":"COMMITTED","applied":[],"covered":[],"commits":-1}',
        b'{"partition":"P","status":"COMMITTED","applied":[],"covered":[],"commits":1,"committedAt":5}',
        b"\xff\xfe",
        b"[]",
    ],
)
def test_a_commit_state_of_the_wrong_shape_is_one_error(tmp_path: Path, body: bytes) -> None:
    # "applied": "success-file" read as the policies 's', 'u', 'c'...; 1e999 escaped as OverflowError.
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 10)
    state = root / STATE_DIR / state_file_name(P)
    state.parent.mkdir(parents=True)
    state.write_bytes(body.replace(b'"P"', json.dumps(P).encode()))
    before = _snapshot(root)
    with pytest.raises(LakeError, match=rf"{state_file_name(P)}: unreadable commit state"):
        commit_plain_partitions(LocalStorage(root), [P])
    assert _snapshot(root) == before


def test_a_partition_named_twice_is_committed_once(tmp_path: Path) -> None:
    # "dt=1" and "dt=1/" are one folder: the custom policy ran twice and the result listed it twice.
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 3)
    calls: list[str] = []
    result = commit_plain_partitions(
        LocalStorage(root),
        [P, f"{P}/", P],
        {"sink.partition-commit.policy.kind": "custom"},
        custom_policy=lambda context: calls.append(context.partition_path),
    )
    assert calls == [P] and result.committed == (P,)
    state = json.loads((root / STATE_DIR / state_file_name(P)).read_text())
    assert state["commits"] == 1 and state["covered"] == ["a.parquet"]


def test_a_publish_killed_half_way_leaves_no_temporary_link_behind(tmp_path: Path) -> None:
    # A local publish links the hidden output to a temporary name, then renames it: killed in
    # between, the temporary link kept a whole merged file's bytes on disk for good.
    root = tmp_path / "events"
    _put(root, f"{P}/a.parquet", 0, 10)
    _put(root, f"{P}/b.parquet", 10, 10)
    leftover = f".part-merged-{'c' * 32}-00000.parquet.{'d' * 32}.tmp"
    _put(root, f"{P}/{leftover}", 0, 10)
    foreign = ".part-merged-notes.tmp"  # not a name a merge gives: kept
    (root / P / foreign).write_bytes(b"x")
    result = merge_plain_partition(LocalStorage(root), P, 10**9)
    assert leftover in result.discarded
    assert sorted(os.listdir(root / P)) == sorted([foreign, *result.written])
    assert _rows(root) == Counter(range(20))
