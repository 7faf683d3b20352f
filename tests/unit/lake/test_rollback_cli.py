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
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash, inject_crash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

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


def _table(path: Path, kind: str = "cow") -> LakeTable:
    return LakeTable.create(
        path,
        name="orders",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
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
    return sorted(os.listdir(path / ".hoodie"))


def test_cli_rollback_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t"
    table = _table(path)
    first = write(table, _batch([1, 2], 1, "a"), "insert").instant
    with pytest.raises(SimulatedCrash), inject_crash(7):  # two base files made, no commit
        write(table, _batch([1, 3], 2, "b"), "upsert")
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


def test_cli_restore_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t"
    table = _table(path, "mor")
    write(table, _batch([1, 2], 1, "a"), "insert")
    point = write(table, _batch([2], 2, "b"), "upsert").instant
    create_savepoint(table, point)
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


def _lake(*argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "airflow_lake_provider.lake.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_lake_write_killed_at_random_moments_then_lake_rollback(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "t"
    table = _table(path, kind)
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
    print(f"\nSIGKILL during lake write ({kind}, a write takes {duration:.1f} s): {outcomes}")
