"""``lake rollback`` and ``lake restore``: the exact contract, errors that change nothing, and
``lake write`` killed with SIGKILL at random moments, then ``lake rollback``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing
from hudi import HudiTableBuilder
from savepoint_support import savepoint
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[3]


def _batch(ids: range | list[int], ts: int, v: str) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "city": pa.array([f"c{i % 40}" for i in ids]),
            "v": pa.array([f"{v}{i}" for i in ids]),
        }
    )


def _table(path: Path, kind: str = "cow", version: int = 6) -> LakeTable:
    return LakeTable.create(
        path,
        name="orders",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        table_version=version,
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _rows(path: Path) -> dict[int, str]:
    ours = read_snapshot(LakeTable.open(path))
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    if not batches or ours.num_columns == 0:  # an empty table
        assert ours.num_rows == sum(b.num_rows for b in batches) == 0
        return {}
    theirs = pa.Table.from_batches(batches)
    mine = dict(zip(ours.column("id").to_pylist(), ours.column("v").to_pylist(), strict=True))
    assert len(mine) == ours.num_rows  # no duplicated key
    assert mine == dict(zip(theirs.column("id").to_pylist(), theirs.column("v").to_pylist(), strict=True))
    return mine


def _hoodie(path: Path) -> list[str]:
    """The timeline folder's files (``.hoodie/``, or ``.hoodie/timeline/`` on v8/v9)."""
    v2 = path / ".hoodie" / "timeline"
    return sorted(os.listdir(v2 if v2.is_dir() else path / ".hoodie"))


# Table versions of the contract tests: 6, and 8 (Hudi 1.x).
VERSIONS = [6, 8]


@pytest.mark.parametrize("version", VERSIONS)
def test_cli_rollback_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int) -> None:
    path = tmp_path / "t"
    table = _table(path, version=version)
    first = write(table, _batch([1, 2], 1, "a"), "insert").instant
    with pytest.raises(SimulatedCrash):  # two base files made, no commit
        write(crashing(table, 7), _batch([1, 3], 2, "b"), "upsert")
    [failed] = table.timeline().pending
    # Errors: one line naming the path or instant, exit 1, nothing changed.
    before = _hoodie(path)
    code, out, err = _run(capsys, "rollback", str(path), "--instant", "20200101000000000")
    assert (code, out) == (1, "")
    assert err == f"lake: error: {path}: there is no instant 20200101000000000 on the timeline\n"
    code, out, err = _run(capsys, "rollback", str(path), "--instant", first)
    assert code == 1 and f"{first} is a completed commit; pass --force" in err
    code, _, err = _run(capsys, "rollback", str(path), "--force")
    assert code == 1 and "--force needs --instant" in err
    assert _hoodie(path) == before
    # No instant: every failed write; the line says what was rolled back.
    code, out, err = _run(capsys, "rollback", str(path))
    [rolled] = [i for i in LakeTable.open(path).timeline().instants if i.action.value == "rollback"]
    assert (code, err) == (0, "")
    expected = (
        f"rolled back commit {failed.timestamp} at {rolled.timestamp}: 2 files deleted, 0 log files marked"
    )
    assert out == expected + "\n"
    assert _rows(path) == {1: "a1", 2: "a2"}
    assert _run(capsys, "rollback", str(path)) == (0, "NO_WORK\n", "")
    # --force: the latest completed commit.
    code, out, _ = _run(capsys, "rollback", str(path), "--instant", first, "--force")
    assert code == 0 and out.startswith(f"rolled back commit {first} at ")
    assert _rows(path) == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_cli_restore_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int) -> None:
    path = tmp_path / "t"
    table = _table(path, "mor", version)
    write(table, _batch([1, 2], 1, "a"), "insert")
    point = write(table, _batch([2], 2, "b"), "upsert").instant
    savepoint(table, point)
    later = [
        write(table, _batch([1, 5], 3, "c"), "upsert").instant,
        write(table, _batch([2], 4, "d"), "delete").instant,
    ]
    before = _hoodie(path)
    code, out, err = _run(capsys, "restore", str(path), "--savepoint", later[0])
    assert (code, out) == (1, "")
    assert err == f"lake: error: {path}: there is no savepoint at {later[0]} (savepoints: {point})\n"
    assert _hoodie(path) == before
    code, out, err = _run(capsys, "restore", str(path), "--savepoint", point)
    [restored] = [
        i.timestamp for i in LakeTable.open(path).timeline().instants if i.action.value == "restore"
    ]
    assert (code, err) == (0, "")
    assert out == f"restored savepoint {point} at {restored}: rolled back {later[1]}, {later[0]}\n"
    assert _rows(path) == {1: "a1", 2: "b2"}
    assert _run(capsys, "restore", str(path), "--savepoint", point) == (
        0,
        f"NO_WORK: nothing after savepoint {point}\n",
        "",
    )


# -- forced rollback after a clean removed the slices it would fall back to -----------------------------
KEEP_ONE_VERSION = ("--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1")


def _file_id(path: Path, partition: str) -> str:
    [file_id] = {n.split("_")[0] for n in os.listdir(path / partition) if n.endswith(".parquet")}
    return file_id


def _cleaned_refusal(
    path: Path, t: str, lost: tuple[str, str, str], n: int, before: str, savepoint: str | None = None
) -> str:
    """The CLI's line refusing a forced rollback of ``t``; ``lost``: (partition, file id, slice)."""
    partition, file_id, at = lost
    count = f"{n} slice" + ("" if n == 1 else "s")
    line = (
        f"lake: error: {path}: cannot roll back {t}: a clean removed the file slice {at} of file group "
        f"{file_id} in partition {partition} ({count} in all) that the table would fall back to, so "
        f"the rollback would delete the only version left; a savepoint of {before} made before the "
        f"clean (lake savepoint create {path} --instant {before}) would have kept it"
    )
    if savepoint:
        line += (
            f"; to undo {t} now, restore the savepoint {savepoint} (lake restore {path} --savepoint "
            f"{savepoint}), which no clean removed"
        )
    return line + "\n"


def _refused_changing_nothing(
    capsys: pytest.CaptureFixture[str], path: Path, t: str, error: str, rows: dict[int, str]
) -> None:
    before = tree_digest(path)
    assert _run(capsys, "rollback", str(path), "--instant", t, "--force") == (1, "", error)
    assert tree_digest(path) == before
    assert _rows(path) == rows  # ours == hudi-rs


def test_forced_rollback_of_a_cow_write_whose_older_version_a_clean_removed_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: exit 0 and 0 rows, for ours and hudi-rs (the rollback deleted the only version left)."""
    path = tmp_path / "t"
    table = _table(path)
    v1 = write(table, _batch([1, 2], 1, "a"), "upsert").instant
    v2 = write(table, _batch([1, 2], 2, "b"), "upsert").instant
    assert _run(capsys, "clean", str(path), *KEEP_ONE_VERSION)[0] == 0
    for partition in ("c1", "c2"):  # v2's base file is the only one left
        [left] = [n for n in os.listdir(path / partition) if n.endswith(".parquet")]
        assert left.endswith(f"_{v2}.parquet")
    # Time travel to v1 is refused for the same reason.
    code, _, err = _run(capsys, "read", str(path), "--output", str(tmp_path / "o.parquet"), "--as-of", v1)
    assert code == 1 and f"cannot read as of {v1}: a clean removed the file slice {v1}" in err
    error = _cleaned_refusal(path, v2, ("c1", _file_id(path, "c1"), v1), 2, v1)
    _refused_changing_nothing(capsys, path, v2, error, {1: "b1", 2: "b2"})


def test_forced_rollback_after_a_clean_names_the_savepoint_to_restore_and_a_savepoint_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t"
    table = _table(path)
    v0 = write(table, _batch([1, 2], 1, "a"), "upsert").instant
    create_savepoint(table, v0)
    v1 = write(table, _batch([1, 2], 2, "b"), "upsert").instant
    v2 = write(table, _batch([1], 3, "c"), "upsert").instant
    assert _run(capsys, "clean", str(path), *KEEP_ONE_VERSION)[0] == 0  # keeps v0 (savepoint) and v2
    error = _cleaned_refusal(path, v2, ("c1", _file_id(path, "c1"), v1), 1, v1, savepoint=v0)
    _refused_changing_nothing(capsys, path, v2, error, {1: "c1", 2: "b2"})
    # What the message says works: the restore, and (on a copy made before the clean) the savepoint.
    code, out, err = _run(capsys, "restore", str(path), "--savepoint", v0)
    assert (code, err) == (0, "") and out.endswith(f"rolled back {v2}, {v1}\n")
    assert _rows(path) == {1: "a1", 2: "a2"}
    kept = tmp_path / "kept"
    table = _table(kept)
    write(table, _batch([1, 2], 1, "a"), "upsert")
    v1 = write(table, _batch([1, 2], 2, "b"), "upsert").instant
    v2 = write(table, _batch([1], 3, "c"), "upsert").instant
    assert _run(capsys, "savepoint", "create", str(kept), "--instant", v1)[0] == 0
    assert _run(capsys, "clean", str(kept), *KEEP_ONE_VERSION)[0] == 0
    code, out, err = _run(capsys, "rollback", str(kept), "--instant", v2, "--force")
    assert (code, err) == (0, "") and out.startswith(f"rolled back commit {v2} at ")
    assert _rows(kept) == {1: "b1", 2: "b2"}


def test_forced_rollback_of_a_mor_compaction_whose_compacted_slice_a_clean_removed_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: exit 0 and key 1 gone (its compacted slice, base and log, was cleaned)."""
    path = tmp_path / "t"
    table = _table(path, "mor")
    d1 = write(table, _batch([1, 2], 1, "a"), "insert").instant
    d2 = write(table, _batch([1], 2, "b"), "upsert").instant  # a log file on key 1's slice
    assert _run(capsys, "compact", str(path), "--mode", "run", "--force")[0] == 0
    compaction = LakeTable.open(path).timeline().last_completed_commit
    assert compaction is not None and compaction.action.value == "commit"
    assert _run(capsys, "clean", str(path), *KEEP_ONE_VERSION)[0] == 0
    assert len(os.listdir(path / "c1")) == 2  # the compacted base file (and partition metadata) only
    error = _cleaned_refusal(path, compaction.timestamp, ("c1", _file_id(path, "c1"), d1), 1, d2)
    _refused_changing_nothing(capsys, path, compaction.timestamp, error, {1: "b1", 2: "a2"})


def test_forced_rollback_of_a_merge_whose_replaced_file_groups_a_clean_removed_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: exit 0 and the partition's 50 rows became 0 (the replaced file groups had no files left)."""
    path = tmp_path / "t"
    table = _table(path)
    made = {}  # file id -> the instant that made it
    for n in range(5):
        result = write(table, _batch([40 * (10 * n + j) for j in range(10)], 1, "a"), "insert")
        made.update({Path(f).name.split("_")[0]: result.instant for f in result.files})
    merged = merge_small_files(table, "c0", 10**9)
    assert merged.instant is not None and sorted(merged.replaced) == sorted(made)
    assert _run(capsys, "clean", str(path), *KEEP_ONE_VERSION)[0] == 0
    assert [n for n in os.listdir(path / "c0") if n.endswith(".parquet")] == [Path(merged.written[0]).name]
    first = min(made)
    error = _cleaned_refusal(path, merged.instant, ("c0", first, made[first]), 5, max(made.values()))
    _refused_changing_nothing(capsys, path, merged.instant, error, {40 * k: f"a{40 * k}" for k in range(50)})


ARCHIVE_ALL_BUT_ONE = ("--option", "hoodie.keep.min.commits=1", "--option", "hoodie.keep.max.commits=2")


def test_forced_rollback_refused_when_the_rewritten_slice_was_written_by_an_archived_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The write stats of the commit that made the slice are archived: the rolled-back commit's own
    ``prevCommit`` names the slice it rewrote."""
    path = tmp_path / "t"
    table = _table(path)
    v1 = write(table, _batch([1], 1, "a"), "upsert").instant
    write(table, _batch([2], 2, "a"), "upsert")
    w3 = write(table, _batch([3], 3, "a"), "upsert").instant
    assert _run(capsys, "archive", str(path), *ARCHIVE_ALL_BUT_ONE)[0] == 0
    assert [i.timestamp for i in LakeTable.open(path).timeline().completed_commits] == [w3]
    v4 = write(table, _batch([1], 4, "b"), "upsert").instant  # rewrites v1's slice
    assert _run(capsys, "clean", str(path), *KEEP_ONE_VERSION)[0] == 0
    error = _cleaned_refusal(path, v4, ("c1", _file_id(path, "c1"), v1), 1, w3)
    _refused_changing_nothing(capsys, path, v4, error, {1: "b1", 2: "a2", 3: "a3"})


def test_forced_rollback_of_the_only_active_commit_after_archival_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: exit 0; ours then read the archived commits' rows, hudi-rs an empty table (no commit on
    the active timeline). Found on the Java table cow_v6_simplekeygen_nonhivestyle_overwritetable."""
    path = tmp_path / "t"
    table = _table(path)
    write(table, _batch([1], 1, "a"), "upsert")
    write(table, _batch([2], 2, "a"), "upsert")
    w3 = write(table, _batch([3], 3, "a"), "upsert").instant
    assert _run(capsys, "archive", str(path), *ARCHIVE_ALL_BUT_ONE)[0] == 0
    assert [i.timestamp for i in LakeTable.open(path).timeline().completed_commits] == [w3]
    error = (
        f"lake: error: {path}: cannot roll back {w3}: it is the only completed commit on the active "
        "timeline and the ones before it are archived; without it Hudi readers (hudi-rs, Spark) read "
        "the table as empty, though the archived commits' files stay\n"
    )
    _refused_changing_nothing(capsys, path, w3, error, {1: "a1", 2: "a2", 3: "a3"})


def test_forced_rollback_of_a_merge_refused_when_its_replaced_groups_were_written_by_archived_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No active write stat names the replaced file groups: the replacecommit's own list does."""
    path = tmp_path / "t"
    table = _table(path)
    for n in range(5):
        write(table, _batch([40 * (10 * n + j) for j in range(10)], 1, "a"), "insert")
    last = write(table, _batch([1], 1, "a"), "insert").instant  # another partition
    assert _run(capsys, "archive", str(path), *ARCHIVE_ALL_BUT_ONE)[0] == 0
    assert [i.timestamp for i in LakeTable.open(path).timeline().completed_commits] == [last]
    merged = merge_small_files(table, "c0", 10**9)
    assert merged.instant is not None and len(merged.replaced) == 5
    assert _run(capsys, "clean", str(path), *KEEP_ONE_VERSION)[0] == 0
    first = min(merged.replaced)
    error = (
        f"lake: error: {path}: cannot roll back {merged.instant}: a clean removed every file of file group "
        f"{first} in partition c0 (5 slices in all) that the table would fall back to, so the rollback "
        f"would delete the only version left; a savepoint of {last} made before the clean (lake "
        f"savepoint create {path} --instant {last}) would have kept it\n"
    )
    expected = {40 * k: f"a{40 * k}" for k in range(50)}
    _refused_changing_nothing(capsys, path, merged.instant, error, {**expected, 1: "a1"})


# -- a write failing on a corrupt table changes nothing ----------------------------------------------
def _failing_write(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, path: Path, lazy: bool, error: str
) -> None:
    """``lake write`` (LAZY: the API with that policy) fails with ``error`` and changes no byte."""
    before = tree_digest(path)
    batch = _batch([1, 2], 9, "z")
    if lazy:
        with pytest.raises(LakeError) as caught:
            write(LakeTable.open(path), batch, "upsert", options=LAZY)
        assert f"lake: error: {caught.value}\n" == error
    else:
        source = tmp_path / "in.parquet"
        pq.write_table(batch, source)
        assert _run(capsys, "write", str(path), "--input", str(source), "--operation", "upsert") == (
            1,
            "",
            error,
        )
    assert tree_digest(path) == before


LAZY = {"hoodie.cleaner.policy.failed.writes": "LAZY"}


@pytest.mark.parametrize(("kind", "lazy"), [("cow", False), ("mor", False), ("mor", True)])
def test_a_write_failing_on_a_corrupt_base_file_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, lazy: bool
) -> None:
    """Was: the write rolled itself back and left a .rollback instant (requested, inflight, completed)."""
    path = tmp_path / "t"
    write(_table(path, kind), _batch([1, 2], 1, "a"), "insert", options=LAZY if lazy else None)
    [base] = [n for n in os.listdir(path / "c1") if n.endswith(".parquet")]
    (path / "c1" / base).write_bytes(b"not a parquet file")
    error = (
        f"lake: error: cannot read base file {path / 'c1' / base}: Parquet magic bytes not found in footer. "
        "Either the file is corrupted or this is not a parquet file.\n"
    )
    _failing_write(capsys, tmp_path, path, lazy, error)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_write_failing_on_a_corrupt_compaction_plan_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lazy: bool
) -> None:
    path = tmp_path / "t"
    table = _table(path, "mor")
    options = LAZY if lazy else None
    write(table, _batch([1, 2], 1, "a"), "insert", options=options)
    write(table, _batch([1], 2, "b"), "upsert", options=options)
    assert _run(capsys, "compact", str(path), "--mode", "schedule", "--force")[0] == 0
    [plan] = LakeTable.open(path).timeline().pending_compactions()
    requested = path / ".hoodie" / f"{plan.timestamp}.compaction.requested"
    requested.write_bytes(b"garbage")
    error = (
        f"lake: error: {requested}: not a readable Avro container file (cannot read header - is it an "
        "avro file?)\n"
    )
    _failing_write(capsys, tmp_path, path, lazy, error)


def _lake(*argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "airflow_lake_provider.lake.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_lake_write_killed_at_random_moments_then_lake_rollback(
    tmp_path: Path, kind: str, version: int
) -> None:
    path = tmp_path / "t"
    table = _table(path, kind, version)
    write(table, _batch(range(20000), 1, "a"), "insert")
    model = {i: f"a{i}" for i in range(20000)}

    def update(n: int) -> tuple[Path, pa.Table]:
        batch = _batch(range(n * 1000, n * 1000 + 15000), 10 + n, f"u{n}-")
        source = tmp_path / f"in{n}.parquet"
        pq.write_table(batch, source)
        return source, batch

    # One uninterrupted write sets the window the kills fall in (start-up included).
    source, batch = update(0)
    started = time.monotonic()
    proc = _lake("write", str(path), "--input", str(source), "--operation", "upsert")
    assert proc.wait(timeout=300) == 0
    duration = time.monotonic() - started
    model.update(dict(zip(batch.column("id").to_pylist(), batch.column("v").to_pylist(), strict=True)))
    rng = random.Random(11)
    outcomes = []
    for n in range(1, 7):
        source, batch = update(n)
        commits = len(LakeTable.open(path).timeline().completed_commits)
        proc = _lake("write", str(path), "--input", str(source), "--operation", "upsert")
        time.sleep(rng.uniform(0.3, 1.05) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        committed = len(LakeTable.open(path).timeline().completed_commits) > commits
        rb = _lake("rollback", str(path))
        out, err = rb.communicate(timeout=300)
        assert rb.returncode == 0, err
        if committed:
            model.update(
                dict(zip(batch.column("id").to_pylist(), batch.column("v").to_pylist(), strict=True))
            )
            assert out == "NO_WORK\n"
        outcomes.append(
            "committed" if committed else "rolled back" if out.startswith("rolled back") else "not started"
        )
        assert _rows(path) == model
        assert LakeTable.open(path).timeline().pending == []
    print(f"\nSIGKILL during lake write (v{version} {kind}, a write takes {duration:.1f} s): {outcomes}")
