"""Odd partition values, corrupt files and future instants, through the ``lake`` CLI.

Partitions whose folder starts with "." are read, compacted and cleaned (Java Hudi and hudi-rs list
them); values no file system or Hudi reader can hold are refused before an instant exists; corrupt
commit and base files give one ``lake: error:`` line naming the file; a compaction plan cannot be
put in the future. Issue 30: a success-file name that is a file of the partition, a foreign parquet
file in a base file's place, and bad ``hoodie.properties``, retention hours, extractors and commit
JSON are each one error line, with the tree unchanged.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import CompactionScheduleConflictError
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.instant import InstantClock, format_instant, instant_to_datetime

REPO_ROOT = Path(__file__).resolve().parents[5]
Row = tuple[str, int, str]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = _run(capsys, *argv)
    assert (code, err) == (0, ""), err
    return out


def _error_line(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = _run(capsys, *argv)
    assert (code, out) == (1, ""), (out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lake: error: ")
    return lines[0]


def _input(path: Path, rows: list[Row], fields: tuple[str, ...] = ("p",)) -> str:
    columns: dict[str, pa.Array] = {
        "k": pa.array([r[0] for r in rows]),
        "ts": pa.array([r[1] for r in rows], pa.int64()),
    }
    for i, name in enumerate(fields):
        columns[name] = pa.array([r[2 + i] for r in rows])  # type: ignore[misc]
    pq.write_table(pa.table(columns), path)
    return str(path)


def _init(
    capsys: pytest.CaptureFixture[str], table: Path, kind: str, fields: str = "p", hive: bool = False
) -> None:
    argv = ["init", str(table), "--table-type", kind, "--name", "t", "--record-key", "k"]
    argv += ["--precombine", "ts", "--partition-fields", fields] + (["--hive-style"] if hive else [])
    _ok(capsys, *argv)


def _ours(capsys: pytest.CaptureFixture[str], table: Path, tmp_path: Path) -> list[tuple]:
    out = tmp_path / "out.parquet"
    _ok(capsys, "read", str(table), "--output", str(out))
    rows = pq.read_table(out).select(["_hoodie_partition_path", "k", "ts", "p"]).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def _hudi_rs(table: Path) -> list[tuple]:
    read = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table)).build().read())
    rows = read.select(["_hoodie_partition_path", "k", "ts", "p"]).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def _data_files(table: Path) -> list[str]:
    """Base and log files, table-relative, with the instant-dependent parts left out."""
    out = []
    for dirpath, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for f in files:
            if f.endswith(".parquet") or ".log." in f:
                out.append(os.path.relpath(os.path.join(dirpath, f), table))
    return sorted(out)


# -- item 2: partitions whose folder starts with "." ---------------------------------------------
def test_dot_partition_is_read_compacted_and_cleaned_like_hudi_rs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    _init(capsys, table, "mor")
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "1.parquet", [("a", 1, ".x"), ("b", 1, "y")]),
        "--operation",
        "insert",
    )
    expected = [(".x", "a", 1, ".x"), ("y", "b", 1, "y")]
    assert _ours(capsys, table, tmp_path) == expected == _hudi_rs(table)

    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "2.parquet", [("a", 2, ".x"), ("b", 2, "y")]),
        "--operation",
        "upsert",
    )
    logs = [f for f in _data_files(table) if ".log." in f]
    assert [f.split("/")[0] for f in logs] == [".x", "y"]  # the update went to a log in each partition
    expected = [(".x", "a", 2, ".x"), ("y", "b", 2, "y")]
    assert _ours(capsys, table, tmp_path) == expected == _hudi_rs(table)

    summary = json.loads(_ok(capsys, "compact", str(table), "--mode", "run", "--force"))
    assert summary["outcome"] == "COMPLETED"
    assert summary["execute"]["operations"] == 2  # the ".x" group is compacted too, not NO_WORK
    assert _ours(capsys, table, tmp_path) == expected == _hudi_rs(table)

    cleaned = json.loads(
        _ok(capsys, "clean", str(table), "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1")
    )
    assert cleaned["outcome"] == "CLEANED"
    assert {p: v["files"] for p, v in cleaned["partitions"].items()} == {".x": 2, "y": 2}
    compacted = summary["execute"]["instant"]
    left = _data_files(table)
    assert [f.split("/")[0] for f in left] == [".x", "y"]
    assert all(f.endswith(f"_{compacted}.parquet") for f in left)
    assert _ours(capsys, table, tmp_path) == expected == _hudi_rs(table)


def test_nested_hoodie_folder_is_skipped_and_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Java Hudi skips a folder named .hoodie at any depth: we neither list nor create one."""
    table = tmp_path / "t"
    _init(capsys, table, "cow", fields="p,q")
    rows = [("a", 1, ".x", ".y"), ("b", 1, "y", "z")]
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "1.parquet", rows, ("p", "q")),  # type: ignore[arg-type]
        "--operation",
        "insert",
    )
    assert _ours(capsys, table, tmp_path) == [(".x/.y", "a", 1, ".x"), ("y/z", "b", 1, "y")]
    # A copy of a partition under a nested .hoodie folder is not a partition of the table.
    shutil.copytree(table / "y" / "z", table / "y" / ".hoodie")
    assert _ours(capsys, table, tmp_path) == [(".x/.y", "a", 1, ".x"), ("y/z", "b", 1, "y")]

    before = tree_digest(table)
    bad = _input(tmp_path / "bad.parquet", [("c", 1, "w", ".hoodie")], ("p", "q"))  # type: ignore[list-item]
    line = _error_line(capsys, "write", str(table), "--input", bad, "--operation", "insert")
    assert line == (
        "lake: error: partition field 'q' value '.hoodie' cannot be a directory name: "
        "Java Hudi skips .hoodie folders"
    )
    assert tree_digest(table) == before


# -- item 6: values no file system (or Hudi reader) can hold ---------------------------------------
@pytest.mark.parametrize(
    ("value", "hive", "message"),
    [
        ("a\x00b", False, r"partition field 'p' value 'a\x00b' holds a NUL byte, which no file name can"),
        # "." is the table root (its rows would sit beside .hoodie/, read by no one), ".." its parent.
        (".", False, "partition field 'p' value '.' cannot be a directory name"),
        ("..", False, "partition field 'p' value '..' cannot be a directory name"),
        ("a/b", True, "partition field 'p' value 'a/b' cannot be a directory name"),
        (
            "z" * 300,
            False,
            f"partition field 'p' value '{'z' * 300}' makes a folder name of 300 bytes; "
            "file systems (and HDFS) allow 255",
        ),
        (
            "z" * 254,
            True,
            f"partition field 'p' value '{'z' * 254}' makes a folder name of 256 bytes; "
            "file systems (and HDFS) allow 255",
        ),
        (
            "é" * 128,
            False,
            f"partition field 'p' value '{'é' * 128}' makes a folder name of 256 bytes; "
            "file systems (and HDFS) allow 255",
        ),
        (
            "a\nb",
            False,
            r"partition field 'p' value 'a\nb' holds the control character '\n', "
            "which Hudi readers cannot list",
        ),
        (
            "a\tb",
            True,
            r"partition field 'p' value 'a\tb' holds the control character '\t', "
            "which Hudi readers cannot list",
        ),
        (
            "a\x7f",
            False,
            r"partition field 'p' value 'a\x7f' holds the control character '\x7f', "
            "which Hudi readers cannot list",
        ),
    ],
)
def test_unstorable_partition_value_is_refused_before_any_instant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, hive: bool, message: str
) -> None:
    table = tmp_path / "t"
    _init(capsys, table, "mor", hive=hive)
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "1.parquet", [("a", 1, "y")]),
        "--operation",
        "insert",
    )
    before = tree_digest(table)
    bad = _input(tmp_path / "bad.parquet", [("b", 1, "y"), ("c", 1, value)])
    assert _error_line(capsys, "write", str(table), "--input", bad, "--operation", "upsert") == (
        f"lake: error: {message}"
    )
    assert tree_digest(table) == before  # no instant, no folder, no marker


@pytest.mark.parametrize(("value", "hive"), [("z" * 255, False), ("z" * 253, True), ("." + "é" * 127, False)])
def test_longest_partition_folder_name_is_written_and_read_by_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, hive: bool
) -> None:
    table = tmp_path / "t"
    _init(capsys, table, "mor", hive=hive)
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "1.parquet", [("a", 1, value), ("b", 1, "y")]),
        "--operation",
        "insert",
    )
    folder = f"p={value}" if hive else value
    assert len(folder.encode()) == 255
    expected = sorted([(folder, "a", 1, value), ("p=y" if hive else "y", "b", 1, "y")])
    assert _ours(capsys, table, tmp_path) == expected == _hudi_rs(table)


def test_partition_path_longer_than_the_file_system_allows_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each folder name fits, the whole path does not: refused before an instant exists."""
    fields = tuple(f"f{i}" for i in range(17))
    table = tmp_path / "t"
    _init(capsys, table, "cow", fields=",".join(fields))
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "1.parquet", [("a", 1, *("v",) * 17)], fields),  # type: ignore[list-item]
        "--operation",
        "insert",
    )
    before = tree_digest(table)
    values = tuple(chr(ord("a") + i) * 250 for i in range(17))
    bad = _input(tmp_path / "bad.parquet", [("b", 1, *values)], fields)  # type: ignore[list-item]
    line = _error_line(capsys, "write", str(table), "--input", bad, "--operation", "insert")
    partition = "/".join(values)
    assert line.startswith(f"lake: error: partition path {partition!r} of {table}: a path of ")
    assert line.endswith(" fit (counting the files a write puts under it)")
    assert tree_digest(table) == before


# -- item 6: corrupt commit files -------------------------------------------------------------------
def _mor_with_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """A MOR table with a log file in each of two partitions; returns it and its last deltacommit."""
    table = tmp_path / "t"
    _init(capsys, table, "mor")
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "1.parquet", [("a", 1, "x"), ("b", 1, "y")]),
        "--operation",
        "insert",
    )
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "2.parquet", [("a", 2, "x"), ("b", 2, "y")]),
        "--operation",
        "upsert",
    )
    # Nothing due nor pending (NO_WORK), but the runs leave the compaction lock files that every later
    # run reuses: a refused run below must then leave .hoodie byte-identical.
    for mode in ("schedule", "execute"):
        assert json.loads(_ok(capsys, "compact", str(table), "--mode", mode))["outcome"] == "NO_WORK"
    commits = sorted((table / ".hoodie").glob("*.deltacommit"))
    return table, commits[-1]


_CORRUPTIONS = {
    "stats list": (
        lambda b: b.update(partitionToWriteStats=[1, 2]),
        "partitionToWriteStats is list, not a JSON object",
    ),
    "stats string": (
        lambda b: b.update(partitionToWriteStats="x"),
        "partitionToWriteStats is str, not a JSON object",
    ),
    "entries string": (
        lambda b: b["partitionToWriteStats"].update(x="abc"),
        "partitionToWriteStats['x'] is str, not a JSON array",
    ),
    "entry number": (
        lambda b: b["partitionToWriteStats"].update(x=[5]),
        "partitionToWriteStats['x'] holds 5, not a write stat object",
    ),
    "numWrites text": (
        lambda b: b["partitionToWriteStats"]["x"][0].update(numWrites="many"),
        "a write stat in partitionToWriteStats['x'] is malformed "
        "(invalid literal for int() with base 10: 'many')",
    ),
    "logFiles string": (
        lambda b: b["partitionToWriteStats"]["x"][0].update(logFiles="abc"),
        "a write stat in partitionToWriteStats['x'] is malformed "
        "(logFiles is 'abc', not a list of file names)",
    ),
    "extraMetadata list": (lambda b: b.update(extraMetadata=[]), "extraMetadata is list, not a JSON object"),
    "replaced ids list": (
        lambda b: b.update(partitionToReplaceFileIds=["f"]),
        "partitionToReplaceFileIds is list, not a JSON object",
    ),
}


@pytest.mark.parametrize("kind", sorted(_CORRUPTIONS))
def test_malformed_commit_file_is_named_by_read_write_and_compact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    table, commit = _mor_with_logs(tmp_path, capsys)
    corrupt, reason = _CORRUPTIONS[kind]
    body = json.loads(commit.read_bytes())
    corrupt(body)
    commit.write_text(json.dumps(body))
    expected = f"lake: error: {commit}: {reason}"
    before = tree_digest(table)
    assert _error_line(capsys, "read", str(table), "--output", str(tmp_path / "o.parquet")) == expected
    more = _input(tmp_path / "3.parquet", [("c", 1, "x")])
    assert _error_line(capsys, "write", str(table), "--input", more, "--operation", "upsert") == expected
    assert _error_line(capsys, "compact", str(table), "--mode", "run", "--force") == expected
    assert tree_digest(table) == before
    assert not (tmp_path / "o.parquet").exists()


def test_commit_file_corrupted_after_scheduling_stops_execute_before_inflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, commit = _mor_with_logs(tmp_path, capsys)
    scheduled = json.loads(_ok(capsys, "compact", str(table), "--mode", "schedule", "--force"))
    c = scheduled["schedule"]["instant"]
    body = json.loads(commit.read_bytes())
    body["partitionToWriteStats"] = 7
    commit.write_text(json.dumps(body))
    before = tree_digest(table)
    assert _error_line(capsys, "compact", str(table), "--mode", "execute", "--instant", c) == (
        f"lake: error: {commit}: partitionToWriteStats is int, not a JSON object"
    )
    assert tree_digest(table) == before  # still requested, not inflight


# -- item 6: corrupt base files ---------------------------------------------------------------------
def test_corrupt_base_file_is_named_by_read_write_and_compact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, _ = _mor_with_logs(tmp_path, capsys)
    base = next((table / "y").glob("*.parquet"))
    base.write_bytes(b"not a parquet file at all")
    named = f"lake: error: cannot read base file {base}: Parquet magic bytes not found in footer."
    before = tree_digest(table)
    assert _error_line(capsys, "read", str(table), "--output", str(tmp_path / "o.parquet")).startswith(named)
    assert tree_digest(table) == before
    # A real process: stderr then also shows what logging prints (pytest captures it in-process).
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_lake_provider.lake.cli",
            "compact",
            str(table),
            "--mode",
            "run",
            "--force",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=300,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    # Refused while scheduling (the planned base files' footers are read first): no plan written.
    assert done.stderr.startswith(named)
    assert tree_digest(table) == before
    more = _input(tmp_path / "3.parquet", [("a", 3, "x"), ("b", 3, "y")])
    assert _error_line(capsys, "write", str(table), "--input", more, "--operation", "upsert").startswith(
        named
    )


# -- item 8: a compaction plan in the future ---------------------------------------------------------
@pytest.mark.parametrize("force", [True, False])
def test_compaction_at_a_future_instant_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], force: bool
) -> None:
    table, _ = _mor_with_logs(tmp_path, capsys)
    before = tree_digest(table)
    argv = ["compact", str(table), "--mode", "schedule", "--instant", "29991231235959999"]
    line = _error_line(capsys, *argv, *(["--force"] if force else []))
    assert line.startswith(
        "lake: error: cannot schedule a compaction at 29991231235959999: it is later than now ("
    )
    assert line.endswith(") by more than 5 minutes, and every later instant would have to follow it")
    assert tree_digest(table) == before
    # The next write still gets a present-day instant.
    instant = _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "3.parquet", [("c", 1, "x")]),
        "--operation",
        "insert",
    ).strip()
    assert instant < "2999"


def test_compaction_instant_may_lead_the_clock_by_the_allowed_skew_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table_path, _ = _mor_with_logs(tmp_path, capsys)
    table = LakeTable.open(table_path)
    now = instant_to_datetime(table.timeline().latest_time) + dt.timedelta(seconds=1)
    table.clock = InstantClock(now=lambda: now)
    too_late = format_instant(now + dt.timedelta(minutes=5, milliseconds=1))
    with pytest.raises(CompactionScheduleConflictError, match=f"at {too_late}: it is later than now"):
        schedule_compaction(table, instant=too_late, force=True)
    assert table.timeline().pending_compactions() == []
    within = format_instant(now + dt.timedelta(minutes=5))
    result = schedule_compaction(table, instant=within, force=True)
    assert (result.outcome, result.instant) == (Outcome.SCHEDULED, within)
    assert [i.timestamp for i in table.timeline().pending_compactions()] == [within]


# -- issue 30, item 5: a success-file name that is a file of the partition ---------------------------
SUCCESS_KEY = "sink.partition-commit.success-file.name"


def test_a_success_file_name_that_is_a_file_of_the_partition_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each of these was truncated to an empty success file, exit 0, and the table no longer read.
    table = tmp_path / "t"
    _init(capsys, table, "cow")
    rows = [("a", 1, "x"), ("b", 1, "y")]
    _ok(capsys, "write", str(table), "--input", _input(tmp_path / "1.parquet", rows), "--operation", "insert")
    _ok(capsys, "partition-commit", str(table), "--partition", "y")  # its lock and write index exist now
    base = next((table / "x").glob("*.parquet")).name
    shutil.copy(table / "x" / base, table / "x" / "DONE")  # a data file without a data file's name
    expected = [("x", "a", 1, "x"), ("y", "b", 1, "y")]
    before = tree_digest(table)
    refusals = {
        base: f"{SUCCESS_KEY}={base!r} is the name of a data file (.parquet, .orc, .hfile, .avro): "
        "choose another, e.g. _SUCCESS",
        ".hoodie_partition_metadata": f"{SUCCESS_KEY}='.hoodie_partition_metadata' is a hidden name, as "
        "Hudi's own files in a partition are (.hoodie_partition_metadata, log files "
        ".<fileId>_<instant>.log.<n>): choose another, e.g. _SUCCESS",
        "../y/_SUCCESS": f"{SUCCESS_KEY}='../y/_SUCCESS' is not a plain file name",
        "DONE": f"{table}/x/DONE is a data file (parquet): {SUCCESS_KEY}='DONE' would overwrite it; "
        "nothing was committed",
    }
    for name, message in refusals.items():
        argv = ["partition-commit", str(table), "--partition", "x", "--option", f"{SUCCESS_KEY}={name}"]
        assert _error_line(capsys, *argv) == f"lake: error: {message}", name
        assert tree_digest(table) == before, name
    assert _ours(capsys, table, tmp_path) == expected == _hudi_rs(table)
    # A name of its own is written (empty), and written again over itself when late data re-commits.
    argv = ["partition-commit", str(table), "--partition", "x", "--option", f"{SUCCESS_KEY}=_DONE"]
    assert json.loads(_ok(capsys, *argv))["committed"] == ["x"]
    assert (table / "x" / "_DONE").read_bytes() == b""
    assert (table / "x" / "DONE").read_bytes() == (table / "x" / base).read_bytes()
    assert _ours(capsys, table, tmp_path) == expected == _hudi_rs(table)


def test_a_long_success_file_name_is_written_or_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 241-byte name (a legal file name) failed with "[Errno 36] File name too long" on its temporary
    # name, after the partition's commit state was saved as COMMITTING; a 301-byte one the same way.
    table = tmp_path / "t"
    _init(capsys, table, "cow")
    rows = [("a", 1, "x"), ("b", 1, "y")]
    _ok(capsys, "write", str(table), "--input", _input(tmp_path / "1.parquet", rows), "--operation", "insert")
    _ok(capsys, "partition-commit", str(table), "--partition", "y")  # its lock and write index exist now
    before = tree_digest(table)
    too_long = "_" + "a" * 300
    argv = ["partition-commit", str(table), "--partition", "x", "--option", f"{SUCCESS_KEY}={too_long}"]
    assert _error_line(capsys, *argv) == (
        f"lake: error: {SUCCESS_KEY}={too_long!r}: {table}/x/{too_long}: {too_long!r} is longer than 255 "
        "bytes, the most a name holds here; nothing was committed"
    )
    assert tree_digest(table) == before
    fits = "_" + "a" * 254
    argv = ["partition-commit", str(table), "--partition", "x", "--option", f"{SUCCESS_KEY}={fits}"]
    assert json.loads(_ok(capsys, *argv))["committed"] == ["x"]
    assert sorted(p.name for p in (table / "x").iterdir() if not p.name.endswith(".parquet")) == [
        ".hoodie_partition_metadata",
        fits,
    ]
    assert (table / "x" / fits).read_bytes() == b""
    assert _ours(capsys, table, tmp_path) == [("x", "a", 1, "x"), ("y", "b", 1, "y")] == _hudi_rs(table)


@pytest.mark.parametrize("kind", ["cow", "mor"])
@pytest.mark.parametrize("policy", ["success-file", "merge-small-files", "success-file,merge-small-files"])
def test_a_hudi_partition_folder_linked_out_of_the_table_is_refused_for_every_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, policy: str
) -> None:
    # Only plain directories refused such a folder: on a Hudi table _SUCCESS (or the merged files)
    # were written through the link, outside the table's base path.
    table = tmp_path / "t"
    _init(capsys, table, kind)
    rows = [("a", 1, "x"), ("b", 1, "y"), ("c", 1, "x")]
    _ok(capsys, "write", str(table), "--input", _input(tmp_path / "1.parquet", rows), "--operation", "insert")
    rows = [("d", 2, "x")]
    _ok(capsys, "write", str(table), "--input", _input(tmp_path / "2.parquet", rows), "--operation", "insert")
    outside = tmp_path / "outside"
    (table / "x").rename(outside)
    (table / "x").symlink_to(outside, target_is_directory=True)
    expected = [("x", "a", 1, "x"), ("x", "c", 1, "x"), ("x", "d", 2, "x"), ("y", "b", 1, "y")]
    assert _hudi_rs(table) == expected  # (ours skips the linked folder: the xfail test below)
    before, before_outside = tree_digest(table), tree_digest(outside)
    argv = ["partition-commit", str(table), "--partition", "y", "--partition", "x", "--policy", policy]
    assert _error_line(capsys, *argv, "--delay", "0 s") == (
        f"lake: error: partition folder 'x' of {table} leads out of it (it resolves to {outside}, outside "
        f"{table}): partition commit only writes inside the table; nothing changed"
    )
    assert (tree_digest(table), tree_digest(outside)) == (before, before_outside)
    assert _hudi_rs(table) == expected


@pytest.mark.xfail(
    strict=True,
    reason="the partition walk does not enter a partition folder that is a link (LocalStorage.list_dir "
    "lists dirs with follow_symlinks=False): ours reads 1 row where hudi-rs (and Java, through "
    "java.io.File) read 4; following links needs a cycle guard and a decision for clean/writes "
    "through such folders (check_deletable refuses deletes outside the base path)",
)
def test_a_partition_folder_that_is_a_link_is_read_as_hudi_rs_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    _init(capsys, table, "cow")
    rows = [("a", 1, "x"), ("b", 1, "y"), ("c", 1, "x"), ("d", 2, "x")]
    _ok(capsys, "write", str(table), "--input", _input(tmp_path / "1.parquet", rows), "--operation", "insert")
    (table / "x").rename(tmp_path / "outside")
    (table / "x").symlink_to(tmp_path / "outside", target_is_directory=True)
    expected = [("x", "a", 1, "x"), ("x", "c", 1, "x"), ("x", "d", 2, "x"), ("y", "b", 1, "y")]
    assert _hudi_rs(table) == expected
    assert _ours(capsys, table, tmp_path) == expected


# -- issue 30, item 7: a foreign parquet file in place of a base file --------------------------------
META = (
    "_hoodie_commit_time, _hoodie_commit_seqno, _hoodie_record_key, _hoodie_partition_path, _hoodie_file_name"
)


def test_a_foreign_parquet_file_in_place_of_a_base_file_is_refused_by_read_and_compaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # read returned its rows as rows of nulls (exit 0); compaction failed on the null keys with a
    # traceback and left an inflight instant behind.
    table, _ = _mor_with_logs(tmp_path, capsys)
    base = next((table / "y").glob("*.parquet"))
    pq.write_table(pa.table({"x": [1, 2], "y": ["a", "b"]}), base)
    named = (
        f"lake: error: {base} is not a base file of {table}: it lacks column(s) {META} (its columns: x, y)"
    )
    before = tree_digest(table)
    assert _error_line(capsys, "read", str(table), "--output", str(tmp_path / "o.parquet")) == named
    for mode in ("run", "schedule"):
        assert _error_line(capsys, "compact", str(table), "--mode", mode, "--force") == named
    assert tree_digest(table) == before  # no compaction instant, requested or inflight
    assert not (tmp_path / "o.parquet").exists()
    with pytest.raises(Exception, match="(?i)schema|column|field"):  # hudi-rs refuses the table too
        _hudi_rs(table)


@pytest.mark.parametrize("kind", ["null keys", "wrong type"])
def test_a_parquet_file_with_the_meta_columns_but_not_the_tables_rows_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    # Null record keys read as rows without a key (compaction then failed on them with a
    # traceback); a column that does not cast to the table's type was refused without the file.
    table, _ = _mor_with_logs(tmp_path, capsys)
    base = next((table / "y").glob("*.parquet"))
    rows = pq.read_table(base)
    if kind == "null keys":
        index = rows.schema.get_field_index("_hoodie_record_key")
        rows = rows.set_column(index, "_hoodie_record_key", pa.nulls(rows.num_rows, pa.string()))
        reason = "1 rows have no record key (_hoodie_record_key is null): not a base file Hudi wrote"
    else:
        rows = rows.set_column(rows.schema.get_field_index("ts"), "ts", pa.array(["soon"]))
        reason = (
            "column 'ts': cannot cast string to int64: Failed to parse string: 'soon' as a scalar of "
            "type int64"
        )
    pq.write_table(rows, base)
    before = tree_digest(table)
    line = _error_line(capsys, "read", str(table), "--output", str(tmp_path / "o.parquet"))
    assert line == f"lake: error: {'' if kind == 'null keys' else 'base file '}{base}: {reason}"
    assert tree_digest(table) == before


def test_a_base_file_replaced_after_scheduling_stops_execute_before_inflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, _ = _mor_with_logs(tmp_path, capsys)
    scheduled = json.loads(_ok(capsys, "compact", str(table), "--mode", "schedule", "--force"))
    c = scheduled["schedule"]["instant"]
    base = next((table / "x").glob("*.parquet"))
    pq.write_table(pa.table({"k": ["a"], "other": [1]}), base)
    before = tree_digest(table)
    named = f"lake: error: {base} is not a base file of {table}: it lacks column(s) {META}"
    execute = ["compact", str(table), "--mode", "execute", "--instant", c]
    assert _error_line(capsys, *execute) == f"{named} (its columns: k, other)"
    assert tree_digest(table) == before  # still requested, not inflight, nothing written


def test_a_table_without_meta_fields_is_judged_by_its_record_key_fields(
    hudi_table_zip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # hoodie.populate.meta.fields=false: base files need not hold the meta columns, only the key.
    table = hudi_table_zip("morparquet_v6_simplekeygen_hivestyle_no_metafields")
    expected = _ok(capsys, "read", str(table), "--output", str(tmp_path / "before.parquet"))
    assert expected == f"4 rows -> {tmp_path}/before.parquet\n"
    base = next((table / "byteField=10").glob("*.parquet"))
    rows = pq.read_table(base)
    pq.write_table(rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie_")]), base)
    _ok(capsys, "read", str(table), "--output", str(tmp_path / "after.parquet"))
    assert pq.read_table(tmp_path / "after.parquet").equals(pq.read_table(tmp_path / "before.parquet"))
    pq.write_table(rows.drop_columns(["id"]), base)  # meta columns, but no record key field
    line = _error_line(capsys, "read", str(table), "--output", str(tmp_path / "o.parquet"))
    assert line.startswith(f"lake: error: {base} is not a base file of {table}: it lacks column(s) id (its ")


# -- issue 30, item 8: tracebacks instead of one error line -------------------------------------------
def test_a_table_without_record_key_fields_refuses_a_write_and_still_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, _ = _mor_with_logs(tmp_path, capsys)
    props = table / ".hoodie" / "hoodie.properties"
    text = props.read_text()
    assert "hoodie.table.recordkey.fields=k\n" in text
    props.write_text(text.replace("hoodie.table.recordkey.fields=k\n", ""))
    before = tree_digest(table)
    more = _input(tmp_path / "3.parquet", [("c", 1, "x")])
    assert _error_line(capsys, "write", str(table), "--input", more, "--operation", "upsert") == (
        f"lake: error: {props}: hoodie.table.recordkey.fields is missing or empty, so records have no "
        "key to write them by (tables with auto-generated keys are not supported)"
    )
    assert tree_digest(table) == before
    assert _ours(capsys, table, tmp_path) == [("x", "a", 2, "x"), ("y", "b", 2, "y")] == _hudi_rs(table)


def test_a_malformed_unicode_escape_in_hoodie_properties_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, _ = _mor_with_logs(tmp_path, capsys)
    props = table / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.datasource.hive_sync.table=t\\uZZZZ\n")
    expected = f"lake: error: {props}: malformed \\uxxxx escape '\\uZZZZ' (needs four hex digits)"
    before = tree_digest(table)
    more = _input(tmp_path / "3.parquet", [("c", 1, "x")])
    for argv in (
        ["read", str(table), "--output", str(tmp_path / "o.parquet")],
        ["timeline", str(table)],
        ["write", str(table), "--input", more, "--operation", "upsert"],
        ["clean", str(table)],
        ["compact", str(table), "--mode", "run", "--force"],
        ["partition-commit", str(table), "--partition", "x"],
    ):
        assert _error_line(capsys, *argv) == expected, argv[0]
    assert tree_digest(table) == before


def test_hours_retained_beyond_any_calendar_are_one_error_line_or_keep_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, _ = _mor_with_logs(tmp_path, capsys)
    before = tree_digest(table)
    hours = "1000000000000"
    assert _error_line(
        capsys, "clean", str(table), "--policy", "KEEP_LATEST_BY_HOURS", "--retained", hours
    ) == (f"lake: error: hoodie.cleaner.hours.retained={hours} must be at most 2147483647")
    options = ["--option", "hoodie.clean.policy=KEEP_LATEST_BY_HOURS"]
    assert _error_line(
        capsys, "clean", str(table), *options, "--option", f"hoodie.clean.hours.retained={hours}"
    ) == (f"lake: error: hoodie.clean.hours.retained={hours} must be at most 2147483647")
    assert tree_digest(table) == before
    # Hudi's largest (a Java int: 245,000 years back, before year 1): every commit is retained.
    done = json.loads(
        _ok(capsys, "clean", str(table), "--policy", "KEEP_LATEST_BY_HOURS", "--retained", "2147483647")
    )
    assert (done["outcome"], done["files_planned"]) == ("NO_WORK", 0)


class RaisingExtractor:
    def extract(self, keys: list[str], values: list[str]) -> dt.datetime:
        return dt.datetime.strptime(values, "%Y")  # type: ignore[arg-type]  (a TypeError: a list)


def test_a_custom_time_extractor_that_raises_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, _ = _mor_with_logs(tmp_path, capsys)
    _ok(capsys, "partition-commit", str(table), "--partition", "y")  # its lock exists from here on
    before = tree_digest(table)
    argv = ["partition-commit", str(table), "--partition", "x", "--trigger", "partition-time"]
    argv += ["--watermark", "2030-01-01T00:00:00Z", "--option", "partition.time-extractor.kind=custom"]
    argv += ["--option", f"partition.time-extractor.class={__name__}.RaisingExtractor"]
    assert _error_line(capsys, *argv) == (
        f"lake: error: extractor {__name__}.RaisingExtractor failed for partition 'x': TypeError: "
        "strptime() argument 1 must be str, not list; nothing was committed"
    )
    assert tree_digest(table) == before


def test_a_commit_file_nested_deeper_than_the_json_decoder_goes_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, commit = _mor_with_logs(tmp_path, capsys)
    commit.write_text('{"partitionToWriteStats": ' + "[" * 100_000 + "]" * 100_000 + "}")
    expected = (
        f"lake: error: {commit}: commit metadata is not JSON (maximum recursion depth exceeded while "
        "decoding a JSON array from a unicode string)"
    )
    before = tree_digest(table)
    more = _input(tmp_path / "3.parquet", [("c", 1, "x")])
    assert _error_line(capsys, "read", str(table), "--output", str(tmp_path / "o.parquet")) == expected
    assert _error_line(capsys, "write", str(table), "--input", more, "--operation", "upsert") == expected
    assert _error_line(capsys, "compact", str(table), "--mode", "run", "--force") == expected
    assert tree_digest(table) == before


def test_a_watermark_late_in_year_9999_in_a_zone_ahead_of_utc_is_judged_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Showing the watermark in the watermark zone (UTC+14) overflowed past year 9999: OverflowError.
    table = tmp_path / "t"
    _init(capsys, table, "cow", fields="dt", hive=True)
    rows = [("a", 1, "2024-01-05"), ("b", 1, "9999-12-31")]
    _ok(
        capsys,
        "write",
        str(table),
        "--input",
        _input(tmp_path / "1.parquet", rows, ("dt",)),
        "--operation",
        "insert",
    )
    argv = ["partition-commit", str(table), "--partition", "dt=2024-01-05", "--partition", "dt=9999-12-31"]
    argv += ["--trigger", "partition-time", "--delay", "0 s", "--watermark", "9999-12-31T23:59:59"]
    argv += ["--option", "partition.time-extractor.timestamp-pattern=$dt"]
    argv += ["--option", "sink.partition-commit.watermark-time-zone=Pacific/Kiritimati"]
    result = json.loads(_ok(capsys, *argv))
    assert result["committed"] == ["dt=2024-01-05", "dt=9999-12-31"]
    assert {p: d["reason"] for p, d in result["partitions"].items()} == {
        "dt=2024-01-05": "watermark 9999-12-31T23:59:59+00:00 > partition time 2024-01-05 00:00:00 "
        "(Pacific/Kiritimati) + delay 0:00:00",
        "dt=9999-12-31": "watermark 9999-12-31T23:59:59+00:00 > partition time 9999-12-31 00:00:00 "
        "(Pacific/Kiritimati) + delay 0:00:00",
    }
